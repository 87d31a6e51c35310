"""Metrics of multi-label classification (task kind ``multilabel``, :func:`bench.tasks.multilabel`).

Inputs: ``probs`` (N, L), the predictive probability that each of L labels is present (the mean of
the sampled sigmoids), targets ``y`` (N, L) of 0/1, and for sampling methods ``sample_probs``
(S, N, L). The labels are independent Bernoullis given the weights, so every per-example quantity
(NLL, entropy, mutual information) is a sum over labels, and every calibration or ranking quantity
is computed label by label, as the medical-imaging papers (ChestMNIST) report them. Outputs are
Python floats, and lists (one entry per label) for the ``*_per_label`` metrics.
"""
from __future__ import annotations

import math

import torch

from bench import metrics as M

EPS = M.EPS
ECE_BINS = M.ECE_BINS
#: a label is predicted present when its probability is above this
THRESHOLD = 0.5

DEFINITIONS = {
    "accuracy": "Hamming accuracy: the fraction of (example, label) pairs whose thresholded prediction "
                "(p > 0.5) equals the target, 1 - scikit-learn's hamming_loss",
    "subset_accuracy": "exact-match accuracy: the fraction of examples whose L thresholded predictions all "
                       "equal their targets (scikit-learn's accuracy_score on multi-label input)",
    "nll": "negative log-likelihood under independent Bernoullis, -1/N sum_i sum_l [y_il log p_il + "
           "(1 - y_il) log(1 - p_il)] (summed over labels, mean over examples; probabilities clamped at 1e-12)",
    "brier": "Brier score 1/(N L) sum_i sum_l (p_il - y_il)^2: the mean over examples AND labels (scikit-learn's "
             "brier_score_loss of the flattened pairs; L times smaller than a sum over labels)",
    "ece": f"mean over the L labels of the binary ECE of each label: {ECE_BINS} equal-width bins of p_l, "
           "sum_b |B_b|/N |freq(y_l = 1 in B_b) - mean p_l in B_b| (the reliability of p_l itself, as classwise ECE)",
    "auroc_mean": "mean over the labels with both classes present in the set of the ROC area of p_l "
                  "separating y_l = 1 from y_l = 0; labels with one class are skipped (counted in "
                  "labels_one_class); undefined when every label is",
    "mean_average_precision": "mean over the same labels as auroc_mean of the average precision of p_l "
                              "(scikit-learn's average_precision_score)",
    "labels_one_class": "labels whose targets hold a single class in this set (no AUROC or AP for them)",
    "entropy": "mean over examples of the predictive entropy summed over labels, sum_l H[Bernoulli(p_l)] (nats)",
    "mutual_information": "mean over examples of sum_l (H[E_s p_sl] - E_s H[p_sl]) over posterior samples "
                          "(epistemic part; sampling methods only)",
    "auroc": "OOD: ROC area separating the OOD set (positive) from the in-distribution test set by the "
             "summed-label predictive entropy",
}
PER_LABEL = ("accuracy_per_label", "ece_per_label", "auroc_per_label", "average_precision_per_label")


def bernoulli_entropy(p: torch.Tensor) -> torch.Tensor:
    """H[Bernoulli(p)] elementwise, in nats (0 at p = 0 and 1)."""
    p = p.double()
    return -(torch.special.xlogy(p, p) + torch.special.xlogy(1 - p, 1 - p))


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """(N,): the entropy of the L independent Bernoullis of each example, the sum over labels."""
    return bernoulli_entropy(probs).sum(-1)


def mutual_information(sample_probs: torch.Tensor) -> torch.Tensor:
    """(N,): sum over labels of H[mean_s p_s] - mean_s H[p_s], from (S, N, L) samples; the labels
    are independent given the weights, so the joint mutual information is this sum."""
    per_label = bernoulli_entropy(sample_probs.mean(0)) - bernoulli_entropy(sample_probs).mean(0)
    return per_label.sum(-1).clamp_min(0.0)


def nll(probs: torch.Tensor, y: torch.Tensor) -> float:
    p, y = probs.double(), y.double()
    ll = y * torch.log(p.clamp_min(EPS)) + (1 - y) * torch.log((1 - p).clamp_min(EPS))
    return (-ll.sum(-1)).mean().item()


def brier(probs: torch.Tensor, y: torch.Tensor) -> float:
    return (probs.double() - y.double()).pow(2).mean().item()


def ece_per_label(probs: torch.Tensor, y: torch.Tensor, n_bins: int = ECE_BINS) -> list[float]:
    """Binary ECE of each label: bin b holds p in (b/n, (b+1)/n], p = 0 in bin 0 (as
    :func:`bench.metrics.reliability_bins`); one bincount over every (label, bin)."""
    p, hit = probs.double(), y.double()
    n, k = p.shape
    idx = (torch.ceil(p * n_bins) - 1).clamp(0, n_bins - 1).long() + n_bins * torch.arange(k)
    conf = torch.bincount(idx.reshape(-1), weights=p.reshape(-1), minlength=n_bins * k).view(k, n_bins)
    freq = torch.bincount(idx.reshape(-1), weights=hit.reshape(-1), minlength=n_bins * k).view(k, n_bins)
    return ((conf - freq).abs().sum(-1) / n).tolist()


def ranking_per_label(probs: torch.Tensor, y: torch.Tensor) -> tuple[list, list]:
    """(AUROC, average precision) of each label's p_l against y_l; None for a label whose targets
    hold one class only (neither is defined, or AP is 1 whatever the scores)."""
    au, ap = [], []
    for l in range(probs.shape[-1]):
        pos = y[:, l] > 0.5
        if bool(pos.all()) or not bool(pos.any()):
            au.append(None)
            ap.append(None)
            continue
        neg_scores, pos_scores = probs[~pos, l], probs[pos, l]
        au.append(M.auroc(neg_scores, pos_scores))
        ap.append(M.aupr(neg_scores, pos_scores))
    return au, ap


def _mean(values: list) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def reliability_bins(probs: torch.Tensor, y: torch.Tensor, n_bins: int = ECE_BINS) -> dict:
    """The report's reliability diagram over every (example, label) pair pooled: p against the
    frequency of y = 1 (``correct_sum`` holds the positives, in the classification curve's format)."""
    return M.confidence_bins(probs.double().reshape(-1), y.double().reshape(-1), n_bins)


def entropy_histogram(ent: torch.Tensor, num_labels: int, bins: int = 30) -> dict:
    """Histogram of the summed-label entropies over [0, L log 2]."""
    return M.entropy_histogram(ent, num_labels, bins, top=num_labels * math.log(2))


def multilabel_metrics(probs: torch.Tensor, y: torch.Tensor,
                       sample_probs: torch.Tensor | None = None) -> tuple[dict, dict]:
    """Scalar metrics, per-label lists and curves of one labelled evaluation set."""
    y = y.double()
    hit = ((probs.double() > THRESHOLD).double() == y).double()  # 1 where a label is predicted right
    ece_l = ece_per_label(probs, y)
    au, ap = ranking_per_label(probs, y)
    ent = entropy(probs)
    metrics = {
        "accuracy": hit.mean().item(),
        "subset_accuracy": hit.min(-1).values.mean().item(),
        "nll": nll(probs, y),
        "brier": brier(probs, y),
        "ece": sum(ece_l) / len(ece_l),
        "auroc_mean": _mean(au),
        "mean_average_precision": _mean(ap),
        "labels_one_class": sum(v is None for v in au),
        "entropy": ent.mean().item(),
        "mutual_information": None if sample_probs is None else mutual_information(sample_probs).mean().item(),
        "accuracy_per_label": hit.mean(0).tolist(),
        "ece_per_label": ece_l,
        "auroc_per_label": au,
        "average_precision_per_label": ap,
    }
    curves = {"reliability": reliability_bins(probs, y), "entropy_hist": entropy_histogram(ent, probs.shape[-1])}
    return metrics, curves


def ood_metrics(probs_in: torch.Tensor, probs_out: torch.Tensor, sample_probs_in: torch.Tensor | None = None,
                sample_probs_out: torch.Tensor | None = None) -> tuple[dict, dict]:
    """OOD detection by the summed-label entropy (and mutual information for sampling methods)."""
    ent_in, ent_out = entropy(probs_in), entropy(probs_out)
    metrics = {
        "auroc": M.auroc(ent_in, ent_out),
        "aupr": M.aupr(ent_in, ent_out),
        "fpr_at_95_tpr": M.fpr_at_tpr(ent_in, ent_out, 0.95),
        "entropy": ent_out.mean().item(),
        "mutual_information": None if sample_probs_out is None else mutual_information(sample_probs_out).mean().item(),
    }
    if sample_probs_in is not None and sample_probs_out is not None:
        metrics["auroc_mi"] = M.auroc(mutual_information(sample_probs_in), mutual_information(sample_probs_out))
    return metrics, {"entropy_hist": entropy_histogram(ent_out, probs_out.shape[-1])}


# -- checks of what the harness scores -----------------------------------------------------------
def target_problem(y: torch.Tensor, num_labels: int) -> str | None:
    """Why ``y`` cannot be a multi-label target set of ``num_labels`` labels (None when it can):
    a floating (N, L) tensor of 0s and 1s. Integer class indices here mean a suite built the wrong task."""
    if y.dim() != 2 or y.shape[1] != num_labels:
        return (f"multi-label targets must be (N, {num_labels}) 0/1 floats (one column per label), got shape "
                f"{tuple(y.shape)}")
    if not y.is_floating_point():
        return f"multi-label targets must be a floating tensor of 0s and 1s, got {y.dtype}"
    bad = ~((y == 0) | (y == 1))
    if bool(bad.any()):
        return (f"multi-label targets must be 0 or 1; {int(bad.sum())} value(s) are not (e.g. "
                f"{y[bad][0].item():g})")
    return None


def predictive_problem(pred, rows: int, num_labels: int, tolerance: float) -> str | None:
    """Why ``pred`` cannot be scored as a multi-label predictive of ``rows`` examples (None when it
    can): ``probs`` (rows, L) and ``sample_probs`` (S, rows, L) tensors in [0, 1] (within ``tolerance``)."""
    probs = getattr(pred, "probs", None)
    if not isinstance(probs, torch.Tensor):
        return f"predictive is a {type(pred).__name__} without per-label probabilities (probs)"
    if tuple(probs.shape) != (rows, num_labels):
        return f"predictive probs has shape {tuple(probs.shape)}, expected ({rows}, {num_labels}) (examples x labels)"
    samples = getattr(pred, "sample_probs", None)
    if samples is not None and (not isinstance(samples, torch.Tensor) or samples.dim() != 3
                                or tuple(samples.shape[1:]) != (rows, num_labels)):
        got = tuple(samples.shape) if isinstance(samples, torch.Tensor) else type(samples).__name__
        return f"predictive sample_probs has shape {got}, expected (S, {rows}, {num_labels})"
    for name, p in (("probs", probs), ("sample_probs", samples)):
        if p is not None and p.numel():
            lo, hi = p.min().item(), p.max().item()
            if lo < -tolerance or hi > 1 + tolerance:
                return f"predictive {name} outside [0, 1] (min {lo:.4g}, max {hi:.4g})"
    return None


def prevalence_reference(train_y: torch.Tensor, y: torch.Tensor) -> dict:
    """The scalar metrics on targets ``y`` of the uninformed multi-label predictor that says each
    label's training prevalence for every example (a constant ranks nothing: AUROC 0.5, AP the set's
    prevalence): the reference row of the reports and what bench.validity's informative check
    compares with. Computed by the same code as a method's metrics, so the two compare exactly."""
    prev = train_y.double().mean(0)
    scores, _ = multilabel_metrics(prev.expand(len(y), -1), y)
    keep = ("accuracy", "subset_accuracy", "nll", "brier", "ece", "auroc_mean", "mean_average_precision", "entropy")
    return {"predictor": "training label prevalence", **{k: scores[k] for k in keep}, "prevalence": prev.tolist()}
