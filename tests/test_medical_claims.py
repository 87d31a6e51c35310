"""``benchmarks/medical_claims.py``: the medical PBN paper's claims against records written here in the
store's layout. A claim the records support, one they contradict, one whose PBN row fails its
validity checks (never a verdict, whatever its numbers say), one with no records (the command that
makes them, which resolves to the configuration the table looks for), and bad input (exit 2)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from bench.config import method_label
from bench.store import ResultsStore, config_hash
from methods import METHODS

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("medical_claims", ROOT / "benchmarks" / "medical_claims.py")
mc = importlib.util.module_from_spec(_spec)
sys.modules["medical_claims"] = mc
_spec.loader.exec_module(mc)

SUITE, PROFILE, MODEL = "camvid_multilabel", "quick", "unet_presence"
SEEDS = (0, 1, 2)
TRAIN = {"schedule": "cosine", "batch_size": 16, "epochs": 6}
#: a MAP network whose validation NLL is at rest over its last epochs (check map_converged)
AT_REST = {"map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}


def vi_diag(median_ratio: float, residual: float) -> dict:
    """A VI fit's diagnostics: sigma moved x``median_ratio`` (log 0.41 of Adam's ceiling 0.01 x 200
    x 0.5 = 1.0 at 1.5) and the objective's relative gradient in sigma ``residual``."""
    return {"sigma_change": {"median_ratio": median_ratio},
            "train": {"rho_optimizer": "adam", "rho_lr": 0.01, "epochs": 3, "steps": 200, "num_train": 367,
                      "final_beta": 0.01, "kl_divisor": 367,
                      "epoch_stats": [{"val_nll": v} for v in AT_REST["map_training"]["val_nll"]]},  # vi_converged
            "sigma_stationarity": {"residual": residual, "residual_se": 0.02}, **AT_REST}


LEARNED = vi_diag(1.5, 0.05)        # passes vi_rate_limit, vi_moved, vi_stationarity
NOT_LEARNED = vi_diag(1.0, -0.9)    # sigma stayed at its initial value, only the KL acts on it

#: clean-test Hamming accuracy per row and seed: PBN 1 % above the deterministic network by 0.02 on
#: every seed (M2 supported), the fully Bayesian network above PBN by 0.05 (M3 contradicted), the
#: ensemble within 0.002 of PBN (M1: no worse than the 0.01 margin, supported)
ACCURACY = {"pbn": [0.900, 0.910, 0.905], "deterministic": [0.880, 0.889, 0.886],
            "mfvi": [0.950, 0.961, 0.954], "deep_ensemble": [0.901, 0.912, 0.905]}
ROWS = {"pbn": mc.PBN_1, "deterministic": mc.DETERMINISTIC, "mfvi": mc.FULL_VI, "deep_ensemble": mc.ENSEMBLE}


def write(root, method: str, seeds=SEEDS, pbn_diag=LEARNED, row=None, accuracy=None, network=None, map_shas=None):
    """``network``: the records' model identity (a backbone digest), part of the cell's identity;
    ``map_shas``: per seed, the weights' digest of the MAP network the run started from."""
    row = row or ROWS[method]
    cfg = mc.profile_config(SUITE, PROFILE, row)
    chash = config_hash({"method": method, **cfg, **({"model_identity": network} if network else {})})
    store = ResultsStore(root)
    diag = pbn_diag if method in ("pbn", "mfvi") else AT_REST
    for seed in seeds:
        acc = (accuracy or ACCURACY[method])[seed]
        base = {"status": "ok", "suite": SUITE, "profile": PROFILE, "task": "multilabel", "method": method,
                "method_label": method_label(method, cfg, METHODS.get(method).defaults), "method_config": cfg,
                "config_hash": chash, "model": MODEL, "seed": seed, "train_config": TRAIN, "num_labels": 11,
                "finished_at": "2026-01-01T00:00:00+00:00",
                **({"model_identity": {"backbone_sha256_16": network}} if network else {})}
        run = store.run_dir(SUITE, MODEL, method, chash, seed)
        d = diag if map_shas is None else {**diag, "map_training": {**diag["map_training"],
                                                                     "network_sha": map_shas[seed]}}
        store.write(run, {**base, "kind": "id", "shift": "clean", "severity": 0, "n": 233, "diagnostics": d,
                          "reference": {"nll": 5.0},
                          "metrics": {"accuracy": acc, "nll": 2.0, "auroc_mean": 0.8, "brier": 0.1 - acc / 10,
                                      "entropy": 2.0}})
        # a corrupted cell: not the clean test set the claims read
        store.write(run, {**base, "kind": "shift", "shift": "fog", "severity": 5, "n": 60,
                          "metrics": {"accuracy": 0.1, "nll": 9.0, "auroc_mean": 0.5, "brier": 0.5, "entropy": 5.0}})


def tune_at_the_profile(root, methods=("pbn", "mfvi")):
    """A stored ``bench tune`` that chose, for each of ``methods``, the profile's own values of its swept
    options: the rows keep their configuration and stand at the protocol's choice."""
    from bench.suites import SUITES
    from bench.tuning import options_of, space_of, write_tuning

    entries = {}
    for method in methods:
        cfg = mc.profile_config(SUITE, PROFILE, mc.Row(method, method))
        chosen = {o: cfg[o] for k in space_of(method, SUITES.get(SUITE)()) for o in options_of(k)}
        entries[method] = {"space": {}, "configurations": 4, "choices": [
            {"model": MODEL, "chosen": chosen, "seeds": [0], "candidates": [], "chosen_config_hash": config_hash(
                {"method": method, **mc.profile_config(SUITE, PROFILE, mc.Row(method, method, chosen))})}]}
    write_tuning(root, SUITE, PROFILE, entries, {})


def line(out: str, key: str) -> str:
    rows = [ln for ln in out.splitlines() if ln.startswith(f"| {key}: ")]
    assert len(rows) == 1, out
    return rows[0]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = mc.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """Every row passes its checks; seeds 0-1 in one directory and seed 2 in another (pooled)."""
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    for method in ACCURACY:
        write(a, method, seeds=(0, 1))
        write(b, method, seeds=(2,))
    tune_at_the_profile(a)
    return a, b


def test_supported_and_contradicted_claims(learned, capsys):
    code, out, _ = run(capsys, "--results", str(learned[0]), str(learned[1]), "--suite", SUITE)
    assert code == 0
    m2 = line(out, "M2")
    assert m2.endswith("| verdict: supported |")
    assert "seeds 0, 1, 2" in m2 and "gain PBN 1 % − deterministic +0.0200," in m2
    assert "paired over seeds 0, 1, 2" in m2
    assert "PBN 1 % 0.9050 ± 0.0050 (3 seeds)" in m2       # the clean test set only, not the corrupted cell
    m3 = line(out, "M3")
    assert m3.endswith("| verdict: contradicted |") and "gain PBN 1 % − fully Bayesian -0.0500," in m3
    assert line(out, "M1").endswith("| verdict: supported |")      # within the 0.01 margin of the ensemble
    # PBN 20 % was not run: its command, with the option that makes it
    m8 = line(out, "M8")
    assert "not run here yet: `python -m bench run --suite camvid_multilabel --profile quick --methods pbn " \
           "--set pbn.r_bayes=0.2`" in m8 and "verdict:" not in m8


def test_the_summary_sorts_every_claim_by_its_tables_verdict(learned, capsys):
    """The README's summary (``--summary``): each claim under the outcome its full line gives, the
    decided ones with their text, so that no prose retypes a verdict."""
    results = ["--results", str(learned[0]), str(learned[1]), "--suite", SUITE]
    _, full, _ = run(capsys, *results)
    code, out, _ = run(capsys, *results, "--summary")
    assert code == 0
    head, _, row = out.splitlines()
    columns = [c.strip() for c in head.strip("|").split("|")][1:]
    cells = dict(zip(columns, [c.strip() for c in row.strip("|").split("|")][1:]))
    assert row.startswith(f"| {SUITE} (quick) |")
    assert cells["supported"].startswith("M1 (1 % Bayesian is as accurate as a 5-member ensemble); M2 (")
    assert cells["contradicted"].startswith("M3 (1 % Bayesian is more accurate than the fully Bayesian network)")
    listed = {}
    for column, text in cells.items():
        for key in re.findall(r"(?:^|[;,] )([MSC]\d+)\b", text):
            listed[key] = column
    for c in mc.claims_of(SUITE):
        verdict = line(full, c.key).rsplit("|", 2)[1].strip()
        assert listed[c.key] == mc.outcome(verdict), (c.key, verdict)
    assert listed["M8"] == "not run here yet"


def test_a_row_failing_its_checks_is_never_a_verdict(tmp_path, capsys):
    for method in ACCURACY:
        write(tmp_path, method, pbn_diag=NOT_LEARNED if method == "pbn" else LEARNED)
    code, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert code == 0
    for key in ("M1", "M2", "M3", "M4", "M5", "M6", "M7"):   # every claim PBN 1 % takes part in
        ln = line(out, key)
        assert "not a verdict: PBN 1 %: vi_moved: sigma stayed at its initial value" in ln, ln
        assert "verdict: supported" not in ln and "verdict: contradicted" not in ln
        assert "PBN 1 %: `pbn[beta_start=0.01,epochs=12,lr=0.005,rho_lr=0.1] ✗`, seeds 0, 1, 2" in ln   # the profile's PBN, marked
    # the numbers are still shown (M2's would read as supported)
    assert "gain PBN 1 % − deterministic +0.020" in line(out, "M2")
    assert "verdict: supported" not in out and "verdict: contradicted" not in out


def write_camvid_cost(root, seeds=SEEDS):
    """camvid (the suite camvid_binary shares its network and profile with): PBN took 600 s to train
    per seed and 0.1 s per image to predict on 100 images: 610 s a seed."""
    store = ResultsStore(root)
    for seed in seeds:
        run = store.run_dir("camvid", "unet_small", "pbn", "abc", seed)
        store.write(run, {"status": "ok", "suite": "camvid", "profile": PROFILE, "method": "pbn", "model": "unet_small",
                          "method_label": "pbn", "config_hash": "abc", "seed": seed, "kind": "id", "shift": "clean",
                          "severity": 0, "n": 100, "task": "segmentation",
                          "cost": {"train_time_s": 600.0, "predict_time_per_example_s": 0.1}})


def test_no_records_prints_the_commands_that_make_them(tmp_path, capsys):
    write_camvid_cost(tmp_path)
    code, out, _ = run(capsys, "--results", str(tmp_path), "--suite", "camvid_binary")
    assert code == 0
    s8 = line(out, "S8")
    assert "PBN 1 % squared: no records; PBN 1 %: no records" in s8
    assert ("not run here yet: `python -m bench run --suite camvid_binary --profile quick --methods pbn` and "
            "`python -m bench run --suite camvid_binary --profile quick --methods pbn --set pbn.squared=true`") in s8
    # what it costs, from camvid's records of the same network and profile: 3 seeds x 610 s
    assert "(~0.5 h for 3 seeds: pbn ~10 min per seed, training with its MAP network and evaluation, as " \
           "camvid's quick records" in s8
    assert "`python -m bench run --suite camvid_binary --profile quick --methods pbn --set "\
           "pbn.class_weights=median_frequency`" in line(out, "S7")
    assert "--methods pbn,deep_ensemble`" in line(out, "S1")
    assert "verdict:" not in out.split("How each claim")[0]


@pytest.mark.parametrize("row", [mc.PBN_1_SQUARED, mc.PBN_1_WEIGHTED, mc.PBN_20, mc.ENSEMBLE, mc.FINE_TUNE_ONLY,
                                 mc.RANDOM_SUBNET])
def test_the_printed_command_makes_the_configuration_the_table_looks_for(row):
    """What ``--set`` gives the run (bench.config.parse_sets, resolve_plan) is the row's configuration."""
    import shlex

    from bench.config import parse_sets, resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    argv = shlex.split(mc.command("camvid_binary", PROFILE, [row]).strip("`"))
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    methods = argv[argv.index("--methods") + 1].split(",")
    plan = resolve_plan(SUITES.get("camvid_binary")(), PROFILE, methods, parse_sets(sets), method_registry=METHODS)
    cfg = plan.methods[row.method][0]
    assert cfg == mc.profile_config("camvid_binary", PROFILE, row)
    assert all(cfg[k] == v for k, v in row.options.items())


def test_records_of_other_options_are_used_but_marked(tmp_path, capsys):
    """A configuration that matches the row's own options but not the profile's (here PBN at another
    learning rate) stands in for the row, and says so."""
    other = mc.Row("PBN 1 %", "pbn", {**mc.PBN_1.options, "lr": 0.01})
    write(tmp_path, "pbn", row=other)
    write(tmp_path, "deterministic")
    tune_at_the_profile(tmp_path)
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    # PBN stands at bench tune's choice (here the profile's values), which the lr-0.01 records are not
    assert "not the options bench tune chose" in line(out, "M2") and line(out, "M2").endswith("| verdict: supported |")


def test_unknown_suite_or_results_directory_exit_2(tmp_path, capsys):
    code, out, err = run(capsys, "--suite", "cifar10c", "--results", str(tmp_path))
    assert code == 2 and "unknown suite(s) cifar10c" in err and "camvid_binary" in err and not out
    code, out, err = run(capsys, "--results", str(tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in err and not out
    code, out, err = run(capsys, "--suite", SUITE, "--profile", "nope", "--results", str(tmp_path))
    assert code == 2 and "no profile 'nope'" in err


def test_a_tuned_method_is_read_and_asked_for_at_its_choice(tmp_path, capsys):
    """Where ``bench tune`` stored a choice for PBN, every PBN row (the 1 % row and its 20 % ablation)
    is read at that choice: the profile's configuration, also present, is not the row, and the
    command of a missing row carries the chosen options."""
    from bench.tuning import write_tuning

    chosen = {"beta_start": 0.2, "rho_lr": 0.05}   # not the profile's
    tuned = mc.with_tuned(mc.PBN_1, {"pbn": chosen})
    assert tuned.options == {**chosen, **mc.PBN_1.options} and tuned.tuned == chosen
    # the profile's PBN, its sigma not learned (never a verdict), beside the tuned one, which learned it
    write(tmp_path, "pbn", pbn_diag=NOT_LEARNED, row=mc.PBN_1)
    write(tmp_path, "pbn", row=tuned)
    write(tmp_path, "deterministic")
    choice = {"model": MODEL, "chosen": chosen, "chosen_config_hash": config_hash(
        {"method": "pbn", **mc.profile_config(SUITE, PROFILE, tuned)}), "seeds": [0], "candidates": []}
    write_tuning(tmp_path, SUITE, PROFILE, {"pbn": {"space": {}, "configurations": 4, "choices": [choice]}}, {})
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert m2.endswith("| verdict: supported |") and "rho_lr=0.05" in m2 and "✗" not in m2
    assert "Tuned by `bench tune`" in out and "pbn: beta_start 0.2, rho_lr 0.05" in out
    m8 = line(out, "M8")
    assert "--set pbn.r_bayes=0.2" in m8 and "--set pbn.rho_lr=0.05" in m8 and "--set pbn.beta_start=0.2" in m8
    # without the stored choice the profile's configuration is the row again: not a verdict
    (tmp_path / SUITE / "tuning" / f"{PROFILE}.json").unlink()
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert "not a verdict" in line(out, "M2")


def test_one_seed_on_a_side_decides_nothing(tmp_path, capsys):
    """Rows that pass their checks with one seed each: the means are shown, no verdict is given."""
    write(tmp_path, "pbn", seeds=(0,))
    write(tmp_path, "deterministic", seeds=(0,))
    tune_at_the_profile(tmp_path)
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert m2.endswith("| no verdict yet: fewer than two seeds on a side (the seed noise is unknown) |")
    assert "PBN 1 % 0.900 (1 seed)" in m2 and "verdict:" not in m2


#: PBN's fine-tuning-only control as its records hold it: no stochastic weight, no sigma to check
NO_STOCHASTIC = {"k": 0, "train": {"epochs": 12, "steps": 276, "num_train": 367}, **AT_REST}


@pytest.mark.parametrize("control_accuracy, verdict", [
    ([0.880, 0.889, 0.886], "verdict: supported"),       # PBN above its pipeline without VI on every seed
    ([0.901, 0.909, 0.906], "verdict: not separable"),   # the extra fine-tuning gives the same accuracy
])
def test_the_fine_tuning_control_stands_beside_the_claim_against_the_deterministic_network(
        tmp_path, capsys, control_accuracy, verdict):
    """C1 reads PBN against the same pipeline with no stochastic weight (``n_bayes=0``), a row with
    no sigma whose VI checks do not apply: a verdict is possible, and M2 can be supported while C1
    says the gain is the extra training's."""
    write(tmp_path, "pbn")
    write(tmp_path, "deterministic")
    write(tmp_path, "pbn", row=mc.FINE_TUNE_ONLY, pbn_diag=NO_STOCHASTIC, accuracy=control_accuracy)
    tune_at_the_profile(tmp_path)
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |")
    c1 = line(out, "C1")
    assert c1.endswith(f"| {verdict} |"), c1
    assert "fine-tuning only: `pbn[beta_start=0.01,epochs=12,lr=0.005,n_bayes=0,rho_lr=0.1]`, seeds 0, 1, 2" in c1
    assert "control (this benchmark, not the paper's)" in c1
    assert "C1, C2 are controls of this benchmark, not claims of the paper" in out


def test_a_row_at_its_defaults_where_the_method_has_a_tuning_space_is_never_a_verdict(learned, tmp_path, capsys):
    """The same records as the supported / contradicted claims, without the stored tuning: PBN and
    mean-field VI have tuning spaces and ran at their defaults, so no claim they take part in is a
    verdict, each says why and names the tune; the ensemble against the deterministic network (no
    space on either side) would still be decided."""
    import shutil

    for d in learned:
        shutil.copytree(d, tmp_path / d.name, dirs_exist_ok=True)
    shutil.rmtree(tmp_path / learned[0].name / SUITE / "tuning")
    _, out, _ = run(capsys, "--results", str(tmp_path / learned[0].name), str(tmp_path / learned[1].name),
                    "--suite", SUITE)
    m2, m3 = line(out, "M2"), line(out, "M3")
    assert m2.endswith("| not a verdict: PBN 1 %: at the method's defaults: `bench tune` has not chosen its "
                       "beta_start+beta_end on this suite (`python -m bench tune --suite camvid_multilabel --profile "
                       "quick --methods pbn`) |"), m2
    assert "fully Bayesian: at the method's defaults" in m3 and "gain PBN 1 % − fully Bayesian -0.0500," in m3
    assert "verdict: supported" not in out and "verdict: contradicted" not in out


def test_a_row_that_rescales_the_likelihood_at_a_weight_tuned_without_it_is_not_a_verdict():
    """The class-weighted ELBO at the KL weight `bench tune` chose for the unweighted one stands at a
    weight chosen for another objective: not chosen by the protocol (S7), while the squared saliency
    (which changes no likelihood) and the tuned row itself are."""
    chosen = {"pbn": {"beta_start": 1e-4, "beta_end": 1e-4}}
    weighted = mc.with_tuned(mc.PBN_1_WEIGHTED, chosen)
    why = mc.untuned_reason("camvid_binary", "quick", weighted)
    assert why is not None and "without class_weights" in why and "beta_start+beta_end" in why
    assert mc.untuned_reason("camvid_binary", "quick", mc.with_tuned(mc.PBN_1, chosen)) is None
    assert mc.untuned_reason("camvid_binary", "quick", mc.with_tuned(mc.PBN_1_SQUARED, chosen)) is None
    assert "--methods pbn --set pbn.class_weights=median_frequency`" in why  # the tune that would choose it


def test_a_tune_of_the_rows_own_objective_chooses_its_options_and_makes_it_a_verdict_candidate():
    """A stored tune of the class-weighted ELBO (bench tune --set pbn.class_weights=median_frequency) gives
    the weighted row its own choice, which the unweighted rows never take; the row is then chosen by
    the protocol. A tune that held another option fixed (squared saliency) does not apply to it."""
    chosen = {"pbn": {"beta_start": 1e-4, "beta_end": 1e-4}}
    objectives = {"pbn": [({"squared": True}, {"beta_start": 1e-2, "beta_end": 1e-2}),
                          ({"class_weights": "median_frequency"}, {"beta_start": 1e-3, "beta_end": 1e-3})]}
    weighted = mc.with_tuned(mc.PBN_1_WEIGHTED, chosen, objectives)
    assert weighted.options["beta_start"] == 1e-3 and weighted.tuned_for == {"class_weights": "median_frequency"}
    assert mc.untuned_reason("camvid_binary", "quick", weighted) is None
    plain = mc.with_tuned(mc.PBN_1, chosen, objectives)
    assert plain.options["beta_start"] == 1e-4 and plain.tuned_for == {}


def test_two_rows_on_different_networks_are_never_a_verdict(tmp_path, capsys):
    """PBN built on one backbone file, the deterministic network on another (the backbone trained twice):
    not a like-for-like comparison, whatever the numbers; once the deterministic network has records on
    PBN's backbone too, the claim reads those and is a verdict again."""
    write(tmp_path, "pbn", network="aaaa")
    write(tmp_path, "deterministic", network="bbbb")
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert "not a verdict" in m2 and "networks of different identity" in m2 and "aaaa" in m2 and "bbbb" in m2
    write(tmp_path, "deterministic", network="aaaa", seeds=(0, 1), accuracy=[0.5, 0.5, 0.5])  # fewer seeds than bbbb
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert m2.endswith("| verdict: supported |") and "deterministic +0.405" in m2 and "different identity" not in m2
    # each row names the network its records stand on (a choice made on another file reads beside it)
    assert "seeds 0, 1, 2, on backbone_sha256_16=aaaa" in m2 and "seeds 0, 1, on backbone_sha256_16=aaaa" in m2


def test_rows_on_two_networks_are_compared_on_the_one_where_they_pair_the_most_seeds(tmp_path, capsys):
    """PBN has three seeds on one backbone file and two on another, the deterministic network one seed on
    the first and three on the second: the claim reads the second (two paired seeds), not PBN's own
    choice (one paired seed, no verdict), and says why; with as many seeds on each, PBN's choice stays."""
    write(tmp_path, "pbn", network="aaaa")
    write(tmp_path, "pbn", network="bbbb", seeds=(0, 1))
    write(tmp_path, "deterministic", network="aaaa", seeds=(0,))
    write(tmp_path, "deterministic", network="bbbb")
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert m2.endswith("| verdict: supported |") and "paired over seeds 0, 1" in m2, m2
    why = "(of the 2 networks both rows stand on, the one on which they pair the most seeds)"
    assert "seeds 0, 1, on backbone_sha256_16=bbbb;" in m2 and "aaaa" not in m2
    assert f"deterministic: `deterministic`, seeds 0, 1, 2, on backbone_sha256_16=bbbb {why} |" in m2
    write(tmp_path, "deterministic", network="aaaa", seeds=(1,))  # two paired seeds on each: PBN's choice
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert f"seeds 0, 1, on backbone_sha256_16=aaaa {why} |" in m2 and "bbbb" not in m2 and m2.count(why) == 1, m2


def test_rows_each_on_a_network_of_its_own_move_to_a_network_they_share(tmp_path, capsys):
    """PBN's most seeds stand on one file, the deterministic network's on another, and they share two
    more: the claim reads the shared file with the most paired seeds, not the two files apart (whose
    common seed numbers pair nothing)."""
    write(tmp_path, "pbn", network="aaaa")
    write(tmp_path, "deterministic", network="bbbb")
    for method in ("pbn", "deterministic"):
        write(tmp_path, method, network="cccc", seeds=(0, 1))
        write(tmp_path, method, network="dddd", seeds=(0,))
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert m2.endswith("| verdict: supported |") and "paired over seeds 0, 1" in m2, m2
    assert "on backbone_sha256_16=cccc;" in m2 and "different identity" not in m2


def test_a_tuned_choice_among_candidates_on_two_networks_is_not_the_protocols(tmp_path, capsys):
    """A stored choice whose candidates' records stand on two networks compared them by network as well
    as by option: a row at that choice is not chosen by the protocol, so not a verdict."""
    from bench.tuning import choice_networks, write_tuning

    write(tmp_path, "pbn", network="aaaa")
    write(tmp_path, "deterministic", network="aaaa")
    other = mc.with_tuned(mc.PBN_1, {"pbn": {"beta_start": 0.2, "rho_lr": 0.05}})
    write(tmp_path, "pbn", row=other, network="bbbb")
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |")  # no candidate list: nothing to compare
    doc = (tmp_path / SUITE / "tuning" / f"{PROFILE}.json")
    import json

    stored = json.loads(doc.read_text())
    choice = stored["methods"]["pbn"]["choices"][0]
    hashes = {config_hash({"method": "pbn", **mc.profile_config(SUITE, PROFILE, r), "model_identity": n})
              for r, n in ((mc.with_tuned(mc.PBN_1, {"pbn": choice["chosen"]}), "aaaa"), (other, "bbbb"))}
    choice["candidates"] = [{"config_hash": h, "values": {}, "score": 1.0, "per_seed": {"0": 1.0}} for h in hashes]
    write_tuning(tmp_path, SUITE, PROFILE, {"pbn": stored["methods"]["pbn"]}, {})
    df = mc.load([str(tmp_path)], [SUITE])
    assert sorted(choice_networks(choice, df)) == ["backbone_sha256_16=aaaa", "backbone_sha256_16=bbbb"]
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert "not a verdict" in m2 and "compared candidates on 2 different networks" in m2


def test_seeds_on_another_fit_of_the_map_network_are_not_paired(tmp_path, capsys):
    """PBN's seed 1 started from another fit of that seed's MAP network than the deterministic row's
    (another weights' digest): the gain is paired over seeds 0 and 2 only, and the text says why."""
    write(tmp_path, "pbn", map_shas={0: "m0", 1: "other", 2: "m2"}, accuracy=[0.900, 0.100, 0.905])
    write(tmp_path, "deterministic", map_shas={0: "m0", 1: "m1", 2: "m2"})
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert "paired over seeds 0, 2; seed 1 not paired: the rows stand on different fits of that seed's MAP network" in m2
    assert "gain PBN 1 % − deterministic +0.0195," in m2 and m2.endswith("| verdict: supported |")


def test_a_choice_stored_over_another_space_than_the_suites_is_not_the_protocols(tmp_path, capsys):
    """A suite that gives a method a space of its own after a tune stored a choice over the method's
    earlier space: the stored candidates are not the protocol's, so a row at that choice is not a
    verdict until the tune runs again over the space of now (the claim says why and names the tune)."""
    import json

    from bench.suites import SUITES
    from bench.tuning import space_of, stale_space_notes

    write(tmp_path, "pbn")
    write(tmp_path, "deterministic")
    tune_at_the_profile(tmp_path, methods=("pbn",))
    doc = tmp_path / SUITE / "tuning" / f"{PROFILE}.json"
    stored = json.loads(doc.read_text())
    stored["methods"]["pbn"]["space"] = space_of("pbn", SUITES.get(SUITE)())  # the space of now
    doc.write_text(json.dumps(stored))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |") and not stale_space_notes([tmp_path])
    stored["methods"]["pbn"]["space"] = {"beta_start": [0.01, 0.2], "rho_lr": [0.05, 0.1]}  # an earlier space
    doc.write_text(json.dumps(stored))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert "not a verdict" in m2 and "PBN 1 %: its stored `bench tune` choice was made over another space" in m2
    assert ("(beta_start 0.01, 0.2; rho_lr 0.05, 0.1; now beta_start = beta_end 0.0001, 0.001, 0.01, 0.1): "
            "rerun the tune (`python -m bench tune --suite camvid_multilabel --profile quick --methods pbn`)") in m2


def test_a_choice_at_the_edge_of_its_space_is_not_a_verdict(tmp_path, capsys):
    """The fully Bayesian network's stored choice is the largest KL weight of its space (the profile's
    0.01 of 1e-5 .. 1e-2): a larger one may do better, so M3 (PBN against it) is not a verdict and says
    where the edge is; PBN's choice inside its space leaves M2 a verdict. The same edge in a space the
    suite no longer gives is named only as a stale choice (rerun the tune), not twice."""
    import json

    from bench.suites import SUITES
    from bench.tuning import at_edge, edge_choice_notes, space_of

    for method in ("pbn", "deterministic", "mfvi"):
        write(tmp_path, method)
    tune_at_the_profile(tmp_path, methods=("pbn", "mfvi"))
    doc = tmp_path / SUITE / "tuning" / f"{PROFILE}.json"
    stored = json.loads(doc.read_text())
    for method in ("pbn", "mfvi"):
        entry = stored["methods"][method]
        entry["space"] = space_of(method, SUITES.get(SUITE)())
        entry["choices"][0]["at_edge"] = at_edge(entry["space"], entry["choices"][0]["chosen"])
    assert stored["methods"]["mfvi"]["choices"][0]["at_edge"] == ["beta_start+beta_end"]
    assert stored["methods"]["pbn"]["choices"][0]["at_edge"] == []
    doc.write_text(json.dumps(stored))
    assert list(edge_choice_notes([tmp_path])) == [(SUITE, PROFILE, MODEL, "mfvi")]
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |")
    m3 = line(out, "M3")
    assert ("| not a verdict: fully Bayesian: its stored `bench tune` choice is at the edge of the swept range "
            "(beta_start = beta_end = 0.01, the largest of 1e-05, 0.0001, 0.001, 0.01): a value beyond it may do "
            "better") in m3, m3
    stored["methods"]["mfvi"]["space"] = {"beta_start+beta_end": [1e-4, 1e-3, 0.01]}  # an earlier space
    doc.write_text(json.dumps(stored))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m3 = line(out, "M3")
    assert "was made over another space" in m3 and "at the edge" not in m3, m3


def write_val(root, method: str, nll: float, seeds=SEEDS):
    """The validation records of ``method``'s row (the MAP row's validation NLL is what
    bench.validation_split compares with its clean test NLL, 2.0 in :func:`write`)."""
    row = ROWS[method]
    cfg = mc.profile_config(SUITE, PROFILE, row)
    chash = config_hash({"method": method, **cfg})
    store = ResultsStore(root)
    for seed in seeds:
        store.write(store.run_dir(SUITE, MODEL, method, chash, seed),
                    {"status": "ok", "suite": SUITE, "profile": PROFILE, "task": "multilabel", "method": method,
                     "method_label": method_label(method, cfg, METHODS.get(method).defaults), "method_config": cfg,
                     "config_hash": chash, "model": MODEL, "seed": seed, "train_config": TRAIN, "num_labels": 11,
                     "finished_at": "2026-01-01T00:00:00+00:00", "kind": "val", "shift": "val", "severity": 0,
                     "n": 101, "metrics": {"nll": nll}})


def test_a_row_at_options_chosen_on_a_validation_split_unlike_the_test_is_not_a_verdict(tmp_path, capsys):
    """The MAP network's validation NLL 1.5 x its clean test NLL (as camvid_multilabel's official split
    gives): PBN's options were chosen on that split, so M2 (PBN against the deterministic network) is
    not a verdict and says why with the numbers; a validation NLL within x1.2 of the test's leaves it a
    verdict; the deterministic network itself chooses nothing there and is never named."""
    for method in ("pbn", "deterministic"):
        write(tmp_path, method)
    tune_at_the_profile(tmp_path, methods=("pbn",))
    write_val(tmp_path, "deterministic", 2.2)                       # x1.1: alike
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |")
    write_val(tmp_path, "deterministic", 3.0)                       # x1.5: unlike
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    m2 = line(out, "M2")
    assert ("| not a verdict: PBN 1 %: the suite's validation split is unlike its test split (the MAP network's "
            "validation NLL is 1.50 x its clean test NLL: 3 vs 2, seeds 0, 1, 2; held-out sets drawn alike stay "
            "within x1.2)") in m2, m2
    assert "deterministic: the suite's validation split" not in m2


def test_a_choice_made_on_another_validation_split_is_not_the_protocols(tmp_path, capsys):
    """A stored tune whose sweeps ran on another validation split than the profile's (here
    ``--set data.val_sequences=[...]`` while the profile tunes on the suite's own; a tune stored with
    its ``data``, or only its ``--set`` list) chose on another split's scores: M2 is not a verdict and
    names both splits and the tune to rerun; on the profile's own split it stays a verdict."""
    import json

    from bench.tuning import other_split_notes

    for method in ("pbn", "deterministic"):
        write(tmp_path, method)
    tune_at_the_profile(tmp_path, methods=("pbn",))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |") and not other_split_notes([tmp_path])
    doc = tmp_path / SUITE / "tuning" / f"{PROFILE}.json"
    stored = json.loads(doc.read_text())
    for how in ({"sets": ['data.val_sequences=["0006R0"]', "seeds=0"]}, {"data": {"val_sequences": ["0006R0"]}}):
        doc.write_text(json.dumps({**stored, "methods": {"pbn": {**stored["methods"]["pbn"], **how}}}))
        _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
        m2 = line(out, "M2")
        assert ("not a verdict: PBN 1 %: its stored `bench tune` choice was made on another validation split "
                "(data.val_sequences=['0006R0']) than the profile's now (the suite's own): rerun the tune") in m2, m2
    doc.write_text(json.dumps({**stored, "methods": {"pbn": {**stored["methods"]["pbn"], "data": {"size": [1, 1]}}}}))
    _, out, _ = run(capsys, "--results", str(tmp_path), "--suite", SUITE)
    assert line(out, "M2").endswith("| verdict: supported |")
