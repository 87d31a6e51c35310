"""Labels are checked when a dataset is read: every label of a K-class set lies in [0, K), or is
the segmentation ignore label. A label outside (MNIST's 12 of 10 classes) otherwise reaches every
fit, and every cell of the grid fails with the same IndexError while the run exits 0."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from datasets.errors import DatasetNotFoundError

#: at most this many of the distinct bad values are named
SHOWN = 10


def label_problem(labels, num_classes: int, ignore_index: int | None = None) -> str | None:
    """What is wrong with ``labels`` (an array or tensor of class indices) for a ``num_classes``-class
    task (None: nothing): how many lie outside [0, K) (and are not ``ignore_index``), and their values."""
    a = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    bad = (a < 0) | (a >= num_classes)
    if ignore_index is not None:
        bad &= a != ignore_index
    n = int(bad.sum())
    if not n:
        return None
    values = np.unique(a[bad])
    shown = ", ".join(str(v) for v in values[:SHOWN].tolist()) + (", ..." if len(values) > SHOWN else "")
    allowed = f"0..{num_classes - 1}" + (f" (or {ignore_index}, ignored)" if ignore_index is not None else "")
    return f"{n} of {a.size} labels outside {allowed}: values {shown}"


def check_labels(name: str, labels, num_classes: int, path: Path, layout: str, how: str,
                 ignore_index: int | None = None) -> None:
    """Raise :class:`DatasetNotFoundError` (exit 2) naming ``path`` and the bad values when a label of
    ``labels``, read from ``path``, lies outside the task's classes."""
    problem = label_problem(labels, num_classes, ignore_index)
    if problem:
        raise DatasetNotFoundError(name, [Path(path)], layout, how, reason=f"malformed ({path}: {problem})")
