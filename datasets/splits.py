"""Fixed, seeded subsets of decoded datasets."""
from __future__ import annotations

import torch


def subset(x: torch.Tensor, y: torch.Tensor | None, n: int | None, seed: int = 0):
    """A fixed, seeded, class-balanced-in-expectation subset of at most n rows (order kept)."""
    if n is None or n >= len(x):
        return x, y
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n].sort().values
    return x[idx], (None if y is None else y[idx])
