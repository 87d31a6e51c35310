"""``benchmarks/method_coverage.py``: which methods have a row on a suite, and why the others have none.

Records written in the store's layout: a row that passes its checks, one that fails them (marked, not
method evidence), a method with records only at another configuration (no row: the command that makes
it), a method the suite's task refuses (the reason is the one the run's planner gives), and bad input."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench.config import method_label, resolve_plan
from bench.store import ResultsStore, config_hash
from bench.suites import SUITES
from methods import METHODS

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("method_coverage", ROOT / "benchmarks" / "method_coverage.py")
cov = importlib.util.module_from_spec(_spec)
sys.modules["method_coverage"] = cov
_spec.loader.exec_module(cov)
mc = cov.mc

SUITE, PROFILE, MODEL = "camvid_multilabel", "quick", "unet_presence"
#: a MAP network at rest over its last epochs (check map_converged)
AT_REST = {"map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}
#: a VI fit whose sigma stayed at its initial value while the KL pulls it (fails vi_moved, vi_stationarity)
NOT_LEARNED = {"sigma_change": {"median_ratio": 1.0},
               "train": {"rho_optimizer": "adam", "rho_lr": 0.01, "epochs": 3, "steps": 200, "num_train": 367,
                         "final_beta": 0.01, "kl_divisor": 367},
               "sigma_stationarity": {"residual": -0.9, "residual_se": 0.02}, **AT_REST}


def write(root, method: str, seeds=(0, 1), options=None, diagnostics=None, nll=2.0):
    cfg = mc.profile_config(SUITE, PROFILE, mc.Row(method, method, options or {}))
    chash = config_hash({"method": method, **cfg})
    store = ResultsStore(root)
    for seed in seeds:
        run = store.run_dir(SUITE, MODEL, method, chash, seed)
        store.write(run, {"status": "ok", "suite": SUITE, "profile": PROFILE, "task": "multilabel", "method": method,
                          "method_label": method_label(method, cfg, METHODS.get(method).defaults),
                          "method_config": cfg, "config_hash": chash, "model": MODEL, "seed": seed,
                          "train_config": {"schedule": "cosine", "batch_size": 16, "epochs": 6}, "num_labels": 11,
                          "finished_at": "2026-01-01T00:00:00+00:00", "kind": "id", "shift": "clean", "severity": 0,
                          "n": 233, "diagnostics": diagnostics or AT_REST, "reference": {"nll": 5.0},
                          "metrics": {"accuracy": 0.9, "nll": nll, "auroc_mean": 0.8, "brier": 0.1, "entropy": 2.0}})


def line(out: str, method: str) -> str:
    rows = [ln for ln in out.splitlines() if ln.startswith(f"| {method} | ")]
    assert len(rows) == 1, out
    return rows[0]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cov.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    write(root, "deterministic", seeds=(0, 1, 2))
    write(root, "deep_ensemble", seeds=(0,))
    write(root, "pbn", seeds=(0, 1), diagnostics=NOT_LEARNED)
    write(root, "mc_dropout", seeds=(0, 1), options={"p": 0.3})     # an ablation, not the profile's row
    return root


def test_rows_their_seeds_and_their_checks(results, capsys):
    code, out, _ = run(capsys, "--results", str(results), "--suite", SUITE)
    assert code == 0
    det = line(out, "deterministic")
    assert "`deterministic`, seeds 0, 1, 2 | pass | – | a row |" in det
    assert line(out, "deep_ensemble").endswith("| a row; one seed (a claim needs two or more) |")
    pbn = line(out, "pbn")      # its sigma did not learn: marked, never a plain row
    assert "✗`, seeds 0, 1 | ✗ vi_moved; vi_stationarity |" in pbn, pbn
    assert "not method evidence" in pbn and not pbn.endswith("| a row |")


def test_another_configuration_is_counted_not_read_as_the_row(results, capsys):
    code, out, _ = run(capsys, "--results", str(results), "--suite", SUITE)
    mcd = line(out, "mc_dropout")
    assert "| yes | – | – | 1 | not run here yet: `python -m bench run --suite camvid_multilabel --profile quick " \
           "--methods mc_dropout` |" in mcd, mcd
    # the command makes the configuration the table looks for
    plan = resolve_plan(SUITES.get(SUITE)(), PROFILE, ["mc_dropout"], {}, method_registry=METHODS)
    assert plan.methods["mc_dropout"][0] == mc.profile_config(SUITE, PROFILE, mc.Row("mc_dropout", "mc_dropout"))


@pytest.mark.parametrize("method", ["laplace_diag", "laplace_last_layer"])
def test_a_refused_method_gives_the_planners_reason(results, capsys, method):
    code, out, _ = run(capsys, "--results", str(results), "--suite", SUITE)
    ln = line(out, method)
    assert "refused when the run is planned (multilabel): " in ln
    why = ln.split("refused when the run is planned (multilabel): ", 1)[1].rstrip(" |")
    # what `python -m bench run --methods <method>` says when it plans the run
    plan = resolve_plan(SUITES.get(SUITE)(), PROFILE, ["deterministic", method], {}, method_registry=METHODS)
    assert method not in plan.methods and why in plan.skipped[method]


def test_every_registered_method_has_a_line(results, capsys):
    code, out, _ = run(capsys, "--results", str(results), "--suite", f"{SUITE},camvid_binary")
    for suite in (SUITE, "camvid_binary"):
        block = out.split(f"**{suite}**", 1)[1].split("\n\n", 2)[1]
        assert sorted(ln.split(" | ")[0][2:] for ln in block.splitlines()[2:]) == sorted(METHODS.names())


def test_a_suite_whose_data_cannot_be_had_says_so(tmp_path, capsys):
    code, out, _ = run(capsys, "--results", str(tmp_path), "--suite", "chestmnist")
    assert code == 0
    assert "not run here: it needs DATA_ROOT/chestmnist.npz" in line(out, "pbn")
    assert "refused when the run is planned" in line(out, "laplace_diag")


@pytest.mark.parametrize("argv", [["--suite", "nope"], ["--results", "/nonexistent/dir"],
                                  ["--suite", SUITE, "--profile", "nope"]])
def test_bad_input_exit_2(tmp_path, capsys, argv):
    argv = argv if "--results" in argv else ["--results", str(tmp_path), *argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and "method_coverage.py:" in err


def test_a_method_with_a_tuning_space_but_no_stored_choice_is_marked_untuned(results, capsys):
    """pbn and mc_dropout have tuning spaces and no stored choice here: their statuses say they ran at
    their defaults, with the tune command; deterministic has no space and no such note."""
    code, out, _ = run(capsys, "--suite", SUITE, "--results", str(results))
    assert code == 0
    pbn = line(out, "pbn")
    assert "at the method's defaults: `bench tune` has not chosen its" in pbn
    assert f"python -m bench tune --suite {SUITE} --profile {PROFILE} --methods pbn" in pbn
    assert "bench tune" not in line(out, "deterministic")


def test_a_tuned_method_is_read_at_its_stored_choice_and_not_marked_untuned(tmp_path, capsys):
    """A stored bench tune that chose mc_dropout's p: the row at that p is the profile's row, named as
    bench tune's choice, with no untuned note."""
    import json

    write(tmp_path, "mc_dropout", seeds=(0, 1), options={"p": 0.3})
    tuning = tmp_path / SUITE / "tuning" / f"{PROFILE}.json"
    tuning.parent.mkdir(parents=True)
    tuning.write_text(json.dumps({"suite": SUITE, "profile": PROFILE, "methods": {"mc_dropout": {"choices": [
        {"model": MODEL, "chosen": {"p": 0.3}, "chosen_config_hash": "x", "candidates": [], "at_edge": []}]}}}))
    code, out, _ = run(capsys, "--suite", SUITE, "--results", str(tmp_path))
    assert code == 0
    mcd = line(out, "mc_dropout")
    assert "(at bench tune's choice), seeds 0, 1" in mcd and "bench tune` has not chosen" not in mcd


def test_a_stored_choice_among_candidates_on_two_networks_is_named(tmp_path, capsys):
    """The stored choice of mc_dropout's p compared a candidate on one backbone file with one on another
    (their records' model identities differ): the row at that choice says the choice is not the protocol's."""
    import json

    write(tmp_path, "mc_dropout", seeds=(0, 1), options={"p": 0.3})
    store = ResultsStore(tmp_path)
    for p, net in ((0.3, "aaaa"), (0.1, "bbbb")):
        cfg = mc.profile_config(SUITE, PROFILE, mc.Row("mc_dropout", "mc_dropout", {"p": p}))
        h = f"h{net}"
        store.write(store.run_dir(SUITE, MODEL, "mc_dropout", h, 0), {
            "status": "ok", "suite": SUITE, "profile": PROFILE, "task": "multilabel", "method": "mc_dropout",
            "method_label": method_label("mc_dropout", cfg, METHODS.get("mc_dropout").defaults), "method_config": cfg,
            "config_hash": h, "model": MODEL, "seed": 0, "kind": "val", "shift": "clean", "severity": 0, "n": 10,
            "model_identity": {"backbone_sha256_16": net}, "finished_at": "2026-01-01T00:00:00+00:00",
            "metrics": {"nll": 1.0}})
    tuning = tmp_path / SUITE / "tuning" / f"{PROFILE}.json"
    tuning.parent.mkdir(parents=True)
    tuning.write_text(json.dumps({"suite": SUITE, "profile": PROFILE, "methods": {"mc_dropout": {"choices": [
        {"model": MODEL, "chosen": {"p": 0.3}, "chosen_config_hash": "haaaa", "at_edge": [],
         "candidates": [{"config_hash": "haaaa"}, {"config_hash": "hbbbb"}]}]}}}))
    code, out, _ = run(capsys, "--suite", SUITE, "--results", str(tmp_path))
    assert code == 0
    mcd = line(out, "mc_dropout")
    assert "(at bench tune's choice)" in mcd and "compared candidates on 2 different networks" in mcd
