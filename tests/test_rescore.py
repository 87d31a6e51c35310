"""Kept predictions (``bench run --keep-predictions``, bench.predictions) and ``bench rescore``
(bench.rescore): the stored predictive is the one scored, rescoring reproduces the metrics and adds
a registered one, cells without predictions are reported (and re-evaluated by a run with the
flag, not refitted), a changed file is refused with exit code 2, the size bound drops the samples
and says so."""
from __future__ import annotations

import hashlib
import json
import math
import shutil

import numpy as np
import pytest
import torch
from conftest import make_fake_mnist, small_mnist_run

from bench.cli import main
from bench.data import EvalSet
from bench.metrics import METRICS, adaptive_ece, classification_metrics, classwise_ece, ece
from bench.predictions import SCHEMA, PredictionPolicy, keep_predictions, labels_sha256, satisfies
from bench.predictive import ClassificationPredictive
from bench.rescore import ATOL, RTOL
from bench.store import load_records
from kept_files import npz_arrays, records_under

METHODS = "deterministic,mc_dropout"


def _run(data, out, methods=METHODS, *extra):
    return main(small_mnist_run(data, out, methods, n_train=300, epochs=1) + list(extra))


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    """One smoke run of MAP and MC dropout on fake MNIST, predictions kept: (data root, results)."""
    base = tmp_path_factory.mktemp("kept")
    data = make_fake_mnist(base / "data", n_train=300, n_test=100)
    assert _run(data, base / "results", METHODS, "--keep-predictions") == 0
    return data, base / "results"


@pytest.fixture
def results(kept_run, tmp_path):
    """A copy of the kept run's results that a test may change."""
    dst = tmp_path / "results"
    shutil.copytree(kept_run[1], dst)
    return dst


_records, _arrays = records_under, npz_arrays


def _close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= ATOL + RTOL * abs(b)


def test_the_kept_file_holds_the_predictive_the_metrics_were_computed_from(kept_run):
    _, root = kept_run
    recs = _records(root)
    assert len(recs) == 12  # 2 methods x (id, 3 rotations, OOD, validation)
    for path, rec in recs.items():
        p = rec["predictions"]
        assert p["kept"] and p["schema"] == SCHEMA and p["dtype"] == "float32"
        f = root / p["file"]
        assert f.parent == (root / path).parent and f.name.endswith(".predictions.npz")
        assert hashlib.sha256(f.read_bytes()).hexdigest() == p["sha256"]
        a = _arrays(root, rec)
        meta = json.loads(str(a.pop("meta")))
        assert {k: meta[k] for k in ("config_hash", "kind", "shift", "seed")} == \
               {k: rec[k] for k in ("config_hash", "kind", "shift", "seed")}
        probs = a["probs"]
        assert probs.dtype == np.float32 and probs.shape == (rec["n"], 10)
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)  # probabilities, not logits
        if rec["method"] == "mc_dropout":
            assert p["samples"] == "kept" and a["sample_probs"].shape == (5, rec["n"], 10)
            np.testing.assert_allclose(a["sample_probs"].mean(0), probs, atol=1e-6)
        else:
            assert p["samples"] == "none" and "sample_probs" not in a
        if rec["kind"] == "ood":
            assert "labels" not in a
            continue
        assert labels_sha256(a["labels"]) == p["labels_sha256"] == meta["labels_sha256"]
        # the stored probabilities and labels give the record's numbers (class order, row order)
        m, _ = classification_metrics(torch.from_numpy(probs), torch.from_numpy(a["labels"]).long(),
                                      None if "sample_probs" not in a else torch.from_numpy(a["sample_probs"]))
        assert m["nll"] == rec["metrics"]["nll"] and m["ece"] == rec["metrics"]["ece"]
        assert m["accuracy"] == rec["metrics"]["accuracy"]


def test_rescore_reproduces_the_metrics_and_adds_a_registered_one(results, capsys):
    before = _records(results)
    assert main(["rescore", "--results", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "12 record(s) of 2 cell(s) checked" in out and "reproduced: 12 of 12" in out
    assert _records(results) == before  # a dry run writes nothing; nor does a rescore that changes nothing
    assert main(["rescore", "--results", str(results)]) == 0
    assert _records(results) == before

    assert "adaptive_ece" not in before[next(iter(before))]["metrics"]
    assert main(["rescore", "--results", str(results), "--metrics", "adaptive_ece"]) == 0
    out = capsys.readouterr().out
    assert "reproduced: 12 of 12" in out and "added: adaptive_ece in 10 record(s)" in out
    after = _records(results)
    assert after.keys() == before.keys()
    for path, rec in after.items():
        old = before[path]
        assert rec["config_hash"] == old["config_hash"] and rec["predictions"] == old["predictions"]
        for k, v in old["metrics"].items():
            assert _close(rec["metrics"][k], v), (path, k, rec["metrics"][k], v)
        if rec["kind"] == "ood":
            assert "adaptive_ece" not in rec["metrics"] and "rescored" not in rec
            continue
        a = _arrays(results, rec)
        want = adaptive_ece(torch.from_numpy(a["probs"]), torch.from_numpy(a["labels"]).long())
        assert rec["metrics"]["adaptive_ece"] == want
        assert rec["rescored"]["added"] == ["adaptive_ece"] and rec["rescored"]["changed"] == {}
    df = load_records(results)  # the rewritten records load as before, with the new column
    assert len(df) == 12 and df["metrics.adaptive_ece"].notna().sum() == 10


def test_a_cell_without_predictions_is_reported_and_a_run_with_the_flag_adds_them(kept_run, results, capsys):
    data, _ = kept_run
    assert _run(data, results, "deterministic", "--seeds", "1") == 0  # no --keep-predictions
    plain = {k: v for k, v in _records(results).items() if "/seed1/" in k}
    assert len(plain) == 6 and not any("predictions" in r for r in plain.values())
    capsys.readouterr()
    assert main(["rescore", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "12 record(s) of 2 cell(s) rescored" in out
    assert "lacking kept predictions: 6 record(s) of 1 cell(s)" in out
    assert "lenet_300_100 deterministic seed 1: 6 set(s)" in out and "made without --keep-predictions" in out

    ckpt = next(results.rglob("fitted/lenet_300_100/deterministic-*/seed1.pt"))
    stamp = ckpt.stat().st_mtime_ns
    assert _run(data, results, "deterministic", "--seeds", "1", "--keep-predictions") == 0
    kept = {k: v for k, v in _records(results).items() if "/seed1/" in k}
    assert ckpt.stat().st_mtime_ns == stamp  # re-evaluated from the fitted checkpoint, not refitted
    for k, rec in kept.items():
        assert rec["predictions"]["kept"] and rec["metrics"] == plain[k]["metrics"]
        assert rec["cost"]["fit_time_s"] == plain[k]["cost"]["fit_time_s"]
    assert _run(data, results, "deterministic", "--seeds", "1", "--keep-predictions") == 0
    assert {k: v for k, v in _records(results).items() if "/seed1/" in k} == kept  # finished now: skipped
    assert main(["rescore", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "18 record(s) of 3 cell(s) rescored" in out and "lacking" not in out
    # redone without the flag: the records no longer name a file, and no stale file is left behind
    assert _run(data, results, "deterministic", "--seeds", "1", "--force") == 0
    assert not any("predictions" in r for k, r in _records(results).items() if "/seed1/" in k)
    assert not list(results.rglob("records/**/seed1/*.npz")) and len(list(results.rglob("*.npz"))) == 12


@pytest.mark.parametrize("damage", ["changed", "truncated"])
def test_a_changed_predictions_file_is_refused_with_exit_code_2(results, capsys, damage):
    before = {p: p.read_bytes() for p in results.rglob("*.json")}
    rec = next(r for k, r in _records(results).items() if "mc_dropout" in k and r["kind"] == "shift")
    f = results / rec["predictions"]["file"]
    if damage == "changed":  # a valid file with other numbers: only the sha256 tells
        a = _arrays(results, rec)
        a["probs"] = a["probs"][:, ::-1].copy()
        np.savez_compressed(f, **a)
    else:
        f.write_bytes(f.read_bytes()[:100])
    assert main(["rescore", "--results", str(results), "--metrics", "adaptive_ece"]) == 2
    err = capsys.readouterr().err
    assert "sha256" in err and "refused" in err and f.name in err
    assert {p: p.read_bytes() for p in results.rglob("*.json")} == before  # nothing rescored


def test_the_size_bound_drops_the_samples_and_says_so(kept_run, tmp_path, capsys):
    data, _ = kept_run
    out = tmp_path / "bounded"
    # 0.01 MiB: the mean predictive (100 x 10 float32 + labels) fits, its 5 samples do not
    assert _run(data, out, "mc_dropout", "--keep-predictions", "--predictions-max-mb", "0.01") == 0
    recs = _records(out)
    for rec in recs.values():
        p = rec["predictions"]
        assert p["kept"] and p["samples"] == "dropped" and p["max_mb"] == 0.01
        assert "sample_probs (5, 100, 10)" in p["samples_why"] and "--predictions-max-mb" in p["samples_why"]
        assert "sample_probs" not in _arrays(out, rec) and "sample_probs" not in p["arrays"]
        assert rec["metrics"]["mutual_information"] is not None  # scored from the samples all the same
    assert main(["rescore", "--results", str(out), "--metrics", "adaptive_ece"]) == 0
    text = capsys.readouterr().out
    assert "not recomputed, stored value kept: mutual_information in 6 record(s)" in text
    assert "not recomputed, stored value kept: auroc_mi in 1 record(s)" in text
    for k, rec in _records(out).items():
        assert rec["metrics"]["mutual_information"] == recs[k]["metrics"]["mutual_information"]
    # a run with a larger bound re-evaluates them to keep the samples
    assert _run(data, out, "mc_dropout", "--keep-predictions") == 0
    assert all(r["predictions"]["samples"] == "kept" for r in _records(out).values())


def _pred(n=50, k=4, s=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    sp = torch.softmax(torch.randn(s, n, k, generator=g) * 2, -1)
    return ClassificationPredictive.from_samples(sp), torch.randint(0, k, (n,), generator=g)


def _record(tmp_path, task="classification"):
    return {"suite": "s", "model": "m", "method": "x", "config_hash": "h", "seed": 0, "kind": "id", "shift": "clean",
            "severity": 0.0, "task": task, "n": 50, "num_classes": 4}


def test_the_bound_refuses_a_mean_predictive_over_it_float16_halves_and_segmentation_is_refused(tmp_path):
    pred, y = _pred()
    e = EvalSet("id", "clean", 0.0, torch.zeros(50, 1), y)
    rec_path = tmp_path / "r" / "id-clean-0.json"
    entry = keep_predictions(tmp_path, rec_path, _record(tmp_path), pred, e, PredictionPolicy(max_mb=1e-4))
    assert entry["kept"] is False and entry["reason"] == "bound" and "over the bound" in entry["why"]
    assert not (tmp_path / "r").exists()
    # a larger bound redoes it, the same one does not
    assert not satisfies({"predictions": entry}, tmp_path, PredictionPolicy(max_mb=1.0))
    assert satisfies({"predictions": entry}, tmp_path, PredictionPolicy(max_mb=1e-4))
    f32 = keep_predictions(tmp_path, rec_path, _record(tmp_path), pred, e, PredictionPolicy())
    with np.load(tmp_path / f32["file"]) as z:
        assert z["probs"].dtype == np.float32 and np.array_equal(z["probs"], pred.probs.numpy())
    f16 = keep_predictions(tmp_path, rec_path, _record(tmp_path), pred, e, PredictionPolicy(dtype="float16"))
    with np.load(tmp_path / f16["file"]) as z:
        assert z["probs"].dtype == np.float16 and z["sample_probs"].dtype == np.float16
        np.testing.assert_allclose(z["probs"], pred.probs.numpy(), atol=1e-3)
    seg = keep_predictions(tmp_path, rec_path, _record(tmp_path, "segmentation"), None, e, PredictionPolicy())
    assert seg["kept"] is False and seg["reason"] == "segmentation" and "per-pixel" in seg["why"]
    assert satisfies({"predictions": seg}, tmp_path, PredictionPolicy(max_mb=1e6))  # not redone by any bound
    assert not satisfies({}, tmp_path, PredictionPolicy())


def _ece_loop(conf, correct, bins):
    """ECE over the given index bins, written as plainly as possible."""
    return sum(abs(correct[b].sum() - conf[b].sum()) for b in bins if len(b)) / len(conf)


def test_the_registered_calibration_metrics_match_plain_definitions():
    assert {"adaptive_ece", "classwise_ece"} <= set(METRICS.names())
    pred, _ = _pred(n=997, k=5, seed=3)
    probs = pred.probs
    # labels drawn from the predictive: calibrated up to noise, bins off in both directions
    y = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(4)).squeeze(1)
    conf, arg = probs.max(-1)
    conf, correct = conf.double().numpy(), (arg == y).double().numpy()
    order = np.argsort(conf, kind="stable")
    assert math.isclose(adaptive_ece(probs, y), _ece_loop(conf, correct, np.array_split(order, 15)), rel_tol=1e-12)
    equal_width = [np.flatnonzero(np.clip(np.ceil(conf * 15) - 1, 0, 14) == b) for b in range(15)]
    assert math.isclose(ece(probs, y), _ece_loop(conf, correct, equal_width), rel_tol=1e-12)
    assert adaptive_ece(probs, y) != ece(probs, y)
    p, hit = probs.double().numpy(), np.eye(5)[y.numpy()]
    per_class = []
    for k in range(5):
        idx = np.clip(np.ceil(p[:, k] * 15) - 1, 0, 14)
        per_class.append(_ece_loop(p[:, k], hit[:, k], [np.flatnonzero(idx == b) for b in range(15)]))
    assert math.isclose(classwise_ece(probs, y), float(np.mean(per_class)), rel_tol=1e-12)


def test_bad_rescore_and_keep_predictions_arguments_exit_2(results, kept_run, tmp_path, capsys):
    assert main(["rescore", "--results", str(results), "--metrics", "no_such_metric"]) == 2
    assert "unknown metric 'no_such_metric'; valid metrics: adaptive_ece, classwise_ece" in capsys.readouterr().err
    assert main(["rescore", "--results", str(tmp_path / "absent")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["rescore", "--results", str(tmp_path / "empty")]) == 2
    assert "no evaluation records" in capsys.readouterr().err
    data, _ = kept_run
    assert _run(data, tmp_path / "r", "deterministic", "--predictions-max-mb", "1") == 2
    assert "--predictions-max-mb goes with --keep-predictions" in capsys.readouterr().err
    assert _run(data, tmp_path / "r", "deterministic", "--keep-predictions", "--predictions-max-mb", "0") == 2


def test_regression_predictions_rescore_to_the_same_numbers(tmp_path, capsys):
    out = tmp_path / "toy"
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
                 "--methods", "deterministic", "--set", "train.epochs=20", "--keep-predictions"]) == 0
    before = _records(out)
    for rec in before.values():
        assert sorted(rec["predictions"]["arrays"]) == ["mean", "targets", "var"]
    assert main(["rescore", "--results", str(out), "--metrics", "adaptive_ece"]) == 0
    assert "reproduced: 3 of 3" in capsys.readouterr().out
    assert _records(out) == before  # nothing to add to a regression record
