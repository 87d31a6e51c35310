import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from bench import metrics as M

PROBS = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]], dtype=torch.float64)
Y = torch.tensor([0, 1, 0, 2])


def test_accuracy_nll_brier_by_hand():
    assert M.accuracy(PROBS, Y) == pytest.approx(0.5)
    assert M.nll(PROBS, Y) == pytest.approx(-(math.log(0.7) + math.log(0.8) + math.log(0.3) + math.log(0.25)) / 4)
    brier = ((0.3**2 + 0.2**2 + 0.1**2) + (0.1**2 + 0.2**2 + 0.1**2) + (0.7**2 + 0.3**2 + 0.4**2)
             + (0.5**2 + 0.25**2 + 0.75**2)) / 4
    assert M.brier(PROBS, Y) == pytest.approx(brier)


def test_ece_by_hand():
    # confidences 0.7, 0.8, 0.4, 0.5 fall in distinct 15-bins; correct: 1, 1, 0, 0
    expected = (abs(1 - 0.7) + abs(1 - 0.8) + abs(0 - 0.4) + abs(0 - 0.5)) / 4
    assert M.ece(PROBS, Y) == pytest.approx(expected)
    # two examples in one bin: |mean acc - mean conf| weighted by the bin's share
    p = torch.tensor([[0.9, 0.1], [0.92, 0.08], [0.55, 0.45]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    bin_hi = 2 / 3 * abs(0.5 - 0.91)
    bin_lo = 1 / 3 * abs(1 - 0.55)
    assert M.ece(p, y) == pytest.approx(bin_hi + bin_lo)


def test_reliability_bins_edges():
    p = torch.tensor([[0.05, 0.95], [0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    bins = M.reliability_bins(p, torch.tensor([1, 0, 0]))
    assert sum(bins["count"]) == 3
    assert bins["count"][14] == 2  # 0.95 and 1.0 in the top bin (14/15, 1]
    assert bins["count"][7] == 1  # 0.5 is in (7/15, 8/15]


def test_entropy_and_mutual_information():
    samples = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]], dtype=torch.float64)  # disagreeing confident samples
    assert M.entropy(samples.mean(0)).item() == pytest.approx(math.log(2))
    assert M.mutual_information(samples).item() == pytest.approx(math.log(2))
    agree = torch.tensor([[[0.5, 0.5]], [[0.5, 0.5]]], dtype=torch.float64)
    assert M.mutual_information(agree).item() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_aupr_match_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    s_in = np.round(rng.normal(0, 1, 300), 1)  # rounding creates ties
    s_out = np.round(rng.normal(0.7, 1, 200), 1)
    labels = np.r_[np.zeros(300), np.ones(200)]
    scores = np.r_[s_in, s_out]
    a = M.auroc(torch.tensor(s_in), torch.tensor(s_out))
    p = M.aupr(torch.tensor(s_in), torch.tensor(s_out))
    assert a == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert p == pytest.approx(average_precision_score(labels, scores), abs=1e-12)


def test_auroc_extremes():
    assert M.auroc(torch.tensor([0.0, 0.1]), torch.tensor([1.0, 2.0])) == 1.0
    assert M.auroc(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.1])) == 0.0


def test_regression_metrics_by_hand():
    mean = torch.tensor([0.0, 1.0])
    var = torch.tensor([1.0, 4.0])
    y = torch.tensor([1.0, 1.0])
    out = M.regression_metrics(mean, var, y)
    assert out["rmse"] == pytest.approx(math.sqrt(0.5))
    nll = 0.5 * (0.5 * math.log(2 * math.pi) + 0.5 + 0.5 * math.log(2 * math.pi * 4))
    assert out["nll"] == pytest.approx(nll)
    assert out["mean_std"] == pytest.approx(1.5)
    assert out["coverage_3sigma"] == 1.0


def test_entropy_histogram_counts_everything():
    ent = torch.tensor([0.0, 0.1, math.log(10), 1.0])
    h = M.entropy_histogram(ent, 10, bins=5)
    assert sum(h["counts"]) == 4 and h["counts"][0] == 2 and h["counts"][-1] == 1


def test_fpr_at_95_tpr_matches_scikit_learn():
    from sklearn.metrics import roc_curve

    from bench.metrics import fpr_at_tpr

    g = torch.Generator().manual_seed(0)
    s_in, s_out = torch.randn(400, generator=g), torch.randn(300, generator=g) + 1.0
    fpr, tpr, _ = roc_curve(np.r_[np.zeros(400), np.ones(300)], np.r_[s_in.numpy(), s_out.numpy()])
    want = fpr[np.searchsorted(tpr, 0.95, side="left")]   # the first threshold reaching 95 % TPR
    assert fpr_at_tpr(s_in, s_out, 0.95) == pytest.approx(want, abs=1e-12)


def test_aurc_brute_force_with_ties():
    import itertools

    from bench.metrics import aurc

    # confidences with a tie (0.6, 0.6): the tie's order is arbitrary, AURC is its average
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.4, 0.6], [0.7, 0.3], [0.55, 0.45]], dtype=torch.float64)
    y = torch.tensor([0, 1, 1, 1, 0])
    conf = probs.max(-1).values.numpy()
    err = (probs.argmax(-1) != y).double().numpy()
    values = []
    for perm in itertools.permutations(range(5)):
        c = conf[list(perm)]
        if any(c[i] < c[i + 1] for i in range(4)):      # only orders sorted by decreasing confidence
            continue
        e = err[list(perm)]
        values.append(np.mean(np.cumsum(e) / np.arange(1, 6)))
    assert len(values) == 2                              # the two orders of the tied pair
    assert aurc(probs, y) == pytest.approx(np.mean(values), abs=1e-12)


def test_ood_by_mutual_information_only_with_samples():
    from bench.metrics import auroc, mutual_information, ood_metrics

    g = torch.Generator().manual_seed(1)
    s_in = torch.softmax(torch.randn(4, 50, 3, generator=g) * 3, -1)
    s_out = torch.softmax(torch.randn(4, 40, 3, generator=g), -1)
    m, _ = ood_metrics(s_in.mean(0), s_out.mean(0), s_out, sample_probs_in=s_in)
    assert m["auroc_mi"] == pytest.approx(auroc(mutual_information(s_in), mutual_information(s_out)))
    m, _ = ood_metrics(s_in.mean(0), s_out.mean(0))
    assert "auroc_mi" not in m and 0 <= m["fpr_at_95_tpr"] <= 1
