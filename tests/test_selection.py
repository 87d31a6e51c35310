"""The one tuning protocol (bench/selection.py): argmin of the mean validation NLL over shared
seeds, among configurations that differ only in the tuned options; test sets never consulted."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.errors import BenchError
from bench.selection import choose_on_validation, write_selection


def _rec(kind, lr, prior, seed, nll, h=None):
    return {"kind": kind, "status": "ok", "method": "pbn", "model": "m", "seed": seed, "metrics.nll": nll,
            "method_config": {"lr": lr, "prior": prior}, "config_hash": h or f"{lr}-{prior}"}


def test_chooses_the_argmin_of_mean_validation_nll_per_untuned_group():
    rows = [
        # prior 1: lr 0.1 has the best seed but the worse mean (0.50 vs 0.45)
        _rec("val", 0.1, 1, 0, 0.30), _rec("val", 0.1, 1, 1, 0.70),
        _rec("val", 0.01, 1, 0, 0.40), _rec("val", 0.01, 1, 1, 0.50),
        # prior 2: a separate choice; seed 2 exists for one candidate only and is ignored
        _rec("val", 0.1, 2, 0, 0.20), _rec("val", 0.1, 2, 1, 0.20),
        _rec("val", 0.01, 2, 0, 0.90), _rec("val", 0.01, 2, 1, 0.90), _rec("val", 0.01, 2, 2, 0.0),
        # test-set records that would choose the other way are never consulted
        _rec("id", 0.1, 1, 0, 0.0), _rec("id", 0.1, 1, 1, 0.0), _rec("shift", 0.01, 2, 0, 0.0),
    ]
    df = pd.DataFrame(rows)
    choices = {c["candidates"][0]["config_hash"].split("-")[1]: c for c in choose_on_validation(df, "pbn", ["lr"])}
    assert choices["1"]["chosen"] == {"lr": 0.01} and choices["1"]["seeds"] == [0, 1]
    assert [round(r["score"], 6) for r in choices["1"]["candidates"]] == [0.45, 0.5]
    assert choices["2"]["chosen"] == {"lr": 0.1} and choices["2"]["seeds"] == [0, 1]


def test_selection_is_written_beside_the_records(tmp_path):
    df = pd.DataFrame([_rec("val", 0.1, 1, 0, 0.3), _rec("val", 0.01, 1, 0, 0.2)])
    (choice,) = choose_on_validation(df, "pbn", ["lr"])
    path = write_selection(tmp_path, "suite", choice)
    assert path.parent == tmp_path / "suite" / "selections" / "m"
    assert json.loads(path.read_text())["chosen"] == {"lr": 0.01}


def test_no_validation_records_or_unknown_option_is_an_error():
    with pytest.raises(BenchError, match="no validation records"):
        choose_on_validation(pd.DataFrame([_rec("id", 0.1, 1, 0, 0.3)]), "pbn", ["lr"])
    with pytest.raises(BenchError, match="no option"):
        choose_on_validation(pd.DataFrame([_rec("val", 0.1, 1, 0, 0.3)]), "pbn", ["temperature"])


def test_the_markdown_table_shows_every_seed_and_marks_the_lower_mean():
    from bench.selection import selection_markdown

    rows = [_rec("val", 0.1, 1, 0, 0.30), _rec("val", 0.1, 1, 1, 0.70),  # best seed, worse mean (0.50)
            _rec("val", 0.01, 1, 0, 0.40), _rec("val", 0.01, 1, 1, 0.50)]  # mean 0.45: chosen
    lines = selection_markdown(choose_on_validation(pd.DataFrame(rows), "pbn", ["lr"])).splitlines()
    assert lines[2] == "| lr | seed 0 | seed 1 | mean | validity | chosen |"
    assert lines[4] == "| 0.01 | 0.4000 | 0.5000 | 0.4500 | ok | **chosen** |"
    assert lines[5] == "| 0.1 | 0.3000 | 0.7000 | 0.5000 | ok |  |"


def test_select_markdown_writes_nothing(tmp_path, capsys):
    """`bench select --markdown` (README tables over kept records) leaves the results folder as it was."""
    from bench.cli import main

    out = tmp_path / "r"
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
                 "--methods", "mc_dropout", "--set", "mc_dropout.p=0.1,0.3", "--set", "train.epochs=20",
                 "--threads", "1"]) == 0
    before = sorted(p for p in out.rglob("*") if p.is_file())
    capsys.readouterr()
    assert main(["select", "--results", str(out), "--suite", "toy", "--method", "mc_dropout", "--tune", "p",
                 "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| p | seed 0 | mean | validity | chosen |" in text and text.count("**chosen**") == 1
    assert sorted(p for p in out.rglob("*") if p.is_file()) == before
    # an option the records never vary leaves nothing to choose: exit 2, named, nothing written
    assert main(["select", "--results", str(out), "--suite", "toy", "--method", "mc_dropout", "--tune", "samples"]) == 2
    err = capsys.readouterr().err
    assert "nothing to choose for mc_dropout" in err and "samples=" in err and "--set mc_dropout.samples=A,B" in err
    assert sorted(p for p in out.rglob("*") if p.is_file()) == before
    # the swept one is chosen and written
    assert main(["select", "--results", str(out), "--suite", "toy", "--method", "mc_dropout", "--tune", "p"]) == 0
    assert list(out.glob("toy/selections/*/mc_dropout-p.json"))


def test_a_record_made_before_a_later_option_is_a_candidate_of_the_same_sweep():
    """A record without an option added later (Method.LATER_OPTIONS) is grouped with the records
    that set it to its earlier behaviour, not chosen in a group of its own (pbn's class_weights:
    one CIFAR-10-C mfvi configuration predated it and was chosen apart from the other three)."""
    old = {**_rec("val", 0.01, 1, 0, 0.2, h="old"), "method_config": {"lr": 0.01, "prior": 1}}
    new = [{**_rec("val", 0.1, 1, 0, 0.3, h="new"), "method_config": {"lr": 0.1, "prior": 1, "class_weights": "none"}}]
    (choice,) = choose_on_validation(pd.DataFrame([old, *new]), "pbn", ["lr"])
    assert {r["config_hash"] for r in choice["candidates"]} == {"old", "new"}
    assert choice["chosen"] == {"lr": 0.01}
    # another value of the later option is another group
    other = {**new[0], "config_hash": "weighted", "method_config": {"lr": 0.1, "prior": 1, "class_weights": [1, 2]}}
    assert len(choose_on_validation(pd.DataFrame([old, *new, other]), "pbn", ["lr"])) == 2


def test_select_skips_later_runs_at_one_value_and_keeps_every_sweep_in_its_own_file(tmp_path, monkeypatch):
    """`bench select` over a results folder where, beside two sweeps of lr (prior 1 and prior 2), later runs
    hold lr at the chosen value (prior 3): those are not sweeps and do not stop the choice (they used to:
    'nothing to choose'), and the two sweeps do not overwrite each other's selection file."""
    import bench.selection as sel

    rows = [_rec("val", 0.1, 1, 0, 0.3), _rec("val", 0.01, 1, 0, 0.2),
            _rec("val", 0.1, 2, 0, 0.1), _rec("val", 0.01, 2, 0, 0.2),
            _rec("val", 0.01, 3, 0, 0.5)]
    monkeypatch.setattr(sel, "choose_from_store",
                        lambda results, suite, method, tuned, model=None, **o: choose_on_validation(
                            pd.DataFrame(rows), method, tuned, model=model))
    choices = sel.select(tmp_path, "suite", "pbn", ["lr"], swept_only=True)
    assert sorted(c["chosen"]["lr"] for c in choices) == [0.01, 0.1]
    paths = {c["path"] for c in choices}
    assert len(paths) == 2 and all(json.loads(open(p).read())["chosen"] in ({"lr": 0.01}, {"lr": 0.1}) for p in paths)
    # only later runs at one value: nothing to choose, nothing written
    rows[:] = [_rec("val", 0.01, 3, 0, 0.5)]
    with pytest.raises(BenchError, match="nothing to choose"):
        sel.select(tmp_path / "empty", "suite", "pbn", ["lr"], swept_only=True)
    assert not (tmp_path / "empty").exists()


def test_candidates_on_two_networks_of_one_name_are_not_compared():
    """A sweep rerun on a retrained backbone (another digest in the records' model identity) leaves its
    old candidates behind: the choice is made among the candidates on one network, the one with the most
    of them, and names the others'; the old network's better score does not win."""
    def rec(lr, seed, nll, net, finished):
        return {**_rec("val", lr, 1, seed, nll, h=f"{lr}-{net}"), "model_identity.backbone_sha256_16": net,
                "finished_at": finished}

    rows = [rec(0.1, 0, 0.10, "old", "2026-01-01"),                                   # best score, old network
            rec(0.1, 0, 0.50, "new", "2026-01-02"), rec(0.01, 0, 0.40, "new", "2026-01-02")]
    (c,) = choose_on_validation(pd.DataFrame(rows), "pbn", ["lr"])
    assert c["chosen"] == {"lr": 0.01} and c["network"] == "backbone_sha256_16=new"
    assert [r["config_hash"] for r in c["candidates"]] == ["0.01-new", "0.1-new"]
    assert c["other_networks"] == {"backbone_sha256_16=old": ["0.1-old"]}
    # one network: nothing left out, no network named when the records carry no identity
    (c,) = choose_on_validation(pd.DataFrame([_rec("val", 0.1, 1, 0, 0.3), _rec("val", 0.01, 1, 0, 0.2)]), "pbn",
                                ["lr"])
    assert "other_networks" not in c and "network" not in c
    from bench.selection import selection_markdown

    rows = [{**_rec("val", 0.1, 1, 0, 0.1, h="old"), "model_identity.backbone_sha256_16": "old"},
            {**_rec("val", 0.1, 1, 0, 0.5, h="a"), "model_identity.backbone_sha256_16": "new"},
            {**_rec("val", 0.01, 1, 0, 0.4, h="b"), "model_identity.backbone_sha256_16": "new"}]
    text = selection_markdown(choose_on_validation(pd.DataFrame(rows), "pbn", ["lr"]))
    assert "left out (1 on backbone_sha256_16=old)" in text.splitlines()[0]


def test_a_choice_made_on_one_network_is_not_called_mixed():
    """bench.tuning.choice_networks names the networks of a stored choice's candidates only where the
    candidates it compared span two; a choice that left the other network's candidates out compared one."""
    from bench.tuning import choice_networks

    def rec(lr, nll, net):
        return {**_rec("val", lr, 1, 0, nll, h=f"{lr}-{net}"), "model_identity.backbone_sha256_16": net,
                "finished_at": "2026-01-02"}

    df = pd.DataFrame([rec(0.1, 0.1, "old"), rec(0.1, 0.5, "new"), rec(0.01, 0.4, "new")])
    (c,) = choose_on_validation(df, "pbn", ["lr"])
    assert c["other_networks"] and choice_networks(c, df) == {}
    mixed = {**c, "candidates": c["candidates"] + [{"config_hash": "0.1-old"}]}
    assert {k: sorted(v) for k, v in choice_networks(mixed, df).items()} == {
        "backbone_sha256_16=new": ["0.01-new", "0.1-new"], "backbone_sha256_16=old": ["0.1-old"]}


def test_candidates_on_two_fits_of_the_map_network_are_not_compared():
    """Candidates of one network identity whose runs stand on different fits of the seed's MAP network
    (another weights' digest in their id records: the MAP network trained again between candidates) are
    not compared either: the choice is made among those on one fit (the most candidates) and names the
    others; a stored choice that compared them is called mixed. Runs of earlier code (no digest) are
    placed by their training curve, and a method that trains its own network is not grouped by one."""
    from bench.tuning import choice_networks

    def runs(lr, nll, sha, method="pbn"):
        h = f"{lr}-{sha}"
        base = {"status": "ok", "method": method, "model": "m", "seed": 0, "config_hash": h,
                "method_config": {"lr": lr, "prior": 1}, "finished_at": "2026-01-02"}
        curve = [1.0, 0.6] if sha == "old" else [1.0, 0.5]  # no digest (earlier code): "new"'s curve
        diag = {"map_training": {"val_nll": curve, **({"network_sha": sha} if sha else {})}}
        return [{**base, "kind": "val", "metrics.nll": nll}, {**base, "kind": "id", "diagnostics": diag}]

    rows = runs(0.1, 0.1, "old") + runs(0.1, 0.5, "new") + runs(0.01, 0.4, "new") + runs(0.001, 0.45, None)
    df = pd.DataFrame(rows)
    (c,) = choose_on_validation(df, "pbn", ["lr"])
    assert sorted(r["config_hash"] for r in c["candidates"]) == ["0.001-None", "0.01-new", "0.1-new"]
    assert c["chosen"] == {"lr": 0.01}  # not 0.1 on the other fit, whose score is the lowest
    ((name, hashes),) = c["other_networks"].items()
    assert hashes == ["0.1-old"] and "another fit of the MAP network (seed 0: network old)" in name
    assert choice_networks(c, df) == {}
    mixed = {**c, "candidates": c["candidates"] + [{"config_hash": "0.1-old"}]}
    assert sorted(sorted(v) for v in choice_networks(mixed, df).values()) == [
        ["0.001-None", "0.01-new", "0.1-new"], ["0.1-old"]]
    # the same configuration's run in another profile (its own MAP network) is not one of these candidates
    paper = {**runs(0.01, 0.4, "elsewhere")[1], "config_hash": "0.01-new", "profile": "paper"}
    (c,) = choose_on_validation(pd.DataFrame([{**r, "profile": "quick"} for r in rows] + [paper]), "pbn", ["lr"],
                                profile="quick")
    assert c["chosen"] == {"lr": 0.01} and list(c["other_networks"].values()) == [["0.1-old"]]
    # MC dropout trains its own network: what its records say of its training is no MAP fit
    own = pd.DataFrame([{**r, "method": "mc_dropout"} for r in rows])
    (c,) = choose_on_validation(own, "mc_dropout", ["lr"])
    assert c["chosen"] == {"lr": 0.1} and "other_networks" not in c
