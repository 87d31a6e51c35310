"""The multi-label task (bench.tasks.multilabel): its loss, predictive and metrics against
scikit-learn and hand-worked cases, the methods that run on it end to end, those that refuse it
at plan time, and the reports' reference row and validity check."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import (accuracy_score, average_precision_score, brier_score_loss, hamming_loss, log_loss,
                             roc_auc_score)

from bench import multilabel_metrics as ML
from bench.errors import BenchError
from bench.tasks import multilabel

# 6 examples x 4 labels; label 2 is never present (one class only), label 3 always present;
# label 1 has tied scores across classes
P = torch.tensor([[0.9, 0.2, 0.1, 0.8],
                  [0.6, 0.2, 0.3, 0.4],
                  [0.2, 0.7, 0.05, 0.9],
                  [0.4, 0.2, 0.6, 0.7],
                  [0.8, 0.9, 0.2, 0.55],
                  [0.1, 0.5, 0.0, 1.0]])
Y = torch.tensor([[1, 0, 0, 1],
                  [0, 1, 0, 1],
                  [0, 1, 0, 1],
                  [1, 0, 0, 1],
                  [1, 1, 0, 1],
                  [0, 0, 0, 1]], dtype=torch.float32)


def test_loss_sums_bce_over_labels_and_averages_over_examples():
    """The example's NLL under L independent Bernoullis: L x scikit-learn's log_loss of the
    flattened (example, label) pairs for the mean; N L x it for the sum."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 3, generator=g, dtype=torch.float64)
    y = (torch.rand(7, 3, generator=g) < 0.5).double()
    task = multilabel(3)
    flat = log_loss(y.numpy().ravel(), torch.sigmoid(logits).numpy().ravel(), labels=[0, 1])
    assert task.loss(logits, y).item() == pytest.approx(3 * flat, rel=1e-9)
    assert task.loss(logits, y, reduction="sum").item() == pytest.approx(21 * flat, rel=1e-9)
    assert task.loss(logits, y, reduction="none").shape == (7,)


def test_predictive_is_the_mean_of_the_sampled_sigmoids():
    logits = torch.tensor([[[0.0, 2.0]], [[4.0, -2.0]]])  # S=2, N=1, L=2
    pred = multilabel(2).predictive_from_samples(logits)
    want = (1 / (1 + np.exp(-logits.numpy()))).mean(0)
    assert np.allclose(pred.probs.numpy(), want) and pred.sample_probs.shape == (2, 1, 2)
    single = multilabel(2).predictive(logits[0])
    assert np.allclose(single.probs.numpy(), 1 / (1 + np.exp(-logits[0].numpy()))) and single.sample_probs is None


def test_entropy_and_mutual_information_by_hand():
    """Per example: the Bernoulli entropies of the mean summed over labels; MI = that minus the
    mean over samples of the per-sample summed entropies (hand-worked with numpy)."""
    s = torch.tensor([[[0.1, 0.5]], [[0.7, 0.5]]], dtype=torch.float64)  # S=2, N=1, L=2

    def h(p):
        return -(p * np.log(p) + (1 - p) * np.log(1 - p))

    mean = np.array([0.4, 0.5])
    want_ent = h(mean).sum()
    want_mi = want_ent - 0.5 * ((h(0.1) + h(0.5)) + (h(0.7) + h(0.5)))
    assert ML.entropy(s.mean(0)).item() == pytest.approx(want_ent)
    assert ML.mutual_information(s).item() == pytest.approx(want_mi)
    assert ML.bernoulli_entropy(torch.tensor([0.0, 1.0])).tolist() == [0.0, 0.0]


def _ece_by_hand(p, y, bins=15):
    """Binary ECE of one label with a plain loop: bin b holds p in (b/n, (b+1)/n], 0 in bin 0."""
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(pi, yi) for pi, yi in zip(p, y) if (lo < pi <= hi) or (b == 0 and pi == 0)]
        if inside:
            total += len(inside) / len(p) * abs(np.mean([yi for _, yi in inside]) - np.mean([pi for pi, _ in inside]))
    return total


def test_metrics_match_scikit_learn_and_skip_one_class_labels():
    m, curves = ML.multilabel_metrics(P, Y)
    p, y = P.numpy().astype(np.float64), Y.numpy().astype(int)
    both = [l for l in range(4) if 0 < y[:, l].sum() < len(y)]
    assert both == [0, 1]
    au = [roc_auc_score(y[:, l], p[:, l]) for l in both]
    ap = [average_precision_score(y[:, l], p[:, l]) for l in both]
    assert m["auroc_per_label"][:2] == pytest.approx(au) and m["auroc_per_label"][2:] == [None, None]
    assert m["auroc_mean"] == pytest.approx(np.mean(au))
    assert m["average_precision_per_label"][:2] == pytest.approx(ap)
    assert m["mean_average_precision"] == pytest.approx(np.mean(ap))
    assert m["labels_one_class"] == 2
    pred = (p > 0.5).astype(int)
    assert m["accuracy"] == pytest.approx(1 - hamming_loss(y, pred))
    assert m["subset_accuracy"] == pytest.approx(accuracy_score(y, pred))
    assert m["accuracy_per_label"] == pytest.approx([(pred[:, l] == y[:, l]).mean() for l in range(4)])
    assert m["brier"] == pytest.approx(brier_score_loss(y.ravel(), p.ravel()))
    clipped = np.clip(p, 1e-12, 1 - 1e-12)  # p = 0 and 1 occur: log_loss needs them clipped as ours are
    assert m["nll"] == pytest.approx(4 * log_loss(y.ravel(), clipped.ravel(), labels=[0, 1]), rel=1e-6)
    ece = [_ece_by_hand(p[:, l], y[:, l]) for l in range(4)]
    assert m["ece_per_label"] == pytest.approx(ece) and m["ece"] == pytest.approx(np.mean(ece))
    assert m["mutual_information"] is None
    assert sum(curves["reliability"]["count"]) == 24


def test_auroc_mean_is_undefined_when_every_label_has_one_class():
    m, _ = ML.multilabel_metrics(P[:, 2:], Y[:, 2:])
    assert m["auroc_mean"] is None and m["mean_average_precision"] is None and m["labels_one_class"] == 2


def test_prevalence_reference_by_hand():
    """The training-prevalence predictor on targets y: NLL -sum_l [f_l log pi_l + (1 - f_l) log(1 - pi_l)]
    with f_l the set's frequency, Brier mean_l [f_l (1 - pi_l)^2 + (1 - f_l) pi_l^2], AUROC 0.5."""
    train = torch.tensor([[1, 0], [0, 0], [1, 1], [1, 0]], dtype=torch.float32)  # pi = (0.75, 0.25)
    y = torch.tensor([[1, 1], [0, 1]], dtype=torch.float32)  # f = (0.5, 1.0)
    ref = ML.prevalence_reference(train, y)
    pi, f = np.array([0.75, 0.25]), np.array([0.5, 1.0])
    assert ref["nll"] == pytest.approx(-(f * np.log(pi) + (1 - f) * np.log(1 - pi)).sum())
    assert ref["brier"] == pytest.approx((f * (1 - pi) ** 2 + (1 - f) * pi ** 2).mean())
    assert ref["auroc_mean"] == 0.5 and ref["prevalence"] == [0.75, 0.25]


def test_ood_scores_use_the_summed_label_entropy():
    p_in = torch.tensor([[0.99, 0.01], [0.95, 0.02]])
    p_out = torch.tensor([[0.5, 0.6], [0.4, 0.5]])
    m, _ = ML.ood_metrics(p_in, p_out)
    assert m["auroc"] == 1.0 and m["entropy"] == pytest.approx(ML.entropy(p_out).mean().item())


def test_bad_targets_and_predictives_are_named():
    from types import SimpleNamespace

    from bench.data import SuiteData
    from bench.harness import check_labels, check_predictive
    from bench.errors import InvalidPredictiveError

    suite = SimpleNamespace(name="s", task=multilabel(3))
    x = torch.zeros(4, 1, 2, 2)
    for y, words in ((torch.zeros(4, dtype=torch.long), "(N, 3)"), (torch.full((4, 3), 2.0), "0 or 1"),
                     (torch.zeros(4, 3, dtype=torch.long), "floating")):
        with pytest.raises(BenchError, match="training labels") as e:
            check_labels(suite, SuiteData(x, y, x, torch.zeros(4, 3), []))
        assert words in str(e.value)
    ok = multilabel(3).predictive(torch.zeros(4, 3))
    check_predictive(multilabel(3), ok, 4, "test set")  # rows need not sum to 1
    with pytest.raises(InvalidPredictiveError, match=r"expected \(4, 3\)"):
        check_predictive(multilabel(3), multilabel(2).predictive(torch.zeros(4, 2)), 4, "test set")


def test_informative_check_compares_with_the_prevalence_reference():
    from bench.validity import FAIL, PASS, informative

    run = {"task": "multilabel", "num_labels": 3, "reference": {"nll": 1.0}}
    assert informative({**run, "metrics": {"nll": 0.9, "auroc_mean": 0.8}}).status == PASS
    assert informative({**run, "metrics": {"nll": 1.1, "auroc_mean": 0.8}}).status == FAIL
    assert informative({**run, "metrics": {"nll": 0.9, "auroc_mean": 0.55}}).status == FAIL
    # no stored reference: 0.5 per label, NLL 3 ln 2
    assert informative({"task": "multilabel", "num_labels": 3,
                        "metrics": {"nll": 3 * math.log(2) + 0.01, "auroc_mean": 0.9}}).status == FAIL


# -- end to end: every method on a tiny multi-label problem -----------------------------------------
SUPPORTING = ["deterministic", "temperature_scaling", "mc_dropout", "deep_ensemble", "pbn", "mfvi", "ssvi", "subnet_laplace",
              "vdp"]
REFUSING = ["laplace_diag", "laplace_last_layer"]
from test_multilabel_api import L, bars  # noqa: E402  (n 8x8 images; label l present when row 2l is bright)


def tiny_suite(methods):
    from bench.config import resolve_plan
    from bench.data import EvalSet, SuiteData, data_digest
    from bench.user_suite import UserNetwork, UserSuite
    from methods import METHODS

    task = multilabel(L)
    (tx, ty), (vx, vy), (sx, sy), (ox, _) = bars(96, 0), bars(48, 1), bars(64, 2), bars(32, 3)
    evals = [EvalSet("id", "clean", 0.0, sx, sy, fingerprint=data_digest(sx, sy)),
             EvalSet("shift", "noise", 1.0, sx + torch.randn_like(sx), sy, fingerprint="noise"),
             EvalSet("ood", "bright", None, ox * 5, None, fingerprint="bright")]
    cfg = {"models": ["lenet_300_100"], "seeds": [0], "train": {"epochs": 1, "batch_size": 32, "lr": 0.05},
           "data": {"fit_digest": data_digest(tx, ty, vx, vy), "map_checkpoint": None, "eval_batch_size": 1000},
           "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4},
                       "subnet_laplace": {"n_subnet": 50, "swag_n_snapshots": 8, "grid_size": 5}}, "note": ""}
    suite = UserSuite("multilabel_tiny", task, (1, 8, 8), SuiteData(tx, ty, vx, vy, evals),
                      {"lenet_300_100": UserNetwork("lenet_300_100", "lenet_300_100", (1, 8, 8), task)},
                      "custom", cfg, tuple(methods))
    return suite, lambda ms: resolve_plan(suite, "custom", ms, {}, method_registry=METHODS)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from bench.api import run_suite

    out = tmp_path_factory.mktemp("multilabel")
    suite, plan = tiny_suite(SUPPORTING)
    ev = run_suite(suite, plan(SUPPORTING), out=out, device="cpu", report=False, quiet=True)
    return out, ev


def test_every_supporting_method_fits_and_scores_finite_metrics(grid):
    _, ev = grid
    assert ev.exit_code == 0 and not ev.summary.failed
    df = ev.metrics
    assert sorted(df["method"].unique()) == sorted(SUPPORTING)
    assert (df["status"] == "ok").all() and len(df) == 4 * len(SUPPORTING)  # id, shift, val, ood
    labelled = df[df["kind"] != "ood"]
    for key in ("nll", "brier", "ece", "accuracy", "subset_accuracy", "auroc_mean", "entropy"):
        assert np.isfinite(labelled[f"metrics.{key}"].astype(float)).all(), key
    assert np.isfinite(df[df["kind"] == "ood"]["metrics.auroc"].astype(float)).all()
    sampling = labelled[labelled["method"].isin(["mc_dropout", "deep_ensemble", "pbn", "mfvi", "ssvi"])]
    assert (sampling["metrics.mutual_information"].astype(float) >= 0).all()


def test_temperature_scaling_minimises_the_validation_bce(grid):
    """The fitted temperature's validation NLL (scikit-learn's log_loss x L on the MAP network's
    sigmoids) is no worse than at a temperature 20 % either side."""
    import json

    out, _ = grid
    from bench.models import build_model

    rec = next(json.loads(p.read_text()) for p in out.rglob("temperature_scaling*/seed0/id-clean-0.json"))
    t = rec["diagnostics"]["temperature"]
    ckpt = next(out.rglob("checkpoints/fitted/lenet_300_100/temperature_scaling*/seed0.pt"))
    net = build_model("lenet_300_100", (1, 8, 8), L)
    net.load_state_dict(torch.load(ckpt, weights_only=True)["method"]["model"])
    net.eval()
    vx, vy = bars(48, 1)
    with torch.no_grad():
        logits = net(vx).double().numpy()

    def val_nll(temp):
        p = 1 / (1 + np.exp(-logits / temp))
        return L * log_loss(vy.numpy().ravel(), p.ravel(), labels=[0, 1])

    assert val_nll(t) <= min(val_nll(t * 1.2), val_nll(t / 1.2)) + 1e-9
    assert t != pytest.approx(1.0)  # it moved


@pytest.mark.parametrize("name", REFUSING)
def test_unsupported_methods_are_refused_at_plan_time_with_their_reason(name):
    from methods import METHODS

    _, plan = tiny_suite([name])
    with pytest.raises(BenchError, match="does not support multilabel tasks") as e:
        plan([name])
    assert METHODS.get(name).UNSUPPORTED["multilabel"] in str(e.value)


def test_pbn_refuses_a_softmax_laplace_criterion_on_multilabel(tmp_path):
    from bench.checkpoints import MapCache
    from bench.training import TrainConfig
    from methods import METHODS, MethodContext
    from bench.models import build_model

    task, cfg = multilabel(L), TrainConfig(epochs=1, batch_size=32, lr=0.05)
    x, y = bars(32, 0)
    build = lambda dropout=0.0: build_model("lenet_300_100", (1, 8, 8), L, dropout=dropout)  # noqa: E731
    cache = MapCache(tmp_path / "map", {"model": "ml"}, build, task, x, y, cfg, torch.device("cpu"))
    ctx = MethodContext(task=task, build_model=build, train=cfg, device=torch.device("cpu"), seed=0,
                        map_cache=cache, num_train=len(x), work_dir=tmp_path / "work")
    with pytest.raises(BenchError, match="softmax-likelihood"):
        METHODS.get("pbn")(ctx, criterion="wasserstein").build_posterior(None)


def test_leaderboard_shows_the_prevalence_reference_and_hamming_accuracy(grid):
    from bench.leaderboard.board import build_ranked_board
    from bench.leaderboard.records import load_runs

    out, ev = grid
    df = load_runs([out])
    board = build_ranked_board(df[df["status"] == "ok"], "multilabel_tiny", "lenet_300_100", "custom", "shift.nll")
    titles = [c.title for c in board.columns]
    assert "ID AUROC (label mean)" in titles and "ID Hamming acc" in titles and "ID NLL" in titles
    assert board.reference_name.startswith("training label prevalence")
    ids = ev.metrics[ev.metrics["kind"] == "id"]
    _, ty = bars(96, 0)
    assert board.reference["id.nll"] == pytest.approx(ML.prevalence_reference(ty, bars(64, 2)[1])["nll"])
    assert board.reference["id.auroc_mean"] == 0.5 and len(ids)


def test_an_ood_set_evaluated_alone_predicts_the_id_set_for_its_scores(grid):
    """A resumed cell whose only pending set is OOD (the clean record exists) still scores OOD
    detection against the clean test set: the same AUROC as when both were evaluated together."""
    from bench.api import run_suite

    out, ev = grid
    before = ev.metrics.set_index(["method", "kind"]).loc[("deterministic", "ood"), "metrics.auroc"]
    rec = next(out.rglob("deterministic*/seed0/ood-bright*.json"))
    rec.unlink()
    suite, plan = tiny_suite(["deterministic"])
    again = run_suite(suite, plan(["deterministic"]), out=out, device="cpu", report=False, quiet=True)
    assert again.exit_code == 0 and again.summary.records == 1 and rec.exists()
    after = again.metrics.set_index(["method", "kind"]).loc[("deterministic", "ood"), "metrics.auroc"]
    assert after == pytest.approx(before)


def test_the_report_names_the_multilabel_columns_reference_and_definitions(grid, tmp_path):
    from bench.reporting import build_report

    out, _ = grid
    build_report(out, tmp_path, suites=["multilabel_tiny"])
    text = (tmp_path / "multilabel_tiny" / "README.md").read_text()
    assert "ID Hamming acc" in text and "ID AUROC (label mean)" in text and "subset acc" in text
    assert "training label prevalence for every example (reference)" in text
    assert "**Accuracy (Hamming)**" in text and "uniform predictor" not in text
    assert "Selective prediction" not in text  # no top-label confidence on multilabel
