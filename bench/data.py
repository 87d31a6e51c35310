"""Batching for training and evaluation.

Training and validation sets are sources a :class:`TensorLoader` indexes (tensors, or the lazy
sources of :mod:`datasets.sources`); evaluation sets are read batch by batch by :func:`batches`
(a ``DataLoader`` whose workers decode whole batches of a file-backed source), so peak memory
does not grow with the number or the size of the evaluation cells.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset


#: the largest share of a CUDA device's free memory a :class:`TensorLoader` copies its tensors into
DEVICE_RESIDENT_SHARE = 0.25


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (on the host) on ``device``: to CUDA from page-locked memory, asynchronously (a copy from
    pageable memory waits for the device, once per call: per step in a training loop)."""
    if torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class TensorLoader:
    """Mini-batches of (x, y) from in-memory tensors, moved to ``device``.

    ``augment`` (optional) maps an input batch to an augmented batch (on the device) and
    draws its randomness from the loader's generator, so a seed fixes the whole stream.

    On a CUDA device, tensors that take at most :data:`DEVICE_RESIDENT_SHARE` of the device's free
    memory are copied there once, at the first iteration, and the batches are gathered there (the
    same indices, the same values): with 8 processes sharing an H200, a LeNet-300-100 training step
    took 3.7 ms with batches gathered and copied from the host, a bare loop on resident data 1.9 ms
    (2026-11-28, docs/device.md). ``x`` and ``y`` stay the tensors given (on the host).
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, device: torch.device | str = "cpu", drop_last: bool = False,
                 augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None):
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last, self.augment = shuffle, drop_last, augment
        self.device = torch.device(device)
        self.generator = torch.Generator().manual_seed(seed)
        self._resident: tuple[torch.Tensor, torch.Tensor] | None = None  # (x, y) on the device, once copied

    def __len__(self) -> int:
        n, b = len(self.x), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    @property
    def num_examples(self) -> int:
        return len(self.x)

    def _source(self) -> tuple:
        """(x, y) to gather batches from: the device's copy where :meth:`_fits_on_device`, else the given ones."""
        if self._resident is None and self._fits_on_device():
            self._resident = (self.x.to(self.device), self.y.to(self.device))
        return self._resident or (self.x, self.y)

    def _fits_on_device(self) -> bool:
        if self.device.type != "cuda" or not (isinstance(self.x, torch.Tensor) and isinstance(self.y, torch.Tensor)):
            return False
        free, _total = torch.cuda.mem_get_info(self.device)
        return self.x.nbytes + self.y.nbytes <= DEVICE_RESIDENT_SHARE * free

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.x)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else None
        x, y = self._source()
        if order is not None and isinstance(x, torch.Tensor) and x.device != order.device:
            order = to_device(order, x.device)
        for i in range(len(self)):
            sl = slice(i * self.batch_size, min((i + 1) * self.batch_size, n))
            if order is None:
                xb, yb = x[sl], y[sl]
            else:
                idx = order[sl]
                xb, yb = x[idx], y[idx]
            xb = xb.to(self.device, non_blocking=True)
            yb = yb.to(self.device, non_blocking=True)
            if self.augment is not None:
                xb = self.augment(xb, self.generator)
            yield xb, yb

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


class _Chunks(Dataset):
    """Item ``i`` = rows ``[i * b, (i + 1) * b)`` of a source, as one batch (read in a worker)."""

    def __init__(self, source, batch_size: int):
        self.source, self.batch_size = source, int(batch_size)

    def __len__(self) -> int:
        return -(-len(self.source) // self.batch_size)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.source[i * self.batch_size: min((i + 1) * self.batch_size, len(self.source))]


class SourceDataset(Dataset):
    """``(x[i], y[i])`` items of a source (e.g. files decoded on demand) and its labels: the
    torch ``Dataset`` a library that wants one (laplace-torch) gets when the data is not a tensor."""

    def __init__(self, x, y: torch.Tensor):
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def is_streamed(source) -> bool:
    """True for sources read from disk per batch (worth loader workers)."""
    return bool(getattr(source, "streamed", False))


def batches(source, batch_size: int, device: torch.device | str = "cpu", workers: int = 0) -> Iterator[torch.Tensor]:
    """The rows of ``source`` in order, ``batch_size`` at a time, on ``device``.

    A file-backed source (:func:`is_streamed`) is read by ``workers`` DataLoader worker
    processes, each decoding a whole batch, with pinned memory on CUDA; in-memory sources are
    sliced in place (workers would only copy them). The batches are the same either way.
    """
    device = torch.device(device)
    if not is_streamed(source) or workers <= 0:
        for start in range(0, len(source), batch_size):
            yield source[start:start + batch_size].to(device, non_blocking=True)
        return
    # a private generator: the loader's worker seed must not consume the global RNG, which seeds
    # the predictions of sampling methods
    loader = DataLoader(_Chunks(source, batch_size), batch_size=None, shuffle=False, num_workers=int(workers),
                        pin_memory=device.type == "cuda", prefetch_factor=2, generator=torch.Generator())
    for xb in loader:
        yield xb.to(device, non_blocking=True)


@dataclass
class EvalSet:
    """One evaluation set: in-distribution test, one shift at one severity, or an OOD set."""

    kind: str  # "id" | "shift" | "ood" | "val" (the held-out validation split, for tuning only)
    shift: str  # shift family ("rotation", a corruption name, "clean") or OOD dataset name
    severity: float | None
    x: torch.Tensor  # or any source (datasets.sources): len() and x[a:b] -> float batch
    y: torch.Tensor | None  # None for OOD sets without labels in the task's label space
    note: str = ""
    #: what the set was made from when that can change under the same configuration (e.g. the
    #: corruption generator's version of a regenerated CIFAR-10-C file); stored in its records, and
    #: a record made from other data is redone (with the fitted method) instead of kept
    fingerprint: str = ""
    #: segmentation: keep the prediction, entropy and mutual-information maps of the first this many
    #: images in the record (downsampled, quantised), for the report's uncertainty maps
    keep_maps: int = 0

    @property
    def n(self) -> int:
        return len(self.x)


@dataclass
class SuiteData:
    """Everything a suite provides for one profile: training and validation sets (tensors or
    sources a :class:`TensorLoader` can index) and the evaluation sets (read per batch)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    eval_sets: list[EvalSet]
    augment: Callable | None = None
    extras: dict = field(default_factory=dict)  # suite-specific (e.g. the toy band grid)

    def id_set(self) -> EvalSet:
        return next(e for e in self.eval_sets if e.kind == "id")


def data_digest(*sources, stat: bool = True) -> str:
    """A hash of what ``sources`` hold: tensors (and uint8-backed image sets) by their contents,
    file-backed sources by their files' paths (``stat``: and sizes and modification times), other
    sources by their type and length, strings and None as they are. Failure records carry it
    (``data_hash``): one written under other data is retried, not skipped (the data was fixed)."""
    import hashlib
    import os

    h = hashlib.blake2b(digest_size=8)
    for obj in sources:
        raw = getattr(obj, "raw", None)
        obj = raw if isinstance(raw, torch.Tensor) else obj
        if obj is None or isinstance(obj, (str, int, float)):
            h.update(f"{type(obj).__name__}:{obj!r}\0".encode())
        elif isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"tensor:{t.dtype}:{tuple(t.shape)}\0".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().data)
        elif getattr(obj, "paths", None) is not None or getattr(obj, "path", None) is not None:
            paths = list(getattr(obj, "paths", None) or [obj.path])
            h.update(f"files:{type(obj).__name__}:{len(obj)}\0".encode())
            rows = getattr(obj, "rows", None)
            if rows is not None:
                h.update(rows.tobytes() if hasattr(rows, "tobytes") else repr(rows).encode())
            for p in paths:
                h.update(str(p).encode() + b"\0")
                if stat:
                    try:
                        st = os.stat(p)
                        h.update(f"{st.st_size}:{st.st_mtime_ns}\0".encode())
                    except OSError:
                        h.update(b"missing\0")
        else:
            h.update(f"{type(obj).__name__}:{len(obj) if hasattr(obj, '__len__') else '?'}\0".encode())
    return h.hexdigest()
