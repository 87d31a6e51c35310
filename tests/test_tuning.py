"""The tuning protocol (bench/tuning.py, ``python -m bench tune``)."""
from __future__ import annotations

import json

import pytest

from bench import tuning
from bench.cli import main
from bench.errors import BenchError
from bench.store import load_records


def test_every_space_has_the_same_number_of_configurations():
    tuning.check_spaces()
    for m, space in tuning.SPACES.items():
        assert len(tuning.configurations(space)) == tuning.CONFIGS_PER_METHOD, m
    with pytest.raises(BenchError, match="gives every method 4"):
        tuning.check_spaces({"mfvi": {"prior_scale": [0.1, 1.0], "rho_lr": [0.01, 0.05, 0.1]}})
    with pytest.raises(BenchError, match="3 distinct"):  # a repeated value is no configuration
        tuning.check_spaces({"mc_dropout": {"p": [0.1, 0.1, 0.2, 0.3]}})


def test_a_choice_at_the_end_of_three_or_more_values_is_named():
    space = {"kl_weight": [1e-4, 1e-3, 1e-2, 1e-1], "rho_lr": [0.01, 0.05]}
    assert tuning.at_edge(space, {"kl_weight": 1e-4, "rho_lr": 0.05}) == ["kl_weight"]
    assert tuning.at_edge(space, {"kl_weight": 1e-3, "rho_lr": 0.01}) == []


def test_an_edge_probe_steps_one_past_each_end_the_choice_sits_at():
    """Two values: every choice sits at an end of both keys, each probed one space step past it (the ratio
    of the two values); four values: only an end choice; a tied key sets each of its options."""
    space = {"prior_scale": [0.005, 0.05], "rho_lr": [0.01, 0.05]}
    assert tuning.edge_probes(space, {"prior_scale": 0.005, "rho_lr": 0.05}) == [
        {"key": "prior_scale", "end": "smallest", "values": {"prior_scale": 0.0005}},
        {"key": "rho_lr", "end": "largest", "values": {"rho_lr": 0.25}}]
    assert tuning.edge_probes(space, {"prior_scale": 0.05, "rho_lr": 0.01}) == [
        {"key": "prior_scale", "end": "largest", "values": {"prior_scale": 0.5}},
        {"key": "rho_lr", "end": "smallest", "values": {"rho_lr": 0.002}}]
    four = {"kl_weight": [1e-4, 1e-3, 1e-2, 1e-1]}
    assert tuning.edge_probes(four, {"kl_weight": 1e-2}) == []
    assert tuning.edge_probes(four, {"kl_weight": 1e-1}) == [{"key": "kl_weight", "end": "largest",
                                                             "values": {"kl_weight": 1.0}}]
    tied = {"beta_start+beta_end": [1e-6, 1e-5, 1e-4, 1e-3]}
    assert tuning.edge_probes(tied, {"beta_start": 1e-6, "beta_end": 1e-6}) == [
        {"key": "beta_start+beta_end", "end": "smallest", "values": {"beta_start": 1e-7, "beta_end": 1e-7}}]
    assert tuning.edge_probes({"p": [0.0, 0.1, 0.2, 0.3]}, {"p": 0.3})[0]["values"] == {"p": 0.4}  # a step, not x1.5
    assert tuning.edge_probes({"p": [0.0, 0.1, 0.2, 0.3]}, {"p": 0.0})[0]["values"] == {"p": -0.1}
    assert tuning.edge_probes({"schedule": ["cosine", "step"]}, {"schedule": "step"}) == []  # no numbers


def _all_valid(monkeypatch, failing=()):
    """Every record's verdict ok (smoke fits never pass their checks), so that a choice has probes; the
    records of the configuration hashes ``failing`` fail."""
    import bench.selection
    import bench.validity

    def ok(df):
        df = df.copy()
        df["validity.status"] = ["fail" if h in failing else "ok" for h in df["config_hash"]]
        return df

    monkeypatch.setattr(bench.validity, "attach_validity", ok)
    monkeypatch.setattr(bench.selection, "attach_validity", ok)


def test_tune_probes_the_edges_of_its_choice_and_weighs_them_as_it_chose(tmp_path, capsys, monkeypatch):
    """toy smoke, mean-field VI (a 2x2 space: every choice is a corner), every verdict ok: --probe-edges
    fits one configuration past each end, with the validation and clean test records only; each probe's
    score is its mean validation NLL recomputed here from the records, and it beats the choice exactly
    when that is lower than the choice's. The tuning table and the boards name an edge exactly for the
    probes that beat the choice; choosing again without probing keeps the probes."""
    _all_valid(monkeypatch)
    out = tmp_path / "results"
    argv = ["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mfvi", "--out", str(out), "--quiet"]

    def plan():  # bench tune --plan: each sweep's cells, as bench run --plan says them; nothing written
        capsys.readouterr()
        assert main([*argv, "--probe-edges", "--plan"]) == 0
        text = capsys.readouterr().out
        assert "one fit past each end of its space the choice sits at" in text
        return [line.split(" | ")[1].rstrip(" |") for line in text.splitlines() if line.startswith("| mlp_100 mfvi")]

    assert plan() == ["fit, then evaluate 3 of 3 evaluation sets"] * 4 and not out.exists()
    assert main([*argv, "--device", "cpu", "--threads", "1", "--probe-edges"]) == 0
    assert plan() == ["nothing to do: all 3 evaluation records exist"] * 4
    path = out / "toy" / "tuning" / "smoke.json"
    (choice,) = json.loads(path.read_text())["methods"]["mfvi"]["choices"]
    chosen, probes = choice["chosen"], choice["edge_probes"]
    space = tuning.SPACES["mfvi"]
    ends = {k: (v == min(space[k]), max(space[k]) / min(space[k])) for k, v in chosen.items()}
    expected = {k: chosen[k] / r if low else chosen[k] * r for k, (low, r) in ends.items()}
    assert [(p["key"], p["values"][p["key"]]) for p in probes] == [(k, pytest.approx(expected[k])) for k in space]
    df = load_records(out, "toy")
    val = df[(df["kind"] == "val") & (df["method"] == "mfvi")]
    assert len(val) == 6  # four candidates and two probes, seed 0

    def nll(values):
        rows = [r["metrics.nll"] for _, r in val.iterrows() if all(r["method_config"][k] == pytest.approx(v)
                                                                   for k, v in values.items())]
        assert len(rows) == 1
        return rows[0]

    for p in probes:
        probe_nll = nll({**chosen, **p["values"]})
        assert p["score"] == pytest.approx(probe_nll) and p["choice_score"] == pytest.approx(nll(chosen))
        assert p["beats_choice"] == (probe_nll < nll(chosen))
    # the probe records are the validation and clean test sets only (no shifted set)
    probe_hashes = {p["config_hash"] for p in probes}
    assert set(df[df["config_hash"].isin(probe_hashes)]["kind"]) <= {"val", "id", "fit"}
    beaten = [p["key"] for p in probes if p["beats_choice"]]
    capsys.readouterr()
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown"]) == 0
    (row,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| mfvi")]
    assert ("at the edge: " + ", ".join(beaten) in row) == bool(beaten) and "probed one step past its edges" in row
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown",
                 "--candidates", "mfvi"]) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if "probe past the" in x]
    assert [("the choice is an edge" in x) for x in rows] == [p["beats_choice"] for p in probes]
    notes = tuning.choice_notes([out]).get(("toy", "smoke", "mlp_100"), [])
    assert bool([n for m, n in notes if "chose the edge" in n]) == bool(beaten)
    # choosing again from the records without probing keeps what the probes found
    assert main([*argv, "--select-only"]) == 0
    (again,) = json.loads(path.read_text())["methods"]["mfvi"]["choices"]
    assert again["edge_probes"] == probes
    assert main([*argv, "--select-only", "--probe-edges"]) == 0  # weighed again from the records: the same
    (again,) = json.loads(path.read_text())["methods"]["mfvi"]["choices"]
    assert again["edge_probes"] == probes
    # a probe that fails its checks never beats the choice, whatever its score
    _all_valid(monkeypatch, failing=probe_hashes)
    assert main([*argv, "--select-only", "--probe-edges"]) == 0
    (again,) = json.loads(path.read_text())["methods"]["mfvi"]["choices"]
    assert [(p["validity"], p["beats_choice"]) for p in again["edge_probes"]] == [("fail", False)] * 2
    assert [p["score"] for p in again["edge_probes"]] == [p["score"] for p in probes]


def test_sweep_sets_are_the_space():
    assert tuning.sweep_sets("pbn") == ["pbn.beta_start=0.01,0.2", "pbn.rho_lr=0.05,0.1"]
    assert tuning.sweep_runs("pbn", tuning.SPACES["pbn"]) == [tuning.sweep_sets("pbn")]  # one run, a product


def test_tied_options_take_one_value_per_run_and_count_once():
    """A space key "a+b" sets both options to each value: one bench run per value (a --set list would
    sweep their product), the untied keys still a product inside each run; four configurations."""
    space = {"beta_start+beta_end": [1e-4, 1e-3], "rho_lr": [0.05, 0.1]}
    tuning.check_spaces({"pbn": space})
    assert tuning.tuned_options(space) == ["beta_start", "beta_end", "rho_lr"]
    assert tuning.sweep_runs("pbn", space) == [
        ["pbn.beta_start=0.0001", "pbn.beta_end=0.0001", "pbn.rho_lr=0.05,0.1"],
        ["pbn.beta_start=0.001", "pbn.beta_end=0.001", "pbn.rho_lr=0.05,0.1"]]
    with pytest.raises(BenchError, match="one run per tied value"):
        tuning.sweep_sets("pbn", space)
    with pytest.raises(BenchError, match="sets beta_end more than once"):
        tuning.check_spaces({"pbn": {"beta_start+beta_end": [1e-4, 1e-3], "beta_end": [0.01, 0.1]}})
    three = {"beta_start+beta_end": [1e-5, 1e-4, 1e-3, 1e-2]}
    assert tuning.at_edge(three, {"beta_start": 1e-2, "beta_end": 1e-2}) == ["beta_start+beta_end"]
    assert tuning.at_edge(three, {"beta_start": 1e-4, "beta_end": 1e-4}) == []


def test_a_suite_space_replaces_the_global_one_for_that_suite_only():
    from bench.suites import SUITES

    binary, toy = SUITES.get("camvid_binary")(), SUITES.get("toy")()
    assert tuning.space_of("pbn", binary) == {"beta_start+beta_end": [1e-6, 1e-5, 1e-4, 1e-3]}
    assert tuning.space_of("mfvi", binary) == {"beta_start+beta_end": [1e-6, 1e-5, 1e-4, 1e-3]}
    assert tuning.space_of("pbn", toy) == tuning.space_of("pbn") == tuning.SPACES["pbn"]
    assert tuning.space_of("mc_dropout", binary) == tuning.SPACES["mc_dropout"]  # no own space: the global
    for suite in SUITES.names():
        tuning.check_spaces(getattr(SUITES.get(suite), "tuning_spaces", {}))
    assert "| pbn | beta_start = beta_end 1e-06, 1e-05, 0.0001, 0.001 (camvid_binary's own space) |" in \
        tuning.spaces_markdown(binary)
    assert "own space" not in tuning.spaces_markdown(toy)


def test_tune_sweeps_a_suites_tied_space(tmp_path, monkeypatch):
    """toy smoke with a suite space tying mean-field VI's KL weights (static): every swept fit has
    beta_start = beta_end at one of the four values, and the choice is the argmin of the mean
    validation NLL among the ok candidates, recomputed here from the records."""
    from bench.suites import SUITES

    values = [1e-3, 1e-2, 0.1, 1.0]
    monkeypatch.setattr(SUITES.get("toy"), "tuning_spaces", {"mfvi": {"beta_start+beta_end": values}}, raising=False)
    out = tmp_path / "results"
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mfvi", "--out", str(out),
                 "--device", "cpu", "--threads", "1", "--quiet"]) == 0
    df = load_records(out, "toy")
    val = df[(df["kind"] == "val") & (df["method"] == "mfvi")]
    pairs = sorted((c["beta_start"], c["beta_end"]) for c in val["method_config"])
    assert pairs == [(v, v) for v in values]
    entry = json.loads((out / "toy" / "tuning" / "smoke.json").read_text())["methods"]["mfvi"]
    assert entry["space"] == {"beta_start+beta_end": values}
    (choice,) = entry["choices"]
    nll = {r["method_config"]["beta_start"]: r["metrics.nll"] for _, r in val.iterrows()}
    verdict = {r["values"]["beta_start"]: r["validity"] for r in choice["candidates"]}
    assert len(verdict) == 4
    pool = [v for v in nll if verdict[v] == "ok"] or list(nll)
    best = min(pool, key=nll.get)
    assert choice["chosen"] == {"beta_start": best, "beta_end": best}
    assert choice["at_edge"] == (["beta_start+beta_end"] if best in (values[0], values[-1]) else [])


def df_epochs(out) -> int:
    """The training epochs of the records under ``out`` (one budget)."""
    (epochs,) = {tc["epochs"] for tc in load_records(out, "toy")["train_config"]}
    return epochs


def test_tune_sweeps_the_space_and_chooses_the_lowest_validation_nll(tmp_path, capsys, monkeypatch):
    """toy smoke, MC dropout: four fits (p 0.05 .. 0.3); the choice equals the argmin of the mean
    validation NLL recomputed here from the records (among the candidates whose verdict is ok). Once
    the suite gives MC dropout another space, the tuning table, the leaderboard and the report say
    that the stored choice is not the protocol's of now (and no longer call it an edge)."""
    out = tmp_path / "results"
    rc = main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out),
               "--device", "cpu", "--threads", "1", "--quiet"])
    assert rc == 0
    doc = json.loads((out / "toy" / "tuning" / "smoke.json").read_text())
    assert doc["configs_per_method"] == 4 and list(doc["methods"]) == ["mc_dropout"]
    entry = doc["methods"]["mc_dropout"]
    assert entry["space"] == {"p": [0.05, 0.1, 0.2, 0.3]} and len(entry["choices"]) == 1
    # the training budget the choice was made at (scripts/tuned_options.py refuses it at another), and
    # the data it was fitted and validated on (bench.tuning.other_split_notes reads its validation split)
    assert entry["train"]["epochs"] == df_epochs(out)
    assert isinstance(entry["data"], dict) and "eval_batch_size" not in entry["data"]
    choice = entry["choices"][0]
    df = load_records(out, "toy")
    val = df[(df["kind"] == "val") & (df["method"] == "mc_dropout")]
    assert sorted({c["p"] for c in val["method_config"]}) == [0.05, 0.1, 0.2, 0.3]
    means = {}
    for _, r in val.iterrows():
        means.setdefault(r["method_config"]["p"], []).append(r["metrics.nll"])
    means = {p: sum(v) / len(v) for p, v in means.items()}
    verdict = {r["values"]["p"]: r["validity"] for r in choice["candidates"]}
    pool = [p for p in means if verdict[p] == "ok"] or list(means)
    assert choice["chosen"] == {"p": min(pool, key=means.get)}
    assert choice["chosen_among_valid"] == any(v == "ok" for v in verdict.values())
    table = capsys.readouterr().out
    assert "| mc_dropout |" in table and "tuning:" in table
    # choosing again from the stored records (no training) gives the same
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out),
                 "--select-only"]) == 0
    assert json.loads((out / "toy" / "tuning" / "smoke.json").read_text())["methods"] == doc["methods"]
    # ... and under other --set options than the sweep's it is refused, the stored entry untouched
    stored_text = (out / "toy" / "tuning" / "smoke.json").read_text()
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out),
                 "--select-only", "--set", "train.epochs=1"]) == 2
    assert "was swept with no --set" in capsys.readouterr().err
    assert (out / "toy" / "tuning" / "smoke.json").read_text() == stored_text
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown"]) == 0
    capsys.readouterr()
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown",
                 "--candidates", "mc_dropout"]) == 0
    cands = capsys.readouterr().out
    assert cands.count("**chosen**") == 1 and len([x for x in cands.splitlines() if x.startswith("| 0.")]) == 4
    assert f"| {choice['chosen']['p']} |" in next(x for x in cands.splitlines() if "**chosen**" in x)
    # a configuration outside the space (an earlier sweep's): ranked by default, never with --chosen-only
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--set", "mc_dropout.p=0.45",
                 "--out", str(out), "--device", "cpu", "--threads", "1", "--quiet", "--no-report"]) == 0
    # the leaderboard with --chosen-only ranks the chosen configuration alone of the five
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(out), "--out", str(tmp_path / "lb"), "--include-smoke",
                 "--chosen-only", "--print-tables"]) == 0
    board = capsys.readouterr().out
    rows = [line for line in board.splitlines() if line.startswith("| mc_dropout")]
    assert len(rows) == 1, rows
    edge_note = "mc_dropout: its tuning chose the edge of the swept range"
    assert (edge_note in board) == bool(choice["at_edge"]), (choice, board)  # named exactly when at an edge
    assert main(["leaderboard", "--results", str(out), "--out", str(tmp_path / "lb"), "--include-smoke",
                 "--print-tables"]) == 0
    every = capsys.readouterr().out
    assert len([line for line in every.splitlines() if line.startswith("| mc_dropout")]) == 5
    assert (edge_note in every) == bool(choice["at_edge"])  # and on the board of every configuration
    # the report ranks the chosen configuration and lists the other four apart, unranked
    from bench.reporting import build_report

    (page,) = build_report(out, tmp_path / "rep")
    md = page.with_name("README.md").read_text()
    ranked, _, apart = md.partition("Configurations the tuning did not choose (not ranked)")
    assert apart, "no table of the configurations the tuning did not choose"
    first_board = ranked.split("What the table shows")[0]
    assert (edge_note in first_board) == bool(choice["at_edge"])
    assert len([x for x in first_board.splitlines() if x.startswith("| mc_dropout")]) == 1
    apart_table = apart.split("\n\n#")[0]
    assert len([x for x in apart_table.splitlines() if x.startswith("| mc_dropout")]) == 4
    # the suite moves MC dropout's space: the stored choice is another space's
    from bench.suites import SUITES

    monkeypatch.setattr(SUITES.get("toy"), "tuning_spaces", {"mc_dropout": {"p": [0.1, 0.2, 0.3, 0.4]}},
                        raising=False)
    stale_note = "mc_dropout: its stored `bench tune` choice was made over another space than the suite gives"
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown"]) == 0
    (row,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| mc_dropout")]
    assert "the suite gives mc_dropout another space now (p 0.1, 0.2, 0.3, 0.4)" in row and "at the edge" not in row
    assert main(["leaderboard", "--results", str(out), "--out", str(tmp_path / "lb"), "--include-smoke",
                 "--chosen-only", "--print-tables"]) == 0
    board = capsys.readouterr().out
    assert f"{stale_note} mc_dropout now (p 0.05, 0.1, 0.2, 0.3; now p 0.1, 0.2, 0.3, 0.4)" in board
    assert edge_note not in board
    (page,) = build_report(out, tmp_path / "rep")
    assert stale_note in page.with_name("README.md").read_text().split("What the table shows")[0]


def test_validation_first_scores_the_chosen_candidate_alone_on_every_set(tmp_path, capsys):
    """bench tune --validation-first (toy smoke, MC dropout): every candidate is scored on the validation
    and clean test sets only (what the choice and the verdicts read), then the chosen one on every set,
    from its fitted checkpoint (four fits, not five); the choice and the chosen records are those of a
    tune that scores every candidate on every set."""
    out, full = tmp_path / "first", tmp_path / "full"
    argv = ["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--device", "cpu",
            "--threads", "1", "--quiet"]
    assert main([*argv, "--out", str(out), "--validation-first"]) == 0
    assert main([*argv, "--out", str(full)]) == 0
    entry = json.loads((out / "toy" / "tuning" / "smoke.json").read_text())["methods"]["mc_dropout"]
    other = json.loads((full / "toy" / "tuning" / "smoke.json").read_text())["methods"]["mc_dropout"]
    assert entry["evaluated"] == tuning.VALIDATION_FIRST and "evaluated" not in other
    assert entry["choices"] == other["choices"]
    chosen = entry["choices"][0]["chosen"]["p"]
    capsys.readouterr()
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(out), "--markdown"]) == 0
    assert "validation first |" in capsys.readouterr().out

    def kinds(results):
        df = load_records(results, "toy")
        df = df[df["method"] == "mc_dropout"]
        return df, {p: set(g["kind"]) for p, g in df.groupby(df["method_config"].map(lambda c: c["p"]))}

    df, got = kinds(out)
    full_df, every = kinds(full)
    assert len(got) == 4 and every[chosen] > {"val", "id"}
    assert got[chosen] == every[chosen] and all(k == {"val", "id"} for p, k in got.items() if p != chosen)
    events = [json.loads(line) for f in (out / "toy" / "events").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert sum(e["event"] == "fitted" and e["method"] == "mc_dropout" for e in events) == 4
    ours = df[df["method_config"].map(lambda c: c["p"]) == chosen].set_index(["kind", "shift", "severity"])
    theirs = full_df[full_df["method_config"].map(lambda c: c["p"]) == chosen].set_index(["kind", "shift", "severity"])
    assert ours["fit_digest"].nunique() == 1
    assert ours["metrics.nll"].sort_index().tolist() == pytest.approx(theirs["metrics.nll"].sort_index().tolist())
    capsys.readouterr()  # the board says why the rows of the candidates not chosen have no shift columns
    assert main(["leaderboard", "--results", str(out), "--out", str(tmp_path / "lb"), "--include-smoke",
                 "--print-tables"]) == 0
    board = capsys.readouterr().out
    assert "mc_dropout: tuned validation first (bench tune --validation-first)" in board
    no_shift = [line for line in board.splitlines() if line.startswith("| mc_dropout") and "| – | – |" in line]
    assert len(no_shift) == 3
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out),
                 "--only-sets", "val,test", "--quiet"]) == 2
    assert "--only-sets test: valid kinds are id, val, shift, ood" in capsys.readouterr().err


def test_a_run_of_the_validation_set_alone_fits_and_scores_it(tmp_path):
    """bench run --only-sets val (and shift alone) on a classification suite: the cell's cost probe and
    its verdict read the clean test set, which the run does not score, so it must stay at hand; every
    cell used to fail on it (StopIteration). Then a full run adds the other sets from the checkpoint."""
    from conftest import make_fake_mnist

    root = make_fake_mnist(tmp_path / "data")
    out = tmp_path / "results"
    argv = ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
            "--methods", "deterministic,mc_dropout", "--seeds", "0", "--quiet", "--no-report", "--threads", "1"]
    assert main([*argv, "--only-sets", "val"]) == 0
    df = load_records(out, "mnist_rotated")
    assert set(df["status"]) == {"ok"} and set(df["kind"]) == {"val"} and len(df) == 2
    assert main([*argv, "--only-sets", "shift"]) == 0
    df = load_records(out, "mnist_rotated")
    assert set(df["status"]) == {"ok"} and set(df["kind"]) == {"val", "shift"}
    assert main(argv) == 0
    df = load_records(out, "mnist_rotated")
    assert set(df["status"]) == {"ok"} and {"id", "ood"} <= set(df["kind"])
    assert df.groupby("method")["fit_digest"].nunique().max() == 1  # one fit each, evaluated in three runs


def test_a_tune_of_another_objective_keeps_its_own_choice_beside_the_profiles(tmp_path, capsys):
    """bench tune with a method option held away from the profile's (here MC dropout's sample count;
    on camvid_binary the class-weighted ELBO) chooses among its own fits and stores the choice under
    its own key, ``mc_dropout[samples=3]``, with its selection file: the profile objective's entry and
    file stay as they were; --chosen-only keeps one configuration per objective; the profile
    objective's choice (chosen_options) is still the first tune's."""
    from bench import tuning

    out = tmp_path / "results"
    common = ["--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out), "--quiet"]
    assert main(["tune", *common, "--device", "cpu", "--threads", "1"]) == 0
    path = out / "toy" / "tuning" / "smoke.json"
    first = json.loads(path.read_text())["methods"]["mc_dropout"]
    selections = sorted(p.name for p in (out / "toy" / "selections").rglob("*.json"))
    assert len(selections) == 1
    assert main(["tune", *common, "--device", "cpu", "--threads", "1", "--set", "mc_dropout.samples=3"]) == 0
    doc = json.loads(path.read_text())["methods"]
    assert doc["mc_dropout"] == first                                      # untouched by the second tune
    other = doc["mc_dropout[samples=3]"]
    assert other["method"] == "mc_dropout" and other["fixed"] == {"samples": 3}
    assert len(other["choices"][0]["candidates"]) == 4
    df = load_records(out, "toy")
    cfg = {h: c for h, c in zip(df["config_hash"], df["method_config"])}
    assert cfg[other["choices"][0]["chosen_config_hash"]]["samples"] == 3   # chosen among its own fits
    assert cfg[first["choices"][0]["chosen_config_hash"]]["samples"] == 20
    assert sorted(p.name for p in (out / "toy" / "selections").rglob("*.json")) == sorted(
        [*selections, "mc_dropout-p-mc_dropout_samples=3_.json"])
    key = ("toy", "smoke", "mlp_100", "mc_dropout")
    assert tuning.chosen_configs([out])[key] == {first["choices"][0]["chosen_config_hash"],
                                                 other["choices"][0]["chosen_config_hash"]}
    assert tuning.chosen_options([out])[key] == first["choices"][0]["chosen"]
    assert tuning.objective_choices([out])[key] == [({"samples": 3}, other["choices"][0]["chosen"])]
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(out), "--out", str(tmp_path / "lb"), "--include-smoke",
                 "--chosen-only", "--print-tables"]) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| mc_dropout")]
    assert len(rows) == 2, rows
    # a second results directory's tuning of the same objectives replaces the first's, one choice each
    import shutil

    shutil.copytree(out / "toy" / "tuning", tmp_path / "later" / "toy" / "tuning")
    later = json.loads((tmp_path / "later" / "toy" / "tuning" / "smoke.json").read_text())
    for entry in later["methods"].values():
        entry["choices"][0]["chosen_config_hash"] = "f" * 10
    (tmp_path / "later" / "toy" / "tuning" / "smoke.json").write_text(json.dumps(later))
    assert tuning.chosen_configs([out, tmp_path / "later"])[key] == {"f" * 10}
    assert len(tuning.objective_choices([out, tmp_path / "later"])[key]) == 1
    # a --set at the profile's own value is the profile's objective
    assert tuning.fixed_options("mc_dropout", ["mc_dropout.samples=20", "seeds=0"], {"p": 0.1, "samples": 20}) == {}


@pytest.mark.parametrize("args, words", [
    (["--methods", "laplace_diag"], "tuned inside their fit"),
    (["--profile", "nope"], "valid: smoke, quick, paper"),
    (["--set", "mc_dropout.p=0.5"], "sweeps these options itself"),
    (["--markdown"], "no stored tuning"),
    (["--candidates", "mc_dropout"], "goes with --markdown"),
])
def test_bad_input_exits_2_and_writes_nothing(args, words, tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(out),
                 *args]) == 2
    assert words in capsys.readouterr().err and not out.exists()


def test_a_choice_among_fewer_configurations_than_the_space_says_so():
    cand = [{"values": {"p": 0.1}, "config_hash": "a", "score": 0.5, "per_seed": {0: 0.5}, "validity": "ok"}]
    choice = {"model": "m", "chosen": {"p": 0.1}, "chosen_config_hash": "a", "seeds": [0], "metric": "validation nll",
              "candidates": cand, "chosen_among_valid": True}
    entry = tuning.summarize("mc_dropout", [choice])
    assert "3 of 4 configurations have no records" in entry["choices"][0]["why"]
    full = {**choice, "candidates": cand * 4}
    assert "why" not in tuning.summarize("mc_dropout", [full])["choices"][0]


def test_candidates_are_this_sweeps_configurations_only():
    """bench tune chooses among the configurations its sweep wrote: an earlier sweep's records in the
    same results (another fixed option, the same value spelled 1 instead of 1.0) are not candidates;
    a record made before a later option existed matches that option's earlier behaviour."""
    import pandas as pd

    from bench.selection import choose_on_validation

    rows = []
    space = [{"beta_start": b, "rho_lr": 0.05, "prior_scale": 1.0, "kl_scale": "dataset"} for b in (0.01, 0.2)]
    cfgs = {"new-a": space[0], "new-b": space[1],
            "old-int": {"beta_start": 0.2, "rho_lr": 0.05, "prior_scale": 1, "kl_scale": "dataset"},  # earlier sweep
            "old-prior": {"beta_start": 0.01, "rho_lr": 0.05, "prior_scale": 0.1, "kl_scale": "dataset"},
            "before-kl-scale": {"beta_start": 0.2, "rho_lr": 0.05, "prior_scale": 1.0}}
    nll = {"new-a": 0.30, "new-b": 0.20, "old-int": 0.01, "old-prior": 0.02, "before-kl-scale": 0.25}
    for h, cfg in cfgs.items():
        for seed in (0, 1):
            rows.append({"kind": "val", "status": "ok", "method": "pbn", "model": "m", "profile": "quick",
                         "config_hash": h, "method_config": cfg, "seed": seed, "metrics.nll": nll[h]})
    df = pd.DataFrame(rows)
    (c,) = choose_on_validation(df, "pbn", ("beta_start",), configs=space, profile="quick")
    assert {r["config_hash"] for r in c["candidates"]} == {"new-a", "new-b"} and c["chosen_config_hash"] == "new-b"
    # the record without kl_scale is this sweep's configuration when kl_scale's earlier behaviour is "dataset"
    choices = choose_on_validation(df, "pbn", ("beta_start",), configs=space, profile="quick",
                                   later={"kl_scale": "dataset"})
    assert {r["config_hash"] for c in choices for r in c["candidates"]} == {"new-a", "new-b", "before-kl-scale"}
    # without the restriction every group is a choice (the earlier behaviour)
    assert len(choose_on_validation(df, "pbn", ("beta_start",))) > 1
    with pytest.raises(BenchError, match="no validation records"):   # another profile's sweep: none
        choose_on_validation(df, "pbn", ("beta_start",), configs=space, profile="smoke")


def test_a_choice_at_an_edge_of_the_space_is_a_note_of_its_board(tmp_path):
    """The leaderboard and report note of a tuned method whose choice is an end of a swept range of
    three or more values (here the smallest p and the largest kl_weight); an interior choice, and a
    two-valued option (every value an end), give none."""
    def choice(values, h):
        cand = [{"values": values, "config_hash": h, "score": 0.5, "per_seed": {0: 0.5}, "validity": "ok"}] * 4
        return {"model": "m", "chosen": values, "chosen_config_hash": h, "seeds": [0], "metric": "validation nll",
                "candidates": cand, "chosen_among_valid": True}

    entries = {"mc_dropout": tuning.summarize("mc_dropout", [choice({"p": 0.05}, "a")]),
               "vdp": tuning.summarize("vdp", [choice({"kl_weight": 0.1}, "b")]),
               "pbn": tuning.summarize("pbn", [choice({"beta_start": 0.01, "rho_lr": 0.05}, "c")])}
    tuning.write_tuning(tmp_path, "toy", "quick", entries, {})
    notes = tuning.choice_notes([tmp_path])
    assert list(notes) == [("toy", "quick", "m")]
    # the two-value corner: no edge, but a note that no probe weighed it
    ((_, pbn),) = [(m, n) for m, n in notes[("toy", "quick", "m")] if m == "pbn"]
    assert "chose the edge" not in pbn and ("an end of a two-value range (beta_start = 0.01, the smaller of 0.01, "
                                            "0.2, rho_lr = 0.05, the smaller of 0.05, 0.1)") in pbn
    ((m1, mc), (m2, vdp)) = [(m, n) for m, n in notes[("toy", "quick", "m")] if m != "pbn"]
    assert (m1, m2) == ("mc_dropout", "vdp")
    assert mc.startswith("mc_dropout:") and "p = 0.05, the smallest of 0.05, 0.1, 0.2, 0.3" in mc
    assert vdp.startswith("vdp:") and "kl_weight = 0.1, the largest of 0.0001, 0.001, 0.01, 0.1" in vdp
    entries["mc_dropout"] = tuning.summarize("mc_dropout", [choice({"p": 0.2}, "a")])
    tuning.write_tuning(tmp_path, "toy", "quick", entries, {})
    edges = tuning.choice_notes([tmp_path])
    assert [m for m, _ in edges[("toy", "quick", "m")]] == ["pbn", "vdp"]
    # a board says the notes of the methods with rows on it, and only those
    from types import SimpleNamespace

    board = SimpleNamespace(suite="toy", profile="quick", model="m", methods={"vdp", "deterministic"})
    assert tuning.board_choice_notes(edges, board) == [edges[("toy", "quick", "m")][1][1]]
    assert tuning.board_choice_notes(edges, SimpleNamespace(suite="toy", profile="quick", model="m",
                                                          methods={"mc_dropout"})) == []
    assert tuning.board_choice_notes(edges, SimpleNamespace(suite="toy", profile="quick", model="other",
                                                          methods={"vdp"})) == []


def test_a_probe_past_the_edge_decides_whether_the_choice_is_one(tmp_path):
    """A two-value corner whose probe passes its checks at a lower validation NLL is an edge of its board
    (the probe named); one whose probes the choice holds against, or that fails its checks, is not; a
    four-value end the probe does not beat is no edge any more; a probe not weighed leaves the rule of
    three values."""
    def choice(values, h, probes):
        cand = [{"values": values, "config_hash": h, "score": 0.5, "per_seed": {0: 0.5}, "validity": "ok"}] * 4
        return {"model": "m", "chosen": values, "chosen_config_hash": h, "seeds": [0], "metric": "validation nll",
                "candidates": cand, "chosen_among_valid": True, "edge_probes": probes}

    def probe(key, value, score, validity="ok"):
        return {"key": key, "end": "largest", "values": {key: value}, "config_hash": "x", "seeds": [0],
                "per_seed": {0: score}, "score": score, "validity": validity, "choice_score": 0.5,
                "beats_choice": validity == "ok" and score < 0.5}

    pbn = {"beta_start": 0.01, "rho_lr": 0.1}
    cases = {  # method -> (choice, the edge its board names or None)
        "pbn": (choice(pbn, "c", [probe("beta_start", 5e-4, 0.6), probe("rho_lr", 0.2, 0.4)]), "rho_lr = 0.1"),
        "mfvi": (choice({"beta_start": 0.01, "rho_lr": 0.05}, "d",
                        [probe("beta_start", 5e-4, 0.3, "fail"), probe("rho_lr", 0.25, 0.7)]), None),
        "vdp": (choice({"kl_weight": 0.1}, "b", [probe("kl_weight", 1.0, 0.6)]), None),
        "mc_dropout": (choice({"p": 0.3}, "a", [{"key": "p", "end": "largest", "values": {"p": 0.45},
                                                  "not_scored": "no validation records of the probe"}]), "p = 0.3"),
    }
    entries = {m: tuning.summarize(m, [c]) for m, (c, _) in cases.items()}
    tuning.write_tuning(tmp_path, "toy", "quick", entries, {})
    notes = dict(tuning.choice_notes([tmp_path])[("toy", "quick", "m")])
    assert sorted(notes) == sorted(m for m, (_, edge) in cases.items() if edge)
    for m, (_, edge) in cases.items():
        if edge:
            assert f"({edge}, the largest of" in notes[m]
    assert "one step past it, 0.2 passes its checks at a lower validation NLL (0.4 against 0.5)" in notes["pbn"]
    assert "beta_start" not in notes["pbn"]
    markdown = tuning.tuning_markdown(json.loads(tuning.tuning_path(tmp_path, "toy", "quick").read_text()))
    (mfvi_row,) = [x for x in markdown.splitlines() if x.startswith("| mfvi")]
    assert "at the edge" not in mfvi_row and "beta_start 0.0005 scores 0.3 against the choice's 0.5, fails its " \
                                              "checks (fail)" in mfvi_row and "rho_lr 0.25 scores 0.7" in mfvi_row


def test_a_probe_on_another_fit_of_the_map_network_is_not_weighed():
    """PBN starts from its seed's MAP network: a probe fitted on another fit of it (a network trained again)
    is not weighed against the choice (no score, the reason said), and on the same fit it is."""
    import pandas as pd

    from methods import METHODS

    d = METHODS.get("pbn").defaults
    chosen, past = {"beta_start": 0.01, "rho_lr": 0.1}, {"rho_lr": 0.2}
    configs = [{**d, **chosen}, {**d, **chosen, **past}]

    def records(shas):
        rows = []
        for h, cfg, sha, nll in zip(("choice", "probe"), configs, shas, (0.5, 0.4)):
            for kind in ("val", "id"):
                rows.append({"kind": kind, "status": "ok", "method": "pbn", "model": "m", "profile": "quick",
                             "config_hash": h, "method_config": cfg, "seed": 0, "metrics.nll": nll,
                             "validity.status": "ok", "finished_at": f"2026-12-07T00:00:0{len(rows)}",
                             "diagnostics": {"map_training": {"network_sha": sha, "val_nll": [1.0]}}})
        return pd.DataFrame(rows)

    choice = {"model": "m", "chosen": chosen}
    probe = {"key": "rho_lr", "end": "largest", "values": past}
    (same,) = tuning.score_edge_probes(records(["a", "a"]), "pbn", ["beta_start", "rho_lr"], choice, [probe], configs,
                                       profile="quick")
    assert same["beats_choice"] and same["score"] == 0.4 and same["choice_score"] == 0.5
    (other,) = tuning.score_edge_probes(records(["a", "b"]), "pbn", ["beta_start", "rho_lr"], choice, [probe], configs,
                                        profile="quick")
    assert "score" not in other and other["not_scored"] == "the probe and the choice stand on different fits of the " \
                                                           "MAP network"



def test_a_probe_of_a_method_built_on_the_map_network_is_weighed_on_one_fit_of_it(tmp_path, monkeypatch, capsys):
    """toy smoke PBN, every verdict ok: with the MAP networks of the tune kept, --probe-edges fits and weighs
    its probes on them; with them removed it writes nothing beside the tune's records (no probe record, no
    MAP network trained again there) and fits the probes and the choice again in the store beside
    (tuning.refit_root), on networks trained there, and weighs them against that refit, seed by seed; under
    --select-only without that store it says why nothing is weighed. A probe the tune's records hold on the
    choice's networks is weighed there; only the others are fitted beside."""
    import shutil

    from bench.selection import choose_on_validation
    from bench.validity import attach_validity

    _all_valid(monkeypatch)
    argv = ["tune", "--suite", "toy", "--profile", "smoke", "--methods", "pbn", "--device", "cpu", "--threads", "1",
            "--quiet"]

    def choice(out):
        (c,) = json.loads((out / "toy" / "tuning" / "smoke.json").read_text())["methods"]["pbn"]["choices"]
        return c

    kept, lost = tmp_path / "kept", tmp_path / "lost"
    for out in (kept, lost):
        assert main([*argv, "--out", str(out)]) == 0
    n_records = len(load_records(lost))
    shutil.rmtree(lost / "toy" / "checkpoints" / "map")
    for out in (kept, lost):
        assert main([*argv, "--out", str(out), "--probe-edges"]) == 0
    assert len(choice(kept)["edge_probes"]) == 2 and all("score" in p and "choice_refit" not in p
                                                         for p in choice(kept)["edge_probes"])
    assert not tuning.refit_root(kept).exists()
    assert len(load_records(lost)) == n_records and not (lost / "toy" / "checkpoints" / "map").exists()
    refit = tuning.refit_root(lost)
    assert refit.parent == lost.parent  # a store of its own: a reading of every suite under lost reads none of it
    assert list((refit / "toy" / "checkpoints" / "map").rglob("seed0.pt"))
    c, board = choice(lost), choice(kept)
    df = attach_validity(load_records(refit, "toy"))
    (again,) = df[df.config_hash == c["chosen_config_hash"]].groupby("config_hash")["seed"].nunique()
    assert again == len(c["seeds"])  # the choice, fitted again beside its probes on every seed
    for p in c["edge_probes"]:
        assert p["choice_refit"] == "the tune's MAP networks of seed(s) 0 are not kept: the probes and the choice " \
                                   "fitted again on networks trained in <results>-edge-probes"
        (both,) = choose_on_validation(df, "pbn", ["beta_start", "rho_lr"], model=c["model"], profile="smoke",
                                       configs=[r["method_config"] for r in (df[df.config_hash == h].iloc[0]
                                                                             for h in (c["chosen_config_hash"],
                                                                                       p["config_hash"]))])
        scores = {r["config_hash"]: r["score"] for r in both["candidates"]}
        assert p["score"] == pytest.approx(scores[p["config_hash"]])
        assert p["choice_score"] == pytest.approx(scores[c["chosen_config_hash"]])
    assert "against the refitted choice's" in tuning.probe_text(c)
    capsys.readouterr()
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(lost), "--markdown",
                 "--candidates", "pbn"]) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if "(not a candidate)" in x]
    assert len(rows) == 2 and all(f"weighed against the choice fitted again beside it, {p['choice_score']:.4f} ("
                                  in x for x, p in zip(rows, c["edge_probes"])), rows
    assert main([*argv, "--out", str(lost), "--select-only", "--probe-edges"]) == 0  # weighed again from there
    assert [p.get("score") for p in choice(lost)["edge_probes"]] == [p["score"] for p in c["edge_probes"]]
    shutil.rmtree(refit)
    assert main([*argv, "--out", str(lost), "--select-only", "--probe-edges"]) == 0
    assert len(choice(lost)["edge_probes"]) == 2 and all(p["not_scored"].startswith("not fitted: the tune's MAP "
                                                                                    "networks of seed(s) 0 are not")
                                                         for p in choice(lost)["edge_probes"])
    assert board["chosen_config_hash"] == c["chosen_config_hash"]
    # a probe the tune's records weigh on the networks its choice stood on is weighed there, not fitted again
    # beside: with kept's MAP networks removed and one probe's records with them, only that probe and the
    # choice are fitted in the store beside
    shutil.rmtree(kept / "toy" / "checkpoints" / "map")
    gone, stays = board["edge_probes"]
    (folder,) = [d for d in (kept / "toy" / "records").rglob(f"pbn-{gone['config_hash']}") if d.is_dir()]
    shutil.rmtree(folder)
    assert main([*argv, "--out", str(kept), "--probe-edges"]) == 0
    again, beside = choice(kept)["edge_probes"], tuning.refit_root(kept)
    assert again[1] == stays and "choice_refit" in again[0] and again[0]["config_hash"] == gone["config_hash"]
    assert set(load_records(beside, "toy")["config_hash"]) == {board["chosen_config_hash"], gone["config_hash"]}


def test_a_probe_within_the_seed_noise_of_the_choice_does_not_make_it_an_edge():
    """Over two or more seeds a probe beats the choice only beyond the seed noise (a two-sided paired t-test
    at the boards' level, checked here against scipy's): a lower mean inside it is a tie, the choice holds;
    consistently lower, it beats the choice."""
    import pandas as pd
    from scipy.stats import ttest_rel

    from bench.leaderboard.stats import ALPHA

    cfgs = [{"p": 0.3}, {"p": 0.45}]

    def weigh(choice_nll, probe_nll):
        rows = [{"kind": kind, "status": "ok", "method": "mc_dropout", "model": "m", "profile": "quick",
                 "config_hash": h, "method_config": cfg, "seed": seed, "metrics.nll": nll, "validity.status": "ok"}
                for h, cfg, nlls in (("c", cfgs[0], choice_nll), ("p", cfgs[1], probe_nll))
                for seed, nll in enumerate(nlls) for kind in ("val", "id")]
        (p,) = tuning.score_edge_probes(pd.DataFrame(rows), "mc_dropout", ["p"], {"model": "m", "chosen": cfgs[0]},
                                        [{"key": "p", "end": "largest", "values": cfgs[1]}], cfgs, profile="quick")
        return p

    noisy = weigh([0.50, 0.50, 0.50], [0.45, 0.52, 0.49])  # lower on average, not beyond the noise
    expected = ttest_rel([0.45, 0.52, 0.49], [0.50, 0.50, 0.50]).pvalue
    assert noisy["score"] < noisy["choice_score"] and noisy["p_value"] == pytest.approx(expected)
    assert expected >= ALPHA and not noisy["beats_choice"]
    steady = weigh([0.50, 0.52, 0.48], [0.40, 0.421, 0.379])
    assert steady["p_value"] == pytest.approx(ttest_rel([0.40, 0.421, 0.379], [0.50, 0.52, 0.48]).pvalue)
    assert steady["p_value"] < ALPHA and steady["beats_choice"]
    space = {"p": [0.05, 0.1, 0.2, 0.3]}
    held = {"model": "m", "chosen": cfgs[0], "at_edge": ["p"], "edge_probes": [noisy]}
    assert tuning.edge_keys(space, held) == [] and "tied within the seed noise (paired t-test p" in tuning.probe_text(held)
    assert tuning.edge_keys(space, {**held, "edge_probes": [steady]}) == ["p"]


def test_tuning_one_method_keeps_the_others_entries(tmp_path):
    from bench.tuning import write_tuning

    write_tuning(tmp_path, "toy", "smoke", {"mc_dropout": {"choices": []}, "vdp": {"choices": []}}, {}, ["a=1"])
    path = write_tuning(tmp_path, "toy", "smoke", {"vdp": {"choices": [1]}}, {"pbn": "no records"}, ["b=2"])
    doc = json.loads(path.read_text())
    assert doc["methods"]["mc_dropout"] == {"choices": [], "sets": ["a=1"]}      # kept, with its own --set
    assert doc["methods"]["vdp"] == {"choices": [1], "sets": ["b=2"]}            # replaced by this run's
    assert doc["not_chosen"] == {"pbn": "no records"}


def test_markdown_of_an_unknown_suite_names_the_valid_ones(tmp_path, capsys):
    assert main(["tune", "--suite", "nope", "--profile", "quick", "--out", str(tmp_path), "--markdown"]) == 2
    err = capsys.readouterr().err
    assert "unknown suite 'nope'" in err and "mnist_rotated" in err


def test_controls_of_a_kept_configuration_are_found_by_their_options():
    """``--with-controls``: of the records a board keeps, the method's CONTROLS (PBN: a random
    subnetwork, no stochastic weight) with every other option, the training and the data the same
    are added with a note; a rejected candidate's control, a control trained differently and one of
    another model are not."""
    import pandas as pd

    chosen = {"beta_start": 0.01, "rho_lr": 0.05, "criterion": "gradient", "n_bayes": None, "r_bayes": 0.01}
    train, data = {"epochs": 10, "lr": 0.05}, {"subset": None}

    def row(h, label, opts, model="m", tr=train):
        return {"suite": "s", "profile": "quick", "model": model, "method": "pbn", "config_hash": h,
                "method_label": label, "method_config": opts, "train_config": tr, "data_config": data, "seed": 0}

    rows = [row("c", "pbn[chosen]", chosen),
            row("r", "pbn[random]", {**chosen, "criterion": "random"}),
            row("f", "pbn[finetune]", {**chosen, "n_bayes": 0}),
            row("x", "pbn[rejected]", {**chosen, "rho_lr": 0.01}),
            row("xr", "pbn[rejected random]", {**chosen, "rho_lr": 0.01, "criterion": "random"}),
            row("t", "pbn[random, 20 epochs]", {**chosen, "criterion": "random"}, tr={**train, "epochs": 20}),
            row("o", "pbn[random, other model]", {**chosen, "criterion": "random"}, model="other"),
            row("mg", "pbn[magnitude]", {**chosen, "criterion": "magnitude"})]
    df = pd.DataFrame(rows + [{**r, "seed": 1} for r in rows])
    kept = df["config_hash"] == "c"
    mask, notes = tuning.control_rows(df, kept)
    assert sorted(set(df.loc[mask, "config_hash"])) == ["f", "r"] and mask.sum() == 4
    assert [n.split(":")[0] for n in notes[("s", "quick", "m")]] == ["pbn[random]", "pbn[finetune]"]
    assert "random subnetwork (criterion=random)" in notes[("s", "quick", "m")][0]
    # a record made before an option existed counts it at its LATER_OPTIONS value
    from methods import METHODS
    later = dict(METHODS.get("pbn").LATER_OPTIONS)
    if later:
        k, v = next(iter(later.items()))
        old = df.copy()
        old["method_config"] = [{kk: vv for kk, vv in c.items() if kk != k} if h == "r" else {**c, k: v}
                                for c, h in zip(old["method_config"], old["config_hash"])]
        assert sorted(set(old.loc[tuning.control_rows(old, kept)[0], "config_hash"])) == ["f", "r"]
    # nothing kept, nothing added
    assert not tuning.control_rows(df, kept & False)[0].any()


def test_with_controls_needs_chosen_only(tmp_path, capsys):
    assert main(["leaderboard", "--results", str(tmp_path), "--with-controls", "--out", str(tmp_path / "lb")]) == 2
    assert "--with-controls goes with --chosen-only" in capsys.readouterr().err
    assert not (tmp_path / "lb").exists()


def test_candidates_validated_on_another_split_are_not_compared():
    """Records of the same configurations validated on another split (data.val_sequences) are not
    candidates of a tune on this one: their scores are another split's (here far lower)."""
    import pandas as pd

    from bench.selection import choose_on_validation

    space = [{"p": p} for p in (0.1, 0.2)]
    rows = []
    for split, nll in (((), {0.1: 0.3, 0.2: 0.2}), (("0006R0",), {0.1: 0.01, 0.2: 0.5})):
        for cfg in space:
            for seed in (0, 1):
                rows.append({"kind": "val", "status": "ok", "method": "mc_dropout", "model": "m", "profile": "quick",
                             "config_hash": f"{cfg['p']}-{'-'.join(split)}", "method_config": cfg, "seed": seed,
                             "metrics.nll": nll[cfg["p"]], "data_config": {"size": [8, 8], "val_sequences": list(split)}
                             if split else {"size": [8, 8]}})
    df = pd.DataFrame(rows)
    (own,) = choose_on_validation(df, "mc_dropout", ("p",), configs=space, profile="quick", val_split=())
    assert own["chosen"] == {"p": 0.2} and len(own["candidates"]) == 2
    (other,) = choose_on_validation(df, "mc_dropout", ("p",), configs=space, profile="quick", val_split=("0006R0",))
    assert other["chosen"] == {"p": 0.1} and {r["config_hash"] for r in other["candidates"]} == {"0.1-0006R0", "0.2-0006R0"}
