"""Network architectures used by the suites, registered by name.

Builders take ``(in_shape, num_outputs, dropout)`` and return an ``nn.Sequential`` (or a
module whose ``.features``-free forward is a plain chain), so that methods can find the
layers before the first stochastic one and compute them once for all posterior samples.
Dropout layers are placed after each hidden activation (never on the input or output),
and exist in every model with ``p = dropout`` (identity at ``p = 0``) so that MC dropout
and the deterministic network share one architecture.
"""
from __future__ import annotations

import math
from typing import Callable

from torch import nn

from bench.registry import Registry

MODELS: Registry[Callable[..., nn.Module]] = Registry("model")


def _dropout(p: float) -> list[nn.Module]:
    return [nn.Dropout(p)] if p > 0 else []


@MODELS.register("lenet_300_100")
def lenet_300_100(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """LeNet-300-100 with batch norm and ReLU (PBN paper, Appendix H.2.1)."""
    d = math.prod(in_shape)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(d, 300), nn.BatchNorm1d(300), nn.ReLU(), *_dropout(dropout),
        nn.Linear(300, 100), nn.BatchNorm1d(100), nn.ReLU(), *_dropout(dropout),
        nn.Linear(100, num_outputs),
    )


@MODELS.register("lenet5")
def lenet5(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) with batch norm, ReLU and max pooling; 28x28 or 32x32 input."""
    c, h, w = in_shape
    pad = 2 if h == 28 else 0
    fh = ((h + 2 * pad - 4) // 2 - 4) // 2
    fw = ((w + 2 * pad - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=pad), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * fh * fw, 120), nn.BatchNorm1d(120), nn.ReLU(), *_dropout(dropout),
        nn.Linear(120, 84), nn.BatchNorm1d(84), nn.ReLU(), *_dropout(dropout),
        nn.Linear(84, num_outputs),
    )


@MODELS.register("mlp_100")
def mlp_100(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """One hidden layer of 100 ReLU units (the toy regression of Hernandez-Lobato & Adams 2015)."""
    d = math.prod(in_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 100), nn.ReLU(), *_dropout(dropout), nn.Linear(100, num_outputs))


def build_model(name: str, in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    return MODELS.get(name)(tuple(in_shape), num_outputs, dropout=dropout)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
