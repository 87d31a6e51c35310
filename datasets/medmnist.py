"""ChestMNIST (MedMNIST v2, Yang et al. 2023) in its official ``.npz`` layout: a multi-label set of
chest X-rays (NIH ChestX-ray14) with 14 disease labels.

``<root>/chestmnist.npz`` (28 x 28, MedMNIST v2) or ``<root>/chestmnist_{64,128,224}.npz`` (the
MedMNIST+ sizes), each holding six arrays: ``{train,val,test}_images`` uint8 ``(N, S, S)`` (grey)
and ``{train,val,test}_labels`` uint8 ``(N, 14)`` multi-hot (0/1), in the label order of MedMNIST's
``INFO["chestmnist"]["label"]`` (:data:`CHESTMNIST_LABELS`). Official splits: 78,468 / 11,219 /
22,433 images.

The file is read with ``np.load(..., allow_pickle=False)``: an ``.npz`` holding pickled (object)
arrays is refused, never unpickled (the project runs no code from data, tests/test_safe_loading.py).
Every array is checked (present, dtype, shape, labels 0/1, the splits' lengths agreeing) before it is
used: a missing file or a malformed one is a :class:`datasets.errors.DatasetNotFoundError` (exit 2)
naming the file, what is wrong, the layout and how to obtain it.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datasets.errors import DatasetNotFoundError

#: MedMNIST's INFO["chestmnist"]["label"], "0".."13", in order
CHESTMNIST_LABELS = ("atelectasis", "cardiomegaly", "effusion", "infiltration", "mass", "nodule", "pneumonia",
                     "pneumothorax", "consolidation", "edema", "emphysema", "fibrosis", "pleural", "hernia")
#: image sides of the published files: 28 (MedMNIST v2's chestmnist.npz) and the MedMNIST+ sizes
SIZES = (28, 64, 128, 224)
SPLITS = ("train", "val", "test")
HOW_CHESTMNIST = ("MedMNIST (https://medmnist.com/): download chestmnist.npz (28 x 28) or chestmnist_{64,128,224}.npz "
                  "from its Zenodo records (v2: https://zenodo.org/records/6496656, MedMNIST+: "
                  "https://zenodo.org/records/10519652), or `pip install medmnist` and run `python -c \"import "
                  "medmnist; medmnist.ChestMNIST(split='test', download=True, size=28, root='DATA_ROOT')\"`; put the "
                  "file directly in the data root (no sub-directory)")


def chestmnist_file(root: Path, size: int = 28) -> Path:
    """Where the ``size`` x ``size`` file lives: ``chestmnist.npz`` at 28, ``chestmnist_<size>.npz`` else."""
    if size not in SIZES:
        raise ValueError(f"ChestMNIST is published at sizes {', '.join(map(str, SIZES))}, not {size}")
    return Path(root) / ("chestmnist.npz" if size == 28 else f"chestmnist_{size}.npz")


def layout(path: Path, size: int) -> str:
    return (f"{path}: a NumPy .npz with arrays train_images, val_images, test_images (uint8, (N, {size}, {size}), "
            f"grey) and train_labels, val_labels, test_labels (uint8, (N, {len(CHESTMNIST_LABELS)}), 0/1 multi-hot "
            f"in MedMNIST's label order: {', '.join(CHESTMNIST_LABELS)})")


@dataclass
class MultiLabelSplit:
    """One split: ``images`` uint8 (N, S, S), ``labels`` uint8 (N, L) of 0/1."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def prevalence(self) -> np.ndarray:
        """The share of the split's images in which each label is present, float64 (L,)."""
        return self.labels.astype(np.float64).mean(0)


def load_chestmnist(root: Path, size: int = 28) -> dict[str, MultiLabelSplit]:
    """The three official splits of ChestMNIST at ``size``, checked (module docstring)."""
    path = chestmnist_file(root, size)
    where = layout(path, size)

    def bad(problem: str) -> DatasetNotFoundError:
        return DatasetNotFoundError("ChestMNIST", [path], where, HOW_CHESTMNIST, reason=f"malformed ({problem})")

    if not path.is_file():
        raise DatasetNotFoundError("ChestMNIST", [path], where, HOW_CHESTMNIST)
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise bad(f"not a readable .npz: {type(exc).__name__}: {exc}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # a bare .npy array saved under the name
        raise bad("a single array, not an .npz archive of the six arrays")
    with archive:
        wanted = [f"{s}_{k}" for s in SPLITS for k in ("images", "labels")]
        missing = [k for k in wanted if k not in archive.files]
        if missing:
            raise bad(f"array(s) {', '.join(missing)} missing; it holds {', '.join(archive.files) or 'nothing'}")
        out = {}
        for split in SPLITS:
            try:
                images, labels = archive[f"{split}_images"], archive[f"{split}_labels"]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
                # object arrays (pickles) are refused by allow_pickle=False; truncated members fail to read
                raise bad(f"{split} arrays cannot be read without executing code or are truncated: "
                          f"{type(exc).__name__}: {exc}") from None
            out[split] = _check_split(split, images, labels, size, bad)
    return out


def _check_split(split: str, images: np.ndarray, labels: np.ndarray, size: int, bad) -> MultiLabelSplit:
    n_labels = len(CHESTMNIST_LABELS)
    if images.dtype != np.uint8:
        raise bad(f"{split}_images has dtype {images.dtype}, expected uint8")
    if images.ndim == 4 and images.shape[-1] == 1:  # (N, S, S, 1): the same grey images
        images = images[..., 0]
    if images.ndim != 3 or images.shape[1:] != (size, size):
        raise bad(f"{split}_images has shape {images.shape}, expected (N, {size}, {size})")
    if labels.dtype.kind not in "uib":
        raise bad(f"{split}_labels has dtype {labels.dtype}, expected uint8 0/1")
    if labels.ndim != 2 or labels.shape[1] != n_labels:
        raise bad(f"{split}_labels has shape {labels.shape}, expected (N, {n_labels}) (one column per label)")
    if len(labels) != len(images):
        raise bad(f"{split}_images has {len(images)} images but {split}_labels {len(labels)} rows")
    if len(labels) == 0:
        raise bad(f"the {split} split is empty")
    values = np.unique(labels)
    if not np.isin(values, (0, 1)).all():
        raise bad(f"{split}_labels holds values other than 0 and 1: {values[~np.isin(values, (0, 1))][:5].tolist()}")
    return MultiLabelSplit(np.ascontiguousarray(images), labels.astype(np.uint8))


__all__ = ["CHESTMNIST_LABELS", "HOW_CHESTMNIST", "SIZES", "MultiLabelSplit", "chestmnist_file", "load_chestmnist"]
