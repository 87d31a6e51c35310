"""Metrics, one definition each. Inputs are torch tensors; outputs are Python floats.

Classification metrics take mean predictive probabilities ``probs`` (N, K) and integer
labels ``y`` (N,). Definitions (also printed in every report, see ``DEFINITIONS``):
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from bench.registry import Registry

EPS = 1e-12
ECE_BINS = 15

DEFINITIONS = {
    "accuracy": "fraction of examples whose arg-max class equals the label",
    "nll": "negative log-likelihood, -1/N sum_i log p(y_i | x_i) (probabilities clamped at 1e-12)",
    "brier": "Brier score, 1/N sum_i sum_k (p_ik - 1[y_i = k])^2 (Ovadia et al.'s variant is this minus 1)",
    "ece": "expected calibration error, 15 equal-width bins of the top-label confidence: "
           "sum_b |B_b|/N |acc(B_b) - conf(B_b)|",
    "entropy": "mean predictive entropy H[p] = -sum_k p_k log p_k of the mean predictive (nats)",
    "mutual_information": "mean mutual information H[E_s p_s] - E_s H[p_s] over posterior samples "
                          "(epistemic part; only for sampling methods)",
    "entropy_correct": "mean predictive entropy over the correctly classified examples (PBN paper Fig. 5 "
                       "bottom right); undefined when none is correct",
    "entropy_incorrect": "mean predictive entropy over the misclassified examples; undefined when none is wrong",
    "auroc": "area under the ROC curve separating the OOD set (positive) from the in-distribution test "
             "set by predictive entropy",
    "aupr": "area under the precision-recall curve (average precision), OOD as positive, score = entropy",
    "fpr_at_95_tpr": "fraction of in-distribution test examples flagged as OOD at the entropy threshold that "
                     "flags 95 % of the OOD set (lower is better)",
    "auroc_mi": "OOD AUROC with the mutual information as the score (sampling methods only)",
    "aurc": "area under the risk-coverage curve (Geifman & El-Yaniv 2017): examples sorted by decreasing "
            "top-label confidence, the error rate among the k most confident averaged over k = 1..N (lower "
            "is better; ties in confidence count as one group)",
    "vdp_variance": "mean over examples of the propagated output variance of the predicted class "
                    "(moment-propagating methods such as VDP++ only)",
    "auroc_vdp_variance": "OOD AUROC with the predicted-class output variance as the score (VDP++ only)",
    "rmse": "root mean squared error of the predictive mean (regression)",
    "gaussian_nll": "negative log-likelihood of y under N(mean, var) of the (moment-matched) predictive",
    "mean_std": "mean predictive standard deviation (regression)",
    "coverage_3sigma": "fraction of targets inside mean +- 3 std (0.9973 when calibrated)",
}


def accuracy(probs: torch.Tensor, y: torch.Tensor) -> float:
    return (probs.argmax(-1) == y).double().mean().item()


def nll(probs: torch.Tensor, y: torch.Tensor) -> float:
    p = probs.double().gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return (-torch.log(p.clamp_min(EPS))).mean().item()


def brier(probs: torch.Tensor, y: torch.Tensor) -> float:
    # sum_k (p_k - 1[y=k])^2 = sum_k p_k^2 - 2 p_y + 1, without materialising the one-hot matrix
    p = probs.double()
    p_y = p.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return (p.pow(2).sum(-1) - 2 * p_y + 1).mean().item()


def _top(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence as float64, predicted class): the maximum probability and its first index."""
    conf, pred = probs.max(-1)
    return conf.double(), pred


def reliability_bins(probs: torch.Tensor, y: torch.Tensor, n_bins: int = ECE_BINS, top=None) -> dict:
    """Counts, summed confidences and summed correctness per equal-width confidence bin
    (``top``: :func:`_top` of ``probs`` when the caller has it)."""
    conf, pred = _top(probs) if top is None else top
    return confidence_bins(conf, (pred == y).double(), n_bins)


def confidence_bins(conf: torch.Tensor, correct: torch.Tensor, n_bins: int = ECE_BINS) -> dict:
    """Counts, summed ``conf`` and summed ``correct`` (1 / 0 per entry) per equal-width bin of
    ``conf``: the reliability curve's format (also the multi-label one, bench.multilabel_metrics)."""
    # bin b holds confidences in (b/n, (b+1)/n]; confidence exactly 0 goes to bin 0
    idx = (torch.ceil(conf * n_bins) - 1).clamp(0, n_bins - 1).long()
    count = torch.bincount(idx, minlength=n_bins).double()
    conf_sum = torch.bincount(idx, weights=conf, minlength=n_bins)
    corr_sum = torch.bincount(idx, weights=correct, minlength=n_bins)
    return {"edges": torch.linspace(0, 1, n_bins + 1).tolist(), "count": count.tolist(),
            "confidence_sum": conf_sum.tolist(), "correct_sum": corr_sum.tolist()}


def ece_from_bins(bins: dict) -> float:
    # sum_b |B_b|/N |acc_b - conf_b| = sum_b |corr_b - conf_b| / N (15 numbers: plain floats)
    gap = sum(abs(float(c) - float(f)) for c, f in zip(bins["correct_sum"], bins["confidence_sum"]))
    return gap / sum(float(n) for n in bins["count"])


def ece(probs: torch.Tensor, y: torch.Tensor, n_bins: int = ECE_BINS) -> float:
    return ece_from_bins(reliability_bins(probs, y, n_bins))


def entropy(probs: torch.Tensor) -> torch.Tensor:
    p = probs.double()
    return -torch.special.xlogy(p, p).sum(-1)


def mutual_information(sample_probs: torch.Tensor) -> torch.Tensor:
    """I[y; theta | x] = H[mean_s p_s] - mean_s H[p_s] per example, from (S, N, K) samples."""
    return (entropy(sample_probs.mean(0)) - entropy(sample_probs).mean(0)).clamp_min(0.0)


def _ranks_with_ties(scores: torch.Tensor) -> torch.Tensor:
    """1-based ranks, ties get the average rank."""
    s = scores.double()
    order = torch.argsort(s, stable=True)
    sorted_s = s[order]
    ranks = torch.empty_like(s)
    ranks[order] = torch.arange(1, len(s) + 1, dtype=torch.float64)
    uniq, inverse, counts = torch.unique_consecutive(sorted_s, return_inverse=True, return_counts=True)
    if len(uniq) < len(s):
        sum_ranks = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inverse, ranks[order])
        ranks[order] = (sum_ranks / counts)[inverse]
    return ranks


def auroc(scores_in: torch.Tensor, scores_out: torch.Tensor) -> float:
    """P(score_out > score_in) + 0.5 P(tie): the Mann-Whitney form of the ROC area."""
    n_in, n_out = len(scores_in), len(scores_out)
    ranks = _ranks_with_ties(torch.cat([scores_in.double(), scores_out.double()]))
    r_out = ranks[n_in:].sum().item()
    return (r_out - n_out * (n_out + 1) / 2) / (n_in * n_out)


def aupr(scores_in: torch.Tensor, scores_out: torch.Tensor) -> float:
    """Average precision with the OOD set as positives (step-wise, as scikit-learn's)."""
    scores = torch.cat([scores_in.double(), scores_out.double()])
    labels = torch.cat([torch.zeros(len(scores_in)), torch.ones(len(scores_out))]).double()
    order = torch.argsort(scores, descending=True, stable=True)
    s, lab = scores[order], labels[order]
    tp = torch.cumsum(lab, 0)
    fp = torch.cumsum(1 - lab, 0)
    # evaluate only at the last position of each group of tied scores
    last = torch.ones(len(s), dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    tp, fp = tp[last], fp[last]
    precision = tp / (tp + fp)
    recall = tp / tp[-1]
    prev = torch.cat([torch.zeros(1, dtype=torch.float64), recall[:-1]])
    return ((recall - prev) * precision).sum().item()


def fpr_at_tpr(scores_in: torch.Tensor, scores_out: torch.Tensor, tpr: float = 0.95) -> float:
    """FPR at the largest threshold t whose rule "score >= t is OOD" flags at least ``tpr`` of the
    OOD set (positives): the fraction of in-distribution scores >= t."""
    s_out = torch.sort(scores_out.double(), descending=True).values
    k = max(1, math.ceil(tpr * len(s_out)))
    t = s_out[k - 1]
    return (scores_in.double() >= t).double().mean().item()


def aurc(probs: torch.Tensor, y: torch.Tensor, top=None) -> float:
    """Area under the risk-coverage curve: errors among the k most confident examples divided by
    k, averaged over k = 1..N; examples of equal confidence enter together (their mean error)."""
    conf, pred = _top(probs) if top is None else top
    err = (pred != y).double()
    order = torch.argsort(conf, descending=True)  # the order within ties does not matter (below)
    conf, err = conf[order], err[order]
    cum = torch.cumsum(err, 0)
    # within a group of tied confidences the order is arbitrary: use the group's mean error rate
    _, inverse, counts = torch.unique_consecutive(conf, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0)
    starts = ends - counts
    before = torch.cat([torch.zeros(1, dtype=torch.float64), cum[ends - 1][:-1]])
    rate = (cum[ends - 1] - before) / counts
    k = torch.arange(1, len(conf) + 1, dtype=torch.float64)
    cum_tied = before[inverse] + rate[inverse] * (k - starts[inverse].double())
    return (cum_tied / k).mean().item()


def entropy_histogram(ent: torch.Tensor, num_classes: int, bins: int = 30, top: float | None = None) -> dict:
    """Histogram of entropies over [0, top] (default log K, the largest entropy of K classes)."""
    top = math.log(num_classes) if top is None else top
    edges = torch.linspace(0.0, top, bins + 1, dtype=torch.float64)
    idx = torch.bucketize(ent.double().clamp(0, top), edges[1:-1], right=False)
    counts = torch.bincount(idx, minlength=bins)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def entropy_by_correctness(probs: torch.Tensor, y: torch.Tensor, ent: torch.Tensor | None = None,
                           correct: torch.Tensor | None = None) -> dict:
    """Mean predictive entropy of the correctly and of the wrongly classified examples
    (``None`` for an empty group)."""
    ent = entropy(probs) if ent is None else ent
    correct = probs.argmax(-1) == y if correct is None else correct

    def mean(mask):
        return ent[mask].mean().item() if bool(mask.any()) else None

    return {"entropy_correct": mean(correct), "entropy_incorrect": mean(~correct)}


def top_k_accuracy(probs: torch.Tensor, y: torch.Tensor, k: int) -> float:
    """Fraction of examples whose label is among the ``k`` most probable classes."""
    top = probs.topk(min(k, probs.shape[-1]), dim=-1).indices
    return (top == y.view(-1, 1)).any(-1).double().mean().item()


def classification_metrics(probs: torch.Tensor, y: torch.Tensor, sample_probs: torch.Tensor | None = None,
                           variance: torch.Tensor | None = None) -> tuple[dict, dict]:
    """Scalar metrics and the curves (reliability bins, entropy histogram) of one evaluation set.

    ``variance`` (N,), from moment-propagating methods, adds ``vdp_variance`` (its mean)."""
    top = _top(probs)  # the arg-max and its probability, once for every metric that needs them
    correct = top[1] == y
    bins = reliability_bins(probs, y, top=top)
    ent = entropy(probs)
    metrics = {
        "accuracy": correct.double().mean().item(),
        "nll": nll(probs, y),
        "brier": brier(probs, y),
        "ece": ece_from_bins(bins),
        "aurc": aurc(probs, y, top=top),
        "entropy": ent.mean().item(),
        "mutual_information": None if sample_probs is None else mutual_information(sample_probs).mean().item(),
        **entropy_by_correctness(probs, y, ent, correct),
    }
    if probs.shape[-1] > 10:  # ImageNet's headline accuracy (the PBN paper's Fig. 7)
        metrics["top5_accuracy"] = top_k_accuracy(probs, y, 5)
    if variance is not None:
        metrics["vdp_variance"] = variance.double().mean().item()
    curves = {"reliability": bins, "entropy_hist": entropy_histogram(ent, probs.shape[-1]),
              "entropy_hist_correct": entropy_histogram(ent[correct], probs.shape[-1]),
              "entropy_hist_incorrect": entropy_histogram(ent[~correct], probs.shape[-1])}
    return metrics, curves


def ood_metrics(probs_in: torch.Tensor, probs_out: torch.Tensor, sample_probs_out: torch.Tensor | None = None,
                variance_in: torch.Tensor | None = None, variance_out: torch.Tensor | None = None,
                sample_probs_in: torch.Tensor | None = None) -> tuple[dict, dict]:
    ent_in, ent_out = entropy(probs_in), entropy(probs_out)
    metrics = {
        "auroc": auroc(ent_in, ent_out),
        "aupr": aupr(ent_in, ent_out),
        "fpr_at_95_tpr": fpr_at_tpr(ent_in, ent_out, 0.95),
        "entropy": ent_out.mean().item(),
        "mutual_information": None if sample_probs_out is None else mutual_information(sample_probs_out).mean().item(),
    }
    if sample_probs_in is not None and sample_probs_out is not None:
        metrics["auroc_mi"] = auroc(mutual_information(sample_probs_in), mutual_information(sample_probs_out))
    if variance_out is not None:
        metrics["vdp_variance"] = variance_out.double().mean().item()
        if variance_in is not None:
            metrics["auroc_vdp_variance"] = auroc(variance_in, variance_out)
    return metrics, {"entropy_hist": entropy_histogram(ent_out, probs_out.shape[-1])}


def regression_metrics(mean: torch.Tensor, var: torch.Tensor, y: torch.Tensor) -> dict:
    mean, var, y = mean.double(), var.double(), y.double()
    std = var.sqrt()
    return {
        "rmse": (mean - y).pow(2).mean().sqrt().item(),
        "nll": (0.5 * torch.log(2 * math.pi * var) + 0.5 * (y - mean).pow(2) / var).mean().item(),
        "mean_std": std.mean().item(),
        "coverage_3sigma": ((y - mean).abs() <= 3 * std).double().mean().item(),
    }


# -- metrics registered for rescoring ------------------------------------------------------------
# A metric registered here is not computed by ``bench run`` (its records keep the set above, so
# that records made by every version compare); ``python -m bench rescore --metrics NAME`` adds it
# to the records whose predictions were kept (``--keep-predictions``, bench.predictions), which is
# how a metric defined after a run reaches that run. A plugin registers one with the decorator:
#
#     @register_metric("my_metric", "what it measures", needs_samples=False)
#     def my_metric(probs, y, sample_probs=None) -> float: ...
#
# ``probs`` (N, K) float32 mean predictive, ``y`` (N,) int64 labels, ``sample_probs`` (S, N, K) or
# None; it is computed on labelled classification sets (id, shift, val), never on OOD sets.


@dataclass(frozen=True)
class RegisteredMetric:
    name: str
    fn: Callable
    definition: str
    needs_samples: bool = False  # computed only where the per-sample probabilities were kept


METRICS: Registry[RegisteredMetric] = Registry("metric")


def register_metric(name: str, definition: str, *, needs_samples: bool = False):
    """Register ``fn(probs, y, sample_probs=None) -> float`` as the metric ``name`` (see above)."""

    def deco(fn):
        METRICS.register(name)(RegisteredMetric(name, fn, definition, needs_samples))
        return fn

    return deco


@register_metric("adaptive_ece", f"adaptive (equal-mass) ECE, Nixon et al. 2019: the examples sorted by top-label "
                                 f"confidence (stable sort) and split into {ECE_BINS} bins of equal count (sizes "
                                 "differ by at most 1), sum_b |B_b|/N |acc(B_b) - conf(B_b)|")
def adaptive_ece(probs: torch.Tensor, y: torch.Tensor, sample_probs: torch.Tensor | None = None,
                 n_bins: int = ECE_BINS) -> float:
    conf, pred = _top(probs)
    order = torch.argsort(conf, stable=True)
    conf, correct = conf[order], (pred[order] == y[order]).double()
    gap = sum(abs(c.sum().item() - f.sum().item())
              for c, f in zip(torch.tensor_split(correct, n_bins), torch.tensor_split(conf, n_bins)))
    return gap / len(conf)


@register_metric("classwise_ece", f"classwise ECE, Kull et al. 2019: for every class k the {ECE_BINS}-bin "
                                  "equal-width ECE of p_k against 1[y = k] over all examples, averaged over the K "
                                  "classes: 1/K sum_k sum_b |B_kb|/N |freq_k(B_kb) - conf_k(B_kb)|")
def classwise_ece(probs: torch.Tensor, y: torch.Tensor, sample_probs: torch.Tensor | None = None,
                  n_bins: int = ECE_BINS) -> float:
    p = probs.double()
    n, k = p.shape
    hit = torch.nn.functional.one_hot(y.long(), k).double()
    # bin b holds p in (b/n, (b+1)/n], p = 0 in bin 0 (as reliability_bins); one bincount per class
    idx = (torch.ceil(p * n_bins) - 1).clamp(0, n_bins - 1).long() + n_bins * torch.arange(k)
    conf_sum = torch.bincount(idx.reshape(-1), weights=p.reshape(-1), minlength=n_bins * k)
    hit_sum = torch.bincount(idx.reshape(-1), weights=hit.reshape(-1), minlength=n_bins * k)
    return ((conf_sum - hit_sum).abs().sum() / (n * k)).item()
