"""The SSVI capacity table (benchmarks/ssvi_capacity.py) on hand-made records: the gap is paired by
seed over the seeds both densities have, only the experiment's training subset and SSVI's default
options enter, a budget comes from the method's own epochs, and a failing fit is marked."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ssvi_capacity  # noqa: E402
from methods.ssvi import SSVI  # noqa: E402

OK = {"status": "ok", "reasons": []}
FAIL = {"status": "fail", "reasons": ["vi_stationarity: not stationary in sigma"]}


def _rows(model, density, epochs, seed, test_acc, val_acc, *, n_train=10_000, validity=OK, **options):
    cfg = {**SSVI.defaults, "density": density, "epochs": epochs, **options}
    base = {"method": "ssvi", "profile": "quick", "status": "ok", "data_config": {"n_train": n_train},
            "model": model, "config_hash": f"{model}-{density}-{epochs}-{sorted(options.items())}-{n_train}",
            "seed": seed, "method_config": cfg, "train_config": {"epochs": 12}, "validity": validity}
    return [{**base, "kind": "id", "metrics.accuracy": test_acc, "metrics.nll": 1.0},
            {**base, "kind": "val", "metrics.accuracy": val_acc, "metrics.nll": 1.1}]


def _table(monkeypatch, rows) -> str:
    import bench.store
    import bench.validity

    monkeypatch.setattr(bench.store, "load_records", lambda results, suite: pd.DataFrame(rows))
    monkeypatch.setattr(bench.validity, "attach_validity", lambda df: df)
    return ssvi_capacity.capacity_table(ssvi_capacity.load_cells("unused"))


def test_the_gap_is_paired_by_seed_over_the_seeds_both_densities_have(monkeypatch):
    rows = (_rows("resnet_small", 1.0, 36, 0, 0.60, 0.61) + _rows("resnet_small", 1.0, 36, 1, 0.62, 0.63)
            + _rows("resnet_small", 1.0, 36, 2, 0.90, 0.90)  # dense only: no pair, left out
            + _rows("resnet_small", 0.1, 36, 0, 0.55, 0.57) + _rows("resnet_small", 0.1, 36, 1, 0.58, 0.60))
    text = _table(monkeypatch, rows)
    row = next(line for line in text.splitlines() if line.startswith("| resnet_small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["resnet_small", "adam", "36", "0,1"]
    assert cells[8].startswith("-0.0450") and cells[9].startswith("-0.0350")  # (-0.05, -0.04), (-0.04, -0.03)
    assert cells[6].startswith("0.6100")  # the dense mean over the paired seeds, not over seed 2 too


def test_only_the_subset_and_the_default_options_enter_and_budgets_come_from_the_method(monkeypatch):
    rows = (_rows("resnet_small", 1.0, None, 0, 0.60, 0.60) + _rows("resnet_small", 0.1, None, 0, 0.50, 0.50)
            + _rows("resnet_small", 1.0, 72, 0, 0.70, 0.70) + _rows("resnet_small", 0.1, 72, 0, 0.60, 0.60)
            + _rows("resnet_small", 0.1, 72, 1, 0.10, 0.10, n_train=45_000)  # the full set: another experiment
            + _rows("resnet_small", 1.0, 72, 1, 0.70, 0.70, n_train=45_000)
            + _rows("resnet_small", 0.1, 72, 2, 0.10, 0.10, criterion="mu_abs")  # not the default criterion
            + _rows("resnet_small", 1.0, 72, 2, 0.70, 0.70, criterion="mu_abs")
            + _rows("resnet_small_x2", 1.0, 72, 0, 0.75, 0.75, rho_optimizer="sgd")
            + _rows("resnet_small_x2", 0.1, 72, 0, 0.74, 0.74, rho_optimizer="sgd", validity=FAIL))
    text = _table(monkeypatch, rows)
    lines = [line for line in text.splitlines() if line.startswith("| resnet_small")]
    assert [line.split("|")[1:5] for line in lines] == [
        [" resnet_small ", " adam ", " 12 ", " 0 "], [" resnet_small ", " adam ", " 72 ", " 0 "],
        [" resnet_small_x2 ", " sgd ", " 72 ", " 0 "]]
    assert "+0.0100 | " not in lines[1] and "-0.1000" in lines[1]
    assert "0.7400 ✗" in lines[2] and "0.7500 |" in lines[2]  # only the failing density is marked
    assert "- resnet_small_x2, sgd, 72 epochs, 10 % ✗: vi_stationarity: not stationary in sigma" in text


def test_no_records_names_the_command(monkeypatch):
    assert "scripts/ssvi_capacity_runs.sh" in _table(monkeypatch, [])


def test_the_ssvi_tables_take_the_tuned_configuration_when_asked():
    """benchmarks/ssvi_criteria.py --tuning: the rows are at what `bench tune` chose among fits that
    pass their checks (kept in docs/tuning: mean-field VI's constant KL weight at sigma rate 0.05), the
    defaults where nothing passed (SSVI at 15 epochs, since 2026-12-07) or nothing was tuned."""
    import ssvi_criteria

    from methods.mfvi import MFVI

    bases = ssvi_criteria.tuned_bases(str(Path(__file__).resolve().parents[1] / "docs" / "tuning"), "mnist_rotated", "quick", "lenet_300_100")
    assert bases["ssvi"] == SSVI.defaults
    assert bases["mfvi"] == {**MFVI.defaults, "beta_start": 0.01, "rho_lr": 0.05}
    assert ssvi_criteria.tuned_bases("no-such-dir", "mnist_rotated", "quick", "lenet_300_100") == {
        "ssvi": SSVI.defaults, "mfvi": MFVI.defaults}
