"""A researcher's data, as :func:`bench.evaluate` takes it, turned into the tensors a suite holds.

Every set may be a ``torch.utils.data.Dataset`` whose items are ``(x, y)`` tensors (or ``x``
alone for an OOD set), a ``DataLoader`` yielding such batches, or an ``(x, y)`` pair of tensors /
numpy arrays (an OOD set: ``x`` alone). Sets are read once, in order (a shuffling loader is read
through its dataset, unshuffled: the same data gives the same digest, so a second call resumes),
into memory: inputs as float32, given to the network as they are (normalise them yourself), labels
as int64 (classification: ``(n,)`` class indices; segmentation: ``(n, H, W)`` label maps, 255
ignored), float32 targets ``(n,)`` (regression) or float32 0/1 targets ``(n, L)`` (multilabel: one
column per label, 1 where the label is present).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from bench.errors import BenchError

ACCEPTED = ("a torch Dataset of (x, y) tensors, a DataLoader of (x, y) batches, or an (x, y) pair of tensors or "
            "numpy arrays")


@dataclass
class Split:
    """One materialised set: inputs ``x`` (n, ...) and labels ``y`` (None: an OOD set)."""

    x: torch.Tensor
    y: torch.Tensor | None


def _tensor(v, what: str) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.detach().cpu()
    if isinstance(v, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(v))
    raise BenchError(f"{what}: got a {type(v).__name__} where a tensor was expected; sets are {ACCEPTED} "
                     f"(give a dataset of images a ToTensor transform)")


def _batches(obj, what: str):
    """The batches of ``obj`` (a DataLoader, or a Dataset read 512 items at a time), in order."""
    if isinstance(obj, DataLoader):
        if isinstance(obj.sampler, RandomSampler):  # its dataset, unshuffled: the same data every call
            obj = DataLoader(obj.dataset, batch_size=obj.batch_size or 512, shuffle=False, collate_fn=obj.collate_fn,
                             num_workers=obj.num_workers)
        return obj
    if isinstance(obj, Dataset) or (hasattr(obj, "__getitem__") and hasattr(obj, "__len__")):
        return DataLoader(obj, batch_size=512, shuffle=False)
    raise BenchError(f"{what}: a {type(obj).__name__} is not a set; sets are {ACCEPTED}")


def materialise(obj, what: str, *, labels: bool = True) -> Split:
    """``obj`` read into memory as a :class:`Split`; ``labels=False`` (OOD sets): labels, when
    there are any, are dropped. BenchError naming what is accepted for anything else."""
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and isinstance(obj[0], (torch.Tensor, np.ndarray)):
        x, y = _tensor(obj[0], what), _tensor(obj[1], f"{what} labels")
    elif isinstance(obj, tuple) and len(obj) == 2 and not isinstance(obj[0], Dataset):
        raise BenchError(f"{what}: an (x, y) pair must hold tensors or numpy arrays, not {type(obj[0]).__name__}; "
                         f"sets are {ACCEPTED}")
    elif isinstance(obj, (torch.Tensor, np.ndarray)):
        if labels:
            raise BenchError(f"{what}: a tensor alone has no labels; give (x, y)")
        x, y = _tensor(obj, what), None
    else:
        xs, ys = [], []
        try:
            for batch in _batches(obj, what):
                if isinstance(batch, (tuple, list)) and batch:
                    xs.append(_tensor(batch[0], what))
                    if len(batch) > 1:
                        ys.append(_tensor(batch[1], f"{what} labels"))
                elif isinstance(batch, torch.Tensor):
                    xs.append(batch.detach().cpu())
                else:
                    raise BenchError(f"{what}: a batch is a {type(batch).__name__}; items must be (x, y) tensors "
                                     f"(or x alone for an OOD set)")
        except BenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - collating the user's items failed: say what is accepted
            raise BenchError(f"{what}: reading it failed ({type(exc).__name__}: {str(exc)[:300]}); sets are "
                             f"{ACCEPTED}") from None
        if not xs:
            raise BenchError(f"{what} is empty")
        if ys and len(ys) != len(xs):
            raise BenchError(f"{what}: some items have labels and some do not")
        x = torch.cat(xs)
        y = torch.cat(ys) if ys else None
    if labels and y is None:
        raise BenchError(f"{what}: its items have no labels; give (x, y) items")
    if len(x) == 0:
        raise BenchError(f"{what} is empty")
    if y is not None and len(y) != len(x):
        raise BenchError(f"{what}: {len(x)} inputs but {len(y)} labels")
    return Split(x.float(), y if labels else None)


def cast_labels(split: Split, task_kind: str, what: str) -> Split:
    """Labels as the task takes them: int64 class indices (classification ``(n,)``, segmentation
    ``(n, H, W)``), float32 targets ``(n,)`` for regression (``(n, 1)`` is squeezed), float32 0/1
    targets ``(n, L)`` for multilabel (bool, integer or floating 0s and 1s)."""
    y = split.y
    if y is None:
        return split
    if task_kind == "multilabel":
        return Split(split.x, multilabel_targets(y, what))
    if task_kind == "regression":
        if y.dim() == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.dim() != 1:
            raise BenchError(f"{what}: regression targets must be one number per example, shape (n,); got "
                             f"{tuple(y.shape)}")
        return Split(split.x, y.float())
    if y.is_floating_point() and not bool((y == y.round()).all()):
        raise BenchError(f"{what}: {task_kind} labels must be class indices (integers); got fractional values")
    want = 1 if task_kind == "classification" else 3
    if y.dim() != want:
        shape = "(n,) class indices" if task_kind == "classification" else "(n, H, W) label maps"
        raise BenchError(f"{what}: {task_kind} labels must be {shape}; got shape {tuple(y.shape)}")
    return Split(split.x, y.long())


def multilabel_targets(y: torch.Tensor, what: str) -> torch.Tensor:
    """``y`` as float32 multi-label targets: (n, L) with every value 0 or 1 (a BenchError naming
    what is valid otherwise: class indices (n,) are a classification task's labels)."""
    valid = ("multilabel targets must be (n, L) 0/1 values, one column per label (1: the label is present; "
             "bool, integer or float)")
    if y.dim() != 2 or y.shape[1] < 1:
        hint = " (class indices (n,) are task='classification' labels)" if y.dim() == 1 else ""
        raise BenchError(f"{what}: {valid}; got shape {tuple(y.shape)}{hint}")
    if y.is_complex():
        raise BenchError(f"{what}: {valid}; got {y.dtype}")
    bad = ~((y == 0) | (y == 1))
    if bool(bad.any()):
        raise BenchError(f"{what}: {valid}; {int(bad.sum())} value(s) are neither 0 nor 1 (e.g. "
                         f"{y[bad][0].item():g})")
    return y.float()


def infer_num_labels(splits: dict[str, Split], num_labels: int | None = None) -> int:
    """The labels L of a multilabel task: the targets' columns, the same in every labelled set, and
    ``num_labels`` when it is given (``num_classes=``); a BenchError naming the sets otherwise."""
    widths = {name: int(s.y.shape[1]) for name, s in splits.items() if s.y is not None}
    found = sorted(set(widths.values()))
    if len(found) > 1:
        raise BenchError("multilabel targets must have the same labels (columns) in every set; got "
                         + ", ".join(f"{name}: {w}" for name, w in widths.items()))
    if num_labels is not None and found and int(num_labels) != found[0]:
        raise BenchError(f"num_classes={num_labels}, but the multilabel targets have {found[0]} labels (columns); "
                         f"leave num_classes out or give {found[0]}")
    return int(num_labels) if num_labels is not None else found[0]


def infer_num_classes(splits: dict[str, Split], ignore_index: int | None = None) -> int:
    """1 + the largest label of any set (the ignore label left out): the task's classes when the
    caller does not say."""
    top = -1
    for s in splits.values():
        if s.y is None or not s.y.numel():
            continue
        y = s.y if ignore_index is None else s.y[s.y != ignore_index]
        if y.numel():
            top = max(top, int(y.max()))
    if top < 1:
        raise BenchError("the labels name fewer than 2 classes; give num_classes= or check the labels")
    return top + 1


def check_shapes(splits: dict[str, Split], task_kind: str) -> tuple[int, ...]:
    """The per-example input shape, the same in every set (else a BenchError naming the set);
    segmentation label maps must match the inputs' height and width."""
    ref_name, ref = next(iter(splits.items()))
    shape = tuple(ref.x.shape[1:])
    for name, s in splits.items():
        if tuple(s.x.shape[1:]) != shape:
            raise BenchError(f"{name}: inputs of shape {tuple(s.x.shape[1:])}, but {ref_name}'s are {shape}")
        if task_kind == "segmentation" and s.y is not None and tuple(s.y.shape[1:]) != shape[-2:]:
            raise BenchError(f"{name}: label maps of shape {tuple(s.y.shape[1:])}, but the images are {shape[-2:]}")
    return shape
