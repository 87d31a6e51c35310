"""Fixed, seeded subsets of decoded datasets."""
from __future__ import annotations

import numpy as np
import torch


def subset(x: torch.Tensor, y: torch.Tensor | None, n: int | None, seed: int = 0):
    """A fixed, seeded, class-balanced-in-expectation subset of at most n rows (order kept)."""
    if n is None or n >= len(x):
        return x, y
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    return x[idx], (None if y is None else y[idx])


def split_per_class(labels, parts=(35, 5, 10), seed: int = 0) -> tuple[np.ndarray, ...]:
    """Per class, a seeded permutation of that class's images (in the given order, e.g. file-name
    order for :func:`datasets.tiny_imagenet.load_tiny_imagenet_val`) cut into ``parts`` counts; one
    sorted index array per part. The counts must fit the smallest class. Splits a validation set of
    N images per class (ImageNet's, Tiny-ImageNet's) into the parts a method fits on, tunes on and
    is tested on."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}")
    parts = tuple(int(p) for p in parts)
    if not parts or any(p < 0 for p in parts):
        raise ValueError(f"parts must be non-negative counts, got {parts}")
    classes, counts = np.unique(labels, return_counts=True)
    if len(classes) and sum(parts) > counts.min():
        worst = classes[np.argmin(counts)]
        raise ValueError(f"parts {parts} need {sum(parts)} images per class; class {worst} has {counts.min()}")
    rng = np.random.default_rng(seed)
    out = [[] for _ in parts]
    for c in classes:
        members = np.flatnonzero(labels == c)[rng.permutation(int((labels == c).sum()))]
        start = 0
        for k, p in enumerate(parts):
            out[k].append(members[start:start + p])
            start += p
    return tuple(np.sort(np.concatenate(o)).astype(np.int64) if o else np.zeros(0, np.int64) for o in out)
