"""Tiny, seeded classification data shared by the method tests (imported as ``synthetic``)."""
from __future__ import annotations

from pathlib import Path

import torch


def blobs(n: int, seed: int):
    """n examples of 3 Gaussian classes in 16 dimensions, shaped as (n, 1, 4, 4) images.

    The class centres are fixed (seed 123) so that every call draws from the same problem."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 16, generator=torch.Generator().manual_seed(123)) * 1.5
    y = torch.randint(0, 3, (n,), generator=g)
    x = (centers[y] + torch.randn(n, 16, generator=g)).view(n, 1, 4, 4)
    return x, y


def bar_classes(n: int, seed: int, k: int = 3, in_shape=(1, 8, 8)):
    """n images of k classes, each class a bright horizontal bar pair (rows 2y and 2y+1 of channel 0)
    over faint noise: a learnable signal for any network (the method contract tests)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, k, (n,), generator=g)
    x = torch.randn(n, *in_shape, generator=g) * 0.3
    x[torch.arange(n), 0, y * 2, :] += 2.0
    return x, y


class TouchOnUnpickle:
    """Unpickling this runs ``Path.touch(marker)``: stands for any code a crafted pickle runs
    (checkpoints, dataset files); a loader that is safe leaves ``marker`` absent."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))
