"""Streaming metrics for semantic segmentation: accumulators updated batch by batch.

A validation split can hold 10^8 pixels, so nothing here keeps a split's probabilities.
``SegmentationScores.update(probs, labels, sample_probs=None)`` takes pixels as rows,
``probs`` (N, K) mean predictive probabilities, ``labels`` (N,) with an ignore label, and for
sampling methods ``sample_probs`` (S, N, K) whose mean over S is ``probs``. Each batch is
reduced, on its own device and in float64, to fixed-size sums (a K x K confusion matrix,
15 reliability bins, two uncertainty histograms per score, a few scalars) that are added to
float64 / int64 accumulators on the CPU. A large batch is processed in row chunks of at most
``CHUNK_ELEMENTS`` float64 values, so memory does not grow with the batch either.

Pixels whose label is ``ignore_index`` are dropped before anything is computed; every other
label must lie in [0, K) (``ValueError`` otherwise). The per-pixel definitions are those of
``bench.metrics`` (pixels are its examples): ``nll`` clamps at ``EPS`` = 1e-12, ``brier`` is
sum_k (p_k - 1[y = k])^2 (not Ovadia et al.'s minus 1), ``ece`` uses ``reliability_bins``'s
equal-width bins (b/n, (b+1)/n] of the top-label confidence, ``entropy`` and
``mutual_information`` are ``bench.metrics.entropy`` / ``mutual_information`` (nats).

Conventions for the confusion-matrix metrics (rows = ground truth, columns = prediction,
as ``sklearn.metrics.confusion_matrix``):

* ``iou_per_class[c]`` = TP / (TP + FP + FN); ``None`` when the union TP + FP + FN is 0 (the
  class is neither in the ground truth nor predicted).
* ``miou`` is the mean of the defined IoUs, i.e. classes with zero union are left out. This is
  the convention of the Cityscapes scripts (``getIouScoreForLabel`` returns NaN, the mean skips
  it) and of mmsegmentation (``nanmean``); torchmetrics' ``MulticlassJaccardIndex`` also drops
  zero-union classes from its macro mean. A class that is predicted but absent from the ground
  truth has IoU 0 and counts, so false positives of absent classes are penalised.
* ``accuracy_per_class[c]`` = TP / (TP + FN) (recall); ``None`` for classes absent from the
  ground truth. ``mean_class_accuracy`` averages the defined ones (mmsegmentation's mAcc).
* ``pixel_accuracy`` = trace / total.
* ``dice_per_class[c]`` = 2 TP / (2 TP + FP + FN) = 2 TP / (ground-truth + predicted pixels of c),
  pooled over every valid pixel of the set (global Dice); ``None`` when both are 0 (as IoU).
  ``mean_dice`` averages the defined ones. ``dice``: on a binary task (K = 2, foreground =
  class 1, e.g. ``camvid_binary``) the global Dice of the predicted foreground mask (arg-max),
  ``dice_per_class[1]``; ``None`` for K > 2.
* ``dice_per_image`` (binary tasks, when ``update`` is told the batch's ``images``): the mean over
  images of each image's foreground Dice over its valid pixels; an image with no foreground in
  its labels and none predicted scores 1 (nothing to find, nothing found: the medical
  segmentation convention, e.g. MONAI's ``ignore_empty=False``), and ``dice_empty_images``
  counts them. Without ``images`` (or K > 2) it is ``None``.

Error detection (``error_auroc``, ``error_aupr``): the score is the predictive entropy of
``probs``, the positive class "pixel misclassified" (arg-max != label). The scores are
histogrammed into ``uncertainty_bins`` equal-width bins on [0, log K] (bin b holds
(e_b, e_{b+1}], bin 0 also holds 0, as ``bench.metrics.entropy_histogram``), one histogram for
the errors and one for the correct pixels, and the areas come from the two histograms with
the pixels of one bin treated as tied scores:

* AUROC = sum_b E_b (C_{<b} + C_b / 2) / (E C), the Mann-Whitney form with ties counted 1/2,
  which is the trapezoid rule on the ROC curve through the bin thresholds.
* AUPR = average precision, sum_b (R_b - R_{b+1}) P_b with the precision P_b and recall R_b of
  "score in bin >= b" (step-wise, one threshold per tied group, as scikit-learn's
  ``average_precision_score`` and ``bench.metrics.aupr``).

Both equal the exact (unbinned) values when no bin holds two distinct scores (in particular
when tied scores are tied exactly). Otherwise only pairs inside one bin are misjudged, which
bounds the AUROC error by ``sum_b E_b C_b / (2 E C)`` (the exact contribution of such a pair is
0, 1/2 or 1, the binned one 1/2); the AP error is bounded by the mean over errors of the widest
range the precision can take inside its bin (see ``binned_aupr``). Both bounds are computed from
the histograms and reported in ``curves()`` as ``*_binning_bound``. With 1000 bins and a
smooth score distribution they are small (5000 random 4-class pixels: AUROC bound 7.5e-4,
AP bound 3.5e-3; with 20 bins 0.037 and 0.13). ``error_auroc_mi`` /
``error_aupr_mi`` do the same with the mutual information as the score (bins on [0, log K],
its range) when ``sample_probs`` are given.
"""
from __future__ import annotations

import math

import torch

from bench.metrics import ECE_BINS, EPS, ece_from_bins, entropy, mutual_information

CHUNK_ELEMENTS = 1 << 24  # float64 values per chunk of rows (128 MiB), samples included

DEFINITIONS = {
    "miou": "mean intersection over union TP / (TP + FP + FN) over the classes whose union is not empty "
            "(present in the ground truth or predicted; Cityscapes / mmsegmentation convention)",
    "iou_per_class": "TP / (TP + FP + FN) per class, undefined (None) when the union is empty",
    "pixel_accuracy": "fraction of valid pixels whose arg-max class equals the label",
    "mean_class_accuracy": "mean over classes present in the ground truth of TP / (TP + FN)",
    "nll": "-1/N sum_i log p(y_i | x_i) over valid pixels (probabilities clamped at 1e-12)",
    "brier": "1/N sum_i sum_k (p_ik - 1[y_i = k])^2 over valid pixels",
    "ece": f"expected calibration error over valid pixels, {ECE_BINS} equal-width bins of the top-label "
           "confidence: sum_b |B_b|/N |acc(B_b) - conf(B_b)|",
    "entropy": "mean predictive entropy (nats) over valid pixels",
    "mutual_information": "mean over valid pixels of H[E_s p_s] - E_s H[p_s] (sampling methods only)",
    "error_auroc": "AUROC of the predictive entropy separating misclassified (positive) from correct pixels, "
                   "from 1000-bin histograms on [0, log K], ties within a bin counted 1/2",
    "error_aupr": "average precision of the same (misclassified pixels positive), from the same histograms",
    "error_auroc_mi": "error AUROC with the mutual information as the score (sampling methods only)",
    "error_aupr_mi": "error average precision with the mutual information as the score (sampling methods only)",
    "n_pixels": "number of valid pixels (label != ignore index)",
    "dice": "binary tasks (foreground = class 1): 2 TP / (2 TP + FP + FN) of the arg-max foreground mask, pooled "
            "over every valid pixel of the set (global Dice); undefined for more than 2 classes",
    "dice_per_image": "binary tasks: mean over images of each image's foreground Dice over its valid pixels, an "
                      "image with no foreground in the labels and none predicted counting 1",
    "dice_per_class": "2 TP / (2 TP + FP + FN) per class, pooled over the set, undefined (None) when the class is "
                      "neither in the ground truth nor predicted",
    "mean_dice": "mean of the defined per-class Dice scores",
    "dice_empty_images": "binary tasks: images with no foreground in the labels and none predicted (Dice 1 each)",
    "foreground_share": "binary tasks: the share of the set's valid pixels labelled foreground (class 1); what an "
                        "uninformed predictor's scores follow from (bench.validity's informative check)",
}


def binned_auroc(pos: torch.Tensor, neg: torch.Tensor) -> tuple[float | None, float | None]:
    """AUROC from histograms of the positives' and negatives' scores over the same increasing
    bins, pixels of one bin tied (counted 1/2), and the bound sum_b pos_b neg_b / (2 P N) on
    its difference from the unbinned AUROC. ``(None, None)`` when a class is empty."""
    pos, neg = pos.double(), neg.double()
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return None, None
    neg_below = torch.cumsum(neg, 0) - neg
    area = (pos * (neg_below + 0.5 * neg)).sum() / (n_pos * n_neg)
    bound = 0.5 * (pos * neg).sum() / (n_pos * n_neg)
    return area.item(), bound.item()


def binned_aupr(pos: torch.Tensor, neg: torch.Tensor) -> tuple[float | None, float | None]:
    """Average precision (positives = high scores) from the same histograms, one threshold per
    bin, and a bound on its difference from the unbinned value.

    A positive of bin b is credited the precision (A + P_b) / (A + B + P_b + N_b) of "bin >= b"
    (A, B: positives / negatives above the bin). Unbinned, its precision is (A + p) / (A + B + p + n)
    for some 1 <= p <= P_b, 0 <= n <= N_b, which lies in [(A + 1) / (A + B + 1 + N_b),
    (A + P_b) / (A + B + P_b)]; the bound is the mean over positives of the larger distance from
    the credited precision to the ends of that range. ``(None, None)`` when a class is empty."""
    pos, neg = pos.double(), neg.double()
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return None, None
    tp = torch.flip(torch.cumsum(torch.flip(pos, [0]), 0), [0])  # positives with score bin >= b
    fp = torch.flip(torch.cumsum(torch.flip(neg, [0]), 0), [0])
    has = pos > 0  # only bins holding positives move the recall; there tp + fp >= 1
    precision = torch.where(has, tp / (tp + fp).clamp_min(1), torch.zeros_like(tp))
    ap = (pos * precision).sum() / n_pos  # sum_b (R_b - R_{b+1}) P_b with R_b - R_{b+1} = pos_b / P
    above_tp, above_fp = tp - pos, fp - neg
    hi = (above_tp + pos) / (above_tp + above_fp + pos).clamp_min(1)
    lo = (above_tp + 1) / (above_tp + above_fp + 1 + neg)
    dev = torch.where(has, torch.maximum(hi - precision, precision - lo), torch.zeros_like(tp))
    return ap.item(), ((pos * dev).sum() / n_pos).item()


class SegmentationScores:
    """Accumulates the metrics of one evaluation set over batches of pixels (see the module
    docstring for the definitions). ``update`` accepts tensors on any device; the state is a
    few small float64 / int64 CPU tensors, whatever the number of pixels."""

    def __init__(self, num_classes: int, ignore_index: int = 255, ece_bins: int = ECE_BINS,
                 uncertainty_bins: int = 1000):
        if num_classes < 2:
            raise ValueError(f"num_classes must be at least 2, got {num_classes}")
        if ece_bins < 1 or uncertainty_bins < 1:
            raise ValueError(f"ece_bins and uncertainty_bins must be positive, got {ece_bins}, {uncertainty_bins}")
        self.num_classes = K = int(num_classes)
        self.ignore_index = int(ignore_index)
        self.ece_bins = int(ece_bins)
        self.uncertainty_bins = int(uncertainty_bins)
        self.uncertainty_edges = torch.linspace(0.0, math.log(K), self.uncertainty_bins + 1, dtype=torch.float64)
        f64, i64 = dict(dtype=torch.float64), dict(dtype=torch.int64)
        self.confusion_matrix = torch.zeros(K, K, **i64)  # rows: ground truth, columns: prediction
        self.sums = dict.fromkeys(["nll", "brier", "entropy", "entropy_correct", "entropy_incorrect",
                                   "mutual_information"], 0.0)
        self.rel_count = torch.zeros(self.ece_bins, **i64)
        self.rel_confidence = torch.zeros(self.ece_bins, **f64)
        self.rel_correct = torch.zeros(self.ece_bins, **i64)
        # histograms of the uncertainty: [0] correct pixels, [1] misclassified pixels
        self.hist_entropy = torch.zeros(2, self.uncertainty_bins, **i64)
        self.hist_mi = torch.zeros(2, self.uncertainty_bins, **i64)
        self.with_samples: bool | None = None  # every batch must agree
        # binary tasks, per image (update(..., images=n)): sum of the images' foreground Dice, images, empty ones
        self.dice_image_sum, self.dice_images, self.dice_empty_images = 0.0, 0, 0

    # ------------------------------------------------------------------ update
    def update(self, probs: torch.Tensor, labels: torch.Tensor, sample_probs: torch.Tensor | None = None,
               images: int | None = None) -> None:
        """``images``: the batch holds that many images of equal size, rows image-major (binary
        tasks then also accumulate the per-image Dice)."""
        K = self.num_classes
        if probs.dim() != 2 or probs.shape[1] != K:
            raise ValueError(f"probs must be (N, {K}) (pixels as rows), got {tuple(probs.shape)}")
        if labels.shape != probs.shape[:1]:
            raise ValueError(f"labels must be ({probs.shape[0]},), got {tuple(labels.shape)}")
        if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
            raise ValueError(f"labels must be integers, got {labels.dtype}")
        if sample_probs is not None and (sample_probs.dim() != 3 or sample_probs.shape[1:] != probs.shape):
            raise ValueError(f"sample_probs must be (S, {probs.shape[0]}, {K}), got {tuple(sample_probs.shape)}")
        has = sample_probs is not None
        if self.with_samples is not None and self.with_samples != has:
            raise ValueError("sample_probs given for some batches and not for others")

        probs = probs.detach()
        sample_probs = None if sample_probs is None else sample_probs.detach()
        labels = labels.to(probs.device).long()
        valid = labels != self.ignore_index
        bad = valid & ((labels < 0) | (labels >= K))
        if bool(bad.any()):
            values = torch.unique(labels[bad]).tolist()
            raise ValueError(f"labels {values[:10]}{' ...' if len(values) > 10 else ''} are outside [0, {K}) "
                             f"and are not the ignore index {self.ignore_index}")
        self.with_samples = has
        if images is not None and K == 2:
            self._update_image_dice(probs, labels, valid, int(images))
        if not bool(valid.all()):
            probs, labels = probs[valid], labels[valid]
            sample_probs = None if sample_probs is None else sample_probs[:, valid]
        n = probs.shape[0]
        rows = max(1, CHUNK_ELEMENTS // (K * (1 + (sample_probs.shape[0] if has else 0))))
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            self._update_valid(probs[start:stop], labels[start:stop],
                               None if sample_probs is None else sample_probs[:, start:stop])

    @torch.no_grad()
    def _update_valid(self, probs: torch.Tensor, y: torch.Tensor, sample_probs: torch.Tensor | None) -> None:
        K, dev = self.num_classes, probs.device
        p = probs.double()
        conf, pred = p.max(-1)
        correct = pred == y
        wrong = (~correct).long()
        self.confusion_matrix += torch.bincount(y * K + pred, minlength=K * K).view(K, K).cpu()

        p_y = p.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        ent = entropy(p)
        batch = {"nll": -torch.log(p_y.clamp_min(EPS)).sum(),
                 "brier": (p.pow(2).sum(-1) - 2 * p_y + 1).sum(),  # sum_k (p_k - 1[y=k])^2
                 "entropy": ent.sum(),
                 "entropy_correct": (ent * correct).sum(),
                 "entropy_incorrect": (ent * ~correct).sum()}

        # reliability bins exactly as bench.metrics.reliability_bins: bin b holds (b/n, (b+1)/n]
        nb = self.ece_bins
        idx = (torch.ceil(conf * nb) - 1).clamp(0, nb - 1).long()
        self.rel_count += torch.bincount(idx, minlength=nb).cpu()
        self.rel_confidence += torch.bincount(idx, weights=conf, minlength=nb).cpu()
        self.rel_correct += torch.bincount(idx[correct], minlength=nb).cpu()

        edges = self.uncertainty_edges.to(dev)
        self.hist_entropy += self._histogram(ent, wrong, edges)
        if sample_probs is not None:
            mi = mutual_information(sample_probs.double())
            batch["mutual_information"] = mi.sum()
            self.hist_mi += self._histogram(mi, wrong, edges)
        values = torch.stack(list(batch.values())).cpu().tolist()
        for key, value in zip(batch, values):
            self.sums[key] += value

    @torch.no_grad()
    def _update_image_dice(self, probs: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, images: int) -> None:
        if images < 1 or probs.shape[0] % images:
            raise ValueError(f"{probs.shape[0]} pixel rows cannot be {images} images of equal size")
        pred = probs.double().max(-1)[1]  # the confusion matrix's arg-max
        fg_pred = ((pred == 1) & valid).view(images, -1)
        fg_true = ((labels == 1) & valid).view(images, -1)
        inter = (fg_pred & fg_true).sum(1).double()
        size = (fg_pred.sum(1) + fg_true.sum(1)).double()
        empty = size == 0
        dice = torch.where(empty, torch.ones_like(size), 2 * inter / size.clamp_min(1))
        self.dice_image_sum += float(dice.sum())
        self.dice_images += images
        self.dice_empty_images += int(empty.sum())

    def _histogram(self, score: torch.Tensor, wrong: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        """(2, bins) counts of ``score`` over ``edges`` for the correct [0] and wrong [1] pixels;
        bin b holds (e_b, e_{b+1}], bin 0 also e_0 (bench.metrics.entropy_histogram's convention)."""
        nb = self.uncertainty_bins
        idx = torch.bucketize(score.clamp(edges[0], edges[-1]), edges[1:-1], right=False)
        return torch.bincount(wrong * nb + idx, minlength=2 * nb).view(2, nb).cpu()

    # ------------------------------------------------------------------ read-out
    @property
    def n_pixels(self) -> int:
        return int(self.rel_count.sum())

    def reliability_bins(self) -> dict:
        """The summed reliability bins, in ``bench.metrics.reliability_bins``'s format."""
        return {"edges": torch.linspace(0, 1, self.ece_bins + 1).tolist(),
                "count": self.rel_count.double().tolist(),
                "confidence_sum": self.rel_confidence.tolist(),
                "correct_sum": self.rel_correct.double().tolist()}

    def result(self) -> dict:
        n = self.n_pixels
        if n == 0:
            raise ValueError("no valid pixels were accumulated (every label was the ignore index?)")
        cm = self.confusion_matrix.double()
        tp, gt, predicted = cm.diagonal(), cm.sum(1), cm.sum(0)
        union = gt + predicted - tp
        iou = [None if u == 0 else v for v, u in zip((tp / union.clamp_min(1)).tolist(), union.tolist())]
        acc = [None if g == 0 else v for v, g in zip((tp / gt.clamp_min(1)).tolist(), gt.tolist())]
        both = gt + predicted
        dice = [None if b == 0 else v for v, b in zip((2 * tp / both.clamp_min(1)).tolist(), both.tolist())]
        n_wrong = int(self.hist_entropy[1].sum())

        def mean(values):
            defined = [v for v in values if v is not None]
            return sum(defined) / len(defined) if defined else None

        out = {
            "miou": mean(iou),
            "iou_per_class": iou,
            "pixel_accuracy": tp.sum().item() / n,
            "mean_class_accuracy": mean(acc),
            "accuracy_per_class": acc,
            "nll": self.sums["nll"] / n,
            "brier": self.sums["brier"] / n,
            "ece": ece_from_bins(self.reliability_bins()),
            "entropy": self.sums["entropy"] / n,
            "entropy_correct": self.sums["entropy_correct"] / (n - n_wrong) if n > n_wrong else None,
            "entropy_incorrect": self.sums["entropy_incorrect"] / n_wrong if n_wrong else None,
            "mutual_information": self.sums["mutual_information"] / n if self.with_samples else None,
            "error_auroc": binned_auroc(self.hist_entropy[1], self.hist_entropy[0])[0],
            "error_aupr": binned_aupr(self.hist_entropy[1], self.hist_entropy[0])[0],
            "error_auroc_mi": None,
            "error_aupr_mi": None,
            "n_pixels": n,
            "dice": dice[1] if self.num_classes == 2 else None,
            "dice_per_image": self.dice_image_sum / self.dice_images if self.dice_images else None,
            "dice_per_class": dice,
            "mean_dice": mean(dice),
            "dice_empty_images": self.dice_empty_images if self.dice_images else None,
            "foreground_share": float(gt[1]) / n if self.num_classes == 2 else None,
        }
        if self.with_samples:
            out["error_auroc_mi"] = binned_auroc(self.hist_mi[1], self.hist_mi[0])[0]
            out["error_aupr_mi"] = binned_aupr(self.hist_mi[1], self.hist_mi[0])[0]
        return out

    def curves(self) -> dict:
        """Reliability bins, the confusion matrix and the uncertainty histograms (correct vs
        misclassified pixels) with the binning bounds of the error AUROC / AUPR."""
        def hist(h):
            return {"edges": self.uncertainty_edges.tolist(), "counts": h.sum(0).tolist(),
                    "counts_correct": h[0].tolist(), "counts_incorrect": h[1].tolist(),
                    "auroc_binning_bound": binned_auroc(h[1], h[0])[1],
                    "aupr_binning_bound": binned_aupr(h[1], h[0])[1]}

        out = {"reliability": self.reliability_bins(), "confusion_matrix": self.confusion_matrix.tolist(),
               "entropy_hist": hist(self.hist_entropy)}
        if self.with_samples:
            out["mutual_information_hist"] = hist(self.hist_mi)
        return out
