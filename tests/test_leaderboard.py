"""``python -m bench leaderboard``: records of two results directories pooled, ranked, compared with
MAP paired over seeds, ties told from wins, written as HTML, markdown and CSV.

The expected numbers are computed here from the values the synthetic records were written with."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from bench.cli import main
from bench.leaderboard.pareto import pareto_front
from bench.leaderboard.stats import format_value, paired_p_value, rank_marks
from bench.store import ResultsStore, config_hash

SEEDS = [0, 1, 2, 3, 4]
SHIFTS = [("fog", 1), ("fog", 3), ("contrast", 1), ("contrast", 3)]
#: per-seed shift NLL: a common seed effect, pbn better by exactly 0.05 on every seed, mc_dropout
#: differing from MAP by +-0.02 around zero (a tie)
BASE = {s: 1.0 + 0.1 * s for s in SEEDS}
OFFSET = {"deterministic": lambda s: 0.0, "pbn": lambda s: -0.05,
          "mc_dropout": lambda s: 0.02 * (-1) ** s}
CONFIGS = {"deterministic": ("deterministic", {"optimizer": None, "lr": None, "weight_decay": None, "epochs": None}),
           "pbn": ("pbn[lr=0.05]", {"lr": 0.05, "epochs": 2, "r_bayes": 0.05}),
           "mc_dropout": ("mc_dropout", {"p": 0.1, "samples": 10})}
TRAIN = {"optimizer": "sgd", "lr": 0.1, "schedule": "cosine", "epochs": 12, "batch_size": 128, "weight_decay": 1e-5}
#: a PBN fit that passes its validity checks (bench.validity): sigma moved x1.5 (log 0.41 of Adam's
#: ceiling 0.01 x 200 x 0.5 = 1.0) and the objective is stationary in sigma
CONVERGED_VI = {"sigma_change": {"median_ratio": 1.5},
                "train": {"rho_optimizer": "adam", "rho_lr": 0.01, "epochs": 2, "steps": 200, "num_train": 1000,
                          "final_beta": 0.01, "kl_divisor": 1000},
                "sigma_stationarity": {"residual": 0.05, "residual_se": 0.02},
                # the MAP network PBN starts from, at rest over its last epochs (check map_converged)
                "map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}
#: a trained network whose validation NLL is at rest over its last epochs (check map_converged)
TRAINED = {"map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}


def _write(root, method, seed, profile="quick", finished="2026-01-01T00:10:00+00:00", skip=(), bump=0.0,
           probe=None, identity=None, map_sha=None, cost=None, map_fit=None):
    label, cfg = CONFIGS[method]
    store = ResultsStore(root)
    chash = config_hash({**cfg, "model_identity": identity} if identity else cfg)  # the network is in the identity
    run = store.run_dir("cifar10c", "resnet20", method, chash, seed)
    base = {"status": "ok", "suite": "cifar10c", "profile": profile, "task": "classification", "method": method,
            "method_label": label, "method_config": cfg, "config_hash": chash, "model": "resnet20",
            "seed": seed, "git_commit": f"c0ffee{seed}", "device": "cpu:x86_64:1threads",
            "versions": {"torch": "2.14.1", "bench": "0.1.0"}, "train_config": TRAIN,
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": finished,
            "cost": {"stochastic_params": 0 if method == "deterministic" else 500, "train_time_s": 100.0 + seed,
                     "predict_time_per_example_s": 1e-4, "flops_per_example": 2e6, "peak_memory_mb": 50.0,
                     **({"peak_memory_probe": probe} if probe else {}), **(cost or {})},
            **({"model_identity": identity} if identity else {})}
    store.write(run, {**base, "kind": "id", "shift": "clean", "severity": 0, "n": 100,
                      "metrics": {"accuracy": 0.9, "nll": 0.3, "brier": 0.15, "ece": 0.03},
                      "diagnostics": _with_map_sha(CONVERGED_VI if method == "pbn" else TRAINED, map_sha, map_fit)})
    for fam, sev in SHIFTS:
        if (fam, sev) in skip:
            continue
        nll = BASE[seed] + OFFSET[method](seed) + 0.01 * sev + bump
        store.write(run, {**base, "kind": "shift", "shift": fam, "severity": sev, "n": 100,
                          "data_fingerprint": "regenerated bench-corruptions-2.0 seed 0",
                          "metrics": {"accuracy": 0.8, "nll": nll, "brier": 0.3, "ece": 0.05}})
    store.write(run, {**base, "kind": "ood", "shift": "svhn", "severity": None, "n": 100,
                      "metrics": {"auroc": 0.8 + 0.01 * seed, "aupr": 0.7}})


def _with_map_sha(diag: dict, sha: str | None, fit: dict | None = None) -> dict:
    """``diag`` with the MAP network's weights' digest (``map_training.network_sha``) when given,
    and where it was trained (``fit``: ``torch_threads``, ``cpu``)."""
    return diag if sha is None else {**diag, "map_training": {**diag["map_training"], "network_sha": sha, **(fit or {})}}


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory):
    """Seeds 0-2 in A, 3-4 in B; pbn seed 0 in both, B's copy finished later and the one that counts
    (A's is off by +1); mc_dropout seed 4 misses one shifted set; a smoke-profile MAP run in B."""
    a, b = tmp_path_factory.mktemp("A"), tmp_path_factory.mktemp("B")
    for method in CONFIGS:
        for seed in SEEDS:
            skip = [("contrast", 3)] if (method, seed) == ("mc_dropout", 4) else []
            _write(a if seed <= 2 else b, method, seed, skip=skip, bump=1.0 if (method, seed) == ("pbn", 0) else 0)
    _write(b, "pbn", 0, finished="2026-01-02T00:00:00+00:00")
    _write(b, "deterministic", 0, profile="smoke")
    return a, b


def _run(tmp_path, dirs, *extra):
    out = tmp_path / "lb"
    assert main(["leaderboard", "--results", *map(str, dirs), "--out", str(out), *extra]) == 0
    return out


def _csv(out) -> pd.DataFrame:
    return pd.read_csv(out / "leaderboard.csv")


def test_writes_three_formats_from_two_directories(tmp_path, two_dirs):
    out = _run(tmp_path, two_dirs)
    html = (out / "leaderboard.html").read_text()
    md = (out / "leaderboard.md").read_text()
    assert "<table" in html and "http://" not in html.split("<body>")[1].split("github.com")[0]
    assert "| method | seeds |" in md and "pareto" in md
    assert list((out / "figures").glob("pareto-*.png"))
    df = _csv(out)
    assert set(df["label"]) == {"deterministic", "pbn[lr=0.05]", "mc_dropout"}
    assert set(df["profile"]) == {"quick"}     # smoke left out by default


def test_pooled_seeds_counted_once_and_ranked(tmp_path, two_dirs):
    df = _csv(_run(tmp_path, two_dirs)).set_index("label")
    assert df.loc["pbn[lr=0.05]", "seeds"] == "0 1 2 3 4"          # seed 0 in both directories: once,
    # the later copy (the values below are those of the copy in B)
    assert df.loc["pbn[lr=0.05]", "rank"] == 1
    for method, (label, _) in CONFIGS.items():
        seeds = SEEDS if method != "mc_dropout" else SEEDS[:4]  # seed 4 misses a shifted set
        want = np.mean([np.mean([BASE[s] + OFFSET[method](s) + 0.01 * sev for _, sev in SHIFTS]) for s in seeds])
        assert df.loc[label, "shift.nll.mean"] == pytest.approx(want, abs=1e-12)
        assert df.loc[label, "shift.nll.n"] == len(seeds)
        assert df.loc[label, "id.accuracy.n"] == 5


def test_incomplete_seed_is_named_in_the_notes(tmp_path, two_dirs):
    md = (_run(tmp_path, two_dirs) / "leaderboard.md").read_text()
    assert "mc_dropout, seed 4: 3 of 4 shifted sets evaluated" in md


def test_paired_difference_to_map_and_marks(tmp_path, two_dirs):
    df = _csv(_run(tmp_path, two_dirs)).set_index("label")
    # pbn is better by exactly 0.05 on every seed: the paired difference and a clear best
    assert df.loc["pbn[lr=0.05]", "delta_vs_map.mean"] == pytest.approx(-0.05, abs=1e-12)
    assert df.loc["pbn[lr=0.05]", "delta_vs_map.std"] == pytest.approx(0.0, abs=1e-12)
    assert df.loc["pbn[lr=0.05]", "delta_vs_map.n"] == 5
    assert df.loc["mc_dropout", "delta_vs_map.n"] == 4
    assert df.loc["pbn[lr=0.05]", "shift.nll.mark"] == "best"
    assert df["shift.nll.mark"].fillna("").tolist().count("best") == 1
    # identical ID accuracy everywhere: a three-way tie, nobody best
    assert set(df["id.accuracy.mark"]) == {"tied"}


def test_provenance_has_the_training_setup_used(tmp_path, two_dirs):
    df = _csv(_run(tmp_path, two_dirs)).set_index("label")
    assert "lr 0.05" in df.loc["pbn[lr=0.05]", "provenance.training"]
    assert "2 epochs" in df.loc["pbn[lr=0.05]", "provenance.training"]
    assert "lr 0.1" in df.loc["deterministic", "provenance.training"]
    assert df.loc["deterministic", "provenance.data"] == "regenerated bench-corruptions-2.0 seed 0"
    assert "torch 2.14.1" in df.loc["deterministic", "provenance.versions"]


def test_filters_smoke_and_published_rows(tmp_path, two_dirs):
    out = _run(tmp_path, two_dirs, "--include-smoke", "--method", "deterministic")
    df = _csv(out)
    assert set(df["profile"]) == {"quick", "smoke"} and set(df["label"]) == {"deterministic"}
    md = (out / "leaderboard.md").read_text()
    assert "SMOKE" in md
    # the suite has published reference rows: shown, cited, never ranked
    assert "Published reference rows (not ranked)" in md and "uncertainty-baselines" in md
    assert "Wide ResNet-28-10" not in set(df["label"])


def test_exclude_label_leaves_out_one_configuration_by_its_label(tmp_path, two_dirs, capsys):
    """A label has commas, so it is passed whole, one per flag; the other configurations of the same
    method stay; a label no record carries is an error (exit 2), not a silent no-op."""
    out = _run(tmp_path, two_dirs, "--exclude-label", "pbn[lr=0.05]")
    assert set(_csv(out)["label"]) == {"deterministic", "mc_dropout"}
    assert "exclude_label=pbn[lr=0.05]" in (out / "leaderboard.md").read_text()
    none = tmp_path / "none"
    assert main(["leaderboard", "--results", str(two_dirs[0]), "--out", str(none), "--exclude-label", "pbn[lr=0.5]"]) == 2
    assert "pbn[lr=0.5]" in capsys.readouterr().err and not none.exists()


def test_bad_input_exits_2_and_writes_nothing(tmp_path, two_dirs, capsys):
    out = tmp_path / "none"
    assert main(["leaderboard", "--results", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert main(["leaderboard", "--results", str(two_dirs[0]), "--out", str(out), "--metric", "shift.bogus"]) == 2
    assert main(["leaderboard", "--results", str(two_dirs[0]), "--out", str(out), "--suite", "imagenetc"]) == 2
    assert "ranking metric 'shift.bogus'" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- statistics


def test_paired_p_value_matches_scipy():
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 10):
        a, b = rng.normal(size=n), rng.normal(size=n)
        assert paired_p_value(a - b) == pytest.approx(ttest_rel(a, b).pvalue, rel=1e-10)
    assert paired_p_value(np.zeros(4)) == 1.0 and np.isnan(paired_p_value(np.array([0.3])))


def test_rank_marks_best_only_beyond_the_noise():
    seeds = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [1.1, 2.1, 3.1], "c": [1.3, 1.9, 3.2]}).T  # rows: configs
    best, tied = rank_marks(seeds.loc[["a", "b"]], "min")
    assert best == {"a"} and not tied                  # better on every seed by the same margin
    best, tied = rank_marks(seeds, "min")
    assert not best and tied == {"a", "c"}             # c: +0.3, -0.1, +0.2 -> not told apart from a
    # a top row chosen by another score (b, by MAP-paired means) that a beats on every seed they share is not best
    best, tied = rank_marks(seeds.loc[["a", "b"]], "min", score=pd.Series({"a": 1.2, "b": 1.0}))
    assert not best and tied == {"a", "b"}


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(1, 100, 40), rng.uniform(0, 1, 40)
    front = set(pareto_front(x, y, higher_is_better=False))
    brute = {i for i in range(40)
             if not np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i])))}
    assert front == brute
    assert set(pareto_front(x, -y, higher_is_better=True)) == brute


def test_rounding_follows_the_seed_std():
    assert format_value(0.123456, 0.0123) == "0.123 ± 0.012"
    assert format_value(1.23456, 0.00012) == "1.235 ± 0.000"   # at most four significant digits
    assert format_value(0.123456) == "0.123"                   # one seed: three significant digits
    assert format_value(155450.0, 0.0, integers=True) == "155,450"
    assert format_value(float("nan")) == "–"


def test_csv_is_parseable_and_complete(tmp_path, two_dirs):
    text = (_run(tmp_path, two_dirs) / "leaderboard.csv").read_text()
    df = pd.read_csv(io.StringIO(text))
    assert {"provenance.commits", "cost.train_time_s.mean", "ood.svhn.auroc.mean"} <= set(df.columns)


def test_print_tables_gives_the_ranked_markdown(tmp_path, two_dirs, capsys):
    _run(tmp_path, two_dirs, "--print-tables")
    out = capsys.readouterr().out
    assert out.startswith("**cifar10c / resnet20 (quick profile)**")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "seeds" not in line and "---" not in line]
    assert rows[0].startswith("| pbn[lr=0.05] | 5 |")


def test_a_board_without_shifted_sets_is_ranked_on_the_clean_set(tmp_path):
    from test_reporting import write_synthetic

    write_synthetic(tmp_path / "r", with_cifar=False)   # holds a regression suite with no shift
    out = _run(tmp_path, [tmp_path / "r"], "--include-smoke", "--suite", "toy")
    assert "ranked by id.nll: these records have no shift.nll" in (out / "leaderboard.md").read_text()
    assert set(_csv(out)["ranked_by"]) == {"id.nll"}


def test_equal_top_scores_are_decided_by_seeds_not_row_order():
    """"a" and "b" score the same (one configuration under two hashes: b = a plus two seeds). The
    top must be b, the one with more seeds, in either row order: against b, "c" is worse on all 5
    seeds (p < 0.05); against a (3 seeds: +0.3, +0.1, +0.2, p = 0.07) it would count as a tie."""
    seeds = pd.DataFrame({"a": [1.0, 2.0, 3.0, np.nan, np.nan], "b": [1.0, 2.0, 3.0, 1.5, 2.5],
                          "c": [1.3, 2.1, 3.2, 1.9, 2.6]}).T
    score = pd.Series({"a": 2.0, "b": 2.0, "c": 2.5})
    for order in (["a", "b", "c"], ["b", "a", "c"]):
        assert rank_marks(seeds.loc[order], "min", score) == (set(), {"a", "b"})


def test_train_peaks_measured_above_an_untrimmed_start_are_named(tmp_path):
    """Records made before the CPU peak probe released freed memory first (no probe field, or the
    legacy one) are named in the board's notes; records with the trimmed probe are not."""
    root = tmp_path / "r"
    _write(root, "deterministic", 0, probe="rss-above-trimmed-start")
    _write(root, "pbn", 0)  # made by older code: no probe field
    _write(root, "mc_dropout", 0, probe="rss-above-start")
    md = (_run(tmp_path, [root]) / "leaderboard.md").read_text()
    notes = [line for line in md.splitlines() if "untrimmed start" in line]
    assert len(notes) == 1 and "train peak MiB of mc_dropout, pbn[lr=0.05]:" in notes[0]
    assert "deterministic" not in notes[0]
    from bench.cost import memory_probe
    from bench.leaderboard.board import LEGACY_CPU_PROBE

    assert LEGACY_CPU_PROBE == memory_probe("cpu", legacy=True)  # the board's spelling of the harness's name


def test_shared_machine_notes_mark_timings_taken_beside_other_work():
    """bench.harness records, around each fit, the 1-minute load average with the fit's threads and
    what the fit's process did with its time (for a method on MAP networks, what their trainings
    did too): a load at least SHARED_LOAD above the threads or a run delay above RUN_DELAY_LIMIT in
    one seed marks the row's train time as taken on a shared machine; stopped above PAUSED_LIMIT, as
    counting pauses (on a GPU too); CPU records without these are named apart; a GPU fit's load is
    not judged."""
    import pandas as pd

    from bench.leaderboard.board import PAUSED_LIMIT, RUN_DELAY_LIMIT, SHARED_LOAD, shared_machine_notes

    ran = {"cost.fit_paused_fraction": 0.0, "cost.fit_run_delay_fraction": 0.0}
    rows = []
    for lab, seed, load, threads, device, usage in (
            ("quiet", 0, 2.2, 2, "cpu:x86_64:2threads", ran),
            ("quiet", 1, 2.0 + SHARED_LOAD - 0.01, 2, "cpu:x86_64:2threads",
             {"cost.fit_paused_fraction": PAUSED_LIMIT, "cost.fit_run_delay_fraction": RUN_DELAY_LIMIT}),
            ("busy", 0, 1.0, 1, "cpu:x86_64:1threads", ran), ("busy", 1, 1.0 + SHARED_LOAD, 1, "cpu:x86_64:1threads", ran),
            ("crowded", 0, 1.0, 1, "cpu:x86_64:1threads", {**ran, "cost.fit_run_delay_fraction": 0.3}),
            ("stopped", 0, 1.0, 1, "cpu:x86_64:1threads", {**ran, "cost.fit_paused_fraction": 0.4}),
            # its MAP network's training was stopped, not the fit
            ("on_stopped_map", 0, 1.0, 1, "cpu:x86_64:1threads",
             {**ran, "cost.upstream_train_time_s": 5.0, "cost.upstream_paused_fraction": 0.4,
              "cost.upstream_run_delay_fraction": 0.0}),
            ("on_unchecked_map", 0, 1.0, 1, "cpu:x86_64:1threads", {**ran, "cost.upstream_train_time_s": 5.0}),
            ("old", 0, None, None, "cpu:x86_64:1threads", {}),
            ("load_only", 0, 1.0, 1, "cpu:x86_64:1threads", {}),
            ("gpu", 0, 9.0, 1, "cuda:NVIDIA H200", {}), ("gpu_stopped", 0, 9.0, 1, "cuda:NVIDIA H200",
                                                         {"cost.fit_paused_fraction": 0.3})):
        rows.append({"label": lab, "seed": seed, "kind": "id", "device": device, "cost.train_time_s": 10.0,
                     "cost.host_load_1m": load, "cost.torch_threads": threads, **usage})
    notes = shared_machine_notes(pd.DataFrame(rows))
    assert len(notes) == 3  # no predict times recorded: no note on them
    assert notes[0].startswith("train s of gpu_stopped, on_stopped_map, stopped:") and "stopped" in notes[0]
    assert notes[1].startswith("train s of busy, crowded:") and "upper bounds" in notes[1]
    assert notes[2].startswith("train s of load_only, old, on_unchecked_map:") and "do not say" in notes[2]
    assert not any("quiet" in n or "gpu," in n or "gpu:" in n for n in notes)


def test_rows_on_two_networks_of_one_name_get_a_board_each(tmp_path):
    """Records of one suite, model and profile whose model identity differs (a backbone file trained
    twice: two digests) are not compared: a board per network, the MAP network's first, each named by
    its identity; a single board made of both (a run's report) gives the other network's rows no
    difference to MAP and never marks them best."""
    from bench.leaderboard import build_boards, load_runs, select_runs
    from bench.leaderboard.board import build_board

    root = tmp_path / "r"
    for seed in (0, 1, 2):
        _write(root, "deterministic", seed, identity={"backbone_sha256_16": "aaaa"})
        _write(root, "mc_dropout", seed, identity={"backbone_sha256_16": "aaaa"})
        _write(root, "pbn", seed, identity={"backbone_sha256_16": "bbbb"})
    out = _csv(_run(tmp_path, [root]))
    assert list(dict.fromkeys(out["model_identity"])) == ["backbone_sha256_16=aaaa", "backbone_sha256_16=bbbb"]
    first = out[out["model_identity"] == "backbone_sha256_16=aaaa"]
    assert set(first["label"]) == {"deterministic", "mc_dropout"}
    second = out[out["model_identity"] == "backbone_sha256_16=bbbb"].set_index("label")
    assert list(second.index) == ["pbn[lr=0.05]"] and np.isnan(second.loc["pbn[lr=0.05]", "delta_vs_map.mean"])

    df = select_runs(load_runs([root]))
    assert len(build_boards(df)) == 2
    # a label on both networks is made distinct where they meet, and is plain on each network's own board
    for seed in (0, 1, 2):
        _write(root, "deterministic", seed, identity={"backbone_sha256_16": "bbbb"})
    both = select_runs(load_runs([root]))
    assert sorted(set(both["label"]))[0].startswith("deterministic#")
    assert [sorted(b.rows) for b in build_boards(both)] == [["deterministic", "mc_dropout"],
                                                              ["deterministic", "pbn[lr=0.05]"]]
    one = build_board(df, "cifar10c", "resnet20", "quick", "shift.nll")  # both networks on one board (no MAP on bbbb)
    assert one.delta.loc["pbn[lr=0.05]", "n"] == 0 and one.delta.loc["mc_dropout", "n"] == 3
    assert "pbn[lr=0.05]" not in one.marks["shift.nll"][0] | one.marks["shift.nll"][1]
    assert any("another network than the MAP row's" in n and "bbbb" in n for n in one.notes)


def test_the_another_fit_note_says_where_each_fit_was_trained(tmp_path):
    """Two fits of one seed's MAP network differ because they were trained at another thread count or
    on another CPU: the note names each side's, from the networks' training logs in the records, and
    says so where a record does not carry it."""
    from bench.leaderboard import build_boards, load_runs, select_runs

    root = tmp_path / "r"
    here = {"torch_threads": 2, "cpu": "AMD EPYC (AVX512)"}
    for seed in SEEDS:
        _write(root, "deterministic", seed, map_sha=f"map{seed}", map_fit=here)
        fit = {0: {"torch_threads": 1, "cpu": "Intel Xeon (AVX2)"}, 1: None}.get(seed, here)
        _write(root, "pbn", seed, map_sha=f"other{seed}" if seed in (0, 1) else f"map{seed}", map_fit=fit)
    board = build_boards(select_runs(load_runs([root])))[0]
    note = next(n for n in board.notes if n.startswith("pbn[lr=0.05]: stands on another fit"))
    assert ("seed 0: network other0 (trained at 1 torch thread(s) on Intel Xeon (AVX2)) vs the MAP row's map0 "
            "(trained at 2 torch thread(s) on AMD EPYC (AVX512))") in note, note
    assert "seed 1: network other1 (where trained not recorded) vs the MAP row's map1 (trained at 2" in note, note
    assert board.delta.loc["pbn[lr=0.05]", "n"] == 3  # the fit's description does not change the pairing


def test_seeds_on_another_fit_of_the_map_network_are_not_paired_with_map(tmp_path):
    """A run that started from another fit of its seed's MAP network than the MAP row's (another
    weights' digest: a retrain on another machine or code version) is not compared with MAP on that
    seed: the difference to MAP, the marks and the summary pair the other seeds only, and a note
    names the seeds. A method that trains its own network (MC dropout) pairs on every seed."""
    from bench.leaderboard import build_boards, load_runs, select_runs
    from bench.leaderboard.summary import summary_lines

    root = tmp_path / "r"
    for seed in SEEDS:
        _write(root, "deterministic", seed, map_sha=f"map{seed}")
        # pbn's seeds 0 and 1 started from other MAP fits, on which it scored 1.0 worse
        other = seed in (0, 1)
        _write(root, "pbn", seed, map_sha=f"other{seed}" if other else f"map{seed}", bump=1.0 if other else 0.0)
        # its own network's training is in its records too, but it does not start from the MAP network
        _write(root, "mc_dropout", seed, map_sha=f"own{seed}")
    board = build_boards(select_runs(load_runs([root])))[0]
    d = board.delta.loc["pbn[lr=0.05]"]
    assert d["n"] == 3 and d["mean"] == pytest.approx(-0.05, abs=1e-12) and d["std"] == pytest.approx(0, abs=1e-12)
    assert board.delta.loc["mc_dropout", "n"] == 5  # not built on the MAP network: paired on every seed
    note = next(n for n in board.notes if n.startswith("pbn[lr=0.05]: stands on another fit"))
    assert "seed 0: network other0 vs the MAP row's map0" in note and "seed 1:" in note and "seed 2" not in note
    assert not any(n.startswith("mc_dropout: stands on another fit") for n in board.notes)
    # paired over seeds 2-4 pbn is better than MAP on every seed: MAP is not tied with it, and the
    # summary counts pbn better (mc_dropout, from no MAP network, is paired with pbn on every seed: a tie)
    assert board.marks["shift.nll"] == (set(), {"pbn[lr=0.05]", "mc_dropout"})
    assert "better beyond the noise (pbn[lr=0.05])" in " ".join(summary_lines(board))
    # the CSV carries the same pairs, and a run's report table marks on the same rule
    out = _csv(_run(tmp_path, [root])).set_index("label")
    assert out.loc["pbn[lr=0.05]", "delta_vs_map.n"] == 3
    # a run's report table ranks by plain means: with pbn's other-fit seeds far better instead, pbn is
    # on top, and MAP, worse on every seed they share a fit on, is not tied with it
    from bench.reporting import tables

    root2 = tmp_path / "r2"
    for seed in SEEDS:
        _write(root2, "deterministic", seed, map_sha=f"map{seed}")
        other = seed in (0, 1)
        _write(root2, "pbn", seed, map_sha=f"other{seed}" if other else f"map{seed}", bump=-1.0 if other else 0.0)
    best, tied = tables.leaderboard(select_runs(load_runs([root2]))).marks["shift.nll"]
    assert best == {"pbn[lr=0.05]"} and not tied


def test_map_networks_pair_by_digest_else_by_validation_curve():
    from bench.reporting.data import map_network, same_map_network

    a = map_network({"map_training": {"val_nll": [1.0, 0.5], "network_sha": "aa"}})
    assert a == ("aa", "1,0.5")
    assert same_map_network(a, map_network({"map_training": {"val_nll": [1.0, 0.5]}}))       # no digest: by curve
    assert not same_map_network(a, map_network({"map_training": {"val_nll": [1.0, 0.4]}}))   # another curve
    assert not same_map_network(a, map_network({"map_training": {"val_nll": [1.0, 0.5], "network_sha": "bb"}}))
    assert same_map_network(a, map_network({}))       # a run that did not start from a MAP network
    assert same_map_network(a, None)


def test_a_board_whose_times_come_from_two_cpu_models_says_so():
    """Records keep the CPU model beside a timing (bench.cost.host_context); a board whose train
    times come from two models names each model's rows, and its provenance names the models."""
    import pandas as pd

    from bench.leaderboard.board import cpu_model_notes, provenance

    rows = [{"label": lab, "seed": s, "kind": "id", "device": "cpu:x86_64:1threads", "cost.train_time_s": 1.0,
             "cost.cpu_model": cpu, "method": lab, "git_commit": "abc", "method_config": {}}
            for lab, s, cpu in (("a", 0, "AMD EPYC (AVX512)"), ("a", 1, "AMD EPYC (AVX512)"),
                                ("b", 0, "Intel Xeon (AVX2)"), ("c", 0, None))]
    notes = cpu_model_notes(pd.DataFrame(rows))
    assert notes == ["train s measured on different CPUs (AMD EPYC (AVX512): a; Intel Xeon (AVX2): b; "
                     "not recorded: c): compare times within one CPU"]
    assert cpu_model_notes(pd.DataFrame([r for r in rows if r["label"] != "b"])) == []
    assert "(CPU: AMD EPYC (AVX512))" in provenance(pd.DataFrame(rows[:2]))["devices"]


def test_the_cheapest_of_the_top_is_no_verdict_when_another_top_rows_time_is_an_upper_bound(tmp_path):
    """The summary names the cheapest configuration among the top; where another top row's train
    time is an upper bound (here: its fit waited for a core 30 % of the time), that row may be the
    cheaper one, and the sentence says the comparison is no verdict."""
    from bench.leaderboard import build_boards, load_runs, select_runs
    from bench.leaderboard.summary import _tops, summary_lines

    clean = {"host_load_1m": 1.0, "torch_threads": 1, "fit_paused_fraction": 0.0, "fit_run_delay_fraction": 0.0}

    def cheapest_line(slow_waited: bool):
        root = tmp_path / f"r{int(slow_waited)}"
        for seed in SEEDS:
            for method, extra in (("deterministic", 0.0), ("mc_dropout", 50.0)):  # tied on shift NLL
                waited = slow_waited and method != "deterministic"
                _write(root, method, seed, cost={**clean, "train_time_s": 100.0 + extra,
                                                 **({"fit_run_delay_fraction": 0.3} if waited else {})})
        board = build_boards(select_runs(load_runs([root])))[0]
        top, _ = _tops(board, board.metric)
        return top, next(line for line in summary_lines(board) if line.startswith("Cheapest"))

    top, line = cheapest_line(False)
    assert len(top) > 1 and "deterministic" in top  # a tie at the top: the cheapest is a comparison of times
    assert "deterministic (100 s)." in line and "not a verdict" not in line
    top, line = cheapest_line(True)
    assert "as measured: deterministic" in line and "not a verdict" in line and "mc_dropout" in line


def test_predict_times_taken_across_a_stop_or_beside_other_work_are_named():
    """Each record keeps the conditions of its set's prediction (bench.harness: predict_paused_fraction,
    predict_run_delay_fraction); the board's predict ms/ex (the id record's) is named an upper bound
    where its set was stopped or waited for a core in a seed; a GPU's wait is not judged."""
    import pandas as pd

    from bench.leaderboard.board import predict_timing_notes

    rows = []
    for lab, device, paused, delay in (("calm", "cpu:x86_64:1threads", 0.0, 0.01),
                                       ("crowded", "cpu:x86_64:1threads", 0.0, 0.4),
                                       ("stopped", "cpu:x86_64:1threads", 0.3, 0.0),
                                       ("gpu_waited", "cuda:NVIDIA H200", 0.0, 0.4)):
        rows.append({"label": lab, "seed": 0, "kind": "id", "device": device, "cost.predict_time_per_example_s": 1e-3,
                     "cost.predict_paused_fraction": paused, "cost.predict_run_delay_fraction": delay})
        # a shifted set of the same run that was stopped: the board shows the id record's time
        rows.append({**rows[-1], "kind": "shift", "cost.predict_paused_fraction": 0.9})
    notes = predict_timing_notes(pd.DataFrame(rows))
    assert len(notes) == 1 and notes[0].startswith("predict ms/ex of crowded, stopped:")
