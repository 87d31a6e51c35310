"""Bad input gives exit 2 and a message saying what is wrong and what is valid, or a failed cell,
never a traceback (issue 38, item 12): each case is built in a temporary folder and run through
the CLI as a user would."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.store import load_records
from conftest import make_fake_mnist

TOY = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report"]
MNIST = ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--quiet", "--no-report", "--methods",
         "deterministic"]
CIFAR = ["run", "--suite", "cifar10c", "--profile", "smoke", "--quiet", "--no-report", "--methods", "deterministic"]


# ----------------------------------------------------------------------------- exit 2 with a message

def _mnist_gz(tmp_path, damage):
    root = make_fake_mnist(tmp_path / "data", n_train=120, n_test=40, gz=True)
    path = root / "MNIST" / "raw" / "train-images-idx3-ubyte.gz"
    path.write_bytes(damage(path.read_bytes()))
    return MNIST + ["--data-root", str(root), "--out", str(tmp_path / "out")]


def _cifar10c(tmp_path, damage, manifest=None):
    from test_cifar10c_suite import make_fake_cifar, make_fake_cifar10c

    root = tmp_path / "data"
    _, _, te_x, te_y = make_fake_cifar(root, n_train=600, n_test=200)
    damage(make_fake_cifar10c(root, te_x, te_y, manifest=manifest))
    return CIFAR + ["--data-root", str(root), "--out", str(tmp_path / "out")]


def _object_npy(path):
    np.save(path, np.array([{"a": 1}] * 4, dtype=object), allow_pickle=True)  # noqa: the crafted input


def _toy(tmp_path, *extra):
    return TOY + ["--methods", "deterministic", "--out", str(tmp_path / "out"), *extra]


def _lock_is_a_directory(tmp_path):
    args = _toy(tmp_path)
    assert main(args) == 0
    lock = next((tmp_path / "out").rglob("locks/**/seed0.lock"))
    lock.unlink()
    lock.mkdir()
    for rec in (tmp_path / "out").rglob("records/**/*.json"):
        rec.unlink()  # the cell is run again, under that lock
    return args


def _suite_folder_is_a_file(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "toy").write_text("not a folder")
    return _toy(tmp_path)


def _records_folder_is_a_file(tmp_path):
    (tmp_path / "out" / "toy").mkdir(parents=True)
    (tmp_path / "out" / "toy" / "records").write_text("not a folder")
    return _toy(tmp_path)


def _suite_folder_unwritable(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere: permissions cannot make a folder unwritable")
    (tmp_path / "out" / "toy").mkdir(parents=True)
    (tmp_path / "out" / "toy").chmod(0o500)
    return _toy(tmp_path)


CASES = {
    # case: (build(tmp_path) -> argv, what the message must say)
    "mnist .gz truncated": (lambda t: _mnist_gz(t, lambda b: b[:200]), r"MNIST: dataset malformed.*EOFError"),
    "mnist .gz garbage": (lambda t: _mnist_gz(t, lambda b: b"\x1f\x8b" + b"garbage" * 20),
                          r"MNIST: dataset malformed.*BadGzipFile"),
    "mnist data.n_val larger than the training set": (
        lambda t: MNIST + ["--data-root", str(make_fake_mnist(t / "data", n_train=120, n_test=40)),
                           "--out", str(t / "out"), "--set", "data.n_val=70000"],
        r"data.n_val=70000 must be in 1\.\.119"),
    "cifar10c .npy truncated": (
        lambda t: _cifar10c(t, lambda d: (d / "gaussian_noise.npy").write_bytes(
            (d / "gaussian_noise.npy").read_bytes()[:5000])), r"CIFAR-10-C: dataset malformed.*uint8"),
    "cifar10c .npy header only": (
        lambda t: _cifar10c(t, lambda d: (d / "contrast.npy").write_bytes((d / "contrast.npy").read_bytes()[:20])),
        r"CIFAR-10-C: dataset malformed"),
    "cifar10c .npy of objects": (lambda t: _cifar10c(t, lambda d: _object_npy(d / "gaussian_noise.npy")),
                                 r"CIFAR-10-C: dataset malformed.*Python objects"),
    "cifar10c labels.npy of objects": (lambda t: _cifar10c(t, lambda d: _object_npy(d / "labels.npy")),
                                       r"CIFAR-10-C: dataset malformed.*Python objects"),
    "cifar10c GENERATED.json garbage": (
        lambda t: _cifar10c(t, lambda d: (d / "GENERATED.json").write_text("{not json")),
        r"malformed GENERATED.json \(JSONDecodeError.*delete .*CIFAR-10-C so that bench regenerates it"),
    "cifar10c GENERATED.json a list": (
        lambda t: _cifar10c(t, lambda d: (d / "GENERATED.json").write_text("[1, 2]")),
        r"malformed GENERATED.json \(a JSON list, not an object\)"),
    "cifar10c GENERATED.json entries not objects": (
        lambda t: _cifar10c(t, lambda d: (d / "GENERATED.json").write_text('{"corruptions": [1]}')),
        r"malformed GENERATED.json \(its 'corruptions' is not an object"),
    "<out>/<suite> is a file": (_suite_folder_is_a_file, r"results folder of suite toy .*out/toy exists and is not a"),
    "<out>/<suite>/records is a file": (_records_folder_is_a_file, r"records exists and is not a directory"),
    "<out>/<suite> unwritable": (_suite_folder_unwritable, r"not writable"),
    "a lock path is a directory": (_lock_is_a_directory, r"cannot open the lock file .*seed0\.lock: Is a directory"),
    "--seeds 0,0": (lambda t: _toy(t, "--seeds", "0,0"), r"--seeds / --set seeds= names 0 more than once"),
    "--set seeds=1,0,1": (lambda t: _toy(t, "--set", "seeds=1,0,1"), r"names 1 more than once \(1,0,1\)"),
    "--set models= twice": (lambda t: _toy(t, "--set", "models=mlp_100,mlp_100"), r"--set models= names mlp_100"),
    "--methods twice": (lambda t: TOY + ["--methods", "deterministic,deterministic", "--out", str(t / "out")],
                        r"--methods names deterministic more than once"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_a_message(case, tmp_path, capsys):
    import re

    build, expected = CASES[case]
    args = build(tmp_path)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(expected, err, re.S), err


def test_a_bad_checkpoint_interval_is_exit_2_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "-5")
    capsys.readouterr()
    assert main(_toy(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "BENCH_CHECKPOINT_INTERVAL_S='-5'" in err and "a number >= 0" in err, err
    assert not (tmp_path / "out").exists()


def test_a_damaged_manifest_of_a_regenerated_image_folder_is_a_clear_error(tmp_path):
    """Tiny-ImageNet-C and CamVid-C (datasets/corruptions/folder.py) read their GENERATED.json alike."""
    from datasets.errors import DatasetNotFoundError
    from test_tiny_imagenet import _generate

    d = _generate(tmp_path)
    for garbage in ("{not json", "[]", '{"cells": {"contrast/1": 5}}'):
        (d / "GENERATED.json").write_text(garbage)
        with pytest.raises(DatasetNotFoundError, match=r"(?s)malformed GENERATED.json.*delete .* so that bench regenerates it"):
            _generate(tmp_path)


# ----------------------------------------------------------------------------- a failed cell, not a crash

@pytest.mark.parametrize("where", ["fit", "predict"])
def test_a_method_calling_sys_exit_fails_its_cell_and_the_grid_goes_on(where, tmp_path, monkeypatch, capsys):
    import sys

    from methods.deterministic import Deterministic

    def leave(self, *a, **k):
        sys.exit(3)

    monkeypatch.setattr(Deterministic, where, leave)
    out = tmp_path / "out"
    assert main(TOY + ["--methods", "deterministic,mc_dropout", "--out", str(out)]) == 0
    df = load_records(out)
    failed = df[df["status"] == "failed"]
    assert list(failed["method"]) == ["deterministic"] and "SystemExit" in failed["error"].iloc[0]
    assert (df[df["method"] == "mc_dropout"]["status"] == "ok").all() and (df["method"] == "mc_dropout").sum() > 1


def test_ctrl_c_in_a_method_still_stops_the_run(tmp_path, monkeypatch):
    from methods.deterministic import Deterministic

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(Deterministic, "fit", interrupted)
    out = tmp_path / "out"
    assert main(_toy(tmp_path)) == 130
    assert not list(out.rglob("records/**/*.json"))  # no failure recorded: the user stopped it


def test_sigterm_stops_a_run_as_ctrl_c_does_and_the_rerun_resumes(tmp_path):
    """``kill PID`` (a batch system's cancel or time limit): the run stops through Ctrl-C's path (its
    message, exit 143, no failure recorded), and the same command then
    finishes the grid. Run in a child process: without the handler SIGTERM kills the process."""
    import subprocess

    out = tmp_path / "out"
    args = TOY + ["--methods", "deterministic,mc_dropout", "--out", str(out)]
    code = (
        "import os, signal, sys\n"
        "from bench.cli import main\n"
        "from methods.mc_dropout import MCDropout\n"
        "def fit(self, *a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    raise AssertionError('SIGTERM did not stop the run')\n"
        "MCDropout.fit = fit\n"
        f"sys.exit(main({args!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 143, (proc.returncode, proc.stderr[-2000:])
    assert "terminated (SIGTERM): finished records are kept" in proc.stderr
    df = load_records(out)
    assert set(df["method"]) == {"deterministic"} and (df["status"] == "ok").all()  # mc_dropout: nothing recorded
    assert main(args) == 0
    df = load_records(out)
    assert set(df["method"]) == {"deterministic", "mc_dropout"} and (df["status"] == "ok").all()


MALFORMED_CURVES = {
    "reliability not an object": {"reliability": 5, "entropy_hist": 5},
    "reliability of strings": {"reliability": {"edges": ["a"] * 16, "count": ["b"] * 15,
                                               "confidence_sum": [1] * 15, "correct_sum": [1] * 15}},
    "entropy histogram of the wrong length": {"entropy_hist": {"edges": [0, 1, 2], "counts": [1, 2, 3, 4]}},
    "band of unequal lengths": {"band": {"x": [1, 2, 3], "mean": [1]}},
    "maps not grids": {"maps": [{"pred": "x", "entropy": [[1]]}]},
    "a string": "garbage",
}


@pytest.mark.parametrize("case", list(MALFORMED_CURVES))
def test_a_record_with_malformed_curves_loses_its_curves_not_the_report(case, tmp_path, caplog):
    from test_reporting import write_synthetic

    results = tmp_path / "results"
    write_synthetic(results, with_cifar=False)
    for pattern in ("mnist_rotated/records/**/id-*.json", "toy/records/**/id-*.json"):
        path = sorted(results.glob(pattern))[0]
        rec = json.loads(path.read_text())
        rec["curves"] = MALFORMED_CURVES[case]
        path.write_text(json.dumps(rec))
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "reports")]) == 0
    assert (tmp_path / "reports" / "mnist_rotated" / "index.html").exists()
    assert "its curves are left out of the figures" in caplog.text and "mnist_rotated" in caplog.text


def test_kept_curves_pass_the_check():
    """Every record kept in git (docs/) keeps its curves: the check refuses only what is malformed."""
    from bench.reporting.data import curves_problem
    from bench.store import ResultsStore

    root = Path(__file__).resolve().parents[1] / "docs"
    seen = 0
    for sub in ("records", "tuning"):
        for rec in ResultsStore(root / sub).iter_records():
            if rec.get("curves"):
                seen += 1
                assert curves_problem(rec["curves"]) is None, (rec["suite"], rec["method"], rec["kind"])
    assert seen


def test_a_leaderboard_of_only_failed_cells_says_so(tmp_path, monkeypatch, capsys):
    from methods.deterministic import Deterministic

    def failing(self, train, val):
        raise FloatingPointError("boom")

    monkeypatch.setattr(Deterministic, "fit", failing)
    main(_toy(tmp_path))
    capsys.readouterr()
    for extra in ([], ["--include-smoke"]):
        assert main(["leaderboard", "--results", str(tmp_path / "out"), "--out", str(tmp_path / "lb"), *extra]) == 2
        err = capsys.readouterr().err
        assert "nothing to rank: the 1 record(s) are all failed cells" in err and "FloatingPointError: boom" in err
        assert "with records: none" not in err


def test_temporary_files_of_killed_writes_are_removed_by_the_next_run(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_toy(tmp_path)) == 0
    run_dir = next(out.rglob("records/**/seed0"))
    old = time.time() - 2 * 3600
    stale = [run_dir / ".id-clean-0.json.k3j_x9q2.tmp", out / "toy" / "checkpoints" / ".seed0.pt.abcdefgh.tmp"]
    young = run_dir / ".shift-x-1.json.zzzzzzzz.tmp"       # a concurrent run's write in progress
    users = [run_dir / "notes.tmp", run_dir / ".mine.tmp"]  # not named as the atomic writes name theirs
    for p in stale + [young] + users:
        p.write_text("partial")
    for p in stale + users:
        os.utime(p, (old, old))
    capsys.readouterr()
    assert main(_toy(tmp_path)) == 0
    assert not any(p.exists() for p in stale) and young.exists() and all(p.exists() for p in users)


@pytest.mark.parametrize("blob", ["{not json", "[1, 2]", '{"suite": "toy", "profile": "smoke", "methods": {"pbn": '
                                  '{"choices": [{"model": "mlp_100"}]}}}'])
def test_a_garbage_stored_tuning_is_exit_2_naming_the_file(blob, tmp_path, capsys):
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--methods", "deterministic", "--seeds", "0",
                 "--quiet", "--no-report", "--threads", "1", "--out", str(tmp_path / "r")]) == 0
    path = tmp_path / "r" / "toy" / "tuning" / "smoke.json"
    path.parent.mkdir(parents=True)
    path.write_text(blob)
    assert main(["tune", "--suite", "toy", "--profile", "smoke", "--out", str(tmp_path / "r"), "--markdown"]) == 2
    assert "is not a stored tuning" in capsys.readouterr().err
    assert main(["leaderboard", "--results", str(tmp_path / "r"), "--chosen-only", "--include-smoke", "--out",
                 str(tmp_path / "lb")]) == 2
    assert str(path) in capsys.readouterr().err


def test_restoring_a_pack_that_names_a_path_outside_the_store_is_exit_2(tmp_path, capsys):
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("keep_records", Path(__file__).parents[1] / "scripts" /
                                                  "keep_records.py")
    kr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kr)
    archive = tmp_path / "archive"
    (archive / "toy").mkdir(parents=True)
    line = json.dumps({"path": "../../escaped.json", "record": {"suite": "toy"}}) + "\n"
    with gzip.open(archive / "toy" / kr.OLD_PACK_NAME, "wt") as f:  # a gzip pack of older code is read too
        f.write(line)
    assert kr.main(["restore", "toy", "--archive", str(archive), "--results", str(tmp_path / "results")]) == 2
    assert "outside the store" in capsys.readouterr().err
    assert not list(tmp_path.rglob("escaped.json"))
