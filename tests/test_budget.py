"""Budget trials (bench.budget, the check map_budget): a longer budget of the same recipe that ends
lower beyond the curves' noise on every seed marks every row trained at the shorter one; noise, one
seed, or a second fit of the shorter budget that is as good do not; on the kept records, CIFAR-10-C's
and CamVid's 12 epochs are short; camvid_binary's 12, rotated MNIST's 15 (60 on 1,500 images) and
MNIST-under-noise's 15 are not."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bench import budget as B
from bench import validity as V

ROOT = Path(__file__).resolve().parents[1]
SGD = {"optimizer": "sgd", "lr": 0.05, "schedule": "cosine", "batch_size": 128}


def _curve(final: float, epochs: int, wobble: float = 0.0) -> list[float]:
    """A validation curve falling linearly to ``final`` over its first third, then flat, alternating
    by +-``wobble`` over its second half (odd epochs up: it ends at ``final + wobble``)."""
    fall = max(1, epochs // 3)
    c = [final + 0.5 * max(0, fall - e) / fall for e in range(epochs)]
    return [v + (wobble if i % 2 else -wobble) * (i >= epochs // 2) for i, v in enumerate(c)]


def _run(method: str, seed: int, epochs: int, curve=None, label=None, **train) -> dict:
    cfg = {**SGD, **train, "epochs": epochs}
    diag = {"map_training": {"val_nll": curve}} if curve is not None else {}
    return {"suite": "cifar10c", "profile": "quick", "model": "resnet_small", "seed": seed, "kind": "id",
            "status": "ok", "method": method, "method_label": label or method,
            "config_hash": f"{method}-{sorted(cfg.items())}", "train_config": cfg, "data_config": {"n_per_cell": 1000},
            "diagnostics": diag, "metrics.nll": 1.0, "metrics.accuracy": 0.6}


def _verdicts(rows, by_label: bool = False) -> dict:
    df = V.attach_validity(pd.DataFrame(rows))
    return {(r["method_label" if by_label else "method"], r["train_config"]["epochs"], r["train_config"]["lr"],
             r["seed"]): r["validity"] for _, r in df.iterrows()}


def _budget_check(v: dict) -> dict | None:
    return next((c for c in v["checks"] if c["name"] == "map_budget"), None)


def test_a_longer_budget_that_ends_lower_on_every_seed_marks_every_row_trained_at_the_shorter():
    rows = [_run("deterministic", s, 12, _curve(1.00 + 0.01 * s, 12)) for s in (0, 1)]
    rows += [_run("deterministic", s, 30, _curve(0.90, 30)) for s in (0, 1)]
    rows += [_run("temperature_scaling", 0, 12, _curve(1.00, 12)),
             _run("temperature_scaling", 0, 12, _curve(1.00, 12), lr=0.01)]
    v = _verdicts(rows)
    ts = v[("temperature_scaling", 12, 0.05, 0)]
    check = _budget_check(ts)
    assert ts["status"] == V.FAILED and ts["reasons"][0].startswith("map_budget: 12 epochs are short")
    # by hand: seed 0 (1.00 - 0.90) / 1.00, seed 1 (1.01 - 0.90) / 1.01; curves smooth, so the 2 % limit
    nums = check["numbers"]
    assert nums["gain_min"] == pytest.approx(0.10) and nums["gain_max"] == pytest.approx(0.11 / 1.01)
    assert nums["limit"] == pytest.approx(V.PLATEAU_MAX_IMPROVEMENT) and nums["longer_epochs"] == 30
    assert v[("deterministic", 12, 0.05, 1)]["status"] == V.FAILED    # the MAP row itself, and every seed
    assert _budget_check(v[("deterministic", 30, 0.05, 0)]) is None   # the longest budget: nothing to judge it by
    assert _budget_check(v[("temperature_scaling", 12, 0.01, 0)]) is None  # another recipe: the trial is not its
    assert v[("temperature_scaling", 12, 0.01, 0)]["status"] == V.OK


def test_a_network_trained_another_way_for_a_short_budget_is_unverified_not_failed():
    rows = [_run("deterministic", s, 12, _curve(1.00, 12)) for s in (0, 1)]
    rows += [_run("deterministic", s, 30, _curve(0.90, 30)) for s in (0, 1)]
    rows += [_run("mfvi", 0, 12),  # its own loop and optimiser: no MAP training log
             _run("deterministic", 1, 12, _curve(0.95, 12), label="deterministic[optimizer=adam]")]
    for key in (("mfvi", 12, 0.05, 0), ("deterministic[optimizer=adam]", 12, 0.05, 1)):
        v = _verdicts(rows, by_label=True)[key]
        assert _budget_check(v)["status"] == V.NOT_MEASURED and v["status"] == V.UNVERIFIED
    rows[2:4] = [_run("deterministic", s, 30, _curve(0.99, 30)) for s in (0, 1)]  # 12 epochs now enough
    assert _budget_check(_verdicts(rows, by_label=True)[("mfvi", 12, 0.05, 0)])["status"] == V.NOT_APPLICABLE


def test_a_gain_within_the_curves_noise_or_on_one_seed_is_no_short_budget():
    wobble = 0.04  # alternating +-4 %: every second difference is 4 x wobble
    noisy = [_run("deterministic", s, 12, _curve(1.00, 12, wobble)) for s in (0, 1)]
    noisy += [_run("deterministic", s, 24, _curve(0.95, 24, wobble)) for s in (0, 1)]
    check = _budget_check(_verdicts(noisy)[("deterministic", 12, 0.05, 0)])
    # by hand: both end on an up-step (final + wobble); every second difference over the last half is 4 x wobble,
    # so the noise an epoch is 4 wobble / (0.6745 sqrt 6), relative to the lower end, and the limit sqrt 2 times it
    end12, end24 = 1.00 + wobble, 0.95 + wobble
    by_hand = math.sqrt(2) * 4 * wobble / (0.6745 * math.sqrt(6)) / end24
    assert check["status"] == V.PASS and check["numbers"]["gain_min"] == pytest.approx((end12 - end24) / end12)
    assert check["numbers"]["limit"] == pytest.approx(by_hand, rel=1e-9) and by_hand > 0.1 > 0.05 / end12

    one_seed = [_run("deterministic", 0, 12, _curve(1.00, 12)), _run("deterministic", 0, 30, _curve(0.80, 30))]
    check = _budget_check(_verdicts(one_seed)[("deterministic", 12, 0.05, 0)])
    assert check["status"] == V.PASS and f"at least {B.MIN_SEEDS} needed" in check["reason"]


def test_a_seed_fitted_twice_counts_its_best_network_at_the_shorter_budget():
    rows = [_run("deterministic", s, 12, _curve(f, 12)) for s in (0, 1) for f in (1.00, 0.93)]
    rows += [_run("deterministic", s, 30, _curve(0.92, 30)) for s in (0, 1)]
    check = _budget_check(_verdicts(rows)[("deterministic", 12, 0.05, 0)])
    assert check["status"] == V.PASS and check["numbers"]["gain_min"] == pytest.approx(0.01 / 0.93)


def test_a_control_or_a_network_without_its_curve_is_no_budget_trial():
    rows = [_run("deterministic", s, 12, _curve(1.00, 12)) for s in (0, 1)]
    rows += [_run("deterministic", s, 30, _curve(0.80, 30), label="deterministic[optimizer=adam]") for s in (0, 1)]
    rows += [_run("deterministic", s, 50) for s in (0, 1)]  # neither a validation curve nor a validation record
    assert _budget_check(_verdicts(rows)[("deterministic", 12, 0.05, 0)]) is None


def test_a_network_recorded_before_the_curves_counts_by_its_validation_record():
    rows = [_run("deterministic", s, 12) for s in (0, 1)]  # no curve: an older record
    rows += [{**r, "kind": "val", "metrics.nll": 1.00} for r in rows]
    rows += [_run("deterministic", s, 30, _curve(0.90, 30)) for s in (0, 1)]
    check = _budget_check(_verdicts(rows)[("deterministic", 12, 0.05, 1)])
    assert check["status"] == V.FAIL and check["numbers"]["gain_min"] == pytest.approx(0.10)


@pytest.mark.parametrize("suite, dirs, epochs, short", [
    ("cifar10c", ["docs/tuning-augmented", "docs/budget-trials"], 12, True),  # the augmented recipe (until 2026-12-06)
    ("cifar10c", ["docs/tuning", "docs/budget-trials"], 12, False),  # the quick profile since: not augmented
    ("camvid", ["docs/records", "docs/budget-trials"], 12, True),
    ("camvid_binary", ["docs/records", "docs/budget-trials"], 12, False),
    ("mnist_rotated", ["docs/tuning", "docs/budget-trials"], 15, False),
    ("mnist_rotated", ["docs/ablations", "docs/budget-trials"], 60, False),  # the Laplace ablations' 1,500 images
    ("mnist_noise", ["docs/ablations", "docs/budget-trials"], 15, False),
])
def test_the_kept_budget_trials(suite, dirs, epochs, short):
    from bench.store import load_records

    board = load_records(ROOT / dirs[0], suite)
    maps = board[(board["method"] == "deterministic") & (board["kind"] == "id")
                 & (board["method_label"] == "deterministic")]
    keys = {B.recipe_key(r["suite"], r["profile"], r["model"], r["train_config"], r["data_config"])
            for _, r in maps.iterrows() if r["train_config"]["epochs"] == epochs}  # the boards' recipes
    df = pd.concat([load_records(ROOT / d, suite) for d in dirs], ignore_index=True)
    trials = [t for (k, e), t in B.budget_trials(df).items() if e == epochs and k in keys]
    assert trials and all(t.short == short for t in trials)


def test_a_recipe_reads_the_suites_default_data_options():
    key = lambda data: B.recipe_key("cifar10c", "quick", "resnet_small", {**SGD, "epochs": 12}, data)  # noqa: E731
    assert key({"n_per_cell": 1000}) == key({"augment": True}) == key({"n_per_cell": 10, "corruptions": "all"})
    assert key({"augment": False}) != key({}) and key({}) != B.recipe_key(
        "cifar10c", "quick", "resnet_small", {**SGD, "epochs": 12, "lr": 0.1}, {})


def test_the_boards_map_row_is_the_network_the_methods_stand_on_not_a_longer_trial():
    from bench.leaderboard.board import map_label
    from bench.reporting.data import unique_labels

    rows = [{**_run("deterministic", s, e, _curve(1.0, e)), "finished_at": f"2026-12-0{1 + (e > 12)}"}
            for e in (12, 50) for s in (0, 1, 2)]  # the trial's 50-epoch networks: as many seeds, more recent
    rows += [{**_run("temperature_scaling", s, 12, _curve(1.0, 12)), "finished_at": "2026-12-01"} for s in (0, 1, 2)]
    df = pd.DataFrame(rows)
    df["label"] = unique_labels(df)
    assert map_label(df) == "deterministic [train.epochs=12]"


def test_a_method_on_the_map_network_is_judged_even_when_its_record_lacks_the_networks_log():
    rows = [_run("deterministic", s, 12, _curve(1.00, 12)) for s in (0, 1)]
    rows += [_run("deterministic", s, 30, _curve(0.90, 30)) for s in (0, 1)]
    rows += [_run("temperature_scaling", 0, 12), _run("vdp", 0, 12)]  # older records: no MAP training log
    v = _verdicts(rows)
    assert _budget_check(v[("temperature_scaling", 12, 0.05, 0)])["status"] == V.FAIL  # starts from the MAP network
    assert _budget_check(v[("vdp", 12, 0.05, 0)])["status"] == V.NOT_MEASURED        # its own, from scratch


def test_the_kept_trials_file_is_what_the_kept_records_give():
    import json

    now = json.loads(json.dumps(B.trials_document(B.KEPT_FROM, ROOT)))
    assert json.loads(B.KEPT.read_text()) == now, "stale: run python -m bench.budget --write"


def test_a_results_folder_without_a_trial_is_judged_by_the_kept_one():
    from bench.store import load_records

    # an augmented quick-profile run: its records alone
    board = load_records(ROOT / "docs/tuning-augmented", "cifar10c")
    ts = board[(board["method"] == "temperature_scaling") & (board["seed"] == 0)]
    v = V.attach_validity(ts)
    check = _budget_check(v[v["kind"] == "id"]["validity"].iloc[0])
    assert check["status"] == V.FAIL and check["numbers"]["epochs"] == 12 and "12 epochs are short" in check["reason"]


# -- a method's own training phase (PBN's VI phase): phase_budget --------------------------------------
def _pbn(seed: int, phase: int, val_nll: float, model: str = "resnet_small", **options) -> list[dict]:
    """A PBN run on the 12-epoch MAP network with a VI phase of ``phase`` epochs: its clean-test record
    (the phase in its training log) and its validation record."""
    cfg = {"beta_start": 0.01, "rho_lr": 0.1, "epochs": phase, **options}
    run = {**_run("pbn", seed, 12), "model": model, "method_config": cfg,
           "config_hash": f"pbn-{sorted(cfg.items())}", "diagnostics": {"train": {"epochs": phase}}}
    return [run, {**run, "kind": "val", "metrics.nll": val_nll}]


def _phase(rows) -> dict:
    df = V.attach_validity(pd.DataFrame(rows))
    df = df[df["kind"] == "id"]
    return {(r["method_config"]["epochs"], str(r["method_config"].get("criterion", "gradient")), r["seed"]):
            next((c for c in r["validity"]["checks"] if c["name"] == "phase_budget"), None)
            for _, r in df.iterrows()}


def test_a_longer_vi_phase_that_ends_lower_on_every_seed_marks_every_configuration_at_the_shorter():
    rows = [r for s in (0, 1) for r in _pbn(s, 2, 1.00 + 0.01 * s) + _pbn(s, 6, 0.95)]
    rows += _pbn(0, 2, 1.02, criterion="random")  # a control at the same phase: judged by the same trial
    v = _phase(rows)
    check = v[(2, "gradient", 0)]
    # by hand: seed 0 (1.00 - 0.95) / 1.00 = 5 %, seed 1 (1.01 - 0.95) / 1.01; no curve, so the 2 % limit
    assert check["status"] == V.FAIL and check["numbers"]["gain_min"] == pytest.approx(0.05)
    assert check["numbers"]["gain_max"] == pytest.approx(0.06 / 1.01) and check["numbers"]["longer_epochs"] == 6
    assert v[(2, "random", 0)]["status"] == V.FAIL
    assert v[(6, "gradient", 0)]["status"] == V.NOT_MEASURED  # 6 < the paper's 50, nothing longer


def test_a_longer_vi_phase_within_the_limit_or_on_one_seed_passes_the_shorter():
    within = [r for s in (0, 1) for r in _pbn(s, 2, 1.00) + _pbn(s, 6, 0.99 if s else 1.04)]
    assert _phase(within)[(2, "gradient", 0)]["status"] == V.PASS  # seed 0 gains 1 %, seed 1 loses
    one_seed = _pbn(0, 2, 1.00) + _pbn(0, 6, 0.80)
    assert _phase(one_seed)[(2, "gradient", 0)]["status"] == V.PASS  # one seed cannot judge (MIN_SEEDS)


def test_a_phase_below_the_papers_without_a_trial_is_unverified_and_at_or_beyond_it_is_not_judged():
    assert _phase(_pbn(0, 2, 1.0))[(2, "gradient", 0)]["status"] == V.NOT_MEASURED  # resnet_small: 50
    assert _phase(_pbn(0, 50, 1.0))[(50, "gradient", 0)]["status"] == V.NOT_APPLICABLE
    assert _phase(_pbn(0, 2, 1.0, model="unet_small"))[(2, "gradient", 0)] is None  # no paper figure: no check


def test_a_phase_trial_compares_a_configuration_with_itself_only():
    # the longer phase of another configuration (another rate) ends lower: not a trial of this one's phase
    rows = [r for s in (0, 1) for r in _pbn(s, 2, 1.00) + _pbn(s, 6, 0.80, rho_lr=0.05)]
    assert _phase(rows)[(2, "gradient", 0)]["status"] == V.NOT_MEASURED


def test_the_fits_table_lists_every_configurations_phases_once():
    """``bench.budget --fits``: each configuration's phases with their validation NLL per seed (the
    trials table keeps one trial per phase key); a fit kept in two folders shows once; --match filters."""
    rows = [r for s in (0, 1) for r in _pbn(s, 2, 1.00 + 0.01 * s) + _pbn(s, 6, 0.95)]
    rows += [r for s in (0, 1) for r in _pbn(s, 2, 0.90, rho_lr=0.05)]
    rows += _pbn(0, 2, 1.00)  # seed 0's 2-epoch fit kept twice (two folders)
    table = B.phase_fits_markdown(pd.DataFrame(rows), "pbn").splitlines()
    assert table[2:] == ["| resnet_small | quick | 12 | rho_lr=0.05 | 2 | 0: 0.9000, 1: 0.9000 |",
                         "| resnet_small | quick | 12 | rho_lr=0.1 | 2 | 0: 1.0000, 1: 1.0100 |",
                         "| resnet_small | quick | 12 | rho_lr=0.1 | 6 | 0: 0.9500, 1: 0.9500 |"]
    only = B.phase_fits_markdown(pd.DataFrame(rows), "pbn", {"rho_lr": "0.05"}).splitlines()
    assert only[2:] == ["| resnet_small | quick | 12 | – | 2 | 0: 0.9000, 1: 0.9000 |"]
    assert len(B.phase_fits_markdown(pd.DataFrame(rows), "mfvi").splitlines()) == 2
    with pytest.raises(ValueError, match="valid keys: .*profile_epochs.*rho_lr"):  # a typo is not an empty table
        B.phase_fits_markdown(pd.DataFrame(rows), "pbn", {"rho_rl": "0.05"})


def _from_scratch(method: str, model: str, epochs: int, seed: int = 0, val_nll: float = 1.0) -> list[dict]:
    """A VI method trained from a random initialisation for ``epochs`` (its phase is its whole training)."""
    run = {**_run(method, seed, 12), "model": model, "method_config": {"epochs": epochs},
           "config_hash": f"{method}-{epochs}", "diagnostics": {"train": {"epochs": epochs}}}
    return [run, {**run, "kind": "val", "metrics.nll": val_nll}]


@pytest.mark.parametrize("method, model, epochs, status", [
    ("mfvi", "lenet_300_100", 15, V.NOT_MEASURED),   # the PBN paper's VI baseline: 50 epochs (App. H.3)
    ("mfvi", "resnet18_pbn", 100, V.NOT_APPLICABLE),  # ResNet-18: 100
    ("ssvi", "resnet18_pbn", 50, V.NOT_MEASURED),    # the SSVI paper: ResNet-18 for 200 epochs (App. C)
    ("ssvi", "resnet18_cifar", 200, V.NOT_APPLICABLE),
    ("ssvi", "resnet_small", 12, None),              # a network the SSVI paper does not train: no figure
])
def test_the_vi_methods_trained_from_scratch_are_held_to_their_papers_epochs(method, model, epochs, status):
    df = V.attach_validity(pd.DataFrame(_from_scratch(method, model, epochs)))
    check = next((c for c in df[df["kind"] == "id"]["validity"].iloc[0]["checks"] if c["name"] == "phase_budget"),
                 None)
    assert (check and check["status"]) == status
    if status == V.NOT_MEASURED:
        assert check["numbers"]["paper_epochs"] == B.paper_epochs(method, model) > epochs


def test_a_phase_trial_of_a_method_trained_from_scratch_names_its_initialisations_not_map_networks():
    rows = [r for s in (0, 1) for r in _from_scratch("ssvi", "resnet_small", 12, s) +
            _from_scratch("ssvi", "resnet_small", 36, s, val_nll=0.9)]  # 10 % lower on both seeds: short
    df = V.attach_validity(pd.DataFrame(rows))
    run = df[(df["kind"] == "id") & (df["config_hash"] == "ssvi-12")]["validity"].iloc[0]
    check = next(c for c in run["checks"] if c["name"] == "phase_budget")
    assert check["status"] == V.FAIL and "from the same seeds' initialisations" in check["reason"]
    assert "MAP networks" not in check["reason"]


def test_a_trial_a_tables_records_hold_never_hides_a_stronger_kept_one(monkeypatch):
    """A table reads the kept trials (bench/budget_trials.json, over every kept folder) beside the trials
    its own records hold; per key the strongest speaks (bench.budget.trial_rank: short by the most, else
    over the most seeds), not the frame's because it is the frame's: a folder that holds a 60-epoch fit
    beside the 15-epoch ones must not replace the kept 120-epoch trial that finds 15 shorter by more.
    A weaker kept trial leaves the frame's in place."""
    phase_rows = [r for s in (0, 1) for r in _pbn(s, 2, 1.00) + _pbn(s, 6, 0.95)]  # the frame: 2 vs 6, 5 %
    map_rows = [_run("deterministic", s, 12, _curve(1.00, 12)) for s in (0, 1)]
    map_rows += [_run("deterministic", s, 30, _curve(0.90, 30)) for s in (0, 1)]  # the frame: 12 vs 30, 10 %
    (phase_key,) = B.phase_trials(pd.DataFrame(phase_rows))
    (map_key,) = B.budget_trials(pd.DataFrame(map_rows))
    strong = {k: B.BudgetTrial(k[1], 48, (0, 1), (0.30, 0.31), (0.02, 0.02)) for k in (phase_key, map_key)}
    weak = {k: B.BudgetTrial(k[1], 48, (0, 1), (0.01, -0.01), (0.02, 0.02)) for k in (phase_key, map_key)}
    for kept, longer in ((strong, (48, 48)), (weak, (6, 30)), ({}, (6, 30))):
        monkeypatch.setattr(B, "kept_phase_trials", lambda kept=kept: {phase_key: kept[phase_key]} if kept else {})
        monkeypatch.setattr(B, "kept_trials", lambda kept=kept: {map_key: kept[map_key]} if kept else {})
        phase = _phase(phase_rows)[(2, "gradient", 0)]
        budget = _budget_check(_verdicts(map_rows)[("deterministic", 12, 0.05, 0)])
        assert (phase["numbers"]["longer_epochs"], budget["numbers"]["longer_epochs"]) == longer
        assert phase["status"] == budget["status"] == V.FAIL
