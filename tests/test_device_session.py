"""The device session (bench/device_session.py, scripts/device_session.sh, docs/device.md) on the
CPU at toy scale: the summary and the archive it writes, the archive merged into kept records
(idempotently) and resumed from, an exhausted budget, bad input, and the CUDA-vs-CPU comparison on
hand-made records (the CUDA run itself needs a GPU)."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest

from bench import device_session as ds
from bench.store import ResultsStore, load_records
from conftest import make_fake_mnist

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("keep_records", ROOT / "scripts" / "keep_records.py")
keep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep)

FAST = ["--device", "cpu", "--threads", "1", "--profile", "smoke", "--seeds", "0", "--methods", "deterministic",
        "--check-suites", "toy", "--check-methods", "deterministic"]


@pytest.fixture(scope="module")
def carried(tmp_path_factory) -> Path:
    """A carried folder as scripts/device_prepare.sh leaves it: data/{MNIST,FashionMNIST-test}.tar.xz
    with their MD5SUMS (of fake digits) and commit.txt."""
    base = tmp_path_factory.mktemp("carried")
    raw = make_fake_mnist(base / "raw")
    data = base / ".device" / "data"
    data.mkdir(parents=True)
    sums = []
    for name, top in (("MNIST", "MNIST"), ("FashionMNIST-test", "FashionMNIST")):
        with tarfile.open(data / f"{name}.tar.xz", "w:xz") as tar:
            tar.add(raw / top, arcname=top)
        for f in sorted((raw / top).rglob("*")):
            if f.is_file():
                sums.append(f"{hashlib.md5(f.read_bytes()).hexdigest()}  {f.relative_to(raw)}")
    (data / "MD5SUMS").write_text("\n".join(sums) + "\n")
    (base / ".device" / "commit.txt").write_text("0123abc+dirty\n")
    return base / ".device"


def _wrapper(args: list[str], out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", str(ROOT / "scripts" / "device_session.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def first_run(carried, tmp_path_factory):
    """One run through the wrapper, as on the device but with --device cpu: toy checks, one grid cell."""
    base = tmp_path_factory.mktemp("run1")
    kept = base / "kept"
    kept.mkdir()
    out = base / "out"
    res = _wrapper([*FAST, "--carried", str(carried), "--kept", str(kept), "--work", str(base / "work"),
                    "--budget-s", "240"], out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, res.stdout + res.stderr


def _members(tarball: Path) -> dict[str, bytes]:
    with tarfile.open(tarball) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_cpu_run_writes_the_summary_and_one_archive_of_the_new_records(first_run):
    out, log = first_run
    assert sorted(p.name for p in out.iterdir()) == ["device_session.log", "maps-1.tar", "records.tar.gz",
                                                     "summary.json"]
    s = json.loads((out / "summary.json").read_text())
    # the MAP network the grid trained comes back beside the records, to be kept and not trained again
    assert s["outputs"]["maps"] == {"archives": ["maps-1.tar"], "networks": 1, "left_out": []}
    (name,) = _members(out / "maps-1.tar")
    assert keep.is_map_checkpoint(name) and name.startswith("mnist_rotated/checkpoints/map/lenet_300_100/")
    assert s["merge"].endswith("<files_at>/records.tar.gz <files_at>/maps-1.tar")
    assert s["schema"] == ds.SCHEMA and s["status"] == "finished" and s["finished_at"]
    dev = s["device"]
    assert dev["used"] == "cpu" and dev["requested"] == "cpu" and dev["torch"] and "cuda" in dev and dev["name"]
    # the carried commit, not the git of the tree (on the device the .git can be older than the tree)
    assert s["git_commit"] == "0123abc+dirty" and s["commit_source"].endswith("commit.txt")
    assert "wheels" in s and s["setup"]["data"][0]["status"] == "unpacked and verified"
    toy = s["checks"]["suites"]["toy"]
    assert toy["smoke"]["status"] == "ok" and toy["smoke"]["methods"]["deterministic"]["status"] == "ok"
    assert toy["smoke"]["seconds"] > 0
    assert toy["agreement"] == {"status": ds.NO_CUDA} and s["checks"]["perf"] == {"status": ds.NO_CUDA}
    assert s["checks"]["passed"] is True
    g = s["grid"]
    assert g["status"] == "complete" and g["suite"] == "mnist_rotated" and g["profile"] == "smoke"
    # the MAP network first, as an item of its own, then the cell built on it
    assert [c["cell"] for c in g["cells"]] == ["lenet_300_100/map/seed0", "lenet_300_100/deterministic/seed0"]
    assert [c["status"] for c in g["cells"]] == ["trained", "fitted"] and g["cells"][1]["seconds"] > 0
    members = _members(out / "records.tar.gz")
    records = {k: json.loads(v) for k, v in members.items() if "/records/" in k}
    assert s["outputs"]["records"] == len(records) == 6  # clean, 3 rotations, OOD, validation
    assert all(k.startswith("mnist_rotated/records/lenet_300_100/deterministic-") for k in records)
    assert all(r["curves_kept"] is False and "curves" not in r and r["status"] == "ok" for r in records.values())
    assert {r["git_commit"] for r in records.values()} == {"0123abc+dirty"}
    assert json.loads(members[f"device/{s['run_id']}.json"])["grid"]["cells"] == g["cells"]
    assert "device_session.sh: wheels:" in (out / "device_session.log").read_text()


def test_the_archive_merges_into_kept_records_idempotently_and_the_grid_resumes_from_them(first_run, carried, tmp_path):
    out, _ = first_run
    kept = tmp_path / "kept"
    (kept / "camvid").mkdir(parents=True)  # a kept copy with something else in it
    (kept / "camvid" / "note.txt").write_text("untouched")
    n = len(_members(out / "records.tar.gz"))
    first = keep.merge(out / "records.tar.gz", kept)
    assert first == {"added": n, "unchanged": 0, "replaced": 0, "conflicts": 0}
    snapshot = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert keep.merge(out / "records.tar.gz", kept) == {"added": 0, "unchanged": n, "replaced": 0, "conflicts": 0}
    assert {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()} == snapshot
    df = load_records(kept, "mnist_rotated")
    assert len(df) == 6 and set(df["method"]) == {"deterministic"}
    assert len(list((kept / "device").glob("*.json"))) == 1
    assert keep.merge(out / "maps-1.tar", kept) == {"added": 1, "unchanged": 0, "replaced": 0, "conflicts": 0}
    (map_file,) = (kept / "mnist_rotated" / "checkpoints" / "map").rglob("seed0.pt")
    # the command line
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "keep_records.py"), "merge",
                          str(out / "records.tar.gz"), "--archive", str(kept)], capture_output=True, text=True)
    assert res.returncode == 0 and f"0 added, {n} unchanged" in res.stdout
    # the merged records are packed; a kept record that differs is a conflict, kept as it is
    from bench.store import PACK_NAME, pack_bytes, read_pack

    pack = kept / "mnist_rotated" / PACK_NAME
    assert not (kept / "mnist_rotated" / "records").exists()
    entries = read_pack(pack)
    rel = next(r for r in entries if "/id-" in r)
    entries[rel] = {**entries[rel], "host": "elsewhere"}
    pack.write_bytes(pack_bytes(entries))
    changed = pack.read_bytes()
    assert keep.merge(out / "records.tar.gz", kept)["conflicts"] == 1 and pack.read_bytes() == changed
    del entries[rel]
    pack.write_bytes(pack_bytes(entries))
    # a second device run resumes from the kept records: its one cell is there, nothing is run
    out2 = tmp_path / "out2"
    code = ds.main([*FAST, "--checks", "skip", "--carried", str(carried), "--kept", str(kept), "--out", str(out2),
                    "--work", str(tmp_path / "work2"), "--budget-s", "120"])
    assert code == 0
    s = json.loads((out2 / "summary.json").read_text())
    assert s["grid"]["restored_records"] == 5 and s["grid"]["cells"][0]["status"] == "fitted"  # one record gone: redone
    # on the kept MAP network, restored into the run's results: it trained none, so it returns none
    assert (tmp_path / "work2" / "grid" / map_file.relative_to(kept)).read_bytes() == map_file.read_bytes()
    assert s["outputs"]["maps"]["networks"] == 0 and not list(out2.glob("maps-*.tar"))
    keep.merge(out2 / "records.tar.gz", kept)
    out3 = tmp_path / "out3"
    assert ds.main([*FAST, "--checks", "skip", "--carried", str(carried), "--kept", str(kept), "--out", str(out3),
                    "--work", str(tmp_path / "work3"), "--budget-s", "120"]) == 0
    s3 = json.loads((out3 / "summary.json").read_text())
    assert s3["grid"]["cells"] == [] and s3["grid"]["kept_cells"] == 1 and s3["grid"]["status"] == "complete"
    assert s3["grid"]["history_used"]["finished"]["lenet_300_100/deterministic"] > 0  # from the kept summaries


def test_map_networks_go_back_in_archives_of_bounded_size_and_only_torch_files_merge(tmp_path):
    results, out = tmp_path / "results", tmp_path / "out"
    out.mkdir()
    (out / "maps-3.tar").write_bytes(b"from an earlier write")
    files = []
    for k in range(3):
        f = results / "s" / "checkpoints" / "map" / "m" / "abc" / f"seed{k}.pt"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(bytes(600))
        files.append(f)
    got = ds.write_map_archives(files, results, out, limit=3300, most=1)  # two networks fit in one archive
    assert got == {"archives": ["maps-1.tar"], "networks": 2, "left_out": ["s/checkpoints/map/m/abc/seed2.pt"]}
    assert sorted(p.name for p in out.iterdir()) == ["maps-1.tar"]  # the stale third archive is gone
    assert sorted(_members(out / "maps-1.tar")) == ["s/checkpoints/map/m/abc/seed0.pt", "s/checkpoints/map/m/abc/seed1.pt"]
    # kept ones are not sent again
    kept = tmp_path / "kept"
    (kept / "s" / "checkpoints" / "map" / "m" / "abc").mkdir(parents=True)
    (kept / "s" / "checkpoints" / "map" / "m" / "abc" / "seed0.pt").write_bytes(bytes(600))
    assert ds.new_map_checkpoints(results, "s", kept, keep) == files[1:]
    # merge: the bytes must be a torch file holding a model state, the path a finished network's
    import torch

    def tar_of(name, body):
        path = tmp_path / f"{len(list(tmp_path.glob('*.tar')))}.tar"
        with tarfile.open(path, "w") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        return path

    good = io.BytesIO()
    torch.save({"model": {"w": torch.ones(2)}, "train_time_s": 1.0}, good)
    target = kept / "s" / "checkpoints" / "map" / "m" / "abc" / "seed5.pt"
    for name, body, words in (("s/checkpoints/map/m/abc/seed5.pt", bytes(600), "not a torch file"),
                              ("s/checkpoints/map/m/abc/seed5.pt", _torch_bytes({"w": 1}), "without the network"),
                              ("s/checkpoints/map/m/abc/seed5.partial", good.getvalue(), "not a resume checkpoint"),
                              ("s/checkpoints/map/m/abc/seed5.part", good.getvalue(), "outside the kept layout")):
        with pytest.raises(keep.MergeError, match=words):
            keep.merge(tar_of(name, body), kept)
        assert not target.exists()
    assert keep.merge(tar_of("s/checkpoints/map/m/abc/seed5.pt", good.getvalue()), kept)["added"] == 1
    assert target.read_bytes() == good.getvalue()


def _torch_bytes(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def test_partial_fits_merge_beside_the_kept_records_never_backwards_and_leave_once_spent(tmp_path):
    """A device run's partial-<k>.tar goes to the carried folder (not the kept records); a copy of
    more epochs is not replaced by one of fewer; the summary's `consumed` digests remove exactly the
    copies the run resumed and finished."""
    import torch

    kept, partials = tmp_path / "kept", tmp_path / "carried" / "partial"
    fit = "s/checkpoints/partial/m/mfvi-0a1b/seed0/mfvi.partial"
    net = "s/checkpoints/map/m/abc/seed1.partial"
    assert keep.is_partial_fit(fit) and keep.is_partial_fit(net) and not keep.is_partial_fit("s/checkpoints/map/m/a/x.pt")
    assert not keep.is_partial_fit("s/checkpoints/partial/m/mfvi-0a1b/mfvi.partial")  # no seed folder
    assert not keep.is_partial_fit("../checkpoints/map/m/abc/seed1.partial")  # outside the folder
    assert not keep.is_partial_fit("s/checkpoints/map/../abc/seed1.partial")

    def state(epoch):
        return _torch_bytes({"model": {"w": torch.full((3,), float(epoch))}, "epoch": epoch, "train_seconds": 1.0})

    counts = keep.merge(_tar(tmp_path / "p1.tar", {fit: state(4), net: state(2)}), kept, partials=partials)
    assert counts["added"] == 2 and not kept.exists()  # nothing of it among the kept records
    assert (partials / fit).read_bytes() == state(4) and (partials / net).read_bytes() == state(2)
    # an older run's archive merged after a newer one's: the copy with more epochs stays
    counts = keep.merge(_tar(tmp_path / "p0.tar", {fit: state(3), net: state(5)}), kept, partials=partials)
    assert counts["conflicts"] == 1 and counts["replaced"] == 1
    assert (partials / fit).read_bytes() == state(4) and (partials / net).read_bytes() == state(5)
    # not a resume checkpoint: refused, nothing written
    with pytest.raises(keep.MergeError, match="not a resume checkpoint"):
        keep.merge(_tar(tmp_path / "bad.tar", {net: _torch_bytes({"model": {"w": torch.ones(1)}})}), kept,
                   partials=partials)
    assert (partials / net).read_bytes() == state(5)
    # the run that resumed `fit` (the copy of 4 epochs) finished it; another digest names another copy
    digest = hashlib.sha256(state(4)).hexdigest()
    summary = {"outputs": {"partials": {"consumed": {fit: digest, net: hashlib.sha256(state(2)).hexdigest()}}}}
    counts = keep.merge(_tar(tmp_path / "r.tar", {"device/run.json": json.dumps(summary).encode()}), kept,
                        partials=partials)
    assert counts["partials_spent"] == 1 and not (partials / fit).exists() and (partials / net).is_file()
    # a cell's fitted method (stopped while it was evaluated) goes there too, once it loads as one
    done = "s/checkpoints/fitted/m/mfvi-0a1b/seed0.pt"
    assert keep.is_partial_fit(done) and not keep.is_partial_fit("s/checkpoints/fitted/m/mfvi/seed0.pt")
    with pytest.raises(keep.MergeError, match="not a fitted method"):
        keep.merge(_tar(tmp_path / "f0.tar", {done: state(1)}), kept, partials=partials)
    body = _torch_bytes({"method": {"w": torch.ones(2)}, "fit_cost": {"fit_time_s": 3.0}})
    assert keep.merge(_tar(tmp_path / "f1.tar", {done: body}), kept, partials=partials)["added"] == 1
    assert (partials / done).read_bytes() == body and not (kept / "s").exists()


def _two_call_setup(carried: Path, tmp_path: Path, methods: str) -> tuple[Path, Path, list[str]]:
    """A carried folder of its own (the partial fits go into it), an empty kept folder, and the
    arguments of a grid of ``methods`` whose deadline may stop an item at any time (no checks)."""
    here = tmp_path / "carried"
    shutil.copytree(carried, here)
    kept = tmp_path / "kept"
    kept.mkdir()
    args = list(FAST)
    args[args.index("--methods") + 1] = methods
    return here, kept, args + ["--checks", "skip", "--min-cell-s", "1", "--finish-s", "4", "--carried", str(here),
                               "--kept", str(kept)]


def _call_running_a_cell(args: list[str], tmp_path: Path, budget_s: int, call: int = 1) -> tuple[Path, dict]:
    """Call ``call`` of a two-call test, whose claim needs a cell running when its deadline comes. On
    a machine so loaded that the setup (wheels, data) takes the whole budget, no cell starts: the
    call is made again in fresh folders with three times the budget, twice at most (what is tested
    is the stopped cell, not the setup's speed). Returns the call's ``$OUT`` and summary."""
    for k in range(3):
        out, budget = tmp_path / f"out{call}-{k}", budget_s * 3 ** k
        work = tmp_path / f"work{call}-{k}"
        assert ds.main([*args, "--budget-s", str(budget), "--out", str(out), "--work", str(work)]) == 0
        summary = json.loads((out / "summary.json").read_text())
        if summary["grid"]["cells"]:
            return out, summary
    raise AssertionError(f"no cell started in a budget of {budget} s: {summary['grid']['status']}")


def test_a_cell_stopped_while_evaluated_is_not_fitted_again(carried, tmp_path):
    """Call 1 fits MC dropout and is stopped while it predicts with 20,000 samples: its fitted method
    goes back (partial-1.tar). Call 2 asks for 2 samples (a prediction option: the same fit), restores
    that fit, loads it instead of fitting again and finishes the cell; the fit is then consumed, and
    merging call 2's records removes the carried copy."""
    here, kept, args = _two_call_setup(carried, tmp_path, "mc_dropout")
    args += ["--set", "data.eval_batch_size=10"]
    out1, s1 = _call_running_a_cell([*args, "--set", "mc_dropout.samples=20000"], tmp_path, 30)
    (cell,) = s1["grid"]["cells"]
    assert cell["status"] == "stopped at the deadline", cell
    rel = cell["fitted_checkpoint"]
    assert rel.startswith("mnist_rotated/checkpoints/fitted/lenet_300_100/mc_dropout-") and rel.endswith("/seed0.pt")
    info = s1["outputs"]["partials"]["files"][rel]
    assert info["fitted"] is True and info["train_seconds"] > 0
    assert list(_members(out1 / "partial-1.tar")) == [rel]
    for name in ("records.tar.gz", "partial-1.tar"):
        keep.merge(out1 / name, kept, partials=here / "partial")
    assert (here / "partial" / rel).is_file()

    out2 = tmp_path / "out2"
    assert ds.main([*args, "--set", "mc_dropout.samples=2", "--budget-s", "120", "--out", str(out2),
                    "--work", str(tmp_path / "work2")]) == 0
    s2 = json.loads((out2 / "summary.json").read_text())
    assert list(s2["grid"]["restored_partials"]) == [rel]
    (cell,) = s2["grid"]["cells"]
    assert cell["status"] == "loaded" and cell["resumed_s"] == round(info["train_seconds"], 2)
    assert s2["outputs"]["partials"]["consumed"] == {rel: info["sha256"]} and not list(out2.glob("partial-*.tar"))
    assert keep.merge(out2 / "records.tar.gz", kept, partials=here / "partial")["partials_spent"] == 1
    assert not (here / "partial" / rel).exists()


def test_partial_fits_of_items_done_since_are_consumed_not_sent_back(first_run, carried, tmp_path):
    """Partial fits carried for a MAP network and a cell that the kept records hold finished (merged
    from another call) are spent: the MAP network's is not restored, the cell's is removed when the
    worker finds the cell done; both are `consumed`, and none goes back."""
    import torch

    out1, _ = first_run
    here = tmp_path / "carried"
    shutil.copytree(carried, here)
    kept = tmp_path / "kept"
    for name in ("records.tar.gz", "maps-1.tar"):
        keep.merge(out1 / name, kept, partials=here / "partial")
    (net,) = [p.relative_to(kept).with_suffix(".partial").as_posix()
              for p in (kept / "mnist_rotated" / "checkpoints" / "map").rglob("seed0.pt")]
    fit_hash = {r["fit_hash"] for r in load_records(kept, "mnist_rotated").to_dict("records")}.pop()
    fit = f"mnist_rotated/checkpoints/partial/lenet_300_100/deterministic-{fit_hash}/seed0/deterministic.partial"
    for rel in (net, fit):
        (here / "partial" / rel).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"model": {"w": torch.ones(2)}, "epoch": 1, "train_seconds": 5.0}, here / "partial" / rel)
    out = tmp_path / "out"
    assert ds.main([*FAST, "--checks", "skip", "--carried", str(here), "--kept", str(kept), "--out", str(out),
                    "--work", str(tmp_path / "work"), "--budget-s", "120"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["grid"]["kept_cells"] == 1 and s["grid"]["restored_partials"][net]["stale"]
    assert sorted(s["outputs"]["partials"]["consumed"]) == sorted([net, fit])
    assert not s["outputs"]["partials"]["files"] and not list(out.glob("partial-*.tar"))
    assert keep.merge(out / "records.tar.gz", kept, partials=here / "partial")["partials_spent"] == 2
    assert not list((here / "partial").rglob("*.partial"))


def test_the_partial_fits_holding_the_most_training_go_back_first(tmp_path):
    """Two partial fits, room for one: the one of more training seconds goes back; the summary gives
    both with their progress, the other as left out, and a restored one that is gone as consumed."""
    import torch

    results, out = tmp_path / "results", tmp_path / "out"
    out.mkdir()
    small = results / "s" / "checkpoints" / "map" / "m" / "abc" / "seed0.partial"
    large = results / "s" / "checkpoints" / "partial" / "m" / "mfvi-1" / "seed0" / "mfvi.partial"
    for path, seconds in ((small, 10.0), (large, 300.0)):
        path.parent.mkdir(parents=True)
        torch.save({"model": {"w": torch.zeros(100)}, "epoch": 3, "train_seconds": seconds}, path)
    got = ds.partial_outputs(results, "s", out, {"s/checkpoints/map/m/abc/seed9.partial": {"sha256": "ab"}}, most=1,
                             limit=large.stat().st_size + 1500)  # one of the two
    rel = {p: p.relative_to(results).as_posix() for p in (small, large)}
    assert got["archives"] == ["partial-1.tar"] and list(_members(out / "partial-1.tar")) == [rel[large]]
    assert got["left_out"] == [rel[small]] and sorted(got["files"]) == sorted(rel.values())
    assert got["files"][rel[large]]["train_seconds"] == 300.0 and got["files"][rel[small]]["epoch"] == 3
    assert got["consumed"] == {"s/checkpoints/map/m/abc/seed9.partial": "ab"}
    # no archive left (the MAP networks took them all): every partial fit is left out, none written
    assert sorted(ds.partial_outputs(results, "s", out, {}, most=0)["left_out"]) == sorted(rel.values())
    assert not list(out.glob("partial-*.tar"))


def test_item_need_counts_the_training_a_partial_fit_holds():
    assert ds.item_need(0.0, 0.0, 50.0) == 0.0  # nothing known: the item starts
    assert ds.item_need(300.0, 0.0, 0.0) == 300.0 and ds.item_need(300.0, 400.0, 0.0) == 400.0
    assert ds.item_need(300.0, 0.0, 120.0) == 180.0 and ds.item_need(300.0, 0.0, 500.0) == 0.0


def test_trainings_stopped_at_the_deadline_go_on_in_the_next_call(carried, tmp_path):
    """Call 1 (two workers) stops two trainings of 10^5 epochs at its deadline, a MAP network's and MC
    dropout's own, and sends their resume checkpoints back (partial-1.tar); merged into the carried
    folder, call 2 restores them and goes on from them: each checkpoint it sends back counts the
    training seconds of the restored one (set to 1000 s here, far above any real value) and more epochs."""
    import torch

    here, kept, args = _two_call_setup(carried, tmp_path, "deterministic,mc_dropout")
    args += ["--set", "train.epochs=100000", "--checkpoint-interval-s", "0", "--grid-workers", "2"]

    out1, s1 = _call_running_a_cell(args, tmp_path, 30)
    assert {c["cell"]: c["status"] for c in s1["grid"]["cells"]} == {
        "lenet_300_100/map/seed0": "stopped at the deadline",
        "lenet_300_100/mc_dropout[samples=5]/seed0": "stopped at the deadline"}
    parts = s1["outputs"]["partials"]
    net, fit = sorted(parts["files"])
    assert net.startswith("mnist_rotated/checkpoints/map/lenet_300_100/") and net.endswith("/seed0.partial")
    assert fit.startswith("mnist_rotated/checkpoints/partial/lenet_300_100/mc_dropout-")
    assert fit.endswith("/seed0/mc_dropout.partial")
    assert parts["archives"] == ["partial-1.tar"] and not parts["consumed"]
    assert all(parts["files"][rel]["epoch"] >= 1 for rel in (net, fit))
    assert "<files_at>/partial-1.tar" in s1["merge"]
    for name in ("records.tar.gz", "partial-1.tar"):
        keep.merge(out1 / name, kept, partials=here / "partial")
    for rel in (net, fit):
        state = torch.load(here / "partial" / rel, weights_only=True)
        assert state["epoch"] == parts["files"][rel]["epoch"]
        torch.save({**state, "train_seconds": 1000.0}, here / "partial" / rel)

    out2, s2 = _call_running_a_cell(args, tmp_path, 30, call=2)
    assert {rel: info["train_seconds"] for rel, info in s2["grid"]["restored_partials"].items()} == {
        net: 1000.0, fit: 1000.0}
    assert [(c["status"], c["resumed_s"]) for c in s2["grid"]["cells"]] == [("stopped at the deadline", 1000.0)] * 2
    for rel in (net, fit):
        again = s2["outputs"]["partials"]["files"][rel]
        assert again["train_seconds"] > 1000.0 and again["epoch"] > parts["files"][rel]["epoch"]


def test_a_swag_selection_stopped_at_the_deadline_goes_on_in_the_next_call(carried, tmp_path):
    """The subnetwork Laplace's SWAG run (here 10^6 snapshots, one an epoch) stopped by call 1's
    deadline goes back as the fit's partial file (``swag.partial``); merged, with the MAP network,
    call 2 restores it and continues it: what it sends back holds the restored seconds (set to
    1000 s) and more epochs, and the stopped cell says it resumed."""
    import torch

    here, kept, args = _two_call_setup(carried, tmp_path, "subnet_laplace")
    args += ["--set", "subnet_laplace.swag_n_snapshots=1000000", "--checkpoint-interval-s", "0"]

    out1, s1 = _call_running_a_cell(args, tmp_path, 25)
    stopped = [c for c in s1["grid"]["cells"] if "/subnet_laplace" in c["cell"]]
    assert [c["status"] for c in stopped] == ["stopped at the deadline"], s1["grid"]["cells"]
    (rel,) = s1["outputs"]["partials"]["files"]
    assert rel.startswith("mnist_rotated/checkpoints/partial/lenet_300_100/subnet_laplace-")
    assert rel.endswith("/seed0/swag.partial") and s1["outputs"]["partials"]["files"][rel]["epoch"] >= 1
    for archive in sorted(out1.glob("*.tar*")):
        keep.merge(archive, kept, partials=here / "partial")
    state = torch.load(here / "partial" / rel, weights_only=False)
    torch.save({**state, "train_seconds": 1000.0}, here / "partial" / rel)

    out2, s2 = _call_running_a_cell(args, tmp_path, 25, call=2)
    assert {r: info["train_seconds"] for r, info in s2["grid"]["restored_partials"].items()} == {rel: 1000.0}
    (cell,) = [c for c in s2["grid"]["cells"] if "/subnet_laplace" in c["cell"]]
    assert (cell["status"], cell["resumed_s"]) == ("stopped at the deadline", 1000.0)
    again = s2["outputs"]["partials"]["files"][rel]
    assert again["train_seconds"] > 1000.0 and again["epoch"] > state["epoch"]


def test_the_grid_runs_seed_0_of_every_model_and_method_before_other_seeds():
    cells = [{"cell": (model, method, {}, seed)} for model in ("a", "b") for method in ("m", "n") for seed in (0, 1, 2)]
    got = [c["cell"] for c in ds.seed_major(cells, [0, 1, 2])]
    assert got[:4] == [("a", "m", {}, 0), ("a", "n", {}, 0), ("b", "m", {}, 0), ("b", "n", {}, 0)]
    assert [c[3] for c in got] == [0] * 4 + [1] * 4 + [2] * 4 and sorted(got) == sorted(c["cell"] for c in cells)


def test_a_worker_takes_seed_0_of_every_method_first(carried, tmp_path):
    args = list(FAST)
    args[args.index("--seeds") + 1] = "0,1"
    args[args.index("--methods") + 1] = "deterministic,temperature_scaling"
    out = tmp_path / "out"
    assert ds.main([*args, "--checks", "skip", "--carried", str(carried), "--kept", str(tmp_path / "kept"),
                    "--out", str(out), "--work", str(tmp_path / "work"), "--budget-s", "200"]) == 0
    g = json.loads((out / "summary.json").read_text())["grid"]
    assert [c["cell"].split("/")[1:] for c in g["cells"]] == [
        ["map", "seed0"], ["deterministic", "seed0"], ["temperature_scaling", "seed0"],
        ["map", "seed1"], ["deterministic", "seed1"], ["temperature_scaling", "seed1"]]


def test_a_cell_whose_network_needs_longer_than_the_call_is_deferred_with_it(carried, tmp_path):
    """A kept summary says the MAP network ran 10^4 s on this kind of device without finishing: the
    network is deferred, and so is the cell built on it (which would train it inside the cell)."""
    kept = tmp_path / "kept"
    (kept / "device").mkdir(parents=True)
    (kept / "device" / "earlier.json").write_text(json.dumps({"device": {"used": "cpu"}, "grid": {"cells": [
        {"cell": "lenet_300_100/map/seed0", "status": "stopped at the deadline", "seconds": 1e4}]}}))
    out = tmp_path / "out"
    # a budget far below the 10^4 s and far above the setup's time on a loaded machine (60 s was not, in a CI
    # beside two training lanes: the grid then stopped for lack of time before it looked at the cells)
    assert ds.main([*FAST, "--checks", "skip", "--carried", str(carried), "--kept", str(kept), "--out", str(out),
                    "--work", str(tmp_path / "work"), "--budget-s", "600"]) == 0
    g = json.loads((out / "summary.json").read_text())["grid"]
    assert g["cells"] == [] and g["status"] == "complete but for the deferred cells"
    assert [d["cell"] for d in g["deferred"]] == ["lenet_300_100/map/seed0", "lenet_300_100/deterministic/seed0"]
    assert all("needs more than 10000 s" in d["why"] for d in g["deferred"])


def test_merge_refuses_an_archive_outside_the_kept_layout_and_writes_nothing(tmp_path, capsys):
    kept = tmp_path / "kept"
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        for name, body in (("mnist_rotated/records/m/x-1/seed0/id-a-0.json", b'{"not": "a record"}'),
                           ("../escape.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    with pytest.raises(keep.MergeError, match="outside the kept layout|missing field"):
        keep.merge(bad, kept)
    assert not kept.exists()
    assert keep.main(["merge", str(bad), "--archive", str(kept)]) == 2
    assert keep.main(["merge", str(tmp_path / "absent.tar.gz"), "--archive", str(kept)]) == 2
    assert "no such file" in capsys.readouterr().err and not kept.exists()


def test_an_exhausted_budget_runs_no_cell_and_still_writes_the_summary(carried, tmp_path):
    out = tmp_path / "out"
    code = ds.main([*FAST, "--carried", str(carried), "--kept", str(tmp_path / "kept"), "--out", str(out),
                    "--work", str(tmp_path / "work"), "--budget-s", "0"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "finished" and s["grid"]["cells"] == []
    assert s["grid"]["status"].startswith("not started: budget")
    assert s["checks"]["suites"]["toy"]["smoke"]["status"] == "not run" and s["checks"]["passed"] is False
    assert s["outputs"]["records"] == 0
    assert not [k for k in _members(out / "records.tar.gz") if "/records/" in k]
    assert not (tmp_path / "work" / "checks").exists() and not (tmp_path / "work" / "grid").exists()


@pytest.mark.parametrize("args, words", [
    (["--data-archives", "/nonexistent/archives"], ["/nonexistent/archives", "MNIST.tar.xz",
                                                    "FashionMNIST-test.tar.xz", "device_prepare.sh"]),
    (["--suite", "nosuch"], ["nosuch", "mnist_rotated", "mnist_noise", "toy"]),
    (["--suite", "cifar10c"], ["does not travel", "mnist_rotated"]),
    (["--check-suites", "toy,nosuch"], ["nosuch", "valid suites", "cifar10c", "camvid"]),
    (["--methods", "nosuch"], ["nosuch", "valid methods", "deterministic"]),
    (["--perf-cases", "nosuch"], ["nosuch", "harness_vs_bare_loop"]),
    (["--cuda-tests", "tests/nosuch.py"], ["tests/nosuch.py", "test_method_contract.py", "none"]),
    (["--grid-workers", "0"], ["--grid-workers", "at least 1"]),
    (["--checkpoint-interval-s", "-1"], ["--checkpoint-interval-s", ">= 0"]),
    (["--recheck-s", "-5"], ["--recheck-s", ">= 0"]),
    (["--set", "pbn.nosuch=1"], ["nosuch", "pbn"]),
])
def test_bad_input_exits_2_naming_what_is_valid_and_writes_nothing(args, words, carried, tmp_path, capsys):
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--device", "cpu", "--check-suites", "toy", "--carried", str(carried), "--out", str(out), "--work",
            str(work), *args]
    assert ds.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and all(w in err for w in words), err
    assert not out.exists() and not work.exists()


def test_missing_out_is_exit_2(carried, monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("OUT", raising=False)
    assert ds.main(["--device", "cpu", "--carried", str(carried), "--work", str(tmp_path / "w")]) == 2
    assert "$OUT" in capsys.readouterr().err and not (tmp_path / "w").exists()


def _write(results: Path, device: str, metrics: dict, method="deterministic", informative="pass", fit_time=1.5):
    store = ResultsStore(results)
    run = store.run_dir("toy", "mlp_100", method, "abc", 0)
    store.write(run, {"suite": "toy", "method": method, "method_label": method, "model": "mlp_100", "seed": 0,
                      "status": "ok", "kind": "id", "shift": "clean", "severity": 0.0, "metrics": metrics,
                      "device": device, "cost": {"fit_time_s": fit_time},
                      "validity": {"status": "ok", "checks": [{"name": "informative", "status": informative}]}})


def test_cuda_and_cpu_metrics_compared_within_the_tolerance(tmp_path):
    """compare_runs, which the CUDA check applies to the CUDA-fitted state evaluated on cuda and on cpu."""
    a, b = tmp_path / "cuda", tmp_path / "cpu"
    _write(a, "cuda:x", {"accuracy": 0.905, "nll": 0.30, "note": "text", "mi": None})
    _write(b, "cpu", {"accuracy": 0.900, "nll": 0.31, "note": "text", "mi": None})
    r = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)
    cell = r["cells"]["mlp_100/deterministic/seed0"]
    assert r["status"] == "ok" and cell["status"] == "ok" and set(cell["metrics"]) == {"accuracy", "nll"}
    assert cell["max_abs_diff"] == pytest.approx(0.01) and cell["same_fitted_state"] and "not_compared" not in cell
    r = ds.compare_runs(a, b, "toy", atol=0.001, rtol=0.0)
    assert r["status"] == "failed" and set(r["cells"]["mlp_100/deterministic/seed0"]["outside_tolerance"]) == {
        "accuracy", "nll"}
    _write(b, "cpu", {"accuracy": 0.5}, method="mc_dropout")  # a cell on one device only
    r = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)
    assert r["status"] == "failed" and r["cells"]["mlp_100/mc_dropout/seed0"]["why"] == "missing on cuda"


def test_a_network_at_chance_is_compared_on_its_smooth_metrics_only(tmp_path):
    """At chance the argmax metrics flip with rounding: accuracy 0.175 vs 0.105 on the same smoke
    cell in the first CUDA run. They are listed, not compared; NLL and Brier still are."""
    a, b = tmp_path / "cuda", tmp_path / "cpu"
    _write(a, "cuda:x", {"accuracy": 0.105, "ece": 0.04, "nll": 2.245, "brier": 0.886}, informative="fail")
    _write(b, "cpu", {"accuracy": 0.175, "ece": 0.12, "nll": 2.250, "brier": 0.888}, informative="fail")
    cell = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)["cells"]["mlp_100/deterministic/seed0"]
    assert cell["status"] == "ok" and sorted(cell["not_compared"]) == ["accuracy", "ece"]
    assert cell["informative"] is False and cell["max_abs_diff"] == pytest.approx(0.005)
    _write(b, "cpu", {"accuracy": 0.175, "ece": 0.12, "nll": 2.9, "brier": 0.888}, informative="fail")
    cell = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)["cells"]["mlp_100/deterministic/seed0"]
    assert cell["status"] == "failed" and cell["outside_tolerance"] == ["nll"]
    # the same numbers from an informative network: every metric is compared
    _write(a, "cuda:x", {"accuracy": 0.105, "ece": 0.04, "nll": 2.245, "brier": 0.886})
    _write(b, "cpu", {"accuracy": 0.175, "ece": 0.12, "nll": 2.250, "brier": 0.888})
    cell = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)["cells"]["mlp_100/deterministic/seed0"]
    assert cell["status"] == "failed" and sorted(cell["outside_tolerance"]) == ["accuracy", "ece"]


def test_a_cpu_record_fitted_again_is_no_reference(tmp_path):
    """The reference is the CUDA-fitted state: a CPU record with another fit time was fitted anew."""
    a, b = tmp_path / "cuda", tmp_path / "cpu"
    _write(a, "cuda:x", {"nll": 0.30}, fit_time=1.5)
    _write(b, "cpu", {"nll": 0.30}, fit_time=9.0)
    cell = ds.compare_runs(a, b, "toy", atol=0.02, rtol=0.05)["cells"]["mlp_100/deterministic/seed0"]
    assert cell["status"] == "failed" and cell["same_fitted_state"] is False and "fitted again" in cell["why"]


def test_checks_that_passed_on_cuda_and_cell_times_are_read_from_kept_summaries():
    info = {"torch": "2.11.0+cu130"}
    ok = {"smoke": {"status": "ok"}, "agreement": {"status": "ok"}}
    kept = [
        {"run_id": "r1", "device": {"used": "cpu", "torch": "2.11.0+cu130"}, "checks": {"suites": {"toy": ok}}},
        {"run_id": "r2", "device": {"used": "cuda", "torch": "2.11.0+cu130"},
         "checks": {"suites": {"toy": ok, "camvid": {**ok, "agreement": {"status": "failed"}}}},
         "grid": {"cells": [{"cell": "lenet5/pbn/seed0", "status": "fitted", "seconds": 40.0},
                            {"cell": "lenet5/pbn/seed1", "status": "fitted", "seconds": 50.0},
                            {"cell": "lenet5/deep_ensemble/seed0", "status": "stopped at the deadline",
                             "seconds": 300.0}]}},
    ]
    code = {"bench/a.py": "1", "methods/b.py": "2"}
    kept[1]["code"] = {"files": code}
    kept[1]["checks"]["suites"]["toy"]["code"] = ds.code_digest(code)
    assert ds.check_standing(kept, "toy", info, code) == {"state": "current", "run": "r2", "at": ""}
    assert ds.check_standing(kept, "camvid", info, code)["state"] == "new"  # its CUDA / CPU comparison failed
    assert ds.check_standing(kept, "toy", {"torch": "2.12.0"}, code)["state"] == "new"  # another torch
    assert ds.check_standing(kept, "toy", info, {**code, "methods/b.py": "3", "bench/c.py": "4"}) == \
        {"state": "stale", "run": "r2", "at": "", "changed": 2}  # a file changed, one added
    # the CUDA tests: a kept pass counts for the test files it ran as they are now, not for one added or
    # changed since (a CUDA test added to a file), nor for a run that kept no digests
    gpu = {"name": "H200", "torch": "2.11.0+cu130"}
    kept[1]["device"]["name"] = "H200"
    kept[1]["checks"]["cuda_tests"] = {"status": "ok", "paths": ["tests/a.py"], "digests": {"tests/a.py": "d1"}}
    kept[1]["checks"]["cuda_tests"]["code"] = "c1"
    assert ds.cuda_tests_passed_before(kept, gpu, ["tests/a.py"], "c1", {"tests/a.py": "d1"}) == "r2"
    assert ds.cuda_tests_passed_before(kept, gpu, ["tests/a.py"], "c2", {"tests/a.py": "d1"}) is None  # code changed
    assert ds.cuda_tests_passed_before(kept, gpu, ["tests/a.py"], "c1", {"tests/a.py": "d2"}) is None
    both = {"tests/a.py": "d1", "tests/b.py": "d3"}
    assert ds.cuda_tests_passed_before(kept, gpu, ["tests/a.py", "tests/b.py"], "c1", both) is None
    assert ds.cuda_tests_passed_before(kept, {**gpu, "name": "H100"}, ["tests/a.py"], "c1",
                                       {"tests/a.py": "d1"}) is None
    kept[1]["checks"]["cuda_tests"] = {"status": "ok", "paths": ["tests/a.py"], "code": "c1"}
    assert ds.cuda_tests_passed_before(kept, gpu, ["tests/a.py"], "c1", {"tests/a.py": "d1"}) is None
    here = str(Path(__file__).resolve().parent / "test_training_loop.py")
    assert ds.test_file_digests([here])[here] == hashlib.sha256(Path(here).read_bytes()).hexdigest()
    h = ds.grid_history(kept, "cuda")
    assert h == {"finished": {"lenet5/pbn": 50.0}, "lower_bound": {"lenet5/deep_ensemble/seed0": 300.0}}
    # a later session's times replace an earlier one's (faster code, other workers): the latest, not the longest
    kept.append({"run_id": "r3", "device": {"used": "cuda"},
                 "grid": {"cells": [{"cell": "lenet5/pbn/seed0", "status": "fitted", "seconds": 20.0},
                                    {"cell": "lenet5/pbn/seed1", "status": "fitted", "seconds": 30.0},
                                    {"cell": "lenet5/deep_ensemble/seed0", "status": "stopped at the deadline",
                                     "seconds": 100.0}]}})
    h = ds.grid_history(kept, "cuda")
    assert h == {"finished": {"lenet5/pbn": 30.0}, "lower_bound": {"lenet5/deep_ensemble/seed0": 300.0}}
    assert ds.grid_history(kept, "cpu") == {"finished": {}, "lower_bound": {}}


def test_a_check_passed_on_other_code_is_stale_and_checked_again_oldest_first():
    """A suite's standing is read from the latest kept CUDA run in which its check ran: runs that skipped it
    (passed before, or stale and not checked again) are passed over, a failure there makes it new again; the
    order puts never-passed suites first, then the stale ones, the grid's suite first and then the oldest."""
    info, ok = {"torch": "t"}, {"status": "ok"}
    now = {"bench/a.py": "2"}

    def run(rid, at, suites, files=None):
        return {"run_id": rid, "started_at": at, "device": {"used": "cuda", "torch": "t"},
                "code": {"files": files} if files else {}, "checks": {"suites": suites}}

    ran = {"smoke": {**ok, "seconds": 3.0}, "agreement": ok, "code": ds.code_digest({"bench/a.py": "1"})}
    skipped = {"smoke": {**ok, "note": "skipped: passed in kept run r1"}, "agreement": ok}
    stale = {"smoke": {**ok, "stale": True, "note": "skipped: not checked again (--recheck-s 0 spent)"},
             "agreement": ok}
    kept = [run("r1", "2026-11-01", {"toy": ran, "cifar10c": ran}, {"bench/a.py": "1"}),
            run("r2", "2026-11-02", {"toy": skipped, "camvid": ran, "cifar10c": stale}, {"bench/a.py": "1"}),
            run("r3", "2026-11-03", {"camvid": stale, "mnist_rotated": {**ran, "code": ds.code_digest(now)},
                                     "folder": {"smoke": {"status": "failed"}, "agreement": ok}}, now),
            run("r0", "2026-10-01", {"folder": ran})]  # before r3 in the file order: the latest run decides
    kept.insert(0, kept.pop())
    st = {s: ds.check_standing(kept, s, info, now) for s in ("toy", "camvid", "cifar10c", "mnist_rotated", "folder",
                                                              "chestmnist")}
    assert st["toy"] == {"state": "stale", "run": "r1", "at": "2026-11-01", "changed": 1}
    assert st["camvid"]["run"] == "r2" and st["cifar10c"]["run"] == "r1"
    assert st["mnist_rotated"] == {"state": "current", "run": "r3", "at": "2026-11-03"}
    assert st["folder"] == {"state": "new", "failed_in": "r3"} and st["chestmnist"] == {"state": "new"}
    # a summary of before the digests were kept: stale, by how many files unknown
    old = [run("r1", "2026-11-01", {"toy": {**ran, "code": None}})]
    assert ds.check_standing(old, "toy", info, now) == {"state": "stale", "run": "r1", "at": "2026-11-01",
                                                        "changed": None}
    assert ds.check_order(st, "camvid") == ["folder", "chestmnist", "camvid", "toy", "cifar10c"]
    assert ds.check_order(st, "mnist_rotated") == ["folder", "chestmnist", "toy", "cifar10c", "camvid"]


def test_stale_checks_run_again_as_the_recheck_budget_allows(carried, tmp_path):
    """With the CPU standing in for the GPU: the toy suite's check passed in a kept run on this code (not run
    again), then on other code: stale, and with --recheck-s 0 marked so without running (the summary names the
    run it passed in and how many files changed since); with time to recheck it runs and its pass holds the
    code's digest, which a later run then finds current."""
    import time

    import torch

    kept_dir = tmp_path / "kept"
    (kept_dir / "device").mkdir(parents=True)
    files = ds.code_files(ds.ROOT)
    ok = {"status": "ok", "seconds": 2.0}
    prior = {"run_id": "r1", "started_at": "2026-11-01", "device": {"used": "cuda", "torch": torch.__version__},
             "code": {"files": files},
             "checks": {"suites": {"toy": {"smoke": ok, "agreement": ok, "code": ds.code_digest(files)}}}}

    def session(name, recheck_s, kept_summary):
        (kept_dir / "device" / "r1.json").write_text(json.dumps(kept_summary))
        out, work = tmp_path / name / "out", tmp_path / name / "work"
        a = ds.build_parser().parse_args([
            "--out", str(out), "--device", "cpu", "--threads", "1", "--check-suites", "toy", "--check-methods",
            "deterministic", "--perf-cases", "none", "--cuda-tests", "none", "--budget-s", "300", "--recheck-s",
            str(recheck_s), "--kept", str(kept_dir), "--carried", str(carried), "--profile", "smoke", "--seeds", "0"])
        a.started_at = time.time()
        ds.validate(a)
        a.data_root = work / "data"
        out.mkdir(parents=True)
        work.mkdir(parents=True)
        s = ds.Session(a, torch.device("cpu:0"), out, work)
        s.cuda, s.info["name"] = True, "stand-in GPU"
        s.run_checks()
        return s.summary

    same = session("same", 120, prior)
    toy = same["checks"]["suites"]["toy"]
    assert toy["smoke"]["note"] == "skipped: passed in kept run r1 on this code" and same["checks"]["stale"] == []
    assert same["checks"]["passed"] is True
    other = json.loads(json.dumps(prior))
    other["code"]["files"]["bench/__init__.py"] = "0" * 16  # the kept pass was on other code
    other["checks"]["suites"]["toy"]["code"] = ds.code_digest(other["code"]["files"])
    held = session("held", 0, other)
    toy = held["checks"]["suites"]["toy"]
    assert toy["smoke"]["stale"] and toy["smoke"]["passed_in"] == "r1" and toy["smoke"]["changed_files"] == 1
    assert "--recheck-s 0 spent" in toy["smoke"]["note"] and "seconds" not in toy["smoke"]
    assert held["checks"]["stale"] == ["toy"] and held["checks"]["passed"] is True
    again = session("again", 120, other)
    toy = again["checks"]["suites"]["toy"]
    assert toy["smoke"]["status"] == "ok" and toy["smoke"]["seconds"] > 0 and toy["stale_since"] == "r1"
    assert toy["code"] == again["code"]["digest"] == ds.code_digest(files) and again["checks"]["stale"] == []
    again["device"]["used"] = "cuda"  # the stand-in's summary as a GPU's
    assert ds.check_standing([other, again], "toy", {"torch": torch.__version__}, files)["state"] == "current"


def test_the_cuda_branch_runs_with_cpu0_standing_in_for_the_gpu(carried, tmp_path):
    """The CUDA-only steps (the CPU evaluation of the device's fitted state, the metric comparison, bench
    perf and its rows in the archive) on a machine without CUDA: device ``cpu:0`` plays the GPU."""
    import time

    import torch

    out, work = tmp_path / "out", tmp_path / "work"
    a = ds.build_parser().parse_args([
        "--out", str(out), "--device", "cpu", "--threads", "1", "--check-suites", "toy", "--check-methods",
        "deterministic,mc_dropout", "--perf-cases", "ensemble_vs_single", "--perf-repeats", "1", "--budget-s", "300",
        "--kept", str(tmp_path / "kept"), "--carried", str(carried), "--profile", "smoke", "--seeds", "0"])
    a.started_at = time.time()
    ds.validate(a)
    a.data_root = work / "data"
    out.mkdir()
    work.mkdir()
    s = ds.Session(a, torch.device("cpu:0"), out, work)
    s.cuda, s.info["name"] = True, "stand-in GPU"
    s.run_checks()
    c = s.summary["checks"]
    toy = c["suites"]["toy"]
    assert toy["smoke"]["status"] == "ok" and toy["smoke"]["device"] == "cpu:0"
    agr = toy["agreement"]
    assert agr["status"] == "ok" and agr["cpu_run"]["status"] == "ok"
    assert set(agr["cells"]) == {"mlp_100/deterministic/seed0", "mlp_100/mc_dropout/seed0"}
    assert all(v["max_abs_diff"] == 0.0 for v in agr["cells"].values())  # the same code on the same CPU
    # the CPU run evaluated the fitted state of the device's run: it loaded, did not fit
    assert agr["cpu_run"]["checkpoint_files_from_cuda"] > 0
    assert all(v["same_fitted_state"] for v in agr["cells"].values())
    assert c["perf"]["status"] == "ok" and c["perf"]["rows"] and c["perf"]["cases"] == ["ensemble_vs_single"]
    # pytest -m cuda ran (here every cuda test skips: without CUDA they cannot pass, so not "ok")
    t = c["cuda_tests"]
    assert t["tests"] > 0 and t["skipped_all"] and t["status"] == "failed" and t["failed"] == []
    assert c["passed"] is False  # the cuda tests did not pass
    s.write_outputs(final=True)
    perf = json.loads(_members(out / "records.tar.gz")["perf/cuda-stand-in_GPU.json"])
    assert {r["case"] for r in perf["rows"]} == {"ensemble_vs_single"}


def test_perf_measures_the_cases_no_kept_run_measured_on_this_gpu(carried, tmp_path):
    """A kept summary measured ensemble_vs_single on this GPU: asked for it and mc_dropout_vs_single
    (a case added since), the session measures the new case only and says which kept run measured the
    other; asked for the old case alone, it measures nothing; another GPU's run counts for nothing, nor one
    on other code.
    (Before, any kept perf run skipped them all, so a case added later never ran on a GPU.)"""
    import time

    import torch

    def session(cases, name="stand-in GPU", code=None):
        out, work = tmp_path / f"out-{cases}-{name}-{code}", tmp_path / f"work-{cases}-{name}-{code}"
        a = ds.build_parser().parse_args([
            "--out", str(out), "--device", "cpu", "--threads", "1", "--perf-cases", cases, "--perf-repeats", "1",
            "--budget-s", "300", "--kept", str(tmp_path / "kept"), "--carried", str(carried)])
        a.started_at = time.time()
        ds.validate(a)
        out.mkdir()
        work.mkdir()
        s = ds.Session(a, torch.device("cpu:0"), out, work)
        s.cuda, s.info["name"] = True, name
        s.kept = [{"run_id": "r1", "device": {"used": "cuda:0", "name": "stand-in GPU"},
                   "checks": {"perf": {"status": "ok", "cases": ["ensemble_vs_single"], "rows": [],
                                       "code": code or s.code}}}]
        return s.run_perf()

    both = session("ensemble_vs_single,mc_dropout_vs_single")
    assert both["status"] == "ok" and both["cases"] == ["mc_dropout_vs_single"]
    assert {r["case"] for r in both["rows"]} == {"mc_dropout_vs_single"}
    assert both["note"] == "ensemble_vs_single: measured in kept run(s) r1"
    old = session("ensemble_vs_single")
    assert old == {"status": "ok", "note": "skipped: measured in kept run(s) r1"}
    other = session("ensemble_vs_single", name="another GPU")
    assert other["cases"] == ["ensemble_vs_single"] and other["rows"]
    changed = session("ensemble_vs_single", code="measured on other code")  # measured again
    assert changed["cases"] == ["ensemble_vs_single"] and changed["rows"]
    assert changed["code"] != "measured on other code"


def test_merged_perf_rows_replace_the_cases_the_run_measured_and_keep_the_others(tmp_path):
    kept = tmp_path / "kept"
    (kept / "perf").mkdir(parents=True)

    def row(case, model, ratio):
        return {"case": case, "model": model, "measure": f"{case} ratio", "ratio": ratio, "op": "<=", "target": 1.0,
                "ok": True, "detail": "", "device": "cuda:X"}

    (kept / "perf" / "cuda-X.json").write_text(json.dumps({"rows": [row("a", "m1", 1.0), row("b", "m1", 2.0)]}))
    run = {"rows": [row("b", "m1", 0.5), row("c", "m1", 0.7)]}
    archive = _tar(tmp_path / "records.tar.gz", {"perf/cuda-X.json": json.dumps(run, indent=1).encode()})
    keep.merge(archive, kept)
    got = json.loads((kept / "perf" / "cuda-X.json").read_text())["rows"]
    assert [(r["case"], r["ratio"]) for r in got] == [("a", 1.0), ("b", 0.5), ("c", 0.7)]
    before = (kept / "perf" / "cuda-X.json").read_bytes()
    keep.merge(archive, kept)  # twice: nothing changes
    assert (kept / "perf" / "cuda-X.json").read_bytes() == before


def test_device_cuda_without_cuda_is_exit_2(carried, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert ds.main(["--device", "cuda", "--carried", str(carried), "--out", str(tmp_path / "out")]) == 2
    assert "CUDA is not available" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_junit_summary_names_each_failing_test(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text("""<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.test_a" name="test_ok"/>
<testcase classname="tests.test_a" name="test_bad[pbn]"><failure message="AssertionError: 3 syncs&#10;more">x</failure></testcase>
<testcase classname="tests.test_a" name="test_skip"><skipped message="no CUDA"/></testcase>
</testsuite></testsuites>""")
    r = ds.junit_summary(xml)
    assert (r["tests"], r["passed"], r["skipped"], r["skipped_all"]) == (3, 1, 1, False)
    assert r["failed"] == [{"test": "tests.test_a::test_bad[pbn]", "message": "AssertionError: 3 syncs"}]
    assert ds.junit_summary(tmp_path / "none.xml") == {}


def test_every_suite_the_checks_may_name_has_data_or_a_fixture(tmp_path):
    """The checks run every registered suite by default: a suite added without a fixture here lost a
    whole lent session once (BadInput before any check ran). Each fixture is built for real."""
    from bench.suites import SUITES

    for suite in SUITES.names():
        if suite in ds.REAL_DATA:
            continue
        extra = ds.build_fixture(suite, tmp_path / suite)
        assert isinstance(extra, list), suite
        assert any(p.is_file() for p in (tmp_path / suite).rglob("*") if p.name != ".done"), suite


def test_the_work_list_puts_each_map_network_before_the_first_cell_that_needs_it():
    cells = [{"key": "m/deterministic/seed0", "cell": 1, "needs": [("m", 0)], "done": True},
             {"key": "m/deep_ensemble/seed0", "cell": 2, "needs": [("m", 0), ("m", 1)], "done": False},
             {"key": "m/pbn/seed0", "cell": 3, "needs": [("m", 0)], "done": False},
             {"key": "m/ssvi/seed0", "cell": 4, "needs": [], "done": False}]
    items = ds.grid_items(cells)
    assert [i["key"] for i in items] == ["m/deterministic/seed0", "m/map/seed0", "m/map/seed1",
                                         "m/deep_ensemble/seed0", "m/pbn/seed0", "m/ssvi/seed0"]
    assert items[3]["needs"] == ["m/map/seed0", "m/map/seed1"]
    # a network trained already (restored from the kept ones) is no item; the cell still names it
    items = ds.grid_items(cells, cached={("m", 0)})
    assert [i["key"] for i in items] == ["m/deterministic/seed0", "m/map/seed1", "m/deep_ensemble/seed0",
                                         "m/pbn/seed0", "m/ssvi/seed0"]
    assert items[2]["needs"] == ["m/map/seed0", "m/map/seed1"]


def test_a_worker_passes_over_a_cell_whose_map_network_another_is_training(tmp_path):
    items = ds.grid_items([{"key": "m/deep_ensemble/seed0", "cell": 1, "needs": [("m", 0), ("m", 1)], "done": False},
                           {"key": "m/ssvi/seed0", "cell": 2, "needs": [], "done": False}])
    a, b = ds.Claims(tmp_path), ds.Claims(tmp_path)  # two workers, one folder
    first, _ = ds.next_item(items, a)
    assert first["key"] == "m/map/seed0" and a.take(first["key"]) and not b.take(first["key"])
    second, _ = ds.next_item(items, b)
    assert second["key"] == "m/map/seed1" and b.take(second["key"])
    third, waiting = ds.next_item(items, a)  # the ensemble waits on both networks: the next cell instead
    assert third["key"] == "m/ssvi/seed0" and waiting and a.take(third["key"])
    assert ds.next_item(items, a) == (None, True)  # nothing to take, a cell waits
    a.finish("m/map/seed0")
    b.finish("m/map/seed1")
    fourth, waiting = ds.next_item(items, b)
    assert fourth["key"] == "m/deep_ensemble/seed0" and not waiting


def test_grid_workers_take_map_networks_and_cells_from_one_list_side_by_side(carried, tmp_path):
    """--grid-workers 2 on seeds 0,1 with a 2-member ensemble: the 4 MAP networks are trained once
    each, as items of their own before the cells; every cell fitted once, both
    workers taking items, and its records all in the one archive."""
    kept = tmp_path / "kept"
    kept.mkdir()
    out = tmp_path / "out"
    args = list(FAST)
    args[args.index("--seeds") + 1] = "0,1"
    args[args.index("--methods") + 1] = "deterministic,deep_ensemble"
    res = _wrapper([*args, "--grid-workers", "2", "--checks", "skip", "--set", "train.epochs=2",
                    "--set", "deep_ensemble.members=2", "--carried", str(carried),
                    "--kept", str(kept), "--work", str(tmp_path / "work"), "--budget-s", "240"], out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    g = s["grid"]
    assert g["status"] == "complete" and g["workers"] == 2
    maps = [c for c in g["cells"] if "/map/" in c["cell"]]
    cells = [c for c in g["cells"] if "/map/" not in c["cell"]]
    # members of seed s are the MAP networks of seeds 2s, 2s+1 (the deterministic cells use 0 and 1)
    assert sorted(c["cell"] for c in maps) == [f"lenet_300_100/map/seed{k}" for k in range(4)]
    assert {c["status"] for c in maps} == {"trained"}
    # the items came from the one list of the two workers (which items each took is the scheduler's race:
    # a worker that starts late may find every item taken: since resume checkpoints are no longer written
    # after every epoch these toy items take well under a second, and a clean-clone CI saw worker 1 take none)
    assert {c["worker"] for c in g["cells"]} <= {0, 1}
    assert sorted((c["cell"].split("-")[0].split("[")[0], c["status"]) for c in cells) == [
        ("lenet_300_100/deep_ensemble", "fitted"), ("lenet_300_100/deep_ensemble", "fitted"),
        ("lenet_300_100/deterministic/seed0", "fitted"), ("lenet_300_100/deterministic/seed1", "fitted")]
    members = _members(out / "records.tar.gz")
    records = [json.loads(v) for k, v in members.items() if "/records/" in k]
    assert {(r["method"], r["seed"]) for r in records} == {(m, s) for m in ("deterministic", "deep_ensemble")
                                                             for s in (0, 1)}
    assert {r["train_config"]["epochs"] for r in records} == {2} and g["sets"][0] == "train.epochs=2"  # --set reached the grid
    assert s["outputs"]["maps"]["networks"] == 4 and len(_members(out / "maps-1.tar")) == 4


def _scripts_repo(repo: Path, *scripts: str) -> Path:
    """A git repository holding only ``scripts/<name>`` of this one, committed: a tiny tree."""
    (repo / "scripts").mkdir(parents=True)
    for f in scripts:
        shutil.copy(ROOT / "scripts" / f, repo / "scripts" / f)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm",
                    "scripts"], check=True)
    return repo


def test_partial_fits_travel_as_far_as_the_call_has_room_the_most_training_seconds_first(tmp_path):
    """device_prepare.sh with a 1 MiB carry limit, a small data archive and three partial fits of
    ~400 KB (10, 30 and 20 training seconds): the two of most seconds travel in .device/partial, the
    third waits in .device-held/partial (not carried). After a merge brings back a newer copy of the held
    training (40 s) beside the held one, the next prepare keeps the newer copy only, and it travels with
    the one of 30 s while the one of 20 s is held; a copy of fewer seconds (a fresh start) does not replace it."""
    import numpy as np
    import torch

    repo = _scripts_repo(tmp_path / "repo", "device_prepare.sh")
    shared = tmp_path / "shared"
    (shared / "src" / "SMALL").mkdir(parents=True)
    (shared / "src" / "SMALL" / "note.txt").write_text("hello\n")
    with tarfile.open(shared / "SMALL.tar.xz", "w:xz") as tar:
        tar.add(shared / "src" / "SMALL", arcname="SMALL")
    (shared / "MD5SUMS").write_text("")
    rels = {s: f"mnist_rotated/checkpoints/partial/lenet5/pbn-abc/seed{k}/pbn.partial"
            for k, s in enumerate((10.0, 30.0, 20.0))}

    def partial(path, secs):
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = torch.from_numpy(np.random.default_rng(int(secs)).standard_normal(100_000).astype(np.float32))
        torch.save({"model": {"w": blob}, "epoch": 3, "train_seconds": secs}, path)

    for secs, rel in rels.items():
        partial(repo / ".device" / "partial" / rel, secs)
    env = {**os.environ, "BENCH_SHARED_DATA": str(shared), "BENCH_DEVICE_CARRY_MIB": "1", "PYTHON": sys.executable}

    def prepare():
        res = subprocess.run(["bash", "scripts/device_prepare.sh", "--no-wheels", "--data", "SMALL"], cwd=repo,
                             env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert sum(f.stat().st_size for f in (repo / ".device").rglob("*") if f.is_file()) <= 2**20
        on, off = ({str(f.relative_to(base)) for f in base.rglob("*.partial")}
                   for base in (repo / ".device" / "partial", repo / ".device-held" / "partial"))
        return on, off, res.stdout

    on, off, out = prepare()
    assert (on, off) == ({rels[30.0], rels[20.0]}, {rels[10.0]})
    assert "1 partial fit(s) held back" in out and "/.device-held/" in (repo / ".git/info/exclude").read_text()
    partial(repo / ".device" / "partial" / rels[10.0], 40.0)  # a newer copy of the held training, merged back
    on, off, _ = prepare()
    assert (on, off) == ({rels[10.0], rels[30.0]}, {rels[20.0]})
    kept = torch.load(repo / ".device" / "partial" / rels[10.0], weights_only=True)
    assert kept["train_seconds"] == 40.0
    # a call that started the held training afresh sends back a copy of fewer seconds: the held one stays
    partial(repo / ".device" / "partial" / rels[20.0], 5.0)
    on, off, _ = prepare()
    assert (on, off) == ({rels[10.0], rels[30.0]}, {rels[20.0]})
    assert torch.load(repo / ".device-held" / "partial" / rels[20.0], weights_only=True)["train_seconds"] == 20.0


def test_an_archive_too_large_for_one_call_travels_in_parts_and_is_put_together(tmp_path):
    """device_prepare.sh --data BIG with a 1 MiB carry limit (BENCH_DEVICE_CARRY_MIB) on a tiny tree:
    BIG (~1.3 MiB) is split between a stage folder and the session's .device/data with a manifest;
    device_stage.sh moves the staged part into .device-staged/, and the session's unpacking puts the
    archive together, checks its SHA-256 and every file against SHA256SUMS-BIG. Without the stage call
    the session refuses to start (exit 2), naming the missing part."""
    import numpy as np

    repo = _scripts_repo(tmp_path / "repo", "device_prepare.sh", "device_stage.sh")
    shared = tmp_path / "shared"
    (shared / "src" / "BIG").mkdir(parents=True)
    payload = np.random.default_rng(0).integers(0, 256, 1_300_000, dtype=np.uint8).tobytes()  # incompressible
    (shared / "src" / "BIG" / "blob.bin").write_bytes(payload)
    (shared / "src" / "BIG" / "note.txt").write_text("hello\n")
    with tarfile.open(shared / "BIG.tar.xz", "w:xz", preset=0) as tar:
        tar.add(shared / "src" / "BIG", arcname="BIG")
    (shared / "SHA256SUMS-BIG").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  BIG/{p.name}\n" for p in sorted((shared / "src" / "BIG").iterdir())))
    (shared / "MD5SUMS").write_text("")
    env = {**os.environ, "BENCH_SHARED_DATA": str(shared), "BENCH_DEVICE_CARRY_MIB": "1", "PYTHON": sys.executable}
    res = subprocess.run(["bash", "scripts/device_prepare.sh", "--no-wheels", "--data", "BIG", "--", "--suite", "toy"],
                         cwd=repo, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = json.loads((repo / ".device" / "data" / "parts.json").read_text())["BIG"]
    assert manifest["bytes"] == (shared / "BIG.tar.xz").stat().st_size and len(manifest["parts"]) == 2
    staged = [p.name for p in (repo / ".device-stage-1").iterdir()]
    assert staged == [manifest["parts"][0]] and (repo / ".device" / "data" / manifest["parts"][1]).is_file()
    assert 'run(command="bash scripts/device_stage.sh .device-stage-1", carry=[".device-stage-1"]' in res.stdout
    assert "--budget-s 540 --suite toy" in res.stdout
    for p in [repo / ".device", *repo.glob(".device-stage-*")]:  # each call within the limit
        assert sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) <= 2**20
    archives, stage = repo / ".device" / "data", repo / ".device-staged"
    assert ds.missing_parts(archives, "BIG", stage) == [manifest["parts"][0]]
    args = ["--device", "cpu", "--checks", "skip", "--suite", "toy", "--check-suites", "toy", "--carried",
            str(repo / ".device"), "--stage-dir", str(stage), "--out", str(tmp_path / "out")]
    monkey = dict(ds.GRID_DATA)
    try:
        ds.GRID_DATA["toy"] = ("BIG",)  # as if the toy suite's data were this archive
        with pytest.raises(ds.BadInput, match=manifest["parts"][0]):
            ds.validate(ds.build_parser().parse_args(args))
        subprocess.run(["bash", "scripts/device_stage.sh", ".device-stage-1"], cwd=repo, check=True, capture_output=True)
        assert ds.missing_parts(archives, "BIG", stage) == []
        ds.validate(ds.build_parser().parse_args(args))
    finally:
        ds.GRID_DATA.clear()
        ds.GRID_DATA.update(monkey)
    got = ds.unpack_archives(archives, ["BIG"], tmp_path / "data", stage, tmp_path / "work")
    assert got[0]["status"] == "unpacked and verified" and got[0]["files"] == 2
    assert got[0]["source"] == "assembled from 2 part(s), 1 staged by earlier calls"
    assert (tmp_path / "data" / "BIG" / "blob.bin").read_bytes() == payload
    # a part that changed on the way: the put-together archive fails its SHA-256
    (stage / manifest["parts"][0]).write_bytes(b"x" + (stage / manifest["parts"][0]).read_bytes()[1:])
    with pytest.raises(RuntimeError, match="SHA-256"):
        ds.unpack_archives(archives, ["BIG"], tmp_path / "data2", stage, tmp_path / "work2")


def test_a_camvid_grid_makes_its_backbone_first(tmp_path):
    """The grid on camvid_multilabel with data.backbone=camvid:smoke (CamVid carried as an archive with its
    SHA256SUMS): worker 0 trains the camvid MAP UNet first, as bench run would, and the grid's
    unet_presence cells start from it (their records name its weights' hash)."""
    from test_camvid_multilabel import make_camvid

    from bench.models import weights_provenance

    src = make_camvid(tmp_path / "src", n=(8, 2, 4))
    carried = tmp_path / ".device"
    (carried / "data").mkdir(parents=True)
    with tarfile.open(carried / "data" / "CamVid-240x180.tar.xz", "w:xz", preset=0) as tar:
        tar.add(src / "CamVid", arcname="CamVid")
    (carried / "data" / "SHA256SUMS-CamVid-240x180").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(src)}\n"
        for p in sorted((src / "CamVid").rglob("*")) if p.is_file()))
    (carried / "commit.txt").write_text("0123abc\n")
    out, work = tmp_path / "out", tmp_path / "work"
    code = ds.main(["--device", "cpu", "--threads", "1", "--checks", "skip", "--suite", "camvid_multilabel",
                    "--profile", "smoke", "--seeds", "0", "--methods", "deterministic", "--set", "models=unet_presence",
                    "--set", "data.backbone=camvid:smoke", "--set", "data.size=[48,64]", "--carried", str(carried),
                    "--kept", str(tmp_path / "kept"), "--out", str(out), "--work", str(work), "--budget-s", "240"])
    s = json.loads((out / "summary.json").read_text())
    assert code == 0 and s["grid"]["status"] == "complete", s.get("traceback") or s["grid"]
    assert s["setup"]["data"][0]["status"] == "unpacked and verified"
    (backbone,) = (work / "grid" / "camvid" / "checkpoints" / "map" / "unet_small").glob("*/seed0.pt")
    records = [json.loads(v) for k, v in _members(out / "records.tar.gz").items() if "/records/" in k]
    assert records and {r["model"] for r in records} == {"unet_presence"}
    assert {r["model_identity"]["backbone_sha256_16"] for r in records} == {weights_provenance(backbone)["sha256_16"]}


def test_the_runs_table_counts_map_networks_apart_from_cells():
    spec = importlib.util.spec_from_file_location("device_table", ROOT / "benchmarks" / "device_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    s = {"run_id": "r", "device": {"name": "G", "torch": "t"}, "git_commit": "abc", "checks": {"passed": True},
         "grid": {"status": "complete", "cells": [
             {"cell": "m/map/seed0", "status": "trained"}, {"cell": "m/map/seed1", "status": "failed"},
             {"cell": "m/deep_ensemble/seed0", "status": "fitted"}]}}
    row = table.run_rows([s])[2]
    assert row.split(" | ")[4:9] == ["not recorded", "", "1", "1", "complete |"]


def test_the_checks_table_says_which_passes_a_later_session_found_stale():
    spec = importlib.util.spec_from_file_location("device_table", ROOT / "benchmarks" / "device_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    ok = {"status": "ok", "methods": {"deterministic": {"status": "ok"}}}
    ran = {"smoke": ok, "agreement": {"status": "ok", "cells": {}}}
    first = {"run_id": "r1", "started_at": "1", "checks": {"suites": {"toy": ran, "camvid": ran}}}
    rows = table.suite_rows([first])
    assert all(r.endswith("| not recorded |") for r in rows[2:])
    second = {"run_id": "r2", "started_at": "2", "code": {"digest": "d"}, "checks": {"stale": ["toy"], "suites": {
        "toy": {"smoke": {"status": "ok", "stale": True, "changed_files": 7, "note": "skipped: not checked again"}},
        "camvid": {"smoke": {"status": "ok", "passed_in": "r1",
                             "note": "skipped: passed in kept run r1 on this code"}}}}}
    rows = table.suite_rows([first, second])
    assert rows[2].startswith("| camvid |") and rows[2].endswith("| r1 (unknown) | same code at r2 |")
    assert rows[3].startswith("| toy |") and rows[3].endswith("| r1 (unknown) | stale at r2: 7 code files changed |")
    third = {"run_id": "r3", "started_at": "3", "code": {"digest": "e"},
             "checks": {"stale": [], "suites": {"toy": ran}}}
    assert table.suite_rows([first, second, third])[3].endswith("| r3 (unknown) | this run |")
    assert table.run_rows([first, second, third])[3].split(" | ")[4] == "toy"


def test_a_grid_on_camvid_multilabel_restores_the_kept_backbone():
    """camvid_multilabel's quick profile starts every network from the camvid MAP UNet (data.backbone=camvid):
    a device grid restores the camvid suite's kept networks too, so the GPU's rows stand on the backbone the
    kept CPU rows stand on instead of one trained there; suites without a backbone restore nothing else."""
    from bench.device_session import backbone_suites

    assert backbone_suites("camvid_multilabel", "quick") == ["camvid"]
    assert backbone_suites("camvid_multilabel", "smoke") == [] and backbone_suites("mnist_rotated", "paper") == []
    assert any((ROOT / "docs" / "records" / "camvid" / "checkpoints" / "map").rglob("seed0.pt"))


def test_the_grid_starts_from_the_kept_backbone_it_restores(tmp_path, monkeypatch):
    """run_grid itself, on camvid_multilabel's quick profile: before any worker starts, the camvid suite's
    kept records and MAP UNet are restored into the grid's results (byte for byte), so the workers build on
    the kept backbone; the summary counts them. The workers are replaced by one that ends at once."""
    kept = tmp_path / "kept"
    shutil.copytree(ROOT / "docs" / "records" / "camvid", kept / "camvid")
    started = []

    class Worker:  # a grid worker that says it has ended, having run nothing
        def __init__(self, cmd, **kw):
            started.append(cmd)
            self.stdout = io.StringIO(ds.CELL_TAG + json.dumps({"event": "end", "worker": 0}) + "\n")

        def wait(self, timeout=None):
            return 0

    fake = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess) if not k.startswith("_")})
    fake.Popen = Worker  # in bench.device_session only: platform and the rest keep the real one
    monkeypatch.setattr(ds, "subprocess", fake)
    monkeypatch.setattr(ds.Session, "setup", lambda self: None)  # the CamVid archive is not unpacked here
    (tmp_path / "carried" / "data").mkdir(parents=True)
    (tmp_path / "carried" / "data" / "CamVid-240x180.tar.xz").write_bytes(b"")  # named, as the checks want
    out, work = tmp_path / "out", tmp_path / "work"
    assert ds.main(["--device", "cpu", "--threads", "1", "--suite", "camvid_multilabel", "--profile", "quick",
                    "--seeds", "0", "--methods", "deterministic", "--checks", "skip", "--kept", str(kept),
                    "--carried", str(tmp_path / "carried"), "--out", str(out), "--work", str(work),
                    "--budget-s", "600"]) == 0
    g = json.loads((out / "summary.json").read_text())["grid"]
    assert len(started) == 1 and g["status"] == "complete" and g["restored_records"] == 0
    n_camvid = len(load_records(kept, "camvid"))
    assert n_camvid > 0 and g["restored_backbone_records"] == {"camvid": n_camvid}
    (backbone,) = (kept / "camvid" / "checkpoints" / "map").rglob("seed0.pt")
    assert (work / "grid" / backbone.relative_to(kept)).read_bytes() == backbone.read_bytes()
    assert len(load_records(work / "grid", "camvid")) == n_camvid
