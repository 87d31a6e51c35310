"""CIFAR-10-C's corruptions: :mod:`datasets.corruptions` with the ``cifar10c`` table.

The parameters are those of the original CIFAR-10-C generator (``make_cifar_c.py`` of
hendrycks/robustness); the implementation (every release's) is in ``datasets/corruptions/``, and
docs/corruptions.md lists every piece and every known difference. ``corrupt`` here is
``datasets.corruptions.corrupt(..., release="cifar10c")``.
"""
from __future__ import annotations

import numpy as np

from datasets.corruptions import functions as _F
from datasets.corruptions.functions import GENERATOR_VERSION, make_rng
from datasets.corruptions.tables import EXTRA, NAMES, PARAMS as _PARAMS, RELEASES, STANDARD

RELEASE = "cifar10c"
SIZE = RELEASES[RELEASE].size
CHUNK = _F.chunk_size(SIZE, SIZE)  # 1000 images per internal step
PARAMS: dict[str, tuple] = _PARAMS[RELEASE]

__all__ = ["CHUNK", "CORRUPTIONS", "EXTRA", "GENERATOR_VERSION", "NAMES", "PARAMS", "SIZE", "STANDARD",
           "check_name_severity", "corrupt", "make_rng"]


def _bind(name: str):
    fn = _F.CORRUPTIONS[name]

    def corruption(images: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
        ctx = _F.Context(RELEASES[RELEASE], int(severity), images.shape[1], images.shape[2])
        return fn(images, PARAMS[name][int(severity) - 1], rng, ctx)
    corruption.__name__ = name
    return corruption


#: name -> f(images uint8 (n, H, W, 3), severity, rng) with the CIFAR-10-C parameters
CORRUPTIONS = {name: _bind(name) for name in NAMES}


def check_name_severity(name: str, severity) -> None:
    _F.check_name_severity(name, severity, RELEASE)


def corrupt(images_uint8: np.ndarray, name: str, severity: int, seed: int = 0) -> np.ndarray:
    """Corrupt a batch (n, 32, 32, 3) of uint8 images; deterministic for (images, name, severity, seed)."""
    return _F.corrupt(images_uint8, name, severity, seed, release=RELEASE)
