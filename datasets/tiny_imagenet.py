"""Tiny-ImageNet (the 200-class, 64x64 ImageNet subset of CS231n): the validation set in its
official layout, and a per-class split of it.

Layout (the official zip, unpacked under the data root)::

    <root>/tiny-imagenet-200/wnids.txt                  200 wnids, one a line; class index = line order
    <root>/tiny-imagenet-200/val/val_annotations.txt    <file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1> per image
    <root>/tiny-imagenet-200/val/images/val_<k>.JPEG    10,000 JPEGs, 64x64 (168 of them greyscale)

``load_tiny_imagenet_val`` returns the images as uint8 RGB (N, 64, 64, 3) sorted by file name
(string order: val_0, val_1, val_10, ...), with int64 labels, the wnid list and the file names.
``datasets.splits.split_per_class`` cuts each class (50 images) into seeded train / validation / test parts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from datasets.errors import DatasetNotFoundError

DIRNAME = "tiny-imagenet-200"
SIZE = 64
URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
LAYOUT = (f"<DATA_ROOT>/{DIRNAME}/wnids.txt (200 wnids, class index = line order), "
          f"<DATA_ROOT>/{DIRNAME}/val/val_annotations.txt (file, wnid, bounding box; tab-separated), "
          f"<DATA_ROOT>/{DIRNAME}/val/images/*.JPEG (64x64)")
HOW = f"download {URL} and unzip it into DATA_ROOT (it creates DATA_ROOT/{DIRNAME}/)"


@dataclass
class TinyImageNetVal:
    images: np.ndarray      # uint8 (N, 64, 64, 3), RGB
    labels: np.ndarray      # int64 (N,), index into wnids
    wnids: list[str]        # the 200 class wnids, in wnids.txt order
    filenames: list[str]    # (N,), sorted

    def __iter__(self):     # images, labels, wnids, filenames = load_tiny_imagenet_val(root)
        return iter((self.images, self.labels, self.wnids, self.filenames))


def tiny_imagenet_dir(root: Path) -> Path:
    root = Path(root)
    if not (root / DIRNAME).exists() and root.name == DIRNAME:
        return root  # the tiny-imagenet-200 directory itself was given
    return root / DIRNAME


def _missing(paths: list[Path], reason: str = "missing") -> DatasetNotFoundError:
    return DatasetNotFoundError("Tiny-ImageNet", paths, LAYOUT, HOW, reason=reason)


def read_wnids(root: Path) -> list[str]:
    path = tiny_imagenet_dir(root) / "wnids.txt"
    if not path.exists():
        raise _missing([path])
    wnids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if len(set(wnids)) != len(wnids) or not wnids:
        raise _missing([path], reason=f"malformed ({len(wnids)} lines, {len(set(wnids))} distinct wnids)")
    return wnids


def read_val_annotations(root: Path) -> dict[str, str]:
    """file name -> wnid, from val/val_annotations.txt."""
    path = tiny_imagenet_dir(root) / "val" / "val_annotations.txt"
    if not path.exists():
        raise _missing([path])
    out = {}
    for k, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise _missing([path], reason=f"malformed (line {k}: {line[:60]!r})")
        out[parts[0]] = parts[1]
    return out


def load_tiny_imagenet_val(root: Path, limit: int | None = None) -> TinyImageNetVal:
    """The validation set sorted by file name; ``limit`` keeps the first ``limit`` files (tests)."""
    d = tiny_imagenet_dir(root)
    wnids = read_wnids(root)
    annotations = read_val_annotations(root)
    index = {w: i for i, w in enumerate(wnids)}
    unknown = sorted({w for w in annotations.values() if w not in index})
    if unknown:
        raise _missing([d / "val" / "val_annotations.txt"],
                       reason=f"malformed (wnids not in wnids.txt: {', '.join(unknown[:5])})")
    filenames = sorted(annotations)[:limit]
    missing = [d / "val" / "images" / f for f in filenames if not (d / "val" / "images" / f).exists()]
    if missing:
        raise _missing(missing[:5] + ([Path(f"... and {len(missing) - 5} more")] if len(missing) > 5 else []))
    images = np.empty((len(filenames), SIZE, SIZE, 3), dtype=np.uint8)
    for i, name in enumerate(filenames):
        path = d / "val" / "images" / name
        try:
            with Image.open(path) as im:
                img = np.asarray(im.convert("RGB"))  # 168 of the JPEGs are greyscale
        except OSError as exc:
            raise _missing([path], reason=f"malformed ({exc})") from None
        if img.shape != (SIZE, SIZE, 3):
            raise _missing([path], reason=f"malformed (size {img.shape[1]}x{img.shape[0]}, expected 64x64)")
        images[i] = img
    labels = np.array([index[annotations[f]] for f in filenames], dtype=np.int64)
    return TinyImageNetVal(images, labels, wnids, filenames)


