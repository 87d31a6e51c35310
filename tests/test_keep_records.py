"""scripts/keep_records.py: the records kept in git are the records (less their curves), restored
without overwriting what a results folder holds, and read back by the store like any record."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from bench.store import ResultsStore, load_records

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("keep_records", ROOT / "scripts" / "keep_records.py")
keep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep)


def record(shift, acc, method="deterministic"):
    return {"suite": "toy", "method": method, "model": "mlp", "seed": 0, "status": "ok", "kind": "shift",
            "shift": shift, "severity": 1, "metrics": {"accuracy": acc}, "curves": {"reliability": [1, 2, 3]},
            "data_config": {"n": 2}}


def test_save_drops_the_curves_and_restore_keeps_existing_records(tmp_path):
    results, archive, fresh = tmp_path / "results", tmp_path / "kept", tmp_path / "fresh"
    store = ResultsStore(results)
    run = store.run_dir("toy", "mlp", "deterministic", "abc", 0)
    store.write(run, record("noise", 0.5))
    store.write(run, record("blur", 0.25))
    assert keep.save(results, "toy", archive) == 2
    kept = [json.loads(p.read_text()) for p in archive.rglob("*.json")]
    assert len(kept) == 2 and all("curves" not in r and r["curves_kept"] is False for r in kept)
    assert {r["metrics"]["accuracy"] for r in kept} == {0.5, 0.25}

    # restore into a folder that already has one of the two (a newer run): that one is kept
    fresh_run = ResultsStore(fresh).run_dir("toy", "mlp", "deterministic", "abc", 0)
    ResultsStore(fresh).write(fresh_run, record("noise", 0.75))
    assert keep.restore(fresh, "toy", archive) == 1
    assert ResultsStore(fresh).read(fresh_run, "shift", "noise", 1)["metrics"]["accuracy"] == 0.75
    assert ResultsStore(fresh).read(fresh_run, "shift", "blur", 1)["metrics"]["accuracy"] == 0.25
    df = load_records(fresh, "toy")
    assert sorted(df["metrics.accuracy"]) == [0.25, 0.75]


def test_a_cell_still_being_evaluated_is_not_kept(tmp_path):
    """A cell with fewer records than the others on the same data is kept whole later, never in
    part (its fit is not kept: a later machine refits and evaluates every set from one fit)."""
    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    done, running = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("deterministic", "mc_dropout"))
    store.write(done, record("noise", 0.5))
    store.write(done, record("blur", 0.25))
    store.write(running, record("noise", 0.5, "mc_dropout"))
    assert keep.save(results, "toy", archive) == 2
    assert {p.parent.parent.name for p in archive.rglob("*.json")} == {"deterministic-abc"}


def test_segmentation_maps_are_kept_for_each_configurations_first_seed_only(tmp_path):
    """The report's map figure shows a configuration's first seed: its maps are kept (compactly),
    every other curve of every record is dropped; the suite's artifacts are copied both ways."""
    results, archive, fresh = tmp_path / "results", tmp_path / "kept", tmp_path / "fresh"
    store = ResultsStore(results)
    maps = [{"pred": [[1, 2], [3, 4]], "entropy": [[0, 255], [7, 9]], "mi": None, "stride": 2, "scale": 1.0}]
    for seed in (2, 1):
        rec = {**record("noise", 0.5), "seed": seed, "curves": {"maps": maps, "entropy_hist": [1] * 50}}
        store.write(store.run_dir("toy", "mlp", "deterministic", "abc", seed), rec)
    (results / "toy" / "artifacts" / "quick").mkdir(parents=True)
    (results / "toy" / "artifacts" / "quick" / "maps.npz").write_bytes(b"images")
    assert keep.save(results, "toy", archive) == 2
    kept = {json.loads(p.read_text())["seed"]: json.loads(p.read_text()) for p in archive.rglob("records/**/*.json")}
    assert kept[1]["curves"] == {"maps": maps} and kept[1]["curves_kept"] == "maps"
    assert "curves" not in kept[2] and kept[2]["curves_kept"] is False
    assert (archive / "toy" / "artifacts" / "quick" / "maps.npz").read_bytes() == b"images"
    assert keep.restore(fresh, "toy", archive) == 2
    assert (fresh / "toy" / "artifacts" / "quick" / "maps.npz").read_bytes() == b"images"
    assert load_records(fresh, "toy").set_index("seed").loc[1, "curves"] == {"maps": maps}
