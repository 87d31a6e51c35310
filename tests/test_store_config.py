import json

import pytest

from bench.config import parse_sets, resolve_plan, split_values
from bench.errors import BenchError, UnknownNameError
from bench.store import ResultsStore, atomic_write_json, config_hash, load_records
from bench.suites import SUITES
from methods import METHODS


def test_config_hash_ignores_key_order():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_atomic_write_keeps_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"x": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"x": object()})
    assert json.loads(path.read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left behind


def test_load_records_is_one_flat_dataframe(tmp_path):
    store = ResultsStore(tmp_path)
    for seed in (0, 1):
        rd = store.run_dir("s", "m", "meth", "abc", seed)
        store.write(rd, {"suite": "s", "method": "meth", "model": "m", "status": "ok", "seed": seed, "kind": "id", "shift": "clean",
                         "severity": 0.0, "metrics": {"nll": 0.5 + seed}, "curves": {"x": [1]},
                         "method_config": {"p": 1}})
    df = load_records(tmp_path)
    assert len(df) == 2
    assert sorted(df["metrics.nll"]) == [0.5, 1.5]
    assert df["curves"].iloc[0] == {"x": [1]} and df["method_config"].iloc[0] == {"p": 1}
    assert store.has(store.run_dir("s", "m", "meth", "abc", 0), "id", "clean", 0.0)


def test_load_records_reads_a_store_once_and_again_when_a_record_changes(tmp_path, monkeypatch):
    """Tables made in one process over one store read its records once; a record written, replaced
    or removed since is read (the files' fingerprint changes), and a caller changing its frame does
    not change the next caller's."""
    import bench.store as store_mod

    store = ResultsStore(tmp_path)
    rec = {"suite": "s", "method": "meth", "model": "m", "status": "ok", "kind": "id", "shift": "clean",
           "severity": 0.0}
    store.write(store.run_dir("s", "m", "meth", "abc", 0), {**rec, "seed": 0, "metrics": {"nll": 0.5}})
    reads = []
    real = store_mod.read_record
    monkeypatch.setattr(store_mod, "read_record", lambda path: (reads.append(path), real(path))[1])
    first = load_records(tmp_path)
    first.loc[0, "metrics.nll"] = 99.0  # the caller's own copy
    assert len(reads) == 1 and list(load_records(tmp_path)["metrics.nll"]) == [0.5] and len(reads) == 1
    store.write(store.run_dir("s", "m", "meth", "abc", 1), {**rec, "seed": 1, "metrics": {"nll": 1.5}})  # a new one
    assert sorted(load_records(tmp_path)["metrics.nll"]) == [0.5, 1.5] and len(reads) == 3
    store.write(store.run_dir("s", "m", "meth", "abc", 1), {**rec, "seed": 1, "metrics": {"nll": 2.5}})  # replaced
    assert sorted(load_records(tmp_path)["metrics.nll"]) == [0.5, 2.5]
    for p in (tmp_path / "s").rglob("*.json"):
        if "seed1" in p.as_posix():
            p.unlink()
    assert list(load_records(tmp_path)["metrics.nll"]) == [0.5]
    assert list(load_records(tmp_path, suite="s")["metrics.nll"]) == [0.5]


def test_a_store_whose_root_is_named_records_reads_only_its_records(tmp_path, caplog):
    """docs/records holds the kept records beside other JSON (perf rows, suite artifacts): only
    <root>/<suite>/records/** are records, whatever the root's own path is called."""
    root = tmp_path / "docs" / "records"
    store = ResultsStore(root)
    store.write(store.run_dir("s", "m", "meth", "abc", 0), {"suite": "s", "method": "meth", "model": "m", "status": "ok",
                                                            "seed": 0, "kind": "id", "shift": "clean", "severity": 0.0})
    atomic_write_json(root / "perf" / "cpu.json", {"rows": []})
    atomic_write_json(root / "s" / "artifacts" / "quick" / "data.json", {"n": 1})
    problems = []
    assert len(list(store.iter_records(problems=problems))) == 1
    assert problems == [] and "damaged" not in caplog.text


def test_parse_sets_sweeps_and_types():
    assert split_values("0.1,[1,2],x") == ["0.1", "[1,2]", "x"]
    sets = parse_sets(["mc_dropout.p=0.1,0.2", "train.epochs=3", "train.milestones=[1,2]", "x.flag=true"])
    assert sets == {"mc_dropout.p": [0.1, 0.2], "train.epochs": [3], "train.milestones": [[1, 2]], "x.flag": [True]}
    with pytest.raises(BenchError):
        parse_sets(["novalue"])


def test_resolve_plan_sweep_and_errors():
    suite = SUITES.get("toy")()
    plan = resolve_plan(suite, "smoke", ["mc_dropout", "deterministic"],
                        parse_sets(["mc_dropout.p=0.1,0.3", "train.epochs=7", "seeds=4,5"]), method_registry=METHODS)
    assert [c["p"] for c in plan.methods["mc_dropout"]] == [0.1, 0.3]
    assert plan.train.epochs == 7 and plan.seeds == [4, 5]
    with pytest.raises(BenchError, match="valid: .*p.*samples"):
        resolve_plan(suite, "smoke", ["mc_dropout"], parse_sets(["mc_dropout.rate=0.1"]), method_registry=METHODS)
    with pytest.raises(BenchError, match="smoke, quick, paper"):
        resolve_plan(suite, "fast", ["deterministic"], {}, method_registry=METHODS)
    with pytest.raises(BenchError, match="valid"):
        resolve_plan(suite, "smoke", ["deterministic"], parse_sets(["train.epoch=1"]), method_registry=METHODS)


def test_unknown_names_list_valid_ones():
    with pytest.raises(UnknownNameError) as err:
        METHODS.get("bogus")
    assert "deterministic" in str(err.value) and "mc_dropout" in str(err.value)
    with pytest.raises(UnknownNameError, match="mnist_rotated"):
        SUITES.get("bogus")


def test_a_method_declares_its_own_profile_defaults_below_the_suite_and_set(monkeypatch):
    from bench.config import resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    cls = METHODS.get("mc_dropout")
    monkeypatch.setattr(cls, "profile_defaults", {"smoke": {"samples": 3, "p": 0.3}})
    toy = SUITES.get("toy")()
    plan = resolve_plan(toy, "smoke", ["mc_dropout"], {}, method_registry=METHODS)
    assert plan.methods["mc_dropout"] == [{**cls.defaults, "samples": 3, "p": 0.3}]
    assert resolve_plan(toy, "quick", ["mc_dropout"], {}, method_registry=METHODS).methods["mc_dropout"] == [cls.defaults]
    monkeypatch.setitem(toy.profiles["smoke"], "methods", {"mc_dropout": {"p": 0.2}})  # the suite's wins
    plan = resolve_plan(toy, "smoke", ["mc_dropout"], {"mc_dropout.samples": [7]}, method_registry=METHODS)
    assert plan.methods["mc_dropout"] == [{**cls.defaults, "samples": 7, "p": 0.2}]  # --set wins over both
