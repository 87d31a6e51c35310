"""Your own images as an ImageFolder tree (torchvision's layout), read for the ``folder`` suite.

Layout::

    <tree>/train/<class>/<image>      required: one directory per class
    <tree>/val/<class>/<image>        optional (the suite splits a validation part off train when absent)
    <tree>/test/<class>/<image>       required

Images are the files with torchvision's image extensions (``IMAGE_EXTENSIONS``, any case) under a
class directory, sub-directories included (as ``torchvision.datasets.ImageFolder``); other files are
ignored, hidden files and directories (``.name``) too. The classes are the directories of
``train/`` in sorted order (ImageFolder's order), and a class's label is its position there in every
split: a class directory of ``val/`` or ``test/`` that ``train/`` lacks is an error naming it, as is
a class of ``train/`` without images. :func:`scan_tree` lists the tree (no image is opened),
:func:`decode_images` decodes images to one size (shorter side resized, centre crop: torchvision's
``Resize(size)`` + ``CenterCrop(size)``, :class:`datasets.sources.ImageFiles`), naming a file it
cannot read. Every problem is a :class:`datasets.errors.DatasetNotFoundError` (exit code 2) that
names the path, the expected layout and what was found there.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from datasets.errors import DatasetNotFoundError

#: torchvision.datasets.folder.IMG_EXTENSIONS
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
SPLITS = ("train", "val", "test")
NAME = "ImageFolder tree"
HOW = ("put your images in that layout (one directory per class, the same class names in every split), "
       "or point data.path at a directory that has it")


def layout(tree: Path) -> str:
    return (f"{tree}/train/<class>/<image> and {tree}/test/<class>/<image> (required), "
            f"{tree}/val/<class>/<image> (optional); images: {', '.join(IMAGE_EXTENSIONS)}; "
            f"classes: the directories of train/, sorted, the same names in every split")


def found(path: Path, limit: int = 8) -> str:
    """What is at ``path``, in words: "does not exist", "a file", "an empty directory" or its entries."""
    path = Path(path)
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), None)
        return f"{path} does not exist" + (f" (nearest existing directory: {parent})" if parent else "")
    if not path.is_dir():
        return f"{path} is a file, not a directory"
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir() if not p.name.startswith("."))
    if not entries:
        return f"{path} is an empty directory"
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return f"{path} holds {', '.join(entries[:limit])}{more}"


def _error(tree: Path, expected: list[Path], reason: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(NAME, expected, layout(tree), HOW, reason=reason)


def list_images(directory: Path) -> list[Path]:
    """Every image file under ``directory`` (recursively; hidden entries skipped), sorted by path."""
    out = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in filenames
                if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)]
    return sorted(out)


def class_dirs(split_dir: Path) -> list[str]:
    """The class directories of one split, sorted (ImageFolder's order); hidden ones skipped."""
    return sorted(p.name for p in Path(split_dir).iterdir() if p.is_dir() and not p.name.startswith("."))


@dataclass
class Split:
    files: list[Path]
    labels: np.ndarray  # int64, the class's position in ``Tree.classes``
    missing_classes: list[str] = field(default_factory=list)  # classes of train with no images here

    def __len__(self) -> int:
        return len(self.files)


@dataclass
class Tree:
    root: Path
    classes: list[str]
    splits: dict[str, Split]  # "train", "test" and, when the tree has one, "val"

    def counts(self, split: str) -> np.ndarray:
        return np.bincount(self.splits[split].labels, minlength=len(self.classes))


def scan_tree(tree: Path) -> Tree:
    """List an ImageFolder tree (no image is opened); see the module docstring for what is checked."""
    tree = Path(tree)
    required = [tree / "train", tree / "test"]
    if not tree.is_dir() or not all(p.is_dir() for p in required):
        absent = [p for p in required if not p.is_dir()]
        what = found(tree) if not tree.is_dir() else \
            f"{found(tree)}; no {' and no '.join(p.name + '/' for p in absent)} directory"
        raise _error(tree, required, f"missing ({what})")
    classes = class_dirs(tree / "train")
    if not classes:
        loose = len(list_images(tree / "train"))
        raise _error(tree, [tree / "train" / "<class>" / "<image>"],
                     f"malformed (no classes: {found(tree / 'train')}"
                     + (f"; its {loose} image(s) must sit in one directory per class" if loose else "") + ")")
    if len(classes) < 2:
        raise _error(tree, [tree / "train" / "<class>"],
                     f"malformed (one class, {classes[0]!r}: classification needs at least two class directories "
                     f"in {tree / 'train'})")
    index = {c: k for k, c in enumerate(classes)}
    splits = {}
    for name in SPLITS:
        d = tree / name
        if not d.is_dir():
            continue  # only val/ can be absent here
        here = class_dirs(d)
        extra = [c for c in here if c not in index]
        if extra:
            raise _error(tree, [d / c for c in extra],
                         f"malformed (class(es) {', '.join(map(repr, extra))} of {name}/ not in train/, whose classes "
                         f"are {', '.join(map(repr, classes))}: a class must have training images, and labels are "
                         f"positions in train/'s sorted class list)")
        files, labels, empty = [], [], []
        for c in classes:
            imgs = list_images(d / c) if (d / c).is_dir() else []
            if not imgs:
                empty.append(c)
            files += imgs
            labels += [index[c]] * len(imgs)
        if name == "train" and empty:
            raise _error(tree, [d / c / "<image>" for c in empty],
                         f"malformed (class(es) {', '.join(map(repr, empty))} of train/ hold no image "
                         f"({', '.join(IMAGE_EXTENSIONS)}): {found(d / empty[0])})")
        if not files:
            raise _error(tree, [d / "<class>" / "<image>"], f"malformed ({name}/ holds no image: {found(d)})")
        splits[name] = Split(files, np.asarray(labels, dtype=np.int64), empty)
    return Tree(tree, classes, splits)


def list_ood(directory: Path) -> tuple[Path, list[Path]]:
    """The images of an out-of-distribution folder: its ``test/`` split when it is an ImageFolder
    tree with one, else every image under it (any layout; labels are not used)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetNotFoundError("OOD images (data.ood)", [directory],
                                   f"{directory}/<image> or {directory}/<class>/<image> (an image folder; when it "
                                   f"has a test/ directory, only its images)", "put the images there, or leave data.ood unset",
                                   reason=f"missing ({found(directory)})")
    base = directory / "test" if (directory / "test").is_dir() else directory
    files = list_images(base)
    if not files:
        raise DatasetNotFoundError("OOD images (data.ood)", [base / "<image>"],
                                   f"{directory}/<image> or {directory}/<class>/<image>; images: {', '.join(IMAGE_EXTENSIONS)}",
                                   "put the images there, or leave data.ood unset", reason=f"empty ({found(base)})")
    return base, files


def decode_images(paths: Sequence[Path], size: int, what: str = NAME, where: str = "", threads: int = 4) -> np.ndarray:
    """The images at ``paths`` as uint8 ``(N, size, size, 3)`` RGB: shorter side resized to ``size``
    (bilinear), centre crop (:meth:`datasets.sources.ImageFiles.decode`). A file PIL cannot read is a
    :class:`DatasetNotFoundError` naming it (``where``: the layout the files belong to)."""
    from datasets.sources import ImageFiles

    reader = ImageFiles([], size, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), resize=size)

    def one(path) -> np.ndarray:
        try:
            return reader.decode(str(path))
        except Exception as exc:  # noqa: BLE001 - any decoder failure: the file is not a readable image
            raise DatasetNotFoundError(what, [Path(path)], (f"{where}; " if where else "")
                                       + f"every image file ({', '.join(IMAGE_EXTENSIONS)}) one PIL can read",
                                       "replace or remove the file",
                                       reason=f"malformed (unreadable image: {type(exc).__name__}: {exc})") from None

    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    if len(paths) == 0:
        return out
    with ThreadPoolExecutor(max_workers=max(1, min(int(threads), len(paths)))) as pool:  # PIL decodes without the GIL
        for k, img in enumerate(pool.map(one, paths)):
            out[k] = img
    return out
