"""Kept predictions and ``bench rescore`` on a multi-label task: the file holds the per-label
probabilities (N, L), MC dropout's samples and the (N, L) targets; the record's metrics follow from
them (checked against scikit-learn); a rescore reproduces every metric within the rescore tolerance,
restores a changed one, keeps mutual information when the size bound dropped the samples."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, hamming_loss, roc_auc_score
from test_multilabel_api import bars, net

from bench.cli import main
from bench.predictions import SCHEMA, labels_sha256, satisfies, PredictionPolicy
from bench.rescore import ATOL, RTOL
from kept_files import npz_arrays, records_under

METHODS = ["deterministic", "mc_dropout"]
S = 4


def _run(out, *extra):
    """A tiny multi-label grid (bench.evaluate's suite) run as bench run does, with ``extra`` options."""
    from bench.api import build_suite
    from bench.cli import build_parser, run_plan

    sx, sy = bars(64, 2)
    suite, plan = build_suite(net, bars(96, 0), bars(48, 1), (sx, sy), shifts={"noise": {1: (sx + 0.5, sy)}},
                              ood={"bright": bars(32, 3)[0] * 5}, task="multilabel", methods=METHODS,
                              train_config={"epochs": 2, "batch_size": 32, "lr": 0.05}, name="mltiny",
                              method_options={"mc_dropout": {"samples": S}})
    args = build_parser().parse_args(["run", "--suite", suite.name, "--out", str(out), "--device", "cpu", "--no-report",
                                      "--loader-workers", "0", "--data-root", str(out), "--quiet", *extra])
    code, _ = run_plan(args, suite, plan, list(plan.methods))
    return code


_records, _arrays = records_under, npz_arrays


def _close(a, b):
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_close, a, b))
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= ATOL + RTOL * abs(b)


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlkept") / "results"
    assert _run(out, "--keep-predictions") == 0
    return out


@pytest.fixture
def results(kept, tmp_path):
    dst = tmp_path / "results"
    shutil.copytree(kept, dst)
    return dst


def test_the_kept_file_holds_the_multilabel_predictive_the_metrics_came_from(kept):
    recs = _records(kept)
    assert len(recs) == 8  # 2 methods x (id, shift, validation, OOD)
    for rec in recs.values():
        p = rec["predictions"]
        assert rec["task"] == "multilabel" and p["kept"] and p["schema"] == SCHEMA and p["dtype"] == "float32"
        a = _arrays(kept, rec)
        meta = json.loads(str(a.pop("meta")))
        assert meta["task"] == "multilabel" and meta["num_labels"] == 3
        probs = a["probs"]
        assert probs.dtype == np.float32 and probs.shape == (rec["n"], 3)
        assert not np.allclose(probs.sum(-1), 1.0)  # per-label sigmoids, not a softmax
        if rec["method"] == "mc_dropout":
            assert p["samples"] == "kept" and a["sample_probs"].shape == (S, rec["n"], 3)
            np.testing.assert_allclose(a["sample_probs"].mean(0), probs, atol=1e-6)
        else:
            assert p["samples"] == "none" and "sample_probs" not in a
        if rec["kind"] == "ood":
            assert "targets" not in a and "labels_sha256" not in p
            continue
        y = a["targets"]
        assert y.shape == (rec["n"], 3) and set(np.unique(y)) <= {0.0, 1.0}
        assert labels_sha256(y) == p["labels_sha256"] == meta["labels_sha256"]
        if rec["kind"] == "id":
            np.testing.assert_array_equal(y, bars(64, 2)[1].numpy())  # the test set's targets, in order
        # independent: scikit-learn on the stored arrays gives the record's numbers
        yi, pred = y.astype(int), (probs > 0.5).astype(int)
        assert rec["metrics"]["accuracy"] == pytest.approx(1 - hamming_loss(yi, pred))
        assert rec["metrics"]["subset_accuracy"] == pytest.approx(accuracy_score(yi, pred))
        both = [lab for lab in range(3) if 0 < yi[:, lab].sum() < len(yi)]
        assert rec["metrics"]["auroc_mean"] == pytest.approx(
            np.mean([roc_auc_score(yi[:, lab], probs[:, lab]) for lab in both]))


def test_rescore_reproduces_every_multilabel_metric(results, capsys):
    before = _records(results)
    assert main(["rescore", "--results", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "8 record(s) of 2 cell(s) checked" in out and "reproduced: 8 of 8" in out and "lacking" not in out
    assert main(["rescore", "--results", str(results)]) == 0
    assert _records(results) == before  # nothing changed: nothing rewritten

    # a stored value changed by hand (a scalar and a per-label list) is recomputed from the file
    key = next(k for k, r in before.items() if r["method"] == "mc_dropout" and r["kind"] == "shift")
    rec = json.loads((results / key).read_text())
    good = dict(rec["metrics"])
    rec["metrics"]["auroc_mean"] = 0.123
    rec["metrics"]["ece_per_label"] = [0.0, 0.0, 0.0]
    (results / key).write_text(json.dumps(rec))
    assert main(["rescore", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "reproduced: 7 of 8" in out and "changed: auroc_mean in 1 record(s)" in out
    assert f"changed: ece_per_label in 1 record(s), max |delta| {max(good['ece_per_label']):.3g}" in out
    fixed = json.loads((results / key).read_text())
    assert set(fixed["rescored"]["changed"]) == {"auroc_mean", "ece_per_label"}
    for k, v in good.items():
        assert _close(fixed["metrics"][k], v), k


def test_the_size_bound_drops_multilabel_samples_and_keeps_mutual_information(tmp_path, capsys):
    out = tmp_path / "bounded"
    # 0.003 MiB (3,145 bytes): 64 x 3 float32 probabilities and targets fit (1,536 bytes), 4 samples do not
    assert _run(out, "--keep-predictions", "--predictions-max-mb", "0.003") == 0
    recs = _records(out)
    ids = [r for r in recs.values() if r["kind"] == "id" and r["method"] == "mc_dropout"]
    assert ids and ids[0]["predictions"]["samples"] == "dropped"
    assert "sample_probs (4, 64, 3)" in ids[0]["predictions"]["samples_why"]
    assert main(["rescore", "--results", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not recomputed, stored value kept: mutual_information" in text
    for k, rec in _records(out).items():
        assert rec["metrics"].get("mutual_information") == recs[k]["metrics"].get("mutual_information")
        if rec["method"] == "mc_dropout" and rec["kind"] != "ood":
            assert rec["metrics"]["mutual_information"] > 0


def test_a_multilabel_record_refused_by_older_code_is_redone():
    rec = {"task": "multilabel", "predictions": {"kept": False, "reason": "segmentation", "why": "old"}}
    assert not satisfies(rec, ".", PredictionPolicy())
    assert satisfies({**rec, "task": "segmentation"}, ".", PredictionPolicy())


def test_a_file_that_does_not_fit_the_records_labels_is_refused(results, capsys):
    """The shape check reads a multilabel record's label count (num_labels): a record that says 4
    labels for a file of 3 is refused with exit code 2, nothing rescored."""
    key, rec = next((k, r) for k, r in _records(results).items() if r["kind"] == "id")
    (results / key).write_text(json.dumps({**rec, "num_labels": 4}))
    before = {p: p.read_bytes() for p in results.rglob("*.json")}
    assert main(["rescore", "--results", str(results)]) == 2
    assert "do not fit the record" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in results.rglob("*.json")} == before
