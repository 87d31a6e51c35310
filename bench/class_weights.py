"""Class-weighted cross-entropy for the ELBO of ``pbn`` and ``mfvi`` (option ``class_weights``).

The medical PBN paper (Sec. 3.1) trains its partial Bayesian networks with "a weighted
cross-entropy loss to address class imbalances". The option takes

* ``"none"`` (default): the task's own likelihood, unchanged;
* ``"median_frequency"``: median-frequency balancing (Eigen & Fergus 2015, SegNet's CamVid
  weights), w_c = median_c(f_c) / f_c, computed from the training labels
  (:func:`median_frequency_weights`);
* ``"balanced"``: scikit-learn's ``class_weight="balanced"``, w_c = N / (C n_c) over the C classes
  present in the training labels (:func:`balanced_weights`); on a multi-label task per label, its
  positives and its negatives as two classes (:func:`multilabel_balanced_weights`);
* K non-negative numbers, one per class (``--set pbn.class_weights=[1,5]``, or the string
  ``"1,5"`` in a profile), at least one positive; on a multi-label task one weight per label for
  its positives (PyTorch's ``pos_weight``), its negatives weighted 1.

Multi-label tasks (the medical PBN paper's ChestMNIST). The weights are a (2, L) table, row 0 the
negatives' and row 1 the positives' weight of each of the L labels, and the data term of a batch
is sum_b sum_l w_{l, y_bl} BCE_bl / B (:func:`weighted_bce`): the task's loss (the BCE summed over
an example's labels) with each label entry weighted. ``median_frequency`` is for one label per
example or pixel and is refused there.

Normalisation (:func:`normalise`). The weights are rescaled so that their mean over the training
observations (examples; on segmentation the labelled pixels; on multi-label tasks the N x L label
entries) is 1: sum_i w_{y_i} = N. The
weighted data term of a batch is sum_b w_{y_b} NLL_b / B (B: its labelled rows), **not**
PyTorch's weighted mean sum_b w_{y_b} NLL_b / sum_b w_{y_b}. So the per-observation loss is an
unbiased estimate of (1/N) sum_i w_{y_i} NLL_i, the weighted log-likelihood of a data set that
keeps its total weight N, and the ELBO's beta KL / N (``kl_scale``) weighs the prior against the
same N observations as without weights; only the split of the data's weight between the
classes changes. PyTorch's ratio would make each batch's normalisation depend on its class
mix (a batch of rare-class pixels gets the same total weight as one of common ones) and
differs from this only by that per-batch factor; an unnormalised list (e.g. SegNet's weights,
whose mean over the labelled CamVid training pixels is 0.51) would silently rescale the KL.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bench.errors import BenchError

CHOICES = ("none", "median_frequency", "balanced")
DESCRIPTION = ("'none', 'median_frequency', 'balanced', or a list of K numbers >= 0 (one per class; on a "
               "multi-label task one per label, for its positives), not all 0")


def parse(value):
    """``"none"`` | ``"median_frequency"`` | a list of floats; BenchError naming what is valid."""
    if isinstance(value, str) and value.strip().lower() in CHOICES:
        return value.strip().lower()
    if isinstance(value, str):
        try:
            value = [float(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise BenchError(f"class_weights={value!r}: expected {DESCRIPTION}") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise BenchError(f"class_weights={value!r}: expected {DESCRIPTION}")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in value):
        raise BenchError(f"class_weights={value!r}: every weight must be a finite number ({DESCRIPTION})")
    if any(v < 0 for v in value):
        raise BenchError(f"class_weights={value!r}: a weight is negative ({DESCRIPTION})")
    if not any(v > 0 for v in value):
        raise BenchError(f"class_weights={value!r}: every weight is 0 ({DESCRIPTION})")
    return [float(v) for v in value]


def check_task(value, task) -> None:
    """The option against the suite's task: a per-class likelihood, and K weights for K classes."""
    parsed = parse(value)
    if parsed == "none":
        return
    if task.kind not in ("classification", "segmentation", "multilabel"):
        raise BenchError(f"class_weights={value!r}: only for classification, segmentation and multilabel tasks, "
                         f"not {task.kind}; use 'none'")
    if task.kind == "multilabel" and parsed == "median_frequency":
        raise BenchError(f"class_weights={value!r}: median-frequency balancing is for one label per example or "
                         f"pixel; on a multi-label task give 'balanced' (each label's positives and negatives "
                         f"weighted as two classes), {task.num_outputs} weights for the labels' positives, or 'none'")
    what = "labels (their positives)" if task.kind == "multilabel" else "classes"
    if isinstance(parsed, list) and len(parsed) != task.num_outputs:
        raise BenchError(f"class_weights={value!r}: {len(parsed)} weights for {task.num_outputs} {what}; give "
                         f"{task.num_outputs} numbers, or 'balanced' / 'none'")


def median_frequency_weights(labels: torch.Tensor, num_classes: int, ignore_index: int | None) -> torch.Tensor:
    """w_c = median_c(f_c) / f_c, f_c = pixels of class c / pixels of the images in which c occurs
    (labelled pixels only). Labels ``(N, H, W)`` are images; class labels ``(N,)`` are one
    "image" (f_c = the share of class c). A class absent from ``labels`` gets weight 0 and no say
    in the median."""
    labels = labels.reshape(1, -1) if labels.dim() == 1 else labels
    count = torch.zeros(num_classes, dtype=torch.float64)
    present_total = torch.zeros(num_classes, dtype=torch.float64)
    for y in labels:
        y = y.reshape(-1)
        if ignore_index is not None:
            y = y[y != ignore_index]
        c = torch.bincount(y.long(), minlength=num_classes).double()
        count += c
        present_total += (c > 0).double() * y.numel()
    present = count > 0
    freq = count / present_total.clamp_min(1)
    med = freq[present].median() if bool(present.any()) else torch.tensor(1.0, dtype=torch.float64)
    return torch.where(present, med / freq.clamp_min(1e-300), torch.zeros_like(freq)).float()


def balanced_weights(counts: torch.Tensor) -> torch.Tensor:
    """scikit-learn's ``class_weight="balanced"``: w_c = N / (C n_c), C the number of classes present
    in the training labels (``counts``: their counts); an absent class gets weight 0."""
    counts = counts.double()
    present = counts > 0
    n_present = int(present.sum())
    if not n_present:
        raise BenchError("class_weights='balanced': the training labels are empty")
    return torch.where(present, counts.sum() / (n_present * counts.clamp_min(1)), torch.zeros_like(counts)).float()


def multilabel_counts(labels: torch.Tensor) -> torch.Tensor:
    """(2, L): the training entries of each label that are 0 (row 0) and 1 (row 1)."""
    y = labels.reshape(-1, labels.shape[-1]).double()
    pos = y.sum(0)
    return torch.stack([y.shape[0] - pos, pos])


def multilabel_balanced_weights(counts: torch.Tensor) -> torch.Tensor:
    """(2, L): per label, ``balanced_weights`` of its negatives and positives as two classes,
    N / (2 n_neg) and N / (2 n_pos); a label that is always 0 (or always 1) in the training labels
    keeps weight 1 on both sides (nothing to balance)."""
    counts = counts.double()
    n = counts.sum(0, keepdim=True)
    both = (counts > 0).all(0, keepdim=True)
    return torch.where(both, n / (2 * counts.clamp_min(1)), torch.ones_like(counts)).float()


def class_counts(labels: torch.Tensor, num_classes: int, ignore_index: int | None) -> torch.Tensor:
    y = labels.reshape(-1)
    if ignore_index is not None:
        y = y[y != ignore_index]
    return torch.bincount(y.long(), minlength=num_classes).double()


def normalise(weights: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``weights`` scaled so that their mean over the training observations is 1
    (sum_c counts_c w_c = sum_c counts_c); see the module docstring."""
    w = weights.double()
    mass = float((counts * w).sum())
    if not mass > 0:
        raise BenchError("class_weights: every training label has weight 0 (the weighted likelihood is empty)")
    return (w * float(counts.sum()) / mass).float()


def resolve(value, task, train_y: torch.Tensor) -> tuple[torch.Tensor | None, dict]:
    """(normalised weights or None for ``"none"``, the record's diagnostics)."""
    parsed = parse(value)
    if parsed == "none":
        return None, {"option": "none"}
    check_task(value, task)
    option = parsed if isinstance(parsed, str) else "list"
    if task.kind == "multilabel":
        counts = multilabel_counts(train_y)
        if parsed == "balanced":
            raw = multilabel_balanced_weights(counts)
        else:
            raw = torch.stack([torch.ones(len(parsed)), torch.tensor(parsed, dtype=torch.float32)])
        w = normalise(raw, counts)
        return w, {"option": option, "raw": raw.tolist(), "normalised": w.tolist(),
                   "train_label_counts": [[int(c) for c in row] for row in counts.tolist()],
                   "layout": "[negatives' weights, positives' weights], one column per label",
                   "normalisation": "mean over the training label entries = 1; batch term "
                                    "sum_b sum_l w_(l, y_bl) BCE_bl / B"}
    K, ignore = task.num_outputs, task.ignore_index
    counts = class_counts(train_y, K, ignore)
    if parsed == "median_frequency":
        raw = median_frequency_weights(train_y, K, ignore)
    elif parsed == "balanced":
        raw = balanced_weights(counts)
    else:
        raw = torch.tensor(parsed)
    w = normalise(raw, counts)
    return w, {"option": option, "raw": raw.tolist(), "normalised": w.tolist(),
               "train_class_counts": [int(c) for c in counts.tolist()],
               "normalisation": "mean over the training observations = 1; batch term sum_b w_y NLL_b / B"}


def weighted_bce(output: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Multi-label: sum_b sum_l w_(l, y_bl) BCE_bl / B, ``weights`` (2, L) as :func:`resolve` makes
    them (row 0 negatives, row 1 positives); unit weights give the task's own loss."""
    t = y.to(output.dtype)
    bce = F.binary_cross_entropy_with_logits(output, t, reduction="none")
    w = weights.to(output.device, output.dtype)
    return ((t * w[1] + (1 - t) * w[0]) * bce).sum(-1).mean()


def weighted_nll(task, output: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_b w_{y_b} NLL_b / B over the batch's labelled rows (ignored pixels count nowhere);
    multi-label tasks: :func:`weighted_bce`."""
    if task.kind == "multilabel":
        return weighted_bce(output, y, weights)
    y = y.reshape(-1) if task.kind == "segmentation" else y
    nll = F.cross_entropy(output, y, reduction="none", ignore_index=-100 if task.ignore_index is None
                          else task.ignore_index)
    valid = y != task.ignore_index if task.ignore_index is not None else torch.ones_like(y, dtype=torch.bool)
    w = weights.to(output.device, output.dtype)[y.clamp_min(0) * valid]
    return (w * nll * valid).sum() / valid.sum().clamp_min(1)
