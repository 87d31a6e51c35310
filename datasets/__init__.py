"""Dataset loaders (torchvision's on-disk layouts), shifts and corruption generators.

This package shadows the PyPI ``datasets`` package on purpose when the repository root is
on ``sys.path``; ``bench`` checks at start-up that this is the one imported.
"""
BENCH_DATASETS = True
