"""The result tables (benchmarks/vi_tables.py, used by laplace_tables.py): a seed enters a row
only when every shift set of the suite was evaluated, so a run still evaluating (or killed half
way) cannot shift a mean with the sets it happens to have."""
from __future__ import annotations

import sys
from pathlib import Path

from bench.cli import main
from tests.conftest import make_fake_mnist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _smoke_deterministic(tmp_path, seeds: str, *extra: str) -> Path:
    """The MAP network on fake MNIST at the smoke profile (``extra``: more ``bench run`` arguments), into
    ``tmp_path/results``, which it returns."""
    root = make_fake_mnist(tmp_path / "data")
    out = tmp_path / "results"
    assert main(["run", "--suite", "mnist_rotated", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                 "--methods", "deterministic", "--seeds", seeds, "--quiet", "--no-report", *extra]) == 0
    return out


def test_a_seed_with_a_missing_shift_set_is_left_out(tmp_path):
    from vi_tables import Runs

    out = _smoke_deterministic(tmp_path, "0,1")
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0, 1])
    (h,) = {h for h, _ in runs.configs("deterministic")}
    assert list(runs.per_seed(h)["seed"]) == [0, 1]
    shift = sorted(out.glob("mnist_rotated/records/*/*/seed1/shift-*.json"))
    shift[-1].unlink()  # seed 1 lost its last rotation
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0, 1])
    assert list(runs.per_seed(h)["seed"]) == [0]


def test_a_row_whose_fit_fails_its_validity_checks_is_marked_with_its_reason(tmp_path):
    """Every ablation table (vi_tables, laplace_tables, vdp_tables) marks a row whose seeds fail their
    validity checks (bench.validity) and lists the reasons under the table, rows failing the same
    checks together; a row whose seeds pass is left as it is."""
    from vi_tables import Runs, main_row

    from bench.validity import FAILED, OK

    out = _smoke_deterministic(tmp_path, "0,1")
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0, 1])
    (h,) = {h for h, _ in runs.configs("deterministic")}
    p = runs.per_seed(h)
    assert {"status", "validity"} <= set(p.columns)  # the verdict recomputed from each seed's clean-test record
    ok = p.assign(status=OK, validity=[{"status": OK, "reasons": []}] * len(p))
    assert main_row("MAP", ok, runs)[0] == "MAP" and runs.notes_text() == ""
    bad = ok.copy()
    bad["status"] = [FAILED, OK]
    bad["validity"] = [{"status": FAILED, "reasons": ["map_converged: still improving (made up)"]},
                       {"status": OK, "reasons": []}]
    assert main_row("MAP", bad, runs)[0] == "MAP ✗"
    assert runs.mark("MAP again", bad) == "MAP again ✗"
    notes = runs.notes_text()
    assert "- MAP ✗, MAP again ✗: map_converged (e.g. MAP ✗: map_converged: still improving (made up) (seed 0))" in notes


def test_a_table_keeps_to_one_training_set(tmp_path):
    """Records made with data settings of their own (``--set data.n_train=...``) share the method's
    configuration with the profile's records but not its training set: a table takes the profile's
    by default and the others only when asked (``--where data.n_train=...``), never both in one row."""
    from vi_tables import Runs, parse_where

    for extra in ([], ["--set", "data.n_train=1000"]):
        out = _smoke_deterministic(tmp_path, "0", *extra)
    profile = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0])
    small = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0], parse_where("data.n_train=1000"))
    assert {d["n_train"] for d in profile.df["data_config"]} == {2000}
    assert {d["n_train"] for d in small.df["data_config"]} == {1000}
    assert parse_where("data.n_train=1500,train.epochs=60,train.lr=0.01") == {
        "data.n_train": 1500, "train.epochs": 60, "train.lr": 0.01}


def test_paired_differences_only_between_runs_on_the_same_map_network():
    """Two fits of one seed's MAP network on different machines differ; a paired difference across
    them would mix the network change into the method's effect, so such seeds are left out."""
    import pandas as pd
    from vi_tables import paired

    a = pd.DataFrame({"seed": [0, 1], "x": [1.0, 2.0], "map_fp": ["m0", "m1"]})
    b = pd.DataFrame({"seed": [0, 1], "x": [0.5, 0.0], "map_fp": ["m0", "other"]})
    assert paired(a, b, "x", "{:+.1f}") == "+0.5"  # seed 1 started from another MAP network
    scratch = pd.DataFrame({"seed": [0, 1], "x": [0.0, 0.0], "map_fp": [None, None]})  # trained from scratch
    assert paired(a, scratch, "x", "{:+.1f}").startswith("+1.5 ± 0.7 (n 2)")
    # the weights' digest, where both records have it, decides too: the same curve, other weights
    a["map_sha"], b["map_sha"] = ["s0", "s1"], ["other", None]
    b["map_fp"] = ["m0", "m1"]
    assert paired(a, b, "x", "{:+.1f}") == "+2.0"  # seed 0: another network; seed 1: no digest in b


def test_the_size_table_shows_s_over_n_and_the_predictive_spread_of_each_row(tmp_path):
    """laplace_tables' size table puts beside each row what bears on the attainable-variance check:
    s / N from the fit's own subnet size and observation count, its validation logit-variance ratio
    (``predictive_spread``), the chosen prior, and the clean NLL's move from MAP's."""
    import argparse

    from laplace_tables import table_size
    from vi_tables import Runs

    out = _smoke_deterministic(tmp_path, "0", "--methods", "deterministic,subnet_laplace",
                               "--set", "subnet_laplace.n_subnet=20", "--set", "subnet_laplace.criterion=wasserstein,random")
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0])
    header, *rows = table_size(runs, argparse.Namespace())
    col = {name: i for i, name in enumerate(header)}
    assert [r[col["subnet size"]] for r in rows] == ["20", "20"]
    recs = runs.df[(runs.df["method"] == "subnet_laplace") & (runs.df["kind"] == "id")]
    map_nll = float(runs.df[(runs.df["method"] == "deterministic") & (runs.df["kind"] == "id")]["metrics.nll"].iloc[0])
    for row, crit in zip(rows, ("wasserstein", "random")):
        rec = next(r for _, r in recs.iterrows() if r["method_config"].get("criterion") == crit)
        d = rec["diagnostics"]
        assert row[col["s / N"]].startswith(f"{20 / d['num_observations']:.3g}")
        assert row[col["logit variance / MAP spread (val)"]].startswith(f"{d['predictive_spread']['ratio']:.3f}")
        assert row[col["Δ ID NLL vs MAP"]] == f"{rec['metrics.nll'] - map_nll:+.4f}"


def test_the_schemes_table_compares_masks_from_the_records_without_checkpoints(tmp_path):
    """laplace_tables' schemes table says whether PBN and the subnetwork Laplace used the same weights
    from each fit's recorded subnet digest, so it holds for kept records, which have no checkpoints:
    the magnitude criterion picks the same weights under both schemes."""
    import argparse
    import shutil

    from laplace_tables import table_schemes
    from vi_tables import Runs

    out = _smoke_deterministic(tmp_path, "0", "--methods", "deterministic,subnet_laplace,pbn",
                               "--set", "subnet_laplace.n_subnet=20", "--set", "subnet_laplace.criterion=magnitude",
                               "--set", "pbn.n_bayes=20", "--set", "pbn.criterion=magnitude")
    shutil.rmtree(out / "mnist_rotated" / "checkpoints")  # as kept records are
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0])
    header, *rows = table_schemes(runs, argparse.Namespace(n_subnet=20, subnet_fraction=None, swag_snapshot_every=None,
                                                            results=str(out), suite="mnist_rotated"))
    (row,) = [r for r in rows if r[0].startswith("largest")]
    assert row[header.index("same mask")] == "1 of 1 seeds"


def test_the_tables_take_a_method_without_a_valid_choice_at_its_defaults_not_at_every_value():
    """vi_tables' rows of a method whose stored tuning has no candidate passing its checks are at the
    method's defaults for every option its space tunes (one configuration: SSVI's prior 0.005 and
    sigma rate 0.01), not at whatever those options hold; a valid choice is taken as stored."""
    import argparse

    from vi_tables import tuned_base

    from methods import METHODS

    def runs(tuning):
        return argparse.Namespace(tuning=tuning, suite="mnist_rotated", profile="quick", model="lenet_300_100")

    d = METHODS.get("ssvi").defaults
    assert tuned_base(runs("no-such-dir"), "ssvi") == {"prior_scale": d["prior_scale"], "rho_lr": d["rho_lr"]}
    kept = str(Path(__file__).resolve().parents[1] / "docs" / "tuning")
    assert tuned_base(runs(kept), "mfvi") == {"beta_start": 0.01, "rho_lr": 0.05}


def test_a_table_of_another_objective_takes_its_fits_and_the_profiles_table_never_does(tmp_path, capsys):
    """A tune of another objective (``bench tune --set ssvi.epochs=2``) is tabled with ``--objective
    ssvi.epochs=2``: SSVI's rows at its fixed option and its choice. The profile's tables pin that option
    at the profile's value, so a fit of the other objective at the same tuned options never enters them
    beside the profile's own (two rows of one label, the first hash taken); an objective no tune stored
    exits 2 naming the stored ones."""
    import json

    from ssvi_criteria import of_objective
    from vi_tables import Runs, main as vi_main, tuned_base

    from bench.tuning import tuning_path
    from methods import METHODS

    root = make_fake_mnist(tmp_path / "data")
    out = tmp_path / "results"
    common = ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
              "--methods", "ssvi", "--seeds", "0", "--quiet", "--no-report"]
    assert main(common) == 0
    assert main(common + ["--set", "ssvi.epochs=2"]) == 0
    d = METHODS.get("ssvi").defaults
    chosen = {"prior_scale": d["prior_scale"], "rho_lr": d["rho_lr"]}  # both objectives chose the same options
    choice = {"model": "lenet_300_100", "chosen": chosen, "chosen_among_valid": True, "chosen_config_hash": "x"}
    probe = {"key": "rho_lr", "end": "largest", "values": {"rho_lr": 0.25}, "per_seed": {"0": 0.7}, "score": 0.7,
             "validity": "ok", "choice_score": 0.5, "beats_choice": False}
    path = tuning_path(tmp_path / "tuning", "mnist_rotated", "smoke")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"suite": "mnist_rotated", "profile": "smoke", "methods": {
        "ssvi": {"method": "ssvi", "choices": [choice]},
        "ssvi[epochs=2]": {"method": "ssvi", "fixed": {"epochs": 2}, "choices": [{**choice, "edge_probes": [probe]}]}}}))

    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0])
    runs.tuning = str(tmp_path / "tuning")
    runs.objective = {}
    (profile_row,) = runs.configs("ssvi", **tuned_base(runs, "ssvi"))
    assert profile_row[1]["epochs"] is None
    runs.objective = {"ssvi": {"epochs": 2}}
    (objective_row,) = runs.configs("ssvi", **tuned_base(runs, "ssvi"))
    assert objective_row[1]["epochs"] == 2

    # ssvi_criteria's runs: the objective's only, or every run but the other objective's
    fits = [{"method": "ssvi", "config": {"epochs": e}} for e in (None, 2)] + [{"method": "mfvi", "config": {}}]
    assert of_objective(fits, {"ssvi": {"epochs": 2}}, {}) == [fits[1]]
    assert of_objective(fits, {}, {"ssvi": [{"epochs": 2}]}) == [fits[0], fits[2]]

    args = ["--results", str(out), "--profile", "smoke", "--seeds", "0", "--tuning", str(tmp_path / "tuning")]
    capsys.readouterr()
    assert vi_main(args + ["--table", "main", "--objective", "ssvi.epochs=2"]) == 0
    line = capsys.readouterr().out
    assert "rows at the objective ssvi[epochs=2]: epochs 2, " in line
    assert "probed one step past its edges: rho_lr 0.25 scores 0.7 against the choice's 0.5, no better" in line
    # without its reference row (density 1; the default criterion) a table still lists the others
    from vi_tables import table_criteria, table_ssvi

    runs.objective = {}
    header, *rows = table_ssvi(runs)
    (row,) = rows
    assert row[0].startswith("0.1") and row[header.index("Δ ID acc vs density 1")] == "no fit of density 1"
    header, *rows = table_criteria(runs)
    assert [r[0].startswith("SNR(|theta|) (default)") for r in rows] == [True] and rows[0][3] == "-"
    assert vi_main(args + ["--table", "main", "--objective", "ssvi.epochs=3"]) == 2
    assert vi_main(args + ["--table", "controls", "--objective", "ssvi.epochs=2"]) == 2
