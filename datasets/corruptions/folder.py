"""Corrupted copies of an image set in the ImageNet-C folder layout, written once.

Layout (that of the official ImageNet-C and Tiny-ImageNet-C releases)::

    <root>/<dirname>/<corruption>/<severity>/<wnid>/<filename>      JPEG, quality 85, optimize=True
    <root>/<dirname>/GENERATED.json                                   manifest (regenerated copies only)

The JPEGs are saved as ``make_tinyimagenet_c.py`` saves them (``Image.fromarray(np.uint8(img))
.save(path, quality=85, optimize=True)``). The manifest records the generator version, release,
seed, number of images, image size, a SHA-256 digest of the source images + file names + wnids,
and per cell (``"<corruption>/<severity>"``) the same plus its creation time. A cell is written
into a hidden temporary directory that is renamed into place when complete, so a reader never sees
half a cell; a cell is regenerated only when it is missing or was made by another generator
version, release, seed or source. An exclusive lock (``.generate.lock``) keeps two processes from
generating at once. A directory with content and no manifest is an official copy: it is read as
it is and never written to; if it lacks a requested cell, :class:`DatasetNotFoundError` says which.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from datasets.corruptions.functions import GENERATOR_VERSION, check_name_severity, corrupt
from datasets.corruptions.storage import directory_lock, now, read_manifest_file, write_json
from datasets.errors import DatasetNotFoundError

MANIFEST = "GENERATED.json"
LOCK = ".generate.lock"
JPEG = {"quality": 85, "optimize": True}   # make_tinyimagenet_c.py / make_imagenet_c.py
SEVERITIES = (1, 2, 3, 4, 5)


def layout(dirname: str) -> str:
    return (f"<DATA_ROOT>/{dirname}/<corruption>/<severity 1..5>/<wnid>/<file name>: JPEG images "
            f"(the ImageNet-C folder layout)")


def how(dirname: str) -> str:
    return (f"unpack the official release into DATA_ROOT/{dirname}/ (Tiny-ImageNet-C: "
            f"https://zenodo.org/record/2536630), or remove DATA_ROOT/{dirname} so that bench regenerates it "
            f"(datasets.corruptions.ensure_image_folder_c)")


def source_digest(images: np.ndarray, wnids: Sequence[str], filenames: Sequence[str]) -> str:
    """SHA-256 of the source: image bytes, shape, file names and wnids."""
    h = hashlib.sha256()
    h.update(repr(images.shape).encode())
    h.update(np.ascontiguousarray(images).tobytes())
    h.update("\n".join(filenames).encode())
    h.update(b"\0")
    h.update("\n".join(wnids).encode())
    return h.hexdigest()


def read_manifest(directory: Path) -> dict | None:
    """The manifest of a regenerated copy, None for an official one; a damaged one is a
    DatasetNotFoundError (``read_manifest_file``)."""
    d = Path(directory)
    return read_manifest_file(d / MANIFEST, d.name, "cells", layout(d.name),
                              f"unpack the official release into DATA_ROOT/{d.name}/")


def is_official_copy(directory: Path) -> bool:
    """A directory with content and no manifest: an official release, read as it is, never written."""
    return read_manifest(Path(directory)) is None and _has_content(Path(directory))


def _has_content(directory: Path) -> bool:
    return directory.is_dir() and any(not p.name.startswith(".") for p in directory.iterdir())


def _cell_files(directory: Path, name: str, severity: int, wnids, filenames) -> list[Path]:
    base = directory / name / str(severity)
    return [base / w / f for w, f in zip(wnids, filenames)]


def _write_cell(directory: Path, name: str, severity: int, corrupted: np.ndarray, wnids, filenames,
                image_format: str = "JPEG") -> None:
    """All images of one cell into a temporary directory, then renamed into place."""
    parent = directory / name
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{severity}.tmp-*"):      # left by an interrupted run
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{severity}.tmp-"))
    os.chmod(tmp, 0o755)
    try:
        for w in sorted(set(wnids)):
            (tmp / w).mkdir()
        for img, w, f in zip(corrupted, wnids, filenames):
            Image.fromarray(img).save(tmp / w / f, format=image_format, **(JPEG if image_format == "JPEG" else {}))
        final = parent / str(severity)
        if final.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{severity}.tmp-old-"))
            os.replace(final, old / "cell")
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def ensure_image_folder_c(root: Path, dirname: str, images_uint8: np.ndarray, wnids_per_image: Sequence[str],
                          filenames: Sequence[str], release: str, corruptions: Sequence[str] | None = None,
                          severities: Sequence[int] = SEVERITIES, seed: int = 0, progress: bool = False,
                          image_format: str = "JPEG") -> Path:
    """Make sure ``root/dirname`` holds every requested (corruption, severity) cell of the images
    corrupted with ``release``'s parameters; returns that directory. See the module docstring.
    ``image_format``: "JPEG" (quality 85, as the ImageNet-C releases) or "PNG" (lossless, for
    segmentation sets, whose corruptions are not JPEG-compressed afterwards)."""
    if image_format not in ("JPEG", "PNG"):
        raise ValueError(f"image_format must be JPEG or PNG, got {image_format!r}")
    from datasets.corruptions.tables import NAMES

    names = list(NAMES if corruptions is None else corruptions)
    for name in names:
        for s in severities:
            check_name_severity(name, s, release)
    severities = [int(s) for s in severities]
    images = np.asarray(images_uint8)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise ValueError(f"images must be uint8 (N, H, W, 3), got {images.dtype} {images.shape}")
    n = len(images)
    wnids, filenames = [str(w) for w in wnids_per_image], [str(f) for f in filenames]
    if len(wnids) != n or len(filenames) != n:
        raise ValueError(f"need one wnid and one file name per image: {n} images, {len(wnids)} wnids, "
                         f"{len(filenames)} file names")
    if len(set(filenames)) != n or any(os.sep in f or f.startswith(".") or not f for f in filenames + wnids):
        raise ValueError("file names must be unique plain names; wnids plain names")
    directory = Path(root) / dirname

    if is_official_copy(directory):   # read only
        missing = [p for name in names for s in severities
                   for p in _cell_files(directory, name, s, wnids, filenames) if not p.exists()]
        if missing:
            cells = sorted({f"{p.parent.parent.parent.name}/{p.parent.parent.name}" for p in missing})
            raise DatasetNotFoundError(
                dirname, missing[:5], layout(dirname), how(dirname),
                reason=f"incomplete: {directory} has no {MANIFEST}, so it is taken for an official copy, which "
                       f"bench never writes into; it lacks {len(missing)} file(s) of cell(s) {', '.join(cells[:10])}")
        return directory

    directory.mkdir(parents=True, exist_ok=True)
    digest = source_digest(images, wnids, filenames)
    identity = {"generator_version": GENERATOR_VERSION, "release": release, "seed": int(seed),
                "source_digest": digest, "n": n}
    if image_format != "JPEG":  # (JPEG cells made before the option keep their identity)
        identity["format"] = image_format
    with directory_lock(directory, LOCK):
        manifest = read_manifest(directory) or {}
        cells = dict(manifest.get("cells", {}))
        manifest.update({
            "generator": f"bench datasets/corruptions (regenerated {dirname}; not an official release)",
            "generator_version": GENERATOR_VERSION, "release": release, "seed": int(seed), "n": n,
            "source_digest": digest, "image_size": list(images.shape[1:3]), "layout": layout(dirname),
            **({"jpeg": JPEG} if image_format == "JPEG" else {"format": image_format}),
        })
        manifest.setdefault("created", now())
        todo = []
        for name in names:
            for s in severities:
                entry = cells.get(f"{name}/{s}", {})
                fresh = (all(entry.get(k) == v for k, v in identity.items())
                         and all(p.exists() for p in _cell_files(directory, name, s, wnids, filenames)))
                if not fresh:
                    todo.append((name, s))
        if todo:  # the manifest first: from now on the directory is never taken for an official copy
            manifest["cells"] = cells
            write_json(directory / MANIFEST, manifest)
        total = time.perf_counter()
        for k, (name, s) in enumerate(todo, 1):
            start = time.perf_counter()
            _write_cell(directory, name, s, corrupt(images, name, s, seed, release=release), wnids, filenames,
                        image_format)
            seconds = time.perf_counter() - start
            cells[f"{name}/{s}"] = {**identity, "seconds": round(seconds, 2), "created": now()}
            manifest["cells"] = cells
            manifest["corruptions"] = {c: sorted(int(key.split("/")[1]) for key in cells if key.split("/")[0] == c)
                                       for c in sorted({key.split("/")[0] for key in cells})}
            manifest["updated"] = now()
            write_json(directory / MANIFEST, manifest)
            if progress:
                print(f"{dirname}: {name} severity {s} ({n} images) in {seconds:.1f} s [{k}/{len(todo)}]", flush=True)
        if progress and todo:
            print(f"{dirname}: {len(todo)} cell(s) generated in {time.perf_counter() - total:.1f} s into {directory}",
                  flush=True)
    return directory


def read_image_folder_c(root: Path, dirname: str, corruption: str, severity: int) -> list[tuple[Path, str]]:
    """(path, wnid) of every image of one cell, sorted by wnid, then file name (torchvision's
    ImageFolder order). Raises :class:`DatasetNotFoundError` naming the layout when it is missing."""
    check_name_severity(corruption, severity)
    cell = Path(root) / dirname / corruption / str(int(severity))
    items = []
    if cell.is_dir():
        for wdir in sorted(p for p in cell.iterdir() if p.is_dir() and not p.name.startswith(".")):
            items += [(f, wdir.name) for f in sorted(wdir.iterdir()) if f.is_file() and not f.name.startswith(".")]
    if not items:
        raise DatasetNotFoundError(dirname, [cell / "<wnid>" / "<file name>"], layout(dirname), how(dirname),
                                   reason=f"missing (no images in cell {corruption}/{severity})")
    return items
