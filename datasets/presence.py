"""Multi-label targets from segmentation label maps: which classes an image shows.

A class is *present* in an image when its pixel share -- its pixels over the image's labelled
pixels (the ignore label, CamVid's void, counts neither as a class nor in the denominator) -- is at
least a threshold. ``bench.suites.camvid_multilabel`` turns CamVid's label maps into 11 presence
labels this way; the threshold and the prevalences it gives are measured on the training maps by
``benchmarks/camvid_label_prevalence.py`` (docs/medical.md).
"""
from __future__ import annotations

import numpy as np
import torch


def pixel_shares(labels, num_classes: int, ignore_index: int | None = 255) -> np.ndarray:
    """float64 ``(N, K)``: the share of each image's labelled pixels that has each class.

    ``labels`` is an integer ``(N, H, W)`` array or tensor of class ids ``0..K-1`` and
    ``ignore_index``. An image without labelled pixels has share 0 for every class."""
    y = labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if y.ndim != 3:
        raise ValueError(f"expected label maps (N, H, W), got shape {y.shape}")
    flat = y.reshape(len(y), -1).astype(np.int64)
    labelled = flat != ignore_index if ignore_index is not None else np.ones_like(flat, dtype=bool)
    bad = labelled & ((flat < 0) | (flat >= num_classes))
    if bad.any():
        raise ValueError(f"label values outside 0..{num_classes - 1} (and ignore {ignore_index}): "
                         f"{np.unique(flat[bad])[:5].tolist()}")
    counts = np.zeros((len(y), num_classes), dtype=np.int64)
    rows = np.broadcast_to(np.arange(len(y))[:, None], flat.shape)
    np.add.at(counts, (rows[labelled], flat[labelled]), 1)
    n = labelled.sum(1, keepdims=True)
    return counts / np.maximum(n, 1)


def class_presence(labels, num_classes: int, threshold: float, ignore_index: int | None = 255) -> torch.Tensor:
    """float32 ``(N, K)`` of 0/1: class ``k`` is present in image ``i`` when its pixel share
    (:func:`pixel_shares`) is at least ``threshold`` (``threshold`` > 0; a class with no pixel is
    never present)."""
    if not threshold > 0:
        raise ValueError(f"the presence threshold is a pixel share in (0, 1], got {threshold!r}")
    shares = pixel_shares(labels, num_classes, ignore_index)
    return torch.from_numpy((shares >= threshold).astype(np.float32))


def prevalence_table(shares: np.ndarray, thresholds) -> np.ndarray:
    """``(T, K)``: for each threshold, the share of images in which each class is present."""
    return np.stack([(shares >= t).mean(0) for t in thresholds])


def informative_labels(prevalence: np.ndarray, low: float = 0.1, high: float = 0.9) -> np.ndarray:
    """Per row of ``prevalence`` (T, K): how many labels are neither almost never (< ``low``) nor
    almost always (> ``high``) present."""
    return ((prevalence >= low) & (prevalence <= high)).sum(-1)


__all__ = ["class_presence", "informative_labels", "pixel_shares", "prevalence_table"]
