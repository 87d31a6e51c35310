"""pbn / mfvi option ``class_weights`` (medical PBN paper Sec. 3.1, bench/class_weights.py): the
loss each method trains with against a hand computation of weighted CE + beta KL / N, the default
bit-identical to the unweighted ELBO and outside the kept records' identities, the normalisation,
median-frequency weights, and bad values stopped when the run is planned (exit 2)."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from bench import class_weights as cw
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.subnet.partial_vi import beta_schedule
from bench.tasks import classification, segmentation
from bench.training import TrainConfig
from methods import METHODS
from methods.base import MethodContext

K, N_TRAIN = 3, 48


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N_TRAIN, 4, generator=g)
    y = torch.tensor([0] * 30 + [1] * 12 + [2] * 6)  # imbalanced: 30 / 12 / 6
    return x, y


def _ctx(tmp_path):
    def build(dropout=0.0):
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, K))

    return MethodContext(task=classification(K), build_model=build, train=TrainConfig(epochs=1, batch_size=16, lr=0.01),
                         device=torch.device("cpu"), seed=0, map_cache=None, num_train=N_TRAIN, work_dir=tmp_path)


def _captured_loss(tmp_path, monkeypatch, **config):
    """The fitted mfvi and the loss function its fit handed to train_model."""
    import methods.pbn as pbn_mod

    seen = {}

    def fake_train(model, loader, cfg, loss_fn, **kw):
        seen["loss_fn"] = loss_fn
        return {"train_seconds": 0.0, "epoch_loss": [], "epoch_stats": []}

    monkeypatch.setattr(pbn_mod, "train_model", fake_train)
    x, y = _data()
    m = METHODS.get("mfvi")(_ctx(tmp_path), train_samples=2, **config)
    m.fit(TensorLoader(x, y, 16, shuffle=False), None)
    return m, seen["loss_fn"], x, y


def _hand_kl(vi, prior=1.0):
    """KL(N(mu, sigma^2) || N(0, prior^2)) summed over the stochastic entries, closed form."""
    mu = torch.cat([p.detach().reshape(-1) for p in vi.net.parameters()])[vi.indices].double()
    s = vi.sigma().detach().double()
    return float((math.log(prior) - s.log() + (s ** 2 + mu ** 2) / (2 * prior ** 2) - 0.5).sum())


def test_the_weighted_elbo_the_method_trains_with_equals_a_hand_computation(tmp_path, monkeypatch):
    weights = [1.0, 2.0, 5.0]
    m, loss_fn, x, y = _captured_loss(tmp_path, monkeypatch, class_weights=weights)
    xb, yb = x[:16], y[:16].clone()
    yb[:4] = torch.tensor([1, 2, 2, 1])  # a batch with all three classes
    frac = 0.25
    torch.manual_seed(7)
    got = float(loss_fn(m.vi, xb, yb, frac))
    torch.manual_seed(7)
    with torch.no_grad():
        logits = m.vi(xb, n_samples=2).double()  # (S, B, K): the same draws
    # normalisation: mean of w_y over the 48 training labels is 1
    mass = (30 * 1.0 + 12 * 2.0 + 6 * 5.0) / N_TRAIN
    w = [v / mass for v in weights]
    data = 0.0
    for s in range(2):
        for i in range(16):
            c = int(yb[i])
            data += w[c] * -float(torch.log_softmax(logits[s, i], -1)[c])
    data /= 2 * 16  # sum_b w_y NLL_b / B over S x B rows, not / sum of the weights
    beta = 0.2 + (0.01 - 0.2) * frac
    expected = data + beta * _hand_kl(m.vi) / N_TRAIN
    assert math.isclose(got, expected, rel_tol=1e-5), (got, expected)
    assert m.meta["class_weights"]["normalised"] == pytest.approx(w, rel=1e-6)
    assert m.diagnostics()["class_weights"]["raw"] == weights


def test_the_default_is_bit_identical_to_the_unweighted_elbo(tmp_path, monkeypatch):
    m, loss_fn, x, y = _captured_loss(tmp_path, monkeypatch)
    assert m.config["class_weights"] == "none" and m.meta["class_weights"] == {"option": "none"}
    xb, yb = x[:16], y[:16]
    torch.manual_seed(3)
    got = loss_fn(m.vi, xb, yb, 0.5)
    torch.manual_seed(3)
    out = m.vi(xb, n_samples=2)
    today = torch.nn.functional.cross_entropy(out.reshape(-1, K), yb.repeat(2)) \
        + beta_schedule(0.5, 0.2, 0.01) * m.vi.kl() / N_TRAIN
    assert torch.equal(got, today)
    # unit weights: the same value up to rounding (sum / count instead of mean)
    m1, loss1, _, _ = _captured_loss(tmp_path / "unit", monkeypatch, class_weights=[1, 1, 1])
    torch.manual_seed(3)
    assert math.isclose(float(loss1(m1.vi, xb, yb, 0.5)), float(got), rel_tol=1e-6)


def test_weighted_pixels_leave_ignored_ones_out_and_divide_by_the_labelled_count():
    task = segmentation(3)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 3, generator=g)
    y = torch.tensor([[[0, 1], [2, 255]], [[1, 1], [0, 255]]])
    w = torch.tensor([0.5, 2.0, 1.5])
    got = float(cw.weighted_nll(task, logits, y, w))
    total, n = 0.0, 0
    for row, label in zip(logits, y.reshape(-1).tolist()):
        if label != 255:
            total += float(w[label]) * -float(torch.log_softmax(row, -1)[label])
            n += 1
    assert math.isclose(got, total / n, rel_tol=1e-6)


def test_median_frequency_weights_are_recorded_from_the_training_labels(tmp_path, monkeypatch):
    m, _, _, y = _captured_loss(tmp_path, monkeypatch, class_weights="median_frequency")
    # classification: f_c = the share of class c (30, 12, 6 of 48); median 12/48; w_c = f_med / f_c
    raw = [12 / 30, 1.0, 2.0]
    info = m.meta["class_weights"]
    assert info["option"] == "median_frequency" and info["raw"] == pytest.approx(raw, rel=1e-6)
    assert info["train_class_counts"] == [30, 12, 6]
    mean = sum(c * v for c, v in zip([30, 12, 6], info["normalised"])) / N_TRAIN
    assert mean == pytest.approx(1.0, rel=1e-6)
    # an absent class: weight 0, no say in the median
    lab = torch.tensor([[[0, 0], [0, 1]], [[0, 1], [1, 255]]])
    assert cw.median_frequency_weights(lab, 3, 255).tolist()[2] == 0.0


@pytest.mark.parametrize("value, words", [([1, 2], "2 weights for 3 classes"), ([1, -1, 2], "negative"),
                                          ([0, 0, 0], "every weight is 0"), ("inverse", "'median_frequency'")])
def test_bad_class_weights_are_refused_naming_what_is_valid(value, words):
    with pytest.raises(BenchError, match=words):
        cw.check_task(value, classification(3))


def test_bad_class_weights_exit_2_when_the_run_is_planned(tmp_path, capsys):
    from bench.cli import main

    rc = main(["run", "--suite", "mnist_rotated", "--profile", "smoke", "--methods", "pbn", "--set",
               "pbn.class_weights=[1,2]", "--data-root", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "2 weights for 10 classes" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["pbn", "mfvi"])
def test_the_default_keeps_the_kept_records_identity(method):
    """class_weights at "none" (LATER_OPTIONS) is no part of a cell's identity; another value is."""
    import json
    from pathlib import Path

    from bench.config import resolve_plan
    from bench.harness import cell_identity
    from bench.store import ResultsStore
    from bench.suites import SUITES

    root = Path(__file__).resolve().parents[1] / "docs" / "records"
    from bench.store import pack_path, read_pack

    kept = {r["config_hash"] for r in read_pack(pack_path(root / "mnist_rotated")).values()
            if r["method"] == method and r["profile"] == "quick" and r["model"] == "lenet_300_100"}
    assert kept
    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "quick", [method], {"train.epochs": [5]}, method_registry=METHODS)
    (cfg,) = plan.methods[method]
    assert cfg["class_weights"] == "none"
    store = ResultsStore("unused")
    cid = cell_identity(suite, plan, store, METHODS, "lenet_300_100", method, cfg, 0, torch.device("cpu"))
    assert cid.chash in kept
    other = cell_identity(suite, plan, store, METHODS, "lenet_300_100", method,
                          {**cfg, "class_weights": "median_frequency"}, 0, torch.device("cpu"))
    assert other.chash != cid.chash and "class_weights=median_frequency" in other.label


# -- multi-label (the medical paper's ChestMNIST setting) and scikit-learn's "balanced" ----------------
L_LABELS = 3


def _multilabel_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N_TRAIN, 4, generator=g)
    y = torch.zeros(N_TRAIN, L_LABELS)
    y[:36, 0] = 1  # label 0: 36 of 48 positive
    y[:6, 1] = 1  # label 1: 6 of 48 positive (rare)
    y[::2, 2] = 1  # label 2: 24 of 48
    return x, y


def _multilabel_loss(tmp_path, monkeypatch, **config):
    import methods.pbn as pbn_mod
    from bench.tasks import multilabel

    seen = {}

    def fake_train(model, loader, cfg, loss_fn, **kw):
        seen["loss_fn"] = loss_fn
        return {"train_seconds": 0.0, "epoch_loss": [], "epoch_stats": []}

    def build(dropout=0.0):
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, L_LABELS))

    monkeypatch.setattr(pbn_mod, "train_model", fake_train)
    ctx = MethodContext(task=multilabel(L_LABELS), build_model=build, train=TrainConfig(epochs=1, batch_size=16, lr=0.01),
                        device=torch.device("cpu"), seed=0, map_cache=None, num_train=N_TRAIN, work_dir=tmp_path)
    x, y = _multilabel_data()
    m = METHODS.get("mfvi")(ctx, train_samples=2, **config)
    m.fit(TensorLoader(x, y, 16, shuffle=False), None)
    return m, seen["loss_fn"], x, y


def test_the_weighted_multilabel_elbo_equals_a_hand_computation(tmp_path, monkeypatch):
    """Positive weights per label (PyTorch's pos_weight), normalised over the N x L label entries."""
    pos = [1.0, 4.0, 2.0]
    m, loss_fn, x, y = _multilabel_loss(tmp_path, monkeypatch, class_weights=pos)
    xb, yb = x[:16], y[:16]
    torch.manual_seed(5)
    got = float(loss_fn(m.vi, xb, yb, 0.5))
    torch.manual_seed(5)
    with torch.no_grad():
        logits = m.vi(xb, n_samples=2).double()
    n_pos = [36, 6, 24]
    mass = sum((N_TRAIN - n_pos[k]) * 1.0 + n_pos[k] * pos[k] for k in range(L_LABELS)) / (N_TRAIN * L_LABELS)
    data = 0.0
    for s in range(2):
        for i in range(16):
            for k in range(L_LABELS):
                p = 1 / (1 + math.exp(-float(logits[s, i, k])))
                t = float(yb[i, k])
                w = (pos[k] if t == 1 else 1.0) / mass
                data += w * -(t * math.log(p) + (1 - t) * math.log(1 - p))
    data /= 2 * 16
    expected = data + beta_schedule(0.5, 0.2, 0.01) * _hand_kl(m.vi) / N_TRAIN
    assert math.isclose(got, expected, rel_tol=1e-5), (got, expected)
    info = m.meta["class_weights"]
    assert info["train_label_counts"] == [[12, 42, 24], n_pos]
    assert info["normalised"][1] == pytest.approx([v / mass for v in pos], rel=1e-6)


def test_unit_multilabel_weights_give_the_task_loss():
    from bench.tasks import multilabel

    task = multilabel(L_LABELS)
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(10, L_LABELS, generator=g)
    y = (torch.rand(10, L_LABELS, generator=g) > 0.5).float()
    got = cw.weighted_nll(task, logits, y, torch.ones(2, L_LABELS))
    assert torch.allclose(got, task.loss(logits, y))


def test_balanced_weights_are_scikit_learns():
    from sklearn.utils.class_weight import compute_class_weight

    _, y = _data()
    ours = cw.balanced_weights(cw.class_counts(y, K, None))
    theirs = compute_class_weight("balanced", classes=torch.arange(K).numpy(), y=y.numpy())
    assert ours.tolist() == pytest.approx(theirs.tolist(), rel=1e-6)
    # multi-label: per label, its negatives and positives as two classes
    _, ym = _multilabel_data()
    table = cw.multilabel_balanced_weights(cw.multilabel_counts(ym))
    for k in range(L_LABELS):
        sk = compute_class_weight("balanced", classes=torch.tensor([0, 1]).numpy(), y=ym[:, k].long().numpy())
        assert [float(table[0, k]), float(table[1, k])] == pytest.approx(sk.tolist(), rel=1e-6)
    # already mean 1 over the label entries: normalising changes nothing
    assert torch.allclose(cw.normalise(table, cw.multilabel_counts(ym)), table, rtol=1e-6)


def test_multilabel_refuses_median_frequency_and_a_wrong_count():
    from bench.tasks import multilabel

    with pytest.raises(BenchError, match="balanced"):
        cw.check_task("median_frequency", multilabel(L_LABELS))
    with pytest.raises(BenchError, match="2 weights for 3 labels"):
        cw.check_task([1, 2], multilabel(L_LABELS))
    cw.check_task("balanced", multilabel(L_LABELS))
