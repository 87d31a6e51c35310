"""CIFAR-10-C: the official release when present, else regenerated from the CIFAR-10 test set.

``corrupt`` applies one of the 19 corruptions of Hendrycks & Dietterich (2019) with the
CIFAR-10-C severity parameters (``datasets.corruptions`` with ``release="cifar10c"``;
docs/corruptions.md); ``ensure_cifar10c`` writes the official on-disk layout
(``<root>/CIFAR-10-C/<name>.npy`` + ``labels.npy``) once; ``load_cifar10c`` reads one severity;
``gallery_png`` draws one image under every corruption and severity.
"""
from datasets.cifar10c.corruptions import (CORRUPTIONS, EXTRA, GENERATOR_VERSION, NAMES, PARAMS,
                                           STANDARD, corrupt)

_FROM_GENERATE = ("DIRNAME", "MANIFEST", "ensure_cifar10c", "gallery_png", "load_cifar10_test",
                  "load_cifar10c", "read_manifest", "distortion_table")

__all__ = ["CORRUPTIONS", "EXTRA", "GENERATOR_VERSION", "NAMES", "PARAMS", "STANDARD", "corrupt",
           *_FROM_GENERATE]


def __getattr__(name):  # lazy, so that `python -m datasets.cifar10c.generate` runs cleanly
    if name in _FROM_GENERATE:
        from datasets.cifar10c import generate
        return getattr(generate, name)
    raise AttributeError(f"module 'datasets.cifar10c' has no attribute {name!r}")
