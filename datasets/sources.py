"""Image sources read from disk batch by batch: what an evaluation (or training) set holds when its
images do not belong in memory.

A *source* is anything with ``len()`` whose ``source[idx]`` (a slice, or a LongTensor of row
indices) returns the float32 NCHW batch of those rows, ready for the network: a tensor, the
CIFAR suites' :class:`datasets.cifar10.NormalizedImages` (uint8 in memory), and here

* :class:`NpyRows`: rows of a ``.npy`` array (e.g. a CIFAR-10-C file of 50,000 images),
  memory-mapped, so only the requested rows are read;
* :class:`ImageFiles`: JPEG / PNG files, decoded with PIL, optionally resized and centre-cropped
  (ImageNet's validation protocol), converted to RGB.

Both open their files lazily and hold only paths and row indices, so they pickle cheaply into
the workers of a ``torch.utils.data.DataLoader`` (:func:`bench.data.batches`), which decode
batches in parallel. ``streamed = True`` marks them as worth those workers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch


def _standardise(x_uint8_nchw: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return x_uint8_nchw.float().div_(255.0).sub_(m).div_(s)


def _rows(idx, n: int) -> np.ndarray:
    if isinstance(idx, slice):
        return np.arange(n)[idx]
    if isinstance(idx, int):
        return np.asarray([idx])
    return np.asarray(torch.as_tensor(idx).cpu().numpy(), dtype=np.int64).reshape(-1)


class StandardisedImages:
    """uint8 NCHW images in memory, read as float32 batches standardised with ``mean`` / ``std``
    (3 bytes a pixel held, the conversion paid per batch)."""

    streamed = False

    def __init__(self, images_uint8_nchw: torch.Tensor, mean: Sequence[float], std: Sequence[float]):
        if images_uint8_nchw.dtype != torch.uint8 or images_uint8_nchw.dim() != 4:
            raise ValueError(f"expected uint8 (N, C, H, W), got {images_uint8_nchw.dtype} {tuple(images_uint8_nchw.shape)}")
        self.raw, self.mean, self.std = images_uint8_nchw, tuple(mean), tuple(std)

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, idx) -> torch.Tensor:
        out = self.raw[idx]
        return _standardise(out.unsqueeze(0), self.mean, self.std).squeeze(0) if out.dim() == 3 else \
            _standardise(out, self.mean, self.std)


class NpyRows:
    """Rows ``rows`` of the uint8 image array in ``path`` (``(N, H, W, C)``, or ``(N, C, H, W)``
    with ``channels_last=False``) as normalised float32 NCHW batches. The file is memory-mapped
    on first use in each process; ``normalize`` maps a uint8 NCHW batch to floats (the suite's
    own normalisation, so that numbers equal those of the in-memory path)."""

    streamed = True

    def __init__(self, path: str | Path, rows: np.ndarray, normalize, *, channels_last: bool = True):
        self.path, self.rows = str(path), np.asarray(rows, dtype=np.int64)
        self.normalize, self.channels_last = normalize, channels_last
        self._arr = None

    def __getstate__(self):
        return {**self.__dict__, "_arr": None}

    def _array(self):
        if self._arr is None:
            self._arr = np.load(self.path, mmap_mode="r")
        return self._arr

    def __len__(self) -> int:
        return len(self.rows)

    def uint8(self, idx) -> torch.Tensor:
        """The uint8 NCHW images of positions ``idx`` (in this source's row order)."""
        rows = self.rows[_rows(idx, len(self.rows))]
        order = np.argsort(rows, kind="stable")  # ascending reads are sequential on disk
        block = np.empty((len(rows),) + self._array().shape[1:], dtype=np.uint8)
        block[order] = self._array()[rows[order]]
        if self.channels_last:
            block = block.transpose(0, 3, 1, 2)
        return torch.from_numpy(np.ascontiguousarray(block))

    def __getitem__(self, idx) -> torch.Tensor:
        out = self.normalize(self.uint8(idx))
        return out.squeeze(0) if isinstance(idx, int) else out


class ImageFiles:
    """Image files as normalised float32 NCHW batches of ``size`` x ``size``.

    ``resize`` (optional): the shorter side is first resized to this many pixels (bilinear, as
    torchvision's ``Resize``); then the centre ``size`` x ``size`` crop is taken (``CenterCrop``).
    Grey and palette images become RGB.
    """

    streamed = True

    def __init__(self, paths: Sequence[str | Path], size: int, mean: Sequence[float], std: Sequence[float],
                 resize: int | None = None):
        self.paths = [str(p) for p in paths]
        self.size, self.resize = int(size), resize
        self.mean, self.std = tuple(mean), tuple(std)

    def __len__(self) -> int:
        return len(self.paths)

    def decode(self, path: str) -> np.ndarray:
        """One image as uint8 HWC RGB, resized and centre-cropped to ``size``."""
        from PIL import Image

        with Image.open(path) as im:
            im = im.convert("RGB")
            if self.resize is not None:
                w, h = im.size
                # torchvision's Resize(int): the short side becomes `resize`, the long side int()
                nw, nh = (self.resize, int(self.resize * h / w)) if w <= h else (int(self.resize * w / h), self.resize)
                if (nw, nh) != (w, h):
                    im = im.resize((nw, nh), Image.BILINEAR)
            w, h = im.size
            if (w, h) != (self.size, self.size):  # torchvision's CenterCrop
                if w < self.size or h < self.size:
                    raise ValueError(f"{path}: {w}x{h} is smaller than the {self.size}x{self.size} crop")
                left = int(round((w - self.size) / 2.0))
                top = int(round((h - self.size) / 2.0))
                im = im.crop((left, top, left + self.size, top + self.size))
            return np.asarray(im, dtype=np.uint8)

    def uint8(self, idx) -> torch.Tensor:
        rows = _rows(idx, len(self.paths))
        block = np.stack([self.decode(self.paths[i]) for i in rows]) if len(rows) else \
            np.empty((0, self.size, self.size, 3), np.uint8)
        return torch.from_numpy(np.ascontiguousarray(block.transpose(0, 3, 1, 2)))

    def __getitem__(self, idx) -> torch.Tensor:
        out = _standardise(self.uint8(idx), self.mean, self.std)
        return out.squeeze(0) if isinstance(idx, int) else out


class Computed:
    """An evaluation set computed from a recipe (a rotation, additive noise) when it is first
    read, and dropped when another :class:`Computed` set is read.

    The harness reads evaluation sets one after the other, so at most one computed set is in
    memory at a time, whatever the number of shift levels, and every set is computed exactly as
    it would be up front (the whole set in one call: a seeded noise stream stays the same)."""

    streamed = False
    _current: tuple["Computed", torch.Tensor] | None = None  # the one materialised set (per process)

    def __init__(self, make, n: int):
        self.make, self.n = make, int(n)

    def __len__(self) -> int:
        return self.n

    def data(self) -> torch.Tensor:
        cur = Computed._current
        if cur is None or cur[0] is not self:
            Computed._current = None  # release the previous set before computing this one
            x = self.make()
            if len(x) != self.n:
                raise ValueError(f"computed set has {len(x)} rows, expected {self.n}")
            Computed._current = (self, x)
        return Computed._current[1]

    def __getitem__(self, idx) -> torch.Tensor:
        return self.data()[idx]

    @classmethod
    def release(cls) -> None:
        cls._current = None
