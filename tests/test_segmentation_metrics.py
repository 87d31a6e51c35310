"""bench.segmentation_metrics: the definitions by hand, against scikit-learn and bench.metrics,
streaming equals one shot, the ignore label, mutual information."""
import json
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import (accuracy_score, average_precision_score, balanced_accuracy_score, confusion_matrix,
                             jaccard_score, roc_auc_score)

from bench import metrics as M
from bench import segmentation_metrics as SM
from bench.segmentation_metrics import SegmentationScores

IGNORE = 255


def random_pixels(seed, n=4000, k=5, s=None, ignore_frac=0.1, temperature=1.5):
    """Softmax probabilities of random logits, labels drawn from them (so errors are more
    likely where the entropy is high), a fraction of pixels set to the ignore label."""
    g = torch.Generator().manual_seed(seed)
    if s is None:
        probs = torch.softmax(temperature * torch.randn(n, k, generator=g, dtype=torch.float64), -1)
        samples = None
    else:
        samples = torch.softmax(temperature * torch.randn(s, n, k, generator=g, dtype=torch.float64), -1)
        probs = samples.mean(0)
    labels = torch.multinomial(probs, 1, generator=g).squeeze(1)
    labels[torch.rand(n, generator=g) < ignore_frac] = IGNORE
    return probs, labels, samples


def scores_of(probs, labels, samples=None, batches=1, k=None, **kw):
    sc = SegmentationScores(k or probs.shape[1], **kw)
    bounds = np.linspace(0, len(labels), batches + 1).astype(int) if isinstance(batches, int) else batches
    for a, b in zip(bounds[:-1], bounds[1:]):
        sc.update(probs[a:b], labels[a:b], None if samples is None else samples[:, a:b])
    return sc


def assert_close(a, b, tol=1e-12, path="result"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_close(a[key], b[key], tol, f"{path}[{key!r}]")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, tol, f"{path}[{i}]")
    elif a is None or b is None:
        assert a is None and b is None, path
    else:
        assert a == pytest.approx(b, abs=tol, rel=0), path


# ---------------------------------------------------------------- by hand
def H(*p):
    return -sum(q * math.log(q) for q in p if q > 0)


def test_hand_worked_two_classes():
    # pixel  p(class 0), p(class 1)  label  arg-max  confidence  15-bin (ceil(15 c) - 1)
    #  0     0.90 0.10               0      0 ok     0.90        13 (13.5)
    #  1     0.65 0.35               1      0 wrong  0.65         9 (9.75)
    #  2     0.18 0.82               1      1 ok     0.82        12 (12.3)
    #  3     0.12 0.88               0      1 wrong  0.88        13 (13.2)
    #  4     0.05 0.95               1      1 ok     0.95        14 (14.25)
    #  5     0.50 0.50               255    ignored
    probs = torch.tensor([[0.9, 0.1], [0.65, 0.35], [0.18, 0.82], [0.12, 0.88], [0.05, 0.95], [0.5, 0.5]],
                         dtype=torch.float64)
    labels = torch.tensor([0, 1, 1, 0, 1, IGNORE])
    sc = scores_of(probs, labels)
    r = sc.result()
    # confusion (rows truth): truth 0 -> predicted {0: px 0, 1: px 3}; truth 1 -> {0: px 1, 1: px 2, 4}
    assert sc.confusion_matrix.tolist() == [[1, 1], [1, 2]]
    assert r["n_pixels"] == 5
    # IoU_0 = TP 1 / (TP 1 + FP 1 (px 1) + FN 1 (px 3)) = 1/3; IoU_1 = 2 / (2 + 1 (px 3) + 1 (px 1)) = 1/2
    assert r["iou_per_class"] == pytest.approx([1 / 3, 1 / 2])
    assert r["miou"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert r["pixel_accuracy"] == pytest.approx(3 / 5)
    assert r["accuracy_per_class"] == pytest.approx([1 / 2, 2 / 3])
    assert r["mean_class_accuracy"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    p_y = [0.9, 0.35, 0.82, 0.12, 0.95]
    assert r["nll"] == pytest.approx(-sum(math.log(p) for p in p_y) / 5)
    # K = 2: sum_k (p_k - 1[y=k])^2 = 2 (1 - p_y)^2
    assert r["brier"] == pytest.approx(2 * (0.1**2 + 0.65**2 + 0.18**2 + 0.88**2 + 0.05**2) / 5)
    # bin 13 holds px 0 (0.90, right) and px 3 (0.88, wrong): |1 - 1.78|; bins 9, 12, 14 one pixel each
    assert r["ece"] == pytest.approx((abs(1 - 1.78) + abs(0 - 0.65) + abs(1 - 0.82) + abs(1 - 0.95)) / 5)
    rel = sc.curves()["reliability"]
    assert rel["count"][13] == 2 and rel["correct_sum"][13] == 1 and rel["confidence_sum"][13] == pytest.approx(1.78)
    ents = [H(0.9, 0.1), H(0.65, 0.35), H(0.18, 0.82), H(0.12, 0.88), H(0.05, 0.95)]
    assert r["entropy"] == pytest.approx(sum(ents) / 5)
    assert r["entropy_incorrect"] == pytest.approx((ents[1] + ents[3]) / 2)
    assert r["entropy_correct"] == pytest.approx((ents[0] + ents[2] + ents[4]) / 3)
    # entropies, high to low: px 1 (wrong), px 2, px 3 (wrong), px 0, px 4.
    # AUROC: px 1 beats the 3 correct pixels, px 3 beats px 0 and px 4: 5 of 2 x 3 pairs.
    assert r["error_auroc"] == pytest.approx(5 / 6)
    # AP: px 1 at precision 1/1, px 3 at precision 2/3, each half the recall
    assert r["error_aupr"] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert r["mutual_information"] is None and r["error_auroc_mi"] is None and r["error_aupr_mi"] is None
    json.dumps(r, allow_nan=False)
    json.dumps(sc.curves(), allow_nan=False)


def test_miou_skips_classes_with_empty_union_only():
    # 3 classes: class 2 never labelled nor predicted (left out); class 1 predicted once, never labelled (IoU 0)
    probs = torch.tensor([[0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.3, 0.6, 0.1], [0.1, 0.8, 0.1]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, IGNORE])
    r = scores_of(probs, labels).result()
    assert r["iou_per_class"] == [pytest.approx(2 / 3), 0.0, None]
    assert r["miou"] == pytest.approx((2 / 3 + 0) / 2)
    assert r["accuracy_per_class"] == [pytest.approx(2 / 3), None, None]
    assert r["mean_class_accuracy"] == pytest.approx(2 / 3)
    # no pixel wrong: the error AUROC is undefined
    r = scores_of(probs[:2], labels[:2]).result()
    assert r["error_auroc"] is None and r["error_aupr"] is None and r["entropy_incorrect"] is None


# ---------------------------------------------------------------- scikit-learn
@pytest.mark.parametrize("seed", [0, 1])
def test_confusion_iou_accuracies_match_sklearn(seed):
    probs, labels, _ = random_pixels(seed, n=3000, k=6)
    r = scores_of(probs, labels, batches=3).result()
    sc = scores_of(probs, labels)
    keep = labels != IGNORE
    y, pred = labels[keep].numpy(), probs[keep].argmax(-1).numpy()
    np.testing.assert_array_equal(sc.confusion_matrix.numpy(), confusion_matrix(y, pred, labels=range(6)))
    iou = jaccard_score(y, pred, labels=range(6), average=None)
    np.testing.assert_allclose(r["iou_per_class"], iou, atol=1e-12)
    assert r["miou"] == pytest.approx(iou.mean(), abs=1e-12)
    assert r["pixel_accuracy"] == pytest.approx(accuracy_score(y, pred), abs=1e-12)
    assert r["mean_class_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred), abs=1e-12)
    assert r["n_pixels"] == int(keep.sum())


def inverse_binary_entropy(h):
    """p in (0, 1/2) with H(p, 1 - p) = h, by bisection (vectorised)."""
    lo, hi = np.full_like(h, 1e-300), np.full_like(h, 0.5)
    for _ in range(200):
        mid = (lo + hi) / 2
        too_low = -(mid * np.log(mid) + (1 - mid) * np.log1p(-mid)) < h
        lo, hi = np.where(too_low, mid, lo), np.where(too_low, hi, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_error_auroc_aupr_exact_when_scores_fall_in_distinct_bins(seed):
    rng = np.random.default_rng(seed)
    n_bins, n = 1000, 600
    # the entropy of each pixel at the centre of its own bin on [0, log 2]
    bins = rng.choice(n_bins, size=n, replace=False)
    target = (bins + 0.5) * math.log(2) / n_bins
    p0 = inverse_binary_entropy(target)
    probs = torch.tensor(np.stack([p0, 1 - p0], 1))  # arg-max: class 1
    wrong = rng.random(n) < 0.1 + 0.8 * target / math.log(2)  # errors where uncertain
    labels = torch.tensor(np.where(wrong, 0, 1))
    ent = M.entropy(probs).numpy()
    assert len(np.unique(np.floor(ent / math.log(2) * n_bins))) == n  # one score per bin
    sc = scores_of(probs, labels, batches=4, uncertainty_bins=n_bins)
    r = sc.result()
    assert r["error_auroc"] == pytest.approx(roc_auc_score(wrong, ent), abs=1e-12)
    assert r["error_aupr"] == pytest.approx(average_precision_score(wrong, ent), abs=1e-12)
    hist = sc.curves()["entropy_hist"]
    assert hist["auroc_binning_bound"] == 0 and hist["aupr_binning_bound"] == 0
    assert hist["counts_incorrect"] == np.bincount(bins[wrong], minlength=n_bins).tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_error_auroc_aupr_with_many_tied_scores(seed):
    # pixels take one of a few probability vectors and their permutations: entropies tied exactly
    # (up to rounding in the last bit), each tie group in one bin, with different arg-max classes
    rng = np.random.default_rng(seed)
    base = np.array([[0.9, 0.05, 0.05], [0.6, 0.3, 0.1], [0.4, 0.35, 0.25], [1 / 3, 1 / 3, 1 / 3]])
    pick = rng.integers(0, len(base), 2000)
    probs = np.stack([rng.permutation(base[i]) for i in pick])
    labels = rng.integers(0, 3, 2000)
    labels[rng.random(2000) < 0.05] = IGNORE
    probs, labels = torch.tensor(probs), torch.tensor(labels)
    sc = scores_of(probs, labels, batches=5)
    r = sc.result()
    keep = (labels != IGNORE).numpy()
    ent = np.round(M.entropy(probs).numpy()[keep], 9)  # tied scores identical
    wrong = probs.argmax(-1).numpy()[keep] != labels.numpy()[keep]
    assert len(np.unique(ent)) == 4
    assert r["error_auroc"] == pytest.approx(roc_auc_score(wrong, ent), abs=1e-12)
    assert r["error_aupr"] == pytest.approx(average_precision_score(wrong, ent), abs=1e-12)


@pytest.mark.parametrize("n_bins", [1000, 20])
def test_binned_error_auroc_aupr_within_the_stated_bound(n_bins):
    probs, labels, _ = random_pixels(3, n=5000, k=4)
    sc = scores_of(probs, labels, uncertainty_bins=n_bins)
    r, hist = sc.result(), sc.curves()["entropy_hist"]
    keep = labels != IGNORE
    ent = M.entropy(probs[keep]).numpy()
    wrong = (probs[keep].argmax(-1) != labels[keep]).numpy()
    auroc, ap = roc_auc_score(wrong, ent), average_precision_score(wrong, ent)
    assert abs(r["error_auroc"] - auroc) <= hist["auroc_binning_bound"] + 1e-12
    assert abs(r["error_aupr"] - ap) <= hist["aupr_binning_bound"] + 1e-12
    if n_bins == 1000:
        assert hist["auroc_binning_bound"] < 2e-3 and hist["aupr_binning_bound"] < 2e-2
    else:  # coarse bins: a real, bounded difference
        assert abs(r["error_auroc"] - auroc) > 1e-6


def test_binned_auroc_aupr_on_histograms():
    # positives in bins 2, 2, 0; negatives in bins 1, 2: pairs (2>1), (2~2 half), (2>1), (2~2), (0<1), (0<2)
    pos, neg = torch.tensor([1, 0, 2]), torch.tensor([0, 1, 1])
    auroc, bound = SM.binned_auroc(pos, neg)
    assert auroc == pytest.approx((1 + 0.5 + 1 + 0.5 + 0 + 0) / 6)
    assert bound == pytest.approx(0.5 * 2 / 6)
    # thresholds: bin >= 2: tp 2, fp 1 (precision 2/3, recall 2/3); bin >= 0: tp 3, fp 2 (3/5, recall 1)
    ap, _ = SM.binned_aupr(pos, neg)
    assert ap == pytest.approx(2 / 3 * 2 / 3 + 1 / 3 * 3 / 5)
    assert SM.binned_auroc(pos, torch.zeros(3)) == (None, None)


# ---------------------------------------------------------------- bench.metrics on the same pixels
def test_calibration_metrics_equal_bench_metrics_on_valid_pixels():
    probs, labels, samples = random_pixels(4, n=3000, k=5, s=3)
    probs = probs.float()  # the usual network output: float32
    # confidences exactly on bin edges (9/15, 12/15, 6/15, 5/15 in float64): bin b holds (b/n, (b+1)/n]
    edge = torch.tensor([[0.6, 0.4, 0, 0, 0], [0.8, 0.2, 0, 0, 0], [0.4, 0.3, 0.3, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0, 0],
                         [0, 0, 0, 1.0, 0]], dtype=torch.float64)
    sc = scores_of(edge, torch.tensor([0, 1, 0, 2, 3]))
    assert sc.curves()["reliability"]["count"] == [0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert sc.result()["ece"] == pytest.approx(M.ece(edge, torch.tensor([0, 1, 0, 2, 3])), abs=1e-12)
    sc = scores_of(probs, labels, samples, batches=3)
    r, rel = sc.result(), sc.curves()["reliability"]
    keep = labels != IGNORE
    p, y = probs[keep], labels[keep]
    bins = M.reliability_bins(p, y)
    assert_close(rel, bins)
    assert r["ece"] == pytest.approx(M.ece_from_bins(bins), abs=1e-12)
    assert r["ece"] == pytest.approx(M.ece(p, y), abs=1e-12)
    assert r["nll"] == pytest.approx(M.nll(p, y), abs=1e-12)
    assert r["brier"] == pytest.approx(M.brier(p, y), abs=1e-12)
    assert r["entropy"] == pytest.approx(M.entropy(p).mean().item(), abs=1e-12)
    assert r["pixel_accuracy"] == pytest.approx(M.accuracy(p, y), abs=1e-12)
    assert_close({k: r[k] for k in ("entropy_correct", "entropy_incorrect")}, M.entropy_by_correctness(p, y))


# ---------------------------------------------------------------- streaming
def test_streaming_equals_one_shot(monkeypatch):
    probs, labels, samples = random_pixels(5, n=5000, k=7, s=4)
    one = scores_of(probs, labels, samples)
    cuts = [0, 1, 700, 701, 2300, 2950, 4999, 5000]  # 7 uneven batches, two of one pixel
    many = scores_of(probs, labels, samples, batches=cuts)
    assert_close(many.result(), one.result())
    assert_close(many.curves(), one.curves())
    monkeypatch.setattr(SM, "CHUNK_ELEMENTS", 100)  # a batch split in chunks of 100 // (5 * 7) = 2 rows
    chunked = scores_of(probs, labels, samples)
    assert_close(chunked.result(), one.result())
    assert_close(chunked.curves(), one.curves())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_inputs_give_the_cpu_result():
    probs, labels, samples = random_pixels(6, n=3000, k=5, s=3)
    cpu = scores_of(probs, labels, samples, batches=3)
    gpu = scores_of(probs.cuda(), labels.cuda(), samples.cuda(), batches=3)
    assert gpu.confusion_matrix.device.type == "cpu"
    assert_close(gpu.result(), cpu.result(), tol=1e-10)
    assert_close(gpu.curves(), cpu.curves(), tol=1e-10)


# ---------------------------------------------------------------- ignore label, bad labels
def test_ignored_pixels_change_nothing():
    probs, labels, samples = random_pixels(7, n=2000, k=4, s=3, ignore_frac=0.3)
    ignored = labels == IGNORE
    g = torch.Generator().manual_seed(1)
    probs2, samples2 = probs.clone(), samples.clone()
    samples2[:, ignored] = torch.softmax(5 * torch.randn(3, int(ignored.sum()), 4, generator=g, dtype=torch.float64), -1)
    probs2[ignored] = samples2[:, ignored].mean(0)
    a = scores_of(probs, labels, samples, batches=2)
    b = scores_of(probs2, labels, samples2, batches=2)
    assert_close(a.result(), b.result(), tol=0)
    assert_close(a.curves(), b.curves(), tol=0)
    assert a.result()["n_pixels"] == int((~ignored).sum())
    # the same pixels with another ignore index
    c = scores_of(probs, torch.where(ignored, -1, labels), samples, batches=2, ignore_index=-1)
    assert_close(c.result(), a.result(), tol=0)


@pytest.mark.parametrize("bad", [4, -1, 254])
def test_labels_outside_the_classes_raise(bad):
    probs, labels, _ = random_pixels(8, n=50, k=4)
    labels[10] = bad
    sc = SegmentationScores(4)
    with pytest.raises(ValueError, match=rf"labels \[{bad}\] are outside \[0, 4\)"):
        sc.update(probs, labels)
    with pytest.raises(ValueError, match="integers"):
        sc.update(probs, labels.double())
    with pytest.raises(ValueError, match=r"\(N, 4\)"):
        sc.update(probs[:, :3], labels)
    with pytest.raises(ValueError, match="no valid pixels"):
        SegmentationScores(4).result()


# ---------------------------------------------------------------- mutual information
def test_mutual_information_zero_for_equal_samples():
    probs, labels, _ = random_pixels(9, n=1000, k=5)
    samples = probs.unsqueeze(0).expand(4, -1, -1)
    sc = scores_of(probs, labels, samples, batches=3)
    r = sc.result()
    assert r["mutual_information"] == pytest.approx(0.0, abs=1e-12)
    # every score 0: one tied group, AUROC 1/2, AP the error rate
    keep = labels != IGNORE
    error_rate = (probs[keep].argmax(-1) != labels[keep]).double().mean().item()
    assert r["error_auroc_mi"] == pytest.approx(0.5)
    assert r["error_aupr_mi"] == pytest.approx(error_rate)
    assert sc.curves()["mutual_information_hist"]["counts"][0] == r["n_pixels"]


def test_mutual_information_matches_direct_computation():
    probs, labels, samples = random_pixels(10, n=3000, k=5, s=6, temperature=3.0)
    sc = scores_of(probs, labels, samples, batches=4)
    r = sc.result()
    keep = (labels != IGNORE).numpy()
    s = samples.numpy()[:, keep]  # (S, N, K)
    mean = s.mean(0)
    mi = -(mean * np.log(mean)).sum(-1) - (-(s * np.log(s)).sum(-1)).mean(0)  # H[mean] - mean H
    assert r["mutual_information"] == pytest.approx(mi.mean(), abs=1e-12)
    wrong = mean.argmax(-1) != labels.numpy()[keep]
    hist = sc.curves()["mutual_information_hist"]
    assert abs(r["error_auroc_mi"] - roc_auc_score(wrong, mi)) <= hist["auroc_binning_bound"] + 1e-12
    assert abs(r["error_aupr_mi"] - average_precision_score(wrong, mi)) <= hist["aupr_binning_bound"] + 1e-12
    assert r["error_auroc_mi"] == pytest.approx(roc_auc_score(wrong, mi), abs=2e-3)


def test_samples_for_some_batches_only_raise():
    probs, labels, samples = random_pixels(11, n=100, k=3, s=2)
    sc = SegmentationScores(3)
    sc.update(probs[:50], labels[:50], samples[:, :50])
    with pytest.raises(ValueError, match="some batches"):
        sc.update(probs[50:], labels[50:])
