"""MNIST and FashionMNIST from torchvision's layout: ``<root>/<Name>/raw/*-ubyte[.gz]``.

The IDX files are parsed directly (no torchvision dataset object): the whole split
becomes one uint8 tensor, decoded once per suite.
"""
from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from bench.errors import BenchError
from datasets.errors import DatasetNotFoundError

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
HOW = {
    "MNIST": "run `../shared/data/unpack.sh DATA_ROOT MNIST` where that archive exists, or let bench "
             "download it (needs network; --no-download forbids it), or copy the four official "
             "files from http://yann.lecun.com/exdb/mnist/ into DATA_ROOT/MNIST/raw/",
    "FashionMNIST": "run `../shared/data/unpack.sh DATA_ROOT FashionMNIST-test`, or let bench download "
                    "it (needs network), or copy the official t10k files into DATA_ROOT/FashionMNIST/raw/",
}
MEAN, STD = 0.1307, 0.3081  # MNIST training-set statistics


def _open(path: Path):
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.exists():
            return gzip.open(candidate, "rb") if candidate.suffix == ".gz" else open(candidate, "rb")
    return None


def read_idx(path: Path) -> np.ndarray:
    fh = _open(path)
    if fh is None:
        raise FileNotFoundError(path)
    try:
        with fh:
            data = fh.read()
    except (OSError, EOFError, zlib.error) as exc:  # a damaged .gz: BadGzipFile, truncated stream, bad CRC
        raise ValueError(f"{getattr(fh, 'name', path)}: unreadable ({type(exc).__name__}: {exc})") from None
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX file")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {body.size} bytes")
    return body.reshape(shape)


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array in IDX format (used by tests to build fixtures in the real layout)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(header + array.tobytes())


def _try_download(name: str, root: Path) -> None:
    import torchvision

    from datasets.roots import RemoveEmptyDirsOnFailure

    cls = getattr(torchvision.datasets, name)
    for train in (True, False):
        try:
            with RemoveEmptyDirsOnFailure(root):
                cls(str(root), train=train, download=True)
        except Exception:  # noqa: BLE001 - any network failure means "not available"
            if name == "FashionMNIST" and train:
                continue  # only the test split is needed for FashionMNIST
            raise


def load_mnist_like(root: Path, name: str, split: str, download: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 1, 28, 28), labels int64 (N,)) of MNIST or FashionMNIST."""
    raw = Path(root) / name / "raw"
    img_name, lab_name = FILES[split]
    paths = [raw / img_name, raw / lab_name]
    layout = f"torchvision layout: {raw}/{{{img_name},{lab_name}}} (optionally .gz)"

    def load():
        return read_idx(paths[0]), read_idx(paths[1])

    try:
        images, labels = load()
    except FileNotFoundError:
        if not download:
            raise DatasetNotFoundError(name, paths, layout, HOW[name]) from None
        try:
            _try_download(name, Path(root))
            images, labels = load()
        except Exception as exc:  # noqa: BLE001
            raise DatasetNotFoundError(name, paths, layout, HOW[name], reason=f"missing and download failed ({type(exc).__name__})") from None
    except ValueError as exc:
        raise DatasetNotFoundError(name, paths, layout, HOW[name], reason=f"malformed ({exc})") from None
    if images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) != len(labels):
        raise DatasetNotFoundError(name, paths, layout, HOW[name],
                                   reason=f"malformed (images {images.shape}, labels {labels.shape})")
    from datasets.labels import check_labels

    found = next((p for p in (paths[1], paths[1].with_name(paths[1].name + ".gz")) if p.exists()), paths[1])
    check_labels(name, labels, 10, found, layout, HOW[name])  # 10 classes, MNIST and FashionMNIST alike
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def normalize(images_uint8: torch.Tensor) -> torch.Tensor:
    return (images_uint8.float() / 255.0 - MEAN) / STD


def load_mnist_splits(root: Path, cfg: dict, download: bool = False) -> dict[str, torch.Tensor]:
    """The MNIST suites' splits, as uint8 images and labels.

    Validation = the last ``cfg["n_val"]`` training images (Ovadia et al. 2019); then seeded
    subsets of at most ``n_train`` / ``n_test`` / ``n_ood`` images (None = all); the OOD set
    is the FashionMNIST test set. Keys: train_x, train_y, val_x, val_y, test_x, test_y, ood_x.
    """
    from datasets.splits import subset

    tr_x, tr_y = load_mnist_like(root, "MNIST", "train", download)
    te_x, te_y = load_mnist_like(root, "MNIST", "test", download)
    ood_x, _ = load_mnist_like(root, "FashionMNIST", "test", download)
    n_val = int(cfg["n_val"])
    if not 0 < n_val < len(tr_x):
        raise BenchError(f"data.n_val={n_val} must be in 1..{len(tr_x) - 1}: the validation split is the last n_val "
                         f"of the {len(tr_x)} MNIST training images, and the rest train")
    val_x, val_y = tr_x[-n_val:], tr_y[-n_val:]
    tr_x, tr_y = subset(tr_x[:-n_val], tr_y[:-n_val], cfg.get("n_train"), seed=1)
    te_x, te_y = subset(te_x, te_y, cfg.get("n_test"), seed=2)
    ood_x, _ = subset(ood_x, None, cfg.get("n_ood"), seed=3)
    return {"train_x": tr_x, "train_y": tr_y, "val_x": val_x, "val_y": val_y,
            "test_x": te_x, "test_y": te_y, "ood_x": ood_x}
