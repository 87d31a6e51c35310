"""scripts/keep_records.py: the records kept in git are the records (less their curves), restored
without overwriting what a results folder holds, and read back by the store like any record."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bench.store import ResultsStore, load_records

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("keep_records", ROOT / "scripts" / "keep_records.py")
keep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep)


def _tarball(path: Path, members: dict[str, dict]) -> Path:
    """A device run's records archive at ``path``: ``{path in the kept layout: record}``, gzip tar."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, obj in members.items():
            body = json.dumps(obj).encode()
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    path.write_bytes(buf.getvalue())
    return path


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
    kept = list(keep.kept(archive, "toy").values())
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


def test_the_stored_tuning_and_selections_travel_with_the_records(tmp_path):
    """--chosen-only and the report read <suite>/tuning/<profile>.json: kept and restored with the records."""
    results, archive, fresh = tmp_path / "results", tmp_path / "kept", tmp_path / "fresh"
    store = ResultsStore(results)
    store.write(store.run_dir("toy", "mlp", "deterministic", "abc", 0), record("noise", 0.5))
    for rel in ("toy/tuning/quick.json", "toy/selections/mlp/pbn-beta_start.json"):
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text(json.dumps({"file": rel}))
    keep.save(results, "toy", archive)
    keep.restore(fresh, "toy", archive)
    for rel in ("toy/tuning/quick.json", "toy/selections/mlp/pbn-beta_start.json"):
        assert json.loads((archive / rel).read_text()) == {"file": rel}
        assert json.loads((fresh / rel).read_text()) == {"file": rel}


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
    assert {Path(rel).parent.parent.name for rel in keep.kept(archive, "toy")} == {"deterministic-abc"}
    # a candidate of a validation-first tune is whole with its validation and clean-test records; with
    # shifted sets more it is being evaluated (the chosen candidate's other sets): those two are kept
    store.write(done, record("fog", 0.5))
    first = store.run_dir("toy", "mlp", "pbn", "def", 0)
    store.write(first, {**record("validation", 0.5, "pbn"), "kind": "val", "severity": None})
    store.write(first, {**record("clean", 0.5, "pbn"), "kind": "id", "severity": None})
    assert keep.save(results, "toy", archive) == 5
    assert {Path(rel).parent.parent.name for rel in keep.kept(archive, "toy")} == {"deterministic-abc", "pbn-def"}
    store.write(first, record("noise", 0.5, "pbn"))
    store.write(done, record("snow", 0.5))
    assert keep.save(results, "toy", archive) == 6  # the deterministic cell's and the candidate's two
    assert not any("pbn-def" in rel and "noise" in rel for rel in keep.kept(archive, "toy"))
    # a full run begun before the tune scored it validation first: shifted sets, then the tune's two
    begun = store.run_dir("toy", "mlp", "pbn", "ghi", 0)
    store.write(begun, record("noise", 0.5, "pbn"))
    assert keep.save(results, "toy", archive) == 6  # not yet: it has no validation record
    store.write(begun, {**record("validation", 0.5, "pbn"), "kind": "val", "severity": None})
    store.write(begun, {**record("clean", 0.5, "pbn"), "kind": "id", "severity": None})
    assert keep.save(results, "toy", archive) == 8
    begun_kept = sorted(Path(rel).stem for rel in keep.kept(archive, "toy") if "pbn-ghi" in rel)
    assert begun_kept == ["id-clean-na", "val-validation-na"]


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
    kept = {r["seed"]: r for r in keep.kept(archive, "toy").values()}
    assert kept[1]["curves"] == {"maps": maps} and kept[1]["curves_kept"] == "maps"
    assert "curves" not in kept[2] and kept[2]["curves_kept"] is False
    assert (archive / "toy" / "artifacts" / "quick" / "maps.npz").read_bytes() == b"images"
    assert keep.restore(fresh, "toy", archive) == 2
    assert (fresh / "toy" / "artifacts" / "quick" / "maps.npz").read_bytes() == b"images"
    assert load_records(fresh, "toy").set_index("seed").loc[1, "curves"] == {"maps": maps}


def _two_kept_records(tmp_path):
    """A results folder with two toy records, saved (and packed) into a kept archive."""
    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    run = store.run_dir("toy", "mlp", "deterministic", "abc", 0)
    store.write(run, record("noise", 0.5))
    store.write(run, record("blur", 0.25))
    keep.save(results, "toy", archive)
    return results, archive


def test_kept_records_are_one_pack_per_suite_read_by_the_store(tmp_path):
    """save packs the suite (no loose file left); the store reads the pack like loose records, a
    loose file of the same path wins; saving the same records again leaves the pack's bytes as
    they were (git sees no change)."""
    from bench.store import PACK_NAME, read_pack

    results, archive = _two_kept_records(tmp_path)
    pack = archive / "toy" / PACK_NAME
    assert pack.is_file() and not list(archive.rglob("*.json")) and len(read_pack(pack)) == 2
    before = pack.read_bytes()
    keep.save(results, "toy", archive)
    assert pack.read_bytes() == before
    assert sorted(load_records(archive, "toy")["metrics.accuracy"]) == [0.25, 0.5]
    assert sorted(load_records(archive)["metrics.accuracy"]) == [0.25, 0.5]
    # a loose record of the same path (a merge before packing) wins over the packed one
    rel = next(r for r, rec in read_pack(pack).items() if rec["shift"] == "noise")
    (archive / rel).parent.mkdir(parents=True)
    (archive / rel).write_text(json.dumps({**read_pack(pack)[rel], "metrics": {"accuracy": 0.9}}))
    assert sorted(load_records(archive, "toy")["metrics.accuracy"]) == [0.25, 0.9]
    assert keep.pack("toy", archive) == 2 and not list(archive.rglob("*.json"))
    assert sorted(load_records(archive, "toy")["metrics.accuracy"]) == [0.25, 0.9]


def test_a_gzip_pack_of_older_code_is_read_and_repacking_makes_it_xz(tmp_path):
    """Packs were gzip (records.jsonl.gz) before 2026-12-06: the store and keep_records read one; a
    pack beside it in xz (the current name) is read instead of it, never both; packing writes xz
    and removes the gzip one."""
    import gzip

    from bench.store import OLD_PACK_NAME, PACK_NAME, find_packs, pack_bytes, read_pack

    results, archive = _two_kept_records(tmp_path)
    entries = read_pack(archive / "toy" / PACK_NAME)
    assert (archive / "toy" / PACK_NAME).read_bytes()[:6] == b"\xfd7zXZ\x00"  # the xz magic
    old = archive / "toy" / OLD_PACK_NAME
    with gzip.open(old, "wt", encoding="utf-8") as fh:
        for rel in sorted(entries):
            fh.write(json.dumps({"path": rel, "record": entries[rel]}) + "\n")
    (archive / "toy" / PACK_NAME).unlink()
    assert read_pack(old) == entries and find_packs(archive) == [old]
    assert sorted(load_records(archive, "toy")["metrics.accuracy"]) == [0.25, 0.5]
    assert keep.kept(archive, "toy") == entries
    # an xz pack beside it wins (an interrupted repack): its records are read, the gzip one's are not
    one = {k: v for k, v in entries.items() if v["shift"] == "blur"}
    (archive / "toy" / PACK_NAME).write_bytes(pack_bytes(one))
    assert find_packs(archive) == [archive / "toy" / PACK_NAME]
    assert sorted(load_records(archive, "toy")["metrics.accuracy"]) == [0.25]
    (archive / "toy" / PACK_NAME).unlink()
    assert keep.pack("toy", archive) == 2 and not old.exists()
    assert read_pack(archive / "toy" / PACK_NAME) == entries


def test_merge_compares_with_the_packed_records(tmp_path):
    from bench.store import RECORD_VERSION, PACK_NAME, read_pack

    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    run = store.run_dir("toy", "mlp", "deterministic", "abc", 0)
    rec = {**record("noise", 0.5), "record_version": RECORD_VERSION}
    store.write(run, rec)
    keep.save(results, "toy", archive)
    (rel, packed), = read_pack(archive / "toy" / PACK_NAME).items()

    def tarball(obj, name):
        return _tarball(tmp_path / name, {rel: obj})

    assert keep.merge(tarball(packed, "same.tar.gz"), archive)["unchanged"] == 1
    other = {**packed, "metrics": {"accuracy": 0.1}}
    assert keep.merge(tarball(other, "other.tar.gz"), archive)["conflicts"] == 1
    assert read_pack(archive / "toy" / PACK_NAME)[rel]["metrics"] == {"accuracy": 0.5}
    assert keep.merge(tarball(other, "other.tar.gz"), archive, replace=True)["replaced"] == 1
    assert read_pack(archive / "toy" / PACK_NAME)[rel]["metrics"] == {"accuracy": 0.1}
    assert not list(archive.rglob("*.json"))


def test_save_maps_keeps_a_suites_map_networks_and_restore_puts_them_back(tmp_path):
    """A network other runs start from (camvid_multilabel's backbone) is kept beside the records: a
    file that loads as a MAP checkpoint is kept, an existing kept one that differs is not replaced, a
    file that is not a checkpoint is refused, and restore puts the kept one back without overwriting."""
    import torch

    results, archive, fresh = tmp_path / "results", tmp_path / "kept", tmp_path / "fresh"
    rel = Path("toy/checkpoints/map/mlp/0123456789/seed0.pt")
    (results / rel).parent.mkdir(parents=True)
    torch.save({"model": {"w": torch.ones(2)}, "epochs": 1}, results / rel)
    assert keep.save_maps(results, "toy", archive) == {"added": 1, "unchanged": 0, "replaced": 0, "conflicts": 0}
    assert (archive / rel).read_bytes() == (results / rel).read_bytes()
    assert keep.save_maps(results, "toy", archive)["unchanged"] == 1
    first = (archive / rel).read_bytes()
    torch.save({"model": {"w": torch.zeros(2)}, "epochs": 1}, results / rel)  # retrained: another network
    assert keep.save_maps(results, "toy", archive)["conflicts"] == 1
    assert (archive / rel).read_bytes() == first  # the kept network stays: records were made on it
    ResultsStore(archive).write(ResultsStore(archive).run_dir("toy", "mlp", "deterministic", "abc", 0),
                                record("noise", 0.5))
    keep.restore(fresh, "toy", archive)
    assert (fresh / rel).read_bytes() == first
    (results / rel).write_bytes(b"not a torch file")
    other = Path("toy/checkpoints/map/mlp/0000000000/seed0.pt")  # a good network, listed before the bad one
    (results / other).parent.mkdir()
    torch.save({"model": {"w": torch.ones(3)}, "epochs": 1}, results / other)
    with pytest.raises(SystemExit, match="not a torch file"):
        keep.save_maps(results, "toy", archive)
    assert not (archive / other).exists()  # every file is checked before any is kept


def test_a_cell_whose_records_come_from_two_fits_is_not_kept(tmp_path, capsys):
    """A --force-method refit stopped during its evaluation leaves a cell with every record, some
    from the new fit and the rest from the old one: the new fit's are the cell's, and not kept until a
    re-run finishes it from that fit."""
    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    mixed, whole = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("deterministic", "mc_dropout"))
    store.write(mixed, {**record("noise", 0.5), "fit_digest": "aaaa", "finished_at": "2026-12-05T01:00:00"})
    store.write(mixed, {**record("blur", 0.25), "cost": {"fit_time_s": 12.5}, "finished_at": "2026-12-04T01:00:00"})
    store.write(whole, {**record("noise", 0.5, "mc_dropout"), "fit_digest": "bbbb"})
    store.write(whole, {**record("blur", 0.25, "mc_dropout"), "fit_digest": "bbbb"})
    assert keep.save(results, "toy", archive) == 2
    assert {Path(rel).parent.parent.name for rel in keep.kept(archive, "toy")} == {"mc_dropout-abc"}
    err = capsys.readouterr().err
    assert "deterministic-abc/seed0: its records come from 2 fits" in err
    assert "1 from fit_time_s:12.5" in err and "1 from state:aaaa" in err
    assert "deterministic-abc/seed0 not kept: 1 of 2 records (still being evaluated)" in err


def test_a_candidate_refitted_validation_first_is_kept_as_its_new_fit(tmp_path, capsys):
    """bench tune --validation-first --redo-predating refits a kept candidate whose records predate a check
    and scores the new fit on the validation and clean test sets only: its shifted-set records stay from
    the earlier fit. Saved, the cell is the new fit's two records, and the earlier fit's kept records of it
    are removed: no kept cell pairs one fit's validation score with another's shifted sets."""
    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    cell, other = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("vdp", "deterministic"))
    for run, method in ((cell, "vdp"), (other, "deterministic")):
        for rec in (record("noise", 0.5, method), record("blur", 0.25, method),
                    {**record("validation", 0.5, method), "kind": "val", "severity": None},
                    {**record("clean", 0.5, method), "kind": "id", "severity": None}):
            store.write(run, {**rec, "fit_digest": "old", "finished_at": "2026-12-06T01:00:00"})
    assert keep.save(results, "toy", archive) == 8
    for kind, name in (("val", "validation"), ("id", "clean")):  # the refit's, over the earlier fit's
        store.write(cell, {**record(name, 0.75, "vdp"), "kind": kind, "severity": None, "fit_digest": "new",
                           "finished_at": "2026-12-07T01:00:00"})
    keep.save(results, "toy", archive)
    vdp = {Path(rel).stem: rec["fit_digest"] for rel, rec in keep.kept(archive, "toy").items() if "vdp-abc" in rel}
    assert vdp == {"val-validation-na": "new", "id-clean-na": "new"}
    err = capsys.readouterr().err
    assert "vdp-abc/seed0: its records come from 2 fits (2 from state:new, 2 from state:old)" in err
    assert "vdp-abc/seed0: 2 kept record(s) of another fit" in err


def test_a_fits_identity_is_its_states_bytes():
    """bench.checkpoints.state_digest names a fit by its fitted state, however nested: equal states
    (a deterministic refit) name one fit, one changed element (a bf16 tensor's last bit, a nested
    float) another; fit_key falls back to the recorded fit time for records of older code."""
    import numpy as np
    import torch

    from bench.checkpoints import state_digest
    from bench.store import fit_key, one_fit

    def state():
        return {"model": {"w": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "mask": torch.tensor([True, False])},
                "members": [{"b": torch.zeros(2)}, {"b": torch.ones(2)}], "prior": 0.5, "idx": np.array([3, 1])}

    a, b = state(), state()
    assert state_digest(a) == state_digest(b)
    b["model"]["w"].view(torch.int16)[1, 2] ^= 1  # one bit of one bf16 weight
    assert state_digest(b) != state_digest(a)
    for change in (lambda s: s["members"][1]["b"].add_(1e-7), lambda s: s.update(prior=0.5000001),
                   lambda s: s["idx"].__setitem__(0, 2), lambda s: s["members"].reverse()):
        c = state()
        change(c)
        assert state_digest(c) != state_digest(a)
    assert fit_key("ab", 3.0) == "state:ab" and fit_key(None, 3.0) == "fit_time_s:3.0" and fit_key(None, None) is None
    newest, fits = one_fit([{"fit_digest": "x", "finished_at": "2026-12-05"}, {"cost": {"fit_time_s": 2.0}, "finished_at": "2026-12-01"},
                            {"kind": "fit", "status": "failed"}])
    assert newest == "state:x" and fits == {"state:x": 1, "fit_time_s:2.0": 1}


@pytest.mark.parametrize("packed", [True, False])
def test_a_cell_fitted_again_replaces_its_kept_records(tmp_path, capsys, packed):
    """A cell kept whole from one fit, removed from a restored copy and fitted again (here a tuning
    candidate scored validation first: two records), replaces its kept records: the old fit's
    shifted-set records do not stay beside the new fit's validation score. Records of the same fit
    that the results folder lacks stay (a cell saved whole, then restored in part)."""
    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    cell, other = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("pbn", "deterministic"))

    def whole(run, method, digest):
        for rec in (record("noise", 0.5, method), record("blur", 0.25, method),
                    {**record("validation", 0.5, method), "kind": "val", "severity": None},
                    {**record("clean", 0.5, method), "kind": "id", "severity": None}):
            store.write(run, {**rec, "fit_digest": digest})

    whole(cell, "pbn", "old")
    whole(other, "deterministic", "same")
    assert keep.save(results, "toy", archive, packed=packed) == 8
    for f in sorted(cell.glob("*.json")):  # the cell refit, scored validation first
        f.unlink()
    for f in sorted(other.glob("shift-*.json")):  # the other cell's shifted sets not restored: the same fit
        f.unlink()
    store.write(cell, {**record("validation", 0.75, "pbn"), "kind": "val", "severity": None, "fit_digest": "new"})
    store.write(cell, {**record("clean", 0.75, "pbn"), "kind": "id", "severity": None, "fit_digest": "new"})
    keep.save(results, "toy", archive, packed=packed)
    now = keep.kept(archive, "toy")
    pbn = {Path(rel).stem: rec["fit_digest"] for rel, rec in now.items() if "pbn-abc" in rel}
    assert pbn == {"val-validation-na": "new", "id-clean-na": "new"}
    assert sum("deterministic-abc" in rel for rel in now) == 4
    assert "pbn-abc/seed0: 2 kept record(s) of another fit" in capsys.readouterr().err


def test_no_kept_cell_mixes_two_fits():
    """Every cell kept in git (docs/*/<suite>/records.jsonl.xz) has its records from one fit: a
    table row never pairs one fit's validation score with another's shifted-set records."""
    from bench.store import one_fit
    from bench.store import read_pack

    packs = sorted((ROOT / "docs").glob("*/*/records.jsonl.xz"))
    assert packs
    mixed = []
    for path in packs:
        mixed += [f"{path.parent.relative_to(ROOT)}: {cell} {fits}"
                  for cell, recs in sorted(keep.by_cell(read_pack(path)).items())
                  if len(fits := one_fit(list(recs.values()))[1]) > 1]
    assert not mixed, "\n".join(mixed)


def test_merge_takes_a_cell_fitted_again_whole_or_not_at_all(tmp_path, capsys):
    """A device archive holding a kept cell from another fit (the cell fitted again) is not merged file by
    file: left out as it is, or, with --replace, replacing the kept cell (the old fit's records it lacks
    removed); a cell of the same fit merges as before (records added beside it)."""
    from bench.store import RECORD_VERSION

    def record(*args, **kw):  # the records a device run sends back carry their version
        return {**globals()["record"](*args, **kw), "record_version": RECORD_VERSION}

    results, archive = tmp_path / "results", tmp_path / "kept"
    store = ResultsStore(results)
    cell, same = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("pbn", "deterministic"))
    for run, method in ((cell, "pbn"), (same, "deterministic")):
        for rec in (record("noise", 0.5, method), record("blur", 0.25, method),
                    {**record("validation", 0.5, method), "kind": "val", "severity": None}):
            store.write(run, {**rec, "fit_digest": "old"})
    keep.save(results, "toy", archive)
    rel = {path.stem: path.relative_to(results).as_posix() for path in cell.glob("*.json")}
    same_rel = same.relative_to(results).as_posix()

    refit = {rel["val-validation-na"]: {**record("validation", 0.75, "pbn"), "kind": "val", "severity": None,
                                        "fit_digest": "new"},
             rel["val-validation-na"].replace("val-validation-na", "id-clean-na"):
                 {**record("clean", 0.75, "pbn"), "kind": "id", "severity": None, "fit_digest": "new"},
             f"{same_rel}/shift-fog-1.json": {**record("fog", 0.5), "fit_digest": "old"}}
    counts = keep.merge(_tarball(tmp_path / "refit.tar.gz", refit), archive)
    assert counts["conflicts"] == 2 and counts["added"] == 1
    now = keep.kept(archive, "toy")
    assert {r["fit_digest"] for p, r in now.items() if "pbn-abc" in p} == {"old"} and len(now) == 7
    assert "pbn-abc/seed0: the archive's records come from another fit" in capsys.readouterr().err
    keep.merge(_tarball(tmp_path / "refit.tar.gz", refit), archive, replace=True)
    now = keep.kept(archive, "toy")
    pbn = {Path(p).stem: r["fit_digest"] for p, r in now.items() if "pbn-abc" in p}
    assert pbn == {"val-validation-na": "new", "id-clean-na": "new"}
    assert sum("deterministic-abc" in p for p in now) == 4


@pytest.mark.parametrize("packed", [True, False])
def test_a_results_folder_reads_a_cell_as_its_newest_fit(tmp_path, packed):
    """load_records, under every table and choice, reads a cell whose records come from two fits (fitted
    again, the sets of the fit before not evaluated again yet) as its newest fit's records only: a row never
    pairs the new fit's validation score with the old fit's shifted sets. Cells of one fit, and failure
    records, are read whole; packed or loose alike."""
    from bench.store import load_records

    results = tmp_path / "results"
    store = ResultsStore(results)
    mixed, whole = (store.run_dir("toy", "mlp", m, "abc", 0) for m in ("vdp", "deterministic"))
    for run, method in ((mixed, "vdp"), (whole, "deterministic")):
        for rec in (record("noise", 0.5, method), {**record("clean", 0.5, method), "kind": "id", "severity": None}):
            store.write(run, {**rec, "fit_digest": "old", "finished_at": "2026-12-06T01:00:00"})
    store.write(mixed, {**record("clean", 0.75, "vdp"), "kind": "id", "severity": None, "fit_digest": "new",
                        "finished_at": "2026-12-07T01:00:00"})
    store.write(whole, {"suite": "toy", "method": "deterministic", "model": "mlp", "seed": 0, "status": "failed",
                        "kind": "fit", "shift": "fit", "severity": None, "error": "earlier"})
    if packed:
        keep.pack("toy", results)
        assert not list((results / "toy" / "records").rglob("*.json"))  # read from the pack alone
    df = load_records(results, "toy")
    assert sorted(df[df.method == "vdp"]["fit_digest"]) == ["new"]
    assert sorted(df[df.method == "deterministic"]["kind"]) == ["fit", "id", "shift"]


@pytest.mark.parametrize("packed", [True, False])
def test_the_map_networks_cells_stand_on_are_read_from_packs_too(tmp_path, packed):
    """bench.checkpoints.recorded_networks (the warning of a MAP network trained again, bench run --plan)
    counts the cells on each digest of a model's seed at one training recipe, one per cell, from loose
    records and packed ones alike."""
    from bench.checkpoints import recorded_networks

    results = tmp_path / "results"
    store = ResultsStore(results)
    train = {"epochs": 3}
    for method, sha, seed, cfg in (("pbn", "aaaa", 0, train), ("laplace_diag", "aaaa", 0, train),
                                   ("mc_dropout", "bbbb", 0, {"epochs": 5}), ("pbn", "cccc", 1, train)):
        run = store.run_dir("toy", "mlp", method, "abc", seed)
        for name in ("clean", "other"):  # two id-like records of one cell count once
            store.write(run, {**record(name, 0.5, method), "kind": "id", "severity": None, "seed": seed,
                              "train_config": cfg, "diagnostics": {"map_training": {"network_sha": sha}}})
    if packed:
        keep.pack("toy", results)
        assert not list((results / "toy" / "records").rglob("*.json"))
    assert recorded_networks(results / "toy" / "records", "mlp", 0, train) == {"aaaa": 2}
    assert recorded_networks(results / "toy" / "records", "mlp", 1, train) == {"cccc": 1}
