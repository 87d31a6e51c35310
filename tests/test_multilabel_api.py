"""Multi-label tasks through ``bench.evaluate`` (task="multilabel"): (N, L) 0/1 targets give records
of task multilabel with the training-prevalence reference row (checked against a numpy count), an
OOD set is scored, and targets that are not (N, L) 0/1 values are refused with a BenchError naming
what is valid (bench run's exit code 2) before anything is trained."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import bench
from bench.errors import BenchError

L = 3


def bars(n, seed):
    """n 8x8 images whose label l is present (prevalence 0.4) when row 2l is bright."""
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, L, generator=g) < 0.4).float()
    x = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    for lab in range(L):
        x[:, 0, 2 * lab, :] += 2.0 * y[:, lab:lab + 1]
    return x, y


def net(in_shape, num_outputs):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(in_shape)), 32), nn.ReLU(), nn.Linear(32, num_outputs))


def _evaluate(tmp_path, **kw):
    args = dict(model=net, train=bars(96, 0), val=bars(48, 1), test=bars(64, 2), task="multilabel",
                methods=["deterministic", "mc_dropout"], out=tmp_path / "out", report=False, quiet=True,
                device="cpu", train_config={"epochs": 3, "batch_size": 32, "lr": 0.05},
                method_options={"mc_dropout": {"samples": 4}})
    return bench.evaluate(**{**args, **kw})


def test_a_multilabel_problem_runs_through_evaluate(tmp_path):
    # targets as uint8 numpy (as MedMNIST stores them) are accepted and become float 0/1
    tx, ty = bars(96, 0)
    ox = bars(32, 3)[0] * 5
    ev = _evaluate(tmp_path, train=(tx, ty.numpy().astype(np.uint8)), ood={"bright": ox})
    assert ev.exit_code == 0 and not ev.summary.failed
    df = ev.metrics
    assert sorted(df["method"].unique()) == ["deterministic", "mc_dropout"]
    assert (df["status"] == "ok").all()
    labelled = df[df["kind"] != "ood"]
    assert np.isfinite(labelled["metrics.auroc_mean"].astype(float)).all()
    assert np.isfinite(df[df["kind"] == "ood"]["metrics.auroc"].astype(float)).all()
    mi = labelled[labelled["method"] == "mc_dropout"]["metrics.mutual_information"].astype(float)
    assert (mi >= 0).all()
    recs = [json.loads(p.read_text()) for p in ev.records]
    assert {r["task"] for r in recs} == {"multilabel"} and {r["num_labels"] for r in recs} == {L}
    rec = next(r for r in recs if r["kind"] == "id" and r["method"] == "deterministic")
    # the reference row: each label's training prevalence for every example, by hand with numpy
    pi = ty.numpy().astype(np.float64).mean(0)
    f = bars(64, 2)[1].numpy().astype(np.float64).mean(0)
    assert rec["reference"]["prevalence"] == pytest.approx(pi)
    assert rec["reference"]["nll"] == pytest.approx(-(f * np.log(pi) + (1 - f) * np.log(1 - pi)).sum())
    assert rec["reference"]["auroc_mean"] == 0.5
    # the validity check compares with that reference, as on the suites
    check = next(c for c in rec["validity"]["checks"] if c["name"] == "informative")
    assert check["numbers"]["reference_nll"] == pytest.approx(rec["reference"]["nll"])
    assert "training-prevalence predictor" in check["reason"]


BAD = {
    "class indices": (torch.zeros(96, dtype=torch.long), r"\(n, L\) 0/1 values.*got shape \(96,\).*classification"),
    "not 0/1": (torch.full((96, L), 2.0), r"\(n, L\) 0/1 values.*neither 0 nor 1 \(e\.g\. 2\)"),
    "fractional": (torch.full((96, L), 0.5), r"neither 0 nor 1 \(e\.g\. 0\.5\)"),
    "nan": (torch.full((96, L), float("nan")), r"neither 0 nor 1"),
    "3-d": (torch.zeros(96, L, 2), r"got shape \(96, 3, 2\)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_targets_are_refused_naming_what_is_valid(tmp_path, case):
    y, words = BAD[case]
    with pytest.raises(BenchError, match=words):
        _evaluate(tmp_path, train=(bars(96, 0)[0], y))
    assert not (tmp_path / "out").exists()  # nothing written, nothing trained


def test_label_counts_must_agree(tmp_path):
    vx, vy = bars(48, 1)
    with pytest.raises(BenchError, match="same labels .* in every set"):
        _evaluate(tmp_path, val=(vx, vy[:, :2]))
    with pytest.raises(BenchError, match="num_classes=4, but the multilabel targets have 3 labels"):
        _evaluate(tmp_path, num_classes=4)
    with pytest.raises(BenchError, match="multilabel"):  # an unknown task names the valid ones
        _evaluate(tmp_path, task="multi-label")
    assert not (tmp_path / "out").exists()



def test_the_report_banner_names_hamming_accuracy_and_the_mean_auroc(tmp_path):
    """The MAP network's line in the report's banner on a multi-label evaluation: Hamming accuracy
    named as such, beside the prevalence predictor's, and the mean AUROC; numbers from the records."""
    ev = _evaluate(tmp_path, methods=["deterministic"], report=True, report_dir=tmp_path / "report")
    text = (tmp_path / "report" / "custom" / "README.md").read_text()
    rec = next(json.loads(p.read_text()) for p in ev.records if json.loads(p.read_text())["kind"] == "id")
    acc, auroc, ref = rec["metrics"]["accuracy"], rec["metrics"]["auroc_mean"], rec["reference"]["accuracy"]
    assert f"The MAP network reaches {acc:.1%} clean Hamming accuracy" in text
    assert f"predicting each label's training prevalence: {ref:.1%}" in text
    assert f"a clean mean AUROC over the labels of {auroc:.3f}" in text
    assert "% clean accuracy" not in text and "(chance " not in text
