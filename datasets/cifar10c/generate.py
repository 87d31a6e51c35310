"""CIFAR-10-C on disk: reuse the official release, else regenerate it once in the official layout.

Layout (the official release's): ``<root>/CIFAR-10-C/<corruption>.npy`` holds uint8 images
(5 * N, 32, 32, 3), the N test images at severity 1, then 2, ... 5; ``labels.npy`` holds the test
labels tiled 5 times (uint8). A regenerated directory also holds ``GENERATED.json`` (generator
version, seed, N, per-corruption entries); a directory without it is treated as an official
release and never written to.

Command line (generates the whole set from ``<root>/cifar-10-batches-py``)::

    OMP_NUM_THREADS=1 python -m datasets.cifar10c.generate --data-root data --gallery gallery.png --stats
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from datasets.cifar10c.corruptions import GENERATOR_VERSION, NAMES, SIZE, check_name_severity, corrupt
from datasets.corruptions.storage import atomic_write_bytes as _atomic_write_bytes
from datasets.corruptions.storage import directory_lock as _lock
from datasets.corruptions.storage import now as _now
from datasets.corruptions.storage import read_manifest_file as _read_manifest_file
from datasets.corruptions.storage import write_json
from datasets.errors import DatasetNotFoundError
from datasets.safe_pickle import load_array_pickle

DIRNAME = "CIFAR-10-C"
MANIFEST = "GENERATED.json"
LABELS = "labels.npy"
SEVERITIES = (1, 2, 3, 4, 5)
LAYOUT = (f"<DATA_ROOT>/{DIRNAME}/<corruption>.npy: uint8 (5*N, 32, 32, 3), the N CIFAR-10 test images "
          f"at severity 1, then 2, ... 5; <DATA_ROOT>/{DIRNAME}/{LABELS}: the N labels tiled 5 times")
HOW = ("unpack the official CIFAR-10-C release (https://zenodo.org/record/2535967) into DATA_ROOT/CIFAR-10-C/, "
       "or let bench regenerate it from the CIFAR-10 test set (DATA_ROOT/cifar-10-batches-py): "
       "`python -m datasets.cifar10c.generate --data-root DATA_ROOT`")
CIFAR10_HOW = ("run `../shared/data/unpack.sh DATA_ROOT cifar-10-batches-py` where that archive exists, "
               "or copy torchvision's CIFAR-10 python batches into DATA_ROOT/cifar-10-batches-py/")


# --------------------------------------------------------------------------- files

def _cifar10c_dir(root: Path) -> Path:
    root = Path(root)
    if not (root / DIRNAME).exists() and root.name == DIRNAME:
        return root  # the CIFAR-10-C directory itself was given
    return root / DIRNAME


def _atomic_save(path: Path, array: np.ndarray) -> None:
    _atomic_write_bytes(path, lambda fh: np.save(fh, array, allow_pickle=False))


def read_manifest(directory: Path) -> dict | None:
    """The GENERATED.json of a regenerated CIFAR-10-C directory, or None (absent: official release)."""
    return _read_manifest_file(_cifar10c_dir(Path(directory)) / MANIFEST, "CIFAR-10-C", "corruptions", LAYOUT,
                               "copy the official release")


def _write_manifest(directory: Path, manifest: dict) -> None:
    write_json(directory / MANIFEST, manifest)


def _npy_shape(path: Path) -> tuple | None:
    try:
        return np.load(path, mmap_mode="r").shape
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- public API

def ensure_cifar10c(root: Path, test_images: np.ndarray, test_labels: np.ndarray,
                    corruptions: Sequence[str] | None = None, seed: int = 0, progress: bool = False) -> Path:
    """Make sure ``root/CIFAR-10-C`` holds the requested corruptions; returns that directory.

    An official release (a directory with .npy files and no GENERATED.json) is used as it is and
    never written to; if it lacks a requested file that is an error. Otherwise every requested
    corruption whose file is missing, or was generated for other images / another seed /
    another generator version, is generated from ``test_images`` and written atomically."""
    names = list(NAMES if corruptions is None else corruptions)
    for name in names:
        check_name_severity(name, 1)
    images = np.asarray(test_images)
    labels = np.asarray(test_labels)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (SIZE, SIZE, 3):
        raise ValueError(f"test_images must be uint8 (N, 32, 32, 3), got {images.dtype} {images.shape}")
    if labels.shape != (len(images),):
        raise ValueError(f"test_labels must have shape ({len(images)},), got {labels.shape}")
    n = len(images)
    directory = _cifar10c_dir(Path(root))

    if directory.is_dir() and read_manifest(directory) is None and any(directory.glob("*.npy")):
        missing = [directory / f"{name}.npy" for name in names if not (directory / f"{name}.npy").exists()]
        if not (directory / LABELS).exists():
            missing.append(directory / LABELS)
        if missing:
            raise DatasetNotFoundError(
                "CIFAR-10-C", missing, LAYOUT, HOW,
                reason=f"incomplete: {directory} looks like an official release (no {MANIFEST}), which "
                       f"bench never writes into; add the missing files or remove the directory to regenerate it")
        return directory

    directory.mkdir(parents=True, exist_ok=True)
    with _lock(directory):
        manifest = read_manifest(directory) or {}
        before = json.dumps(manifest, sort_keys=True)
        entries = dict(manifest.get("corruptions", {}))
        tiled = np.tile(labels.astype(np.uint8), len(SEVERITIES))
        label_path = directory / LABELS
        same_labels = (manifest.get("n") == n and _npy_shape(label_path) == tiled.shape  # damaged: regenerated
                       and np.array_equal(np.load(label_path, mmap_mode="r"), tiled))
        if not same_labels:
            entries = {}  # generated for other test images: nothing can be reused
            _atomic_save(label_path, tiled)
        manifest.update({
            "generator": "bench datasets/cifar10c (regenerated CIFAR-10-C; not the official release)",
            "generator_version": GENERATOR_VERSION, "seed": int(seed), "n": n,
            "layout": LAYOUT, "severities": list(SEVERITIES),
        })
        manifest.setdefault("created", _now())
        todo = []
        for name in names:
            entry = entries.get(name, {})
            path = directory / f"{name}.npy"
            fresh = (entry.get("generator_version") == GENERATOR_VERSION and entry.get("seed") == int(seed)
                     and entry.get("n") == n and _npy_shape(path) == (len(SEVERITIES) * n, SIZE, SIZE, 3))
            if not fresh:
                todo.append(name)
        manifest["corruptions"] = entries
        if todo or json.dumps(manifest, sort_keys=True) != before:  # a call with nothing to do writes nothing
            _write_manifest(directory, manifest)
        total = time.perf_counter()
        for k, name in enumerate(todo, 1):
            start = time.perf_counter()
            out = np.empty((len(SEVERITIES) * n, SIZE, SIZE, 3), dtype=np.uint8)
            for s in SEVERITIES:
                out[(s - 1) * n:s * n] = corrupt(images, name, s, seed)
            _atomic_save(directory / f"{name}.npy", out)
            seconds = time.perf_counter() - start
            entries[name] = {"generator_version": GENERATOR_VERSION, "seed": int(seed), "n": n,
                             "seconds": round(seconds, 2), "created": _now()}
            manifest["corruptions"] = entries
            manifest["updated"] = _now()
            _write_manifest(directory, manifest)
            if progress:
                print(f"CIFAR-10-C: {name} ({5 * n} images) generated in {seconds:.1f} s [{k}/{len(todo)}]",
                      flush=True)
        if progress and todo:
            print(f"CIFAR-10-C: {len(todo)} corruption(s) generated in {time.perf_counter() - total:.1f} s "
                  f"into {directory}", flush=True)
    return directory


def load_cifar10c(root: Path, name: str, severity: int) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels int64 (N,)) of one corruption and severity.

    ``root`` is the data root (or the CIFAR-10-C directory itself). The images are a slice of a
    memory map: nothing but the requested severity is read."""
    check_name_severity(name, severity)
    directory = _cifar10c_dir(Path(root))
    path, label_path = directory / f"{name}.npy", directory / LABELS
    if not path.exists() or not label_path.exists():
        raise DatasetNotFoundError("CIFAR-10-C", [path, label_path], LAYOUT, HOW)
    try:
        images = np.load(path, mmap_mode="r")
        labels = np.load(label_path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise DatasetNotFoundError("CIFAR-10-C", [path, label_path], LAYOUT, HOW, reason=f"malformed ({exc})") from None
    if (images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (SIZE, SIZE, 3)
            or len(images) % len(SEVERITIES) or labels.shape != (len(images),)):
        raise DatasetNotFoundError("CIFAR-10-C", [path, label_path], LAYOUT, HOW,
                                   reason=f"malformed (images {images.dtype} {images.shape}, labels {labels.shape})")
    n = len(images) // len(SEVERITIES)
    sl = slice((severity - 1) * n, severity * n)
    return images[sl], np.asarray(labels[sl], dtype=np.int64)


def load_cifar10_test(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (10000, 32, 32, 3), labels int64) from torchvision's ``cifar-10-batches-py``."""
    path = Path(root) / "cifar-10-batches-py" / "test_batch"
    layout = "torchvision layout: DATA_ROOT/cifar-10-batches-py/test_batch (python pickle, 'data' (N, 3072) CHW uint8, 'labels')"
    if not path.exists():
        raise DatasetNotFoundError("CIFAR-10", [path], layout, CIFAR10_HOW)
    try:
        with open(path, "rb") as fh:  # containers and numpy arrays only: a crafted file runs no code
            batch = load_array_pickle(fh, encoding="latin1")
        data = np.asarray(batch["data"] if "data" in batch else batch[b"data"], dtype=np.uint8)
        images = data.reshape(-1, 3, SIZE, SIZE).transpose(0, 2, 3, 1).copy()
        labels = np.asarray(batch["labels"] if "labels" in batch else batch[b"labels"], dtype=np.int64)
    except Exception as exc:  # noqa: BLE001 - any decoding problem means a malformed file
        raise DatasetNotFoundError("CIFAR-10", [path], layout, CIFAR10_HOW, reason=f"malformed ({exc})") from None
    if len(images) != len(labels):
        raise DatasetNotFoundError("CIFAR-10", [path], layout, CIFAR10_HOW, reason="malformed (image/label count)")
    return images, labels


def gallery_png(image: np.ndarray, seed: int = 0, names: Sequence[str] | None = None) -> bytes:
    """PNG of one image under every corruption (rows) at severity 0 (clean) to 5 (columns)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.shape != (SIZE, SIZE, 3):
        raise ValueError(f"expected one uint8 image (32, 32, 3), got {image.dtype} {image.shape}")
    names = list(NAMES if names is None else names)
    rows = {name: [image] + [corrupt(image[None], name, s, seed)[0] for s in SEVERITIES] for name in names}
    return gallery_grid_png(rows, list(SEVERITIES))


def gallery_grid_png(rows: dict, severities: Sequence) -> bytes:
    """PNG of a grid of images: one row per corruption (``rows``: name -> [clean, one image per
    severity]), columns titled "clean" and "severity s" for each of ``severities``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.0 * (len(severities) + 1) + 1.6, 1.0 * len(rows) + 0.4), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), len(severities) + 1, squeeze=False)
    for r, (name, row) in enumerate(rows.items()):
        for c, img in enumerate(row):
            ax = axes[r, c]
            ax.imshow(img, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title("clean" if c == 0 else f"severity {severities[c - 1]}", fontsize=9)
            if c == 0:
                ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=9)
    fig.subplots_adjust(left=0.2, right=0.99, top=1 - 0.35 / fig.get_figheight(),
                        bottom=0.05 / fig.get_figheight(), wspace=0.05, hspace=0.08)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def distortion_table(root: Path, clean: np.ndarray, names: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Mean |corrupted - clean| (pixel values 0..255) per corruption and severity, from the files."""
    table = {}
    clean = clean.astype(np.int16)
    for name in (NAMES if names is None else names):
        row = []
        for s in SEVERITIES:
            imgs, _ = load_cifar10c(root, name, s)
            row.append(float(np.mean([np.abs(np.asarray(imgs[i:i + 1000], dtype=np.int16) - clean[i:i + 1000]).mean()
                                      for i in range(0, len(clean), 1000)])))
        table[name] = row
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m datasets.cifar10c.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", default=None, help="data root (default: $BENCH_DATA_ROOT, else ./data)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corruptions", default=None, help="comma-separated names (default: all 19)")
    parser.add_argument("--gallery", default=None, help="write the gallery PNG of one test image here")
    parser.add_argument("--gallery-index", type=int, default=0)
    parser.add_argument("--stats", action="store_true", help="print mean |corrupted - clean| per severity")
    args = parser.parse_args(argv)
    from datasets.roots import resolve_data_root

    root = resolve_data_root(args.data_root)
    names = None if args.corruptions is None else [s for s in args.corruptions.split(",") if s]
    try:
        images, labels = load_cifar10_test(root)
        start = time.perf_counter()
        directory = ensure_cifar10c(root, images, labels, names, seed=args.seed, progress=True)
        print(f"CIFAR-10-C ready in {directory} ({time.perf_counter() - start:.1f} s)")
    except (DatasetNotFoundError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.gallery:
        Path(args.gallery).write_bytes(gallery_png(images[args.gallery_index], seed=args.seed))
        print(f"gallery written to {args.gallery}")
    if args.stats:
        table = distortion_table(root, images, names)
        print("| corruption | s1 | s2 | s3 | s4 | s5 |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, row in table.items():
            print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
