"""CIFAR-10 and SVHN (test) from torchvision's on-disk layouts.

* CIFAR-10: ``<root>/cifar-10-batches-py/{data_batch_1..5, test_batch}``, the pickled
  python version of the official release (dicts with ``b"data"`` (N, 3072) uint8 rows in
  channel-major order and ``b"labels"``).
* SVHN test: ``<root>/SVHN/test_32x32.mat`` or ``<root>/test_32x32.mat`` (torchvision's
  ``SVHN(root, split="test")`` puts it directly in ``root``), a MATLAB file with ``X``
  (32, 32, 3, N) uint8 and ``y`` (N, 1) in 1..10 (10 stands for the digit 0).

Images come back as uint8 tensors (NCHW by default, NHWC on request): suites keep them
as bytes and normalise per batch (:class:`NormalizedImages`), so 95 CIFAR-10-C cells cost
3 KB per image instead of 12 KB.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from datasets.errors import DatasetNotFoundError
from datasets.safe_pickle import load_array_pickle

CIFAR_DIR = "cifar-10-batches-py"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_BATCH = "test_batch"
#: CIFAR-10 training-set channel statistics (of images scaled to [0, 1])
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)

HOW_CIFAR = ("run `../shared/data/unpack.sh DATA_ROOT` where that archive exists, or let bench download it "
             "(needs network; --no-download forbids it), or unpack the official python version "
             "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz into DATA_ROOT")
HOW_SVHN = ("optional (the OOD set): copy the official test_32x32.mat of "
            "http://ufldl.stanford.edu/housenumbers/ into DATA_ROOT/SVHN/, or let bench download it through "
            "torchvision (needs network)")


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as fh:
        d = load_array_pickle(fh, encoding="bytes")
    if not isinstance(d, dict):
        raise ValueError(f"{path.name}: a {type(d).__name__}, not the batch dict")
    data = d.get(b"data", d.get("data"))
    labels = d.get(b"labels", d.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path.name}: no 'data'/'labels' entries (keys {sorted(map(str, d))[:5]})")
    data = np.asarray(data, dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise ValueError(f"{path.name}: data {data.shape}, {len(labels)} labels; expected (N, 3072) and N")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def write_cifar_batch(path: Path, images_nchw: np.ndarray, labels) -> None:
    """Write one batch in the official pickle layout (for test fixtures)."""
    images_nchw = np.ascontiguousarray(images_nchw, dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump({b"batch_label": path.name.encode(), b"labels": [int(v) for v in labels],
                     b"data": images_nchw.reshape(len(images_nchw), -1),
                     b"filenames": [f"{i}.png".encode() for i in range(len(images_nchw))]}, fh)


def _layout(d: Path) -> str:
    return (f"torchvision layout: {d}/{{{','.join(TRAIN_BATCHES)},{TEST_BATCH}}} (pickled dicts with "
            "b'data' (N, 3072) uint8 and b'labels')")


def load_cifar10(root: Path, split: str, download: bool = False, layout: str = "nchw") -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 3, 32, 32) or (N, 32, 32, 3), labels int64 (N,)) of CIFAR-10 ``split``."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if layout not in ("nchw", "nhwc"):
        raise ValueError(f"layout must be 'nchw' or 'nhwc', got {layout!r}")
    d = Path(root) / CIFAR_DIR
    names = TRAIN_BATCHES if split == "train" else [TEST_BATCH]
    paths = [d / n for n in names]
    if not all(p.exists() for p in paths):
        reason = "missing"
        if download:
            try:
                import torchvision

                from datasets.roots import RemoveEmptyDirsOnFailure

                with RemoveEmptyDirsOnFailure(root):
                    torchvision.datasets.CIFAR10(str(root), train=(split == "train"), download=True)
            except Exception as exc:  # noqa: BLE001 - any network failure means "not available"
                reason = f"missing and download failed ({type(exc).__name__})"
        if not all(p.exists() for p in paths):
            raise DatasetNotFoundError("CIFAR-10", [p for p in paths if not p.exists()], _layout(d), HOW_CIFAR, reason)
    try:
        parts = [_read_batch(p) for p in paths]
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in many ways; each is "malformed"
        raise DatasetNotFoundError("CIFAR-10", paths, _layout(d), HOW_CIFAR,
                                   reason=f"malformed ({type(exc).__name__}: {exc})") from None
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    from datasets.labels import check_labels

    for p, (_, labels) in zip(paths, parts):  # the batch file and the values of a label outside 0..9
        check_labels("CIFAR-10", labels, 10, p, _layout(d), HOW_CIFAR)
    if layout == "nhwc":
        x = x.transpose(0, 2, 3, 1)
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def svhn_test_paths(root: Path) -> list[Path]:
    return [Path(root) / "SVHN" / "test_32x32.mat", Path(root) / "test_32x32.mat"]


def load_svhn_test(root: Path, download: bool = False, layout: str = "nchw") -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, 3, 32, 32) or NHWC, labels int64 in 0..9) of the SVHN test split."""
    candidates = svhn_test_paths(root)
    path = next((p for p in candidates if p.exists()), None)
    layout_text = ("torchvision layout: test_32x32.mat (MATLAB; X (32, 32, 3, N) uint8, y (N, 1) in 1..10) "
                   f"in {candidates[0].parent} or {candidates[1].parent}")
    reason = "missing"
    if path is None and download:
        try:
            import torchvision

            from datasets.roots import RemoveEmptyDirsOnFailure

            with RemoveEmptyDirsOnFailure(root):
                torchvision.datasets.SVHN(str(candidates[0].parent), split="test", download=True)
        except Exception as exc:  # noqa: BLE001
            reason = f"missing and download failed ({type(exc).__name__})"
        path = next((p for p in candidates if p.exists()), None)
    if path is None:
        raise DatasetNotFoundError("SVHN (test)", candidates, layout_text, HOW_SVHN, reason)
    import scipy.io

    try:
        mat = scipy.io.loadmat(str(path))
        x, y = np.asarray(mat["X"]), np.asarray(mat["y"]).reshape(-1)
    except Exception as exc:  # noqa: BLE001 - scipy raises several types for a bad file
        raise DatasetNotFoundError("SVHN (test)", [path], layout_text, HOW_SVHN, reason=f"malformed ({exc})") from None
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
        raise DatasetNotFoundError("SVHN (test)", [path], layout_text, HOW_SVHN,
                                   reason=f"malformed (X {x.shape}, y {y.shape})")
    x = x.astype(np.uint8).transpose(3, 2, 0, 1)  # (32, 32, 3, N) -> (N, 3, 32, 32)
    if layout == "nhwc":
        x = x.transpose(0, 2, 3, 1)
    y = y.astype(np.int64) % 10  # torchvision: label 10 is the digit 0
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def normalize(images_uint8_nchw: torch.Tensor) -> torch.Tensor:
    """uint8 NCHW -> float32, scaled to [0, 1] and standardised with the CIFAR-10 mean / std."""
    mean = torch.tensor(MEAN, device=images_uint8_nchw.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images_uint8_nchw.device).view(1, 3, 1, 1)
    return images_uint8_nchw.float().div_(255.0).sub_(mean).div_(std)  # one float copy, no temporaries


class NormalizedImages:
    """uint8 NCHW images that look like a float tensor of normalised images to the harness.

    ``len()`` and slicing (``x[a:b]``, an index tensor) return normalised float32 batches,
    so an evaluation set holds 3 bytes per pixel and pays the conversion once per batch.
    """

    def __init__(self, images_uint8_nchw: torch.Tensor):
        if images_uint8_nchw.dtype != torch.uint8 or images_uint8_nchw.dim() != 4:
            raise ValueError(f"expected uint8 (N, C, H, W), got {images_uint8_nchw.dtype} {tuple(images_uint8_nchw.shape)}")
        self.raw = images_uint8_nchw

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def shape(self) -> torch.Size:
        return self.raw.shape

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def __getitem__(self, idx) -> torch.Tensor:
        out = self.raw[idx]
        if out.dim() == 3:  # a single image
            return normalize(out.unsqueeze(0)).squeeze(0)
        return normalize(out)

    @property
    def nbytes(self) -> int:
        return self.raw.numel()
