"""ImageNet validation and ImageNet-C / Tiny-ImageNet-C, read in their published layouts.

* ImageNet validation: an ``ImageFolder`` tree ``<root>/<imagenet_dir>/val/<wnid>/*.JPEG`` (what
  torchvision's ``ImageNet`` makes of ``ILSVRC2012_img_val.tar`` and the devkit; when only those
  two archives are there, torchvision unpacks them once into that tree).
* ImageNet-C (Hendrycks & Dietterich 2019): ``<root>/ImageNet-C/<corruption>/<severity>/<wnid>/*.JPEG``,
  224 x 224 images made from the validation images resized to 256 and centre-cropped to 224;
  Tiny-ImageNet-C: ``<root>/Tiny-ImageNet-C/<corruption>/<severity>/<wnid>/*.JPEG`` (64 x 64).
  File names are those of the validation images, so a corrupted image is found from its clean one.

Class indices are positions in the sorted list of the 1,000 ImageNet-1k WordNet ids
(``imagenet_wnids.txt``, the order of torchvision's and timm's pretrained classifiers), so a
folder holding only some classes keeps the labels of the full dataset.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from datasets.errors import DatasetNotFoundError

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")
ZENODO = {"ImageNet-C": "https://zenodo.org/record/2235448", "Tiny-ImageNet-C": "https://zenodo.org/record/2536630"}
HOW_IMAGENET = ("ImageNet (ILSVRC2012) requires an account: https://image-net.org/download; put "
                "ILSVRC2012_img_val.tar and ILSVRC2012_devkit_t12.tar.gz in the directory (unpacked once by "
                "torchvision.datasets.ImageNet) or the validation images as val/<wnid>/*.JPEG")


@lru_cache(maxsize=1)
def imagenet_wnids() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k WordNet ids in class-index order (sorted)."""
    return tuple((Path(__file__).with_name("imagenet_wnids.txt")).read_text().split())


def wnid_index() -> dict[str, int]:
    return {w: i for i, w in enumerate(imagenet_wnids())}


def list_class_folders(directory: Path) -> list[tuple[str, str]]:
    """``[(wnid, file name)]`` of every image under ``directory/<wnid>/``, sorted."""
    out = []
    for d in sorted(p for p in Path(directory).iterdir() if p.is_dir()):
        out += [(d.name, f.name) for f in sorted(d.iterdir()) if f.suffix.lower() in IMAGE_EXTENSIONS]
    return out


def imagenet_val_files(root: Path, imagenet_dir: str = "ImageNet") -> tuple[Path, list[tuple[str, str]]]:
    """The validation directory and its ``[(wnid, file name)]``; unpacks the official archives
    with torchvision once when only they are present."""
    base = Path(root) / imagenet_dir
    val = base / "val"
    archives = [base / "ILSVRC2012_img_val.tar", base / "ILSVRC2012_devkit_t12.tar.gz"]
    if not val.is_dir() and all(p.exists() for p in archives):
        from torchvision.datasets import ImageNet

        ImageNet(str(base), split="val")  # parses the devkit, unpacks val/<wnid>/*.JPEG
    layout = (f"{val}/<wnid>/*.JPEG (an ImageFolder tree of the 50,000 validation images, 1,000 WordNet-id "
              f"folders), or {archives[0].name} + {archives[1].name} in {base}")
    if not val.is_dir():
        raise DatasetNotFoundError("ImageNet (validation)", [val] + archives, layout, HOW_IMAGENET)
    files = list_class_folders(val)
    index = wnid_index()
    unknown = sorted({w for w, _ in files if w not in index})
    if not files or unknown:
        reason = "empty" if not files else f"malformed (folders that are not ImageNet-1k WordNet ids: {unknown[:5]})"
        raise DatasetNotFoundError("ImageNet (validation)", [val], layout, HOW_IMAGENET, reason=reason)
    return val, files


def corrupted_cell_paths(root: Path, dirname: str, corruption: str, severity: int,
                         files: list[tuple[str, str]], layout_note: str = "") -> list[Path]:
    """The paths of ``files`` (``(wnid, file name)``) in one ImageNet-C-layout cell; a missing
    cell or image is a :class:`DatasetNotFoundError` naming the layout and where to get it."""
    cell = Path(root) / dirname / corruption / str(severity)
    paths = [cell / w / f for w, f in files]
    missing = [p for p in paths if not p.exists()]
    if missing:
        layout = (f"{Path(root) / dirname}/<corruption>/<severity 1-5>/<wnid>/<file name of the clean image>"
                  + (f"; {layout_note}" if layout_note else ""))
        how = f"download {dirname} ({ZENODO.get(dirname, 'the official release')}) and unpack it into {Path(root)}"
        raise DatasetNotFoundError(dirname, missing[:5] + ([Path(f"... {len(missing) - 5} more")] if len(missing) > 5 else []),
                                   layout, how, reason="missing" if len(missing) == len(paths) else
                                   f"incomplete ({len(missing)} of {len(paths)} images of {corruption} severity {severity} missing)")
    return paths


def write_fixture(root: Path, wnids: list[str], per_class: int, corruptions=("gaussian_noise", "contrast"),
                  severities=(1, 3, 5), seed: int = 0, sizes=((300, 260), (260, 333)), quality: int = 90,
                  c_dir: str = "ImageNet-C", imagenet_dir: str = "ImageNet") -> list[tuple[str, str]]:
    """A synthetic ImageNet validation tree and ImageNet-C in the official layouts, for tests and
    benchmarks: ``per_class`` JPEGs per WordNet id (sizes cycling through ``sizes``, the class
    visible in one colour channel, the first image greyscale) named like the official files, and
    224 x 224 noise JPEGs of the same names in every (corruption, severity) cell. Returns the
    ``(wnid, file name)`` list."""
    import numpy as np
    from PIL import Image

    def save(path: Path, array) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(array).save(path, quality=quality)

    rng = np.random.default_rng(seed)
    files, k = [], 0
    for ci, wnid in enumerate(wnids):
        for j in range(per_class):
            k += 1
            name = f"ILSVRC2012_val_{k:08d}.JPEG"
            h, w = sizes[j % len(sizes)]
            base = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
            base[:, :, ci % 3] += 150
            save(Path(root) / imagenet_dir / "val" / wnid / name, base[:, :, 0] if (j == 0 and ci == 0) else base)
            for c in corruptions:
                for s in severities:
                    save(Path(root) / c_dir / c / str(s) / wnid / name,
                         rng.integers(0, 255, (224, 224, 3)).astype(np.uint8))
            files.append((wnid, name))
    return files
