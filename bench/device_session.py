"""One lent GPU session as one command (docs/device.md): ``python -m bench.device_session``.

Run by ``scripts/device_session.sh`` on the device machine (which installs the carried wheels
first), after ``scripts/device_prepare.sh`` filled the carried folders here. In order:

1. setup: unpack the carried data archives (``.device/data/*.tar.xz``, verified against the
   carried ``MD5SUMS``) into a data root;
2. checks, first in every run until they pass (a suite whose checks passed on CUDA in a kept
   device summary, same torch, on the same code (:func:`code_files`) is not checked again; one that
   passed on other code is stale and checked again after the suites never passed, the grid's suite
   first, then the oldest pass, as ``--recheck-s`` allows: the others stay marked stale in the
   summary; ``--checks always`` checks every suite):
   every method x suite at the ``smoke`` profile on the device (the suites whose data does not
   travel on the fixtures their tests build), the clean-test metrics of each cell against a CPU
   run of the same cell (CUDA only), and ``bench perf --device cuda`` (CUDA only);
3. the grid: ``--suite`` (``mnist_rotated``) at ``--profile`` (``paper``), seeds 0-2, every
   default method, resumed from the kept records and MAP networks (``docs/records``), in
   ``--grid-workers`` child processes that take the MAP networks still to train and the cells from
   one list (:func:`grid_items`, seed 0 of every model and method first: :func:`seed_major`) until
   ``--budget-s`` runs out: an item is not started when the
   time left is short or when earlier runs showed it needs more (less the training seconds a
   restored partial fit holds); a cell still running at the deadline is stopped and none of its
   records is kept (the store writes each record atomically, so none is half-written), while every
   MAP network finished by then is, and the partial fits of the stopped trainings go back (below).

After each step ``--out`` (default ``$OUT``) holds ``summary.json`` and ``records.tar.gz``: the
new records, slimmed as ``scripts/keep_records.py save`` keeps them, in the layout of
``docs/records`` (``<suite>/records/...``), this summary as ``device/<run_id>.json`` and the perf
rows as ``perf/<device>.json``; and ``maps-<k>.tar``: the MAP networks the grid trained that the
kept records lack (``<suite>/checkpoints/map/...``, at most :data:`MAP_ARCHIVES` archives of
:data:`MAP_ARCHIVE_BYTES`), which the next run restores instead of training them again.
At the end, ``partial-<k>.tar`` (in the archive slots the MAP networks left): the resume
checkpoints of the trainings the deadline stopped (written every ``--checkpoint-interval-s``) and
the fitted methods of the cells it stopped while they were evaluated,
which ``keep_records.py merge`` keeps in ``.device/partial`` and the next call restores, so that a
training longer than one call goes on call after call (:func:`partial_outputs`).
``scripts/keep_records.py merge records.tar.gz maps-*.tar partial-*.tar`` merges them here.

Without CUDA (``--device cpu``, or ``auto`` on a machine without a GPU) the same flow runs on the
CPU; the CUDA-only checks are reported as ``skipped: no CUDA``. Bad input exits 2 and writes
nothing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.util
import io
import json
import math
import os
import platform
import queue
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the real data each suite's checks use: archives (../shared/data names) that travel in .device/data
REAL_DATA = {"mnist_rotated": ("MNIST", "FashionMNIST-test"), "mnist_noise": ("MNIST", "FashionMNIST-test"),
             "toy": ()}
#: SegNet's CamVid at 240 x 180 (48 MiB): beside the tree it travels in parts staged by earlier calls
#: (``scripts/device_prepare.sh --data CamVid-240x180``); its suites' checks keep to their fixtures
CAMVID = ("CamVid-240x180",)
#: the suites the grid may run, with the archives their data comes from
GRID_DATA = {**REAL_DATA, "camvid": CAMVID, "camvid_binary": CAMVID, "camvid_multilabel": CAMVID}
GRID_SUITES = tuple(GRID_DATA)
#: what scripts/device_prepare.sh writes beside the archives when one travels in parts
PARTS_MANIFEST = "parts.json"
#: where scripts/device_stage.sh leaves the parts an earlier call carried (an ignored folder of the
#: tree: kept between calls while the machine is held)
STAGE_DIR = ROOT / ".device-staged"
#: grid processes side by side on a GPU: a LeNet step is bound by the host's kernel launches, not the
#: GPU (one process kept an H200 ~10 % busy); 8 processes on 16 cores each ran a step 1.25x slower
#: than one alone (bare loop, 2026-11-28): about 6x the cells per second of one process
CUDA_GRID_WORKERS = 8

#: the largest MAP-network archive a run returns (a call returns files of at most 16 MiB) ...
MAP_ARCHIVE_BYTES = 15 * 2**20
#: ... and how many (a call returns at most 8 files: these, summary.json, records.tar.gz and the log)
MAP_ARCHIVES = 4

#: where the carried folder keeps the partial fits (resume checkpoints, ``*.partial``) of trainings an
#: earlier call stopped at its deadline, in the results folder's layout (``<suite>/checkpoints/...``):
#: ``scripts/keep_records.py merge`` puts the ones a call sends back there (``partial-<k>.tar``)
PARTIAL_DIR = "partial"
#: seconds between two resume checkpoints of a grid worker's trainings (``BENCH_CHECKPOINT_INTERVAL_S``;
#: the bench default is 60): a training stopped at the deadline loses at most this and one epoch
GRID_CHECKPOINT_INTERVAL_S = 20.0

#: the code a suite's smoke check runs: a check passed on CUDA holds for the code it ran on (the digests of these
#: files, kept in the summary); on other code it is stale, and run again as ``--recheck-s`` allows
CHECKED_CODE = ("bench", "methods", "datasets")

#: the test files with CUDA tests (pytest -m cuda) the session runs
CUDA_TESTS = ("tests/test_method_contract.py,tests/test_training_loop.py,tests/test_laplace_precision.py,"
              "tests/test_laplace_machinery.py")

#: bench perf cases that measure the device (the others time CPU threads, processes or loaders)
PERF_CASES = ("harness_vs_bare_loop", "ensemble_vs_single", "mc_dropout_vs_single", "pbn_vs_mfvi_train_step",
              "vi_training_loop_vs_bare_steps", "ssvi_vs_mfvi_train_step", "pbn_predict_vs_single",
              "vdp_predict_vs_single", "laplace_glm_jvp_vs_moments", "segmentation_jvp_vs_forward",
              "diag_glm_grid_pairs_vs_per_vector", "subnet_posterior_memory")
NO_CUDA = "skipped: no CUDA"
CELL_TAG = "@@cell "
SCHEMA = "bench.device_session/1"


class BadInput(Exception):
    """Exit 2: the message names what is valid."""


# ------------------------------------------------------------------------------------ helpers


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _csv(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def keep_records():
    """scripts/keep_records.py as a module (its slimming and layout are the kept records')."""
    spec = importlib.util.spec_from_file_location("keep_records", ROOT / "scripts" / "keep_records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def carried_commit(carried: Path) -> tuple[str, str]:
    """(commit, where it came from): the file that scripts/device_prepare.sh wrote into the carried
    folder just before the call, else git. The carried file comes first: the device's copy of the
    tree can hold a ``.git`` from the start of the session, older than the tree (the second CUDA run
    recorded 69a7ca3+dirty for code committed as fc32205)."""
    from bench.provenance import git_commit

    f = carried / "commit.txt"
    if f.is_file() and f.read_text().strip():
        return f.read_text().strip(), str(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)
    commit = git_commit()
    return (commit, "git") if commit != "unknown" else ("unknown", "none")


def device_info(device) -> dict:
    import torch

    info = {"requested": None, "used": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(), "python": platform.python_version(),
            "host": platform.node(), "machine": platform.machine(), "cpu_cores": os.cpu_count()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(name=torch.cuda.get_device_name(device), memory_gib=round(p.total_memory / 2**30, 1),
                    multiprocessors=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
                    cudnn=torch.backends.cudnn.version(), cudnn_allow_tf32=torch.backends.cudnn.allow_tf32,
                    matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
                    nvidia_tf32_override=os.environ.get("NVIDIA_TF32_OVERRIDE"))
    else:
        info["name"] = f"cpu ({platform.processor() or platform.machine()})"
    return info


def _digest(path: Path, algorithm: str = "md5") -> str:
    """The hex digest of a file (``algorithm``: a hashlib name), read in 1 MiB blocks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_sums(path: Path) -> dict[str, str]:
    sums = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                digest, name = line.split(None, 1)
                sums[name.strip().lstrip("*")] = digest
    return sums


def missing_parts(archives: Path, name: str, stage: Path) -> list[str] | None:
    """The parts of ``name`` found neither in ``archives`` nor in ``stage`` ([] when all are
    there); None when ``name`` does not travel in parts (see :data:`PARTS_MANIFEST`)."""
    manifest = archives / PARTS_MANIFEST
    entry = json.loads(manifest.read_text()).get(name) if manifest.is_file() else None
    if entry is None:
        return None
    return [p for p in entry["parts"] if not ((archives / p).is_file() or (stage / p).is_file())]


def archive_source(archives: Path, name: str, stage: Path, work: Path) -> tuple[Path, str]:
    """``<archives>/<name>.tar.xz``, or the archive put together from the parts the manifest lists
    (carried, or staged by earlier calls), checked against the manifest's SHA-256."""
    whole = archives / f"{name}.tar.xz"
    if whole.is_file():
        return whole, "carried"
    entry = json.loads((archives / PARTS_MANIFEST).read_text())[name]
    missing = missing_parts(archives, name, stage)
    if missing:
        raise RuntimeError(f"{name}: part(s) {', '.join(missing)} neither carried nor in {stage}")
    out = work / "archives" / f"{name}.tar.xz"
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = 0
    with open(out, "wb") as dst:
        for part in entry["parts"]:
            src = archives / part if (archives / part).is_file() else stage / part
            staged += src.parent == stage
            with open(src, "rb") as fh:
                shutil.copyfileobj(fh, dst, 1 << 22)
    if _digest(out, "sha256") != entry["sha256"]:
        raise RuntimeError(f"{name}: the archive put together from {len(entry['parts'])} part(s) does not match "
                           f"the SHA-256 of {archives / PARTS_MANIFEST}")
    return out, f"assembled from {len(entry['parts'])} part(s), {staged} staged by earlier calls"


def unpack_archives(archives: Path, names: list[str], data_root: Path, stage: Path = STAGE_DIR,
                    work: Path | None = None) -> list[dict]:
    """Unpack ``<archives>/<name>.tar.xz`` (or the archive its parts make, :func:`archive_source`)
    into ``data_root`` (skipped when its files are there and verify), then check every file against
    the carried checksums, as ../shared/data/unpack.sh: ``SHA256SUMS-<name>`` where it travels, else
    the lines of ``MD5SUMS`` under the archive's top folder."""
    md5 = _read_sums(archives / "MD5SUMS")
    out = []
    for name in names:
        t0 = time.perf_counter()
        if (archives / f"SHA256SUMS-{name}").is_file():
            mine, algorithm, sums_file = _read_sums(archives / f"SHA256SUMS-{name}"), "sha256", f"SHA256SUMS-{name}"
        else:
            prefix = name.removesuffix("-test") + "/"
            mine, algorithm, sums_file = {k: v for k, v in md5.items() if k.startswith(prefix)}, "md5", "MD5SUMS"

        def verified() -> bool:
            return bool(mine) and all((data_root / k).is_file() and _digest(data_root / k, algorithm) == v
                                      for k, v in mine.items())

        if verified():
            out.append({"archive": name, "status": "present and verified", "seconds": time.perf_counter() - t0})
            continue
        source, how = archive_source(archives, name, stage, work or data_root.parent)
        data_root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(source) as tar:
            tar.extractall(data_root, filter="data")
        status = "unpacked and verified" if verified() else (f"unpacked (no {sums_file} for it)" if not mine else None)
        if status is None:
            raise RuntimeError(f"{name}: files under {data_root} do not match {archives / sums_file}")
        out.append({"archive": name, "status": status, "files": len(mine), "source": how,
                    "seconds": time.perf_counter() - t0})
    return out


# ------------------------------------------------------------------------------ the fixtures


def _tests_module(name: str):
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(name)


def build_fixture(suite: str, root: Path) -> list[str]:
    """Fixture-size data for a suite whose data does not travel, written by the builders the
    suite's own tests use (tests/test_*.py); returns the extra ``bench run`` arguments."""
    if (root / ".done").exists():
        return json.loads((root / ".done").read_text())
    root.mkdir(parents=True, exist_ok=True)
    extra: list[str] = []
    if suite in ("cifar10c", "cifar10_noise"):
        m = _tests_module("test_cifar10c_suite")
        _, _, te_x, te_y = m.make_fake_cifar(root)
        if suite == "cifar10c":  # the official layout, so that nothing is regenerated
            m.make_fake_cifar10c(root, te_x, te_y)
    elif suite == "tinyimagenetc":
        _tests_module("test_imagenetc").make_fake_tiny_imagenet(root)
    elif suite == "imagenetc":
        import torch

        m = _tests_module("test_imagenetc")
        m.make_fake_imagenet(root)
        extra = ["--set", f"data.weights={m._weights(root)}"]
        torch.manual_seed(0)
    elif suite in ("camvid", "camvid_binary", "camvid_multilabel"):  # one layout: SegNet's CamVid
        _tests_module("test_segmentation_suite").make_fake_camvid(root, size=(180, 240))
    elif suite == "chestmnist":
        m = _tests_module("test_chestmnist")
        m.write(root, m.arrays())
    elif suite == "cityscapes":
        _tests_module("test_segmentation_suite").make_fake_cityscapes(root, size=(128, 256))
    elif suite == "folder":  # your images: a small ImageFolder tree
        extra = ["--set", f"data.path={_tests_module('test_folder_suite').make_tree(root / 'tree')}"]
    else:
        raise BadInput(f"no fixture for suite {suite!r}")
    (root / ".done").write_text(json.dumps(extra))
    return extra


# ---------------------------------------------------------------------------------- checks


#: set by :class:`Session` for the bench processes it starts: the carried commit (:func:`carried_commit`)
CHILD_ENV: dict[str, str] = {}


def _bench_env(threads: int, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1", **CHILD_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra or {})
    return env


def _start(module: str, args: list[str], threads: int, log: Path) -> tuple[subprocess.Popen, object]:
    """``python -m <module> <args>`` in its own session, its output into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=_bench_env(threads),
                            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, fh


def _start_bench(args: list[str], threads: int, log: Path) -> tuple[subprocess.Popen, object]:
    return _start("bench", args, threads, log)


def _finish(proc: subprocess.Popen, fh, timeout: float) -> tuple[int | None, bool]:
    """(return code, timed out); a process past ``timeout`` is stopped with its children."""
    try:
        rc = proc.wait(timeout=max(timeout, 0.1))
        fh.close()
        return rc, False
    except subprocess.TimeoutExpired:
        _stop(proc)
        fh.close()
        return None, True


def _stop(proc: subprocess.Popen) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _records(results: Path, suite: str) -> list[dict]:
    out = []
    for p in sorted((results / suite / "records").rglob("*.json")) if (results / suite / "records").is_dir() else []:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _smoke_result(results: Path, suite: str, methods: list[str], rc, timed_out, seconds, log) -> dict:
    recs = _records(results, suite)
    per = {}
    for m in methods:
        mine = [r for r in recs if r["method"] == m]
        bad = [r for r in mine if r.get("status") != "ok"]
        if not mine:
            per[m] = {"status": "failed", "why": "no records" + (" (timed out)" if timed_out else "")}
        elif bad:
            per[m] = {"status": "failed", "why": (bad[0].get("error") or "failed record")[:300]}
        else:
            per[m] = {"status": "ok", "records": len(mine)}
    ok = rc == 0 and not timed_out and all(v["status"] == "ok" for v in per.values())
    res = {"status": "ok" if ok else "failed", "seconds": round(seconds, 2), "returncode": rc, "timed_out": timed_out,
           "methods": per}
    if not ok:
        res["log_tail"] = _tail(log)
    return res


#: metrics that are smooth functions of the predictive probabilities: equal within float tolerance
#: whenever the probabilities are. The others (accuracy, ECE, AURC, error AUROC, mIoU, entropy of the
#: correct / incorrect ones, ...) go through an argmax, which a network at chance (the smoke models on
#: fixture data) flips with rounding (TF32 convolutions) or with a different Monte Carlo draw
SMOOTH_METRICS = ("nll", "brier", "entropy", "mutual_information", "n", "n_pixels")


def _informative(rec: dict) -> bool:
    """Whether the record's ``informative`` validity check passed (its argmax is not a coin toss)."""
    for c in (rec.get("validity") or {}).get("checks", []):
        if c.get("name") == "informative":
            return c.get("status") == "pass"
    return False


def compare_runs(cuda_dir: Path, cpu_dir: Path, suite: str, atol: float, rtol: float) -> dict:
    """The clean-test (``kind == "id"``) metrics of each cell on CUDA against the CPU evaluation of
    the same fitted state (the CUDA run's checkpoints, see :func:`share_fitted_state`): every
    finite metric within ``atol + rtol * |cpu|``. Where the CUDA-fitted network is not informative
    (at chance), only :data:`SMOOTH_METRICS` are compared; the argmax metrics are listed as
    ``not_compared``. A CPU record that did not evaluate the CUDA-fitted state (its fit time
    differs: it was fitted again) fails its cell."""
    def index(d):
        return {(r["model"], r.get("method_label", r["method"]), r["seed"]): r for r in _records(d, suite)
                if r.get("kind") == "id" and r.get("status") == "ok"}

    a, b = index(cuda_dir), index(cpu_dir)
    per, ok_all = {}, True
    for key in sorted(set(a) | set(b)):
        label = f"{key[0]}/{key[1]}/seed{key[2]}"
        if key not in a or key not in b:
            per[label] = {"status": "failed", "why": "missing on " + ("cuda" if key not in a else "cpu")}
            ok_all = False
            continue
        fa, fb = (a[key].get("cost") or {}).get("fit_time_s"), (b[key].get("cost") or {}).get("fit_time_s")
        same_state = fa == fb
        informative = _informative(a[key])
        diffs, worst, skipped = {}, [], []
        for name, va in a[key]["metrics"].items():
            vb = b[key]["metrics"].get(name)
            if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool) \
                    and va == va and vb == vb and abs(va) != float("inf") and abs(vb) != float("inf"):
                d = abs(va - vb)
                diffs[name] = {"cuda": va, "cpu": vb, "abs_diff": d}
                if not informative and name not in SMOOTH_METRICS:
                    skipped.append(name)
                elif d > atol + rtol * abs(vb):
                    worst.append(name)
        compared = [n for n in diffs if n not in skipped]
        ok = bool(compared) and not worst and same_state
        ok_all &= ok
        per[label] = {"status": "ok" if ok else "failed", "outside_tolerance": worst,
                      "same_fitted_state": same_state, "informative": informative,
                      "max_abs_diff": max((diffs[n]["abs_diff"] for n in compared), default=None),
                      "metrics": diffs}
        if skipped:
            per[label]["not_compared"] = skipped
        if not same_state:
            per[label]["why"] = f"the CPU run fitted again (fit time {fb} s) instead of evaluating the CUDA fit ({fa} s)"
    return {"status": "ok" if ok_all and per else "failed", "atol": atol, "rtol": rtol,
            "reference": "the CUDA-fitted state evaluated on the CPU", "cells": per}


def share_fitted_state(cuda_out: Path, cpu_out: Path, suite: str) -> int:
    """Copy the CUDA run's checkpoints (MAP networks and fitted methods) into the CPU run's results
    folder, so that the CPU run loads every fitted method and only evaluates it; returns the number
    of files copied. Training on two devices diverges (float rounding, different random streams),
    so two independent fits are no test of "the same predictions"; one fitted state is."""
    src = cuda_out / suite / "checkpoints"
    dst = cpu_out / suite / "checkpoints"
    if not src.is_dir():
        return 0
    shutil.copytree(src, dst, dirs_exist_ok=True)
    return sum(1 for p in dst.rglob("*") if p.is_file())


def junit_summary(xml: Path) -> dict:
    """Counts of a pytest junit XML file, and each failing or erring test with its message's
    first line; ``{}`` when there is none."""
    import xml.etree.ElementTree as ET

    if not xml.is_file():
        return {}
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        return {}
    cases = root.iter("testcase")
    out = {"tests": 0, "passed": 0, "failed": [], "skipped": 0}
    for c in cases:
        out["tests"] += 1
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        name = f"{c.get('classname', '')}::{c.get('name', '')}"
        if bad is not None:
            out["failed"].append({"test": name, "message": (bad.get("message") or "").splitlines()[0][:300]
                                  if bad.get("message") else ""})
        elif c.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    out["skipped_all"] = out["tests"] > 0 and out["skipped"] == out["tests"]
    return out


def kept_summaries(kept: Path) -> list[dict]:
    out = []
    for p in sorted((kept / "device").glob("*.json")) if (kept / "device").is_dir() else []:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def kept_pass(kept: list[dict], info: dict, parts, same: tuple[str, ...]) -> str | None:
    """The run id of the latest kept CUDA summary whose ``parts(checks)`` (a list of check
    entries) all have status ok, on a device equal to ``info`` in the ``same`` fields; else None."""
    for s in reversed(kept):
        dev = s.get("device") or {}
        if dev.get("used", "").startswith("cuda") and all(dev.get(k) == info.get(k) for k in same) and \
                all((e or {}).get("status") == "ok" for e in parts(s.get("checks") or {})):
            return s.get("run_id", "?")
    return None


def _ran(entry: dict) -> bool:
    """Whether a suite's check entry of a summary ran there (not skipped as passed before, nor left for lack of
    time)."""
    smoke = (entry or {}).get("smoke") or {}
    return bool(smoke) and smoke.get("status") != "not run" and not str(smoke.get("note", "")).startswith("skipped")


def code_files(root: Path = ROOT) -> dict[str, str]:
    """``{path: first 16 hex digits of its SHA-256}`` of the files under :data:`CHECKED_CODE` (the code a smoke
    check runs), caches left out: a check's pass is kept with the digest of these (:func:`code_digest`)."""
    out = {}
    for top in CHECKED_CODE:
        for p in sorted((Path(root) / top).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def code_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]


def files_changed(before: dict[str, str] | None, now: dict[str, str]) -> int | None:
    """How many files of ``now`` are new or changed since ``before``, or gone (None: ``before`` unknown)."""
    if not before:
        return None
    return sum(before.get(f) != d for f, d in now.items()) + sum(f not in now for f in before)


def check_standing(kept: list[dict], suite: str, info: dict, files: dict[str, str]) -> dict:
    """Where ``suite``'s CUDA checks stand for this torch and the code ``files`` (:func:`code_files`), by the latest
    kept CUDA summary with this torch in which they ran: ``{"state": "new"}`` when none did or they failed there
    (checked first); ``{"state": "current", "run": id}`` when they passed on this code (not checked again);
    ``{"state": "stale", "run": id, "at": its start, "changed": k}`` when they passed on other code: k files of
    :data:`CHECKED_CODE` differ (None: that run kept no digests). Stale checks run again as ``--recheck-s``
    allows, the oldest first."""
    digest = code_digest(files)
    for s in reversed(kept):
        dev = s.get("device") or {}
        entry = ((s.get("checks") or {}).get("suites") or {}).get(suite) or {}
        if not (dev.get("used", "").startswith("cuda") and dev.get("torch") == info.get("torch") and _ran(entry)):
            continue
        if not all((entry.get(k) or {}).get("status") == "ok" for k in ("smoke", "agreement")):
            return {"state": "new", "failed_in": s.get("run_id", "?")}
        run = {"run": s.get("run_id", "?"), "at": s.get("started_at", "")}
        if entry.get("code") == digest:
            return {"state": "current", **run}
        return {"state": "stale", **run, "changed": files_changed((s.get("code") or {}).get("files"), files)}
    return {"state": "new"}


def check_order(standing: dict[str, dict], first: str) -> list[str]:
    """The suites to check, in order: those never passed (as given), then the stale ones, ``first`` (the grid's
    suite) before the others and then the oldest pass first; a check current on this code is not run."""
    new = [s for s, st in standing.items() if st["state"] == "new"]
    stale = sorted((s for s, st in standing.items() if st["state"] == "stale"),
                   key=lambda s: (s != first, standing[s].get("at", "")))
    return new + stale


def perf_cases_measured_before(kept: list[dict], info: dict, code: str) -> dict[str, str]:
    """``{case: run id}`` of the perf cases kept CUDA summaries measured (status ok) on a GPU of this
    name and on the code of digest ``code`` (:func:`code_digest`), the latest run of each: a case added
    to :data:`PERF_CASES` since is in none of them, and after a change to the code every case is
    measured again (9 of the cases took 19 s on the H200)."""
    out: dict[str, str] = {}
    for s in kept:
        dev = s.get("device") or {}
        perf = (s.get("checks") or {}).get("perf") or {}
        if dev.get("used", "").startswith("cuda") and dev.get("name") == info.get("name") and \
                perf.get("status") == "ok" and perf.get("code") == code:
            out.update(dict.fromkeys(perf.get("cases") or [], s.get("run_id", "?")))
    return out


def test_file_digests(paths: list[str]) -> dict[str, str | None]:
    """``{path: sha256 of its bytes}`` of the test files ``pytest -m cuda`` runs (None: no such file)."""
    import hashlib

    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() if Path(p).is_file() else None for p in paths}


def cuda_tests_passed_before(kept: list[dict], info: dict, paths: list[str], code: str,
                             digests: dict[str, str | None] | None = None) -> str | None:
    """The run id of a kept device summary whose ``pytest -m cuda`` passed on this GPU and torch, on the
    code of digest ``code`` (:func:`code_digest`), and ran every test file of ``paths`` as it is now
    (``digests``: :func:`test_file_digests`; a file added or changed since, e.g. a CUDA test added to it,
    is run again; a kept run without digests counts for no file), or None."""
    digests = test_file_digests(paths) if digests is None else digests

    def parts(chk):
        entry = chk.get("cuda_tests") or {}
        ran = entry.get("digests") or {}
        same = entry.get("code") == code and all(p in ran and ran[p] == digests.get(p) for p in paths)
        return [entry if same else None]
    return kept_pass(kept, info, parts, ("name", "torch"))


# ------------------------------------------------------------------------------ the grid


def new_map_checkpoints(results: Path, suite: str, kept: Path, kr) -> list[Path]:
    """The finished MAP networks under ``results/<suite>/checkpoints/map`` that the kept records
    (``kept``, docs/records) do not hold with the same bytes, in path order."""
    out = []
    for path in sorted((results / suite / "checkpoints" / "map").glob("*/*/seed*.pt")):
        rel = path.relative_to(results)
        if not kr.is_map_checkpoint(rel.as_posix()):
            continue
        k = kept / rel
        if not (k.is_file() and k.read_bytes() == path.read_bytes()):
            out.append(path)
    return out


def write_map_archives(paths: list[Path], results: Path, out: Path, limit: int = MAP_ARCHIVE_BYTES,
                       most: int = MAP_ARCHIVES) -> dict:
    """The finished MAP networks ``paths`` in ``maps-<k>.tar`` (:func:`write_file_archives`): the
    archives' names, the networks they hold and those left out (which the next run trains again)."""
    got = write_file_archives(paths, results, out, "maps", limit, most)
    return {"archives": got["archives"], "networks": got["files"], "left_out": got["left_out"]}


def write_file_archives(paths: list[Path], results: Path, out: Path, prefix: str, limit: int = MAP_ARCHIVE_BYTES,
                        most: int = MAP_ARCHIVES) -> dict:
    """``paths`` (files under ``results``) in ``<prefix>-1.tar``, ``<prefix>-2.tar``, ... of at most
    ``limit`` bytes each (uncompressed: network weights do not compress), at most ``most`` of them,
    each written atomically; older ``<prefix>-*.tar`` in ``out`` beyond those are removed. Returns
    the archives' names, how many files they hold and those left out."""
    from bench.store import atomic_write_bytes

    chunks: list[list[Path]] = []
    size, left_out = 0, []
    for path in paths:
        n = path.stat().st_size + 1024  # the tar header and padding, generously
        if n > limit:
            left_out.append(path)
            continue
        if not chunks or size + n > limit:
            if len(chunks) == most:
                left_out.append(path)
                continue
            chunks.append([])
            size = 0
        chunks[-1].append(path)
        size += n
    names = []
    for k, chunk in enumerate(chunks, 1):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in chunk:
                tar.add(path, arcname=path.relative_to(results).as_posix())
        atomic_write_bytes(out / f"{prefix}-{k}.tar", buf.getvalue())
        names.append(f"{prefix}-{k}.tar")
    for old in out.glob(f"{prefix}-*.tar"):
        if old.name not in names:
            old.unlink()
    return {"archives": names, "files": sum(len(c) for c in chunks),
            "left_out": [p.relative_to(results).as_posix() for p in left_out]}


# ---------------------------------------------------------------------- partial fits, across calls


def partial_files(results: Path, suite: str) -> list[Path]:
    """The resume checkpoints of unfinished trainings under ``results/<suite>/checkpoints``: a MAP
    network's (``map/<model>/<key hash>/seed<k>.partial``) and a fit's
    (``partial/<model>/<method>-<fit hash>/seed<k>/<tag>.partial``), in path order. A training
    removes its own when it ends, so after the grid these are exactly the ones it stopped."""
    root = results / suite / "checkpoints"
    return sorted(p for p in root.rglob("*.partial") if p.is_file()) if root.is_dir() else []


def partial_progress(path: Path, digest: bool = True) -> dict:
    """What a resume checkpoint holds: the epochs it finished, the training seconds they took (across
    the processes that ran them), its size and (``digest``) SHA-256; a fitted method's checkpoint (a
    cell stopped after its fit, while it was evaluated): ``fitted`` and its fit's seconds. A file
    that does not load says why."""
    from bench.torch_files import load_torch

    info = {"bytes": path.stat().st_size, **({"sha256": _digest(path, "sha256")} if digest else {})}
    try:
        state = load_torch(path)
        if path.suffix == ".pt":
            info.update(fitted=True, train_seconds=float(state["fit_cost"].get("fit_time_s", math.nan)))
        else:
            info.update(epoch=int(state["epoch"]), train_seconds=float(state.get("train_seconds", math.nan)))
    except Exception as exc:  # noqa: BLE001 - a damaged file is reported, and the training starts again
        info["problem"] = f"{type(exc).__name__}: {exc}"[:300]
    return info


def restore_partials(carried: Path, results: Path, suite: str) -> dict[str, dict]:
    """Copy the partial fits an earlier call sent back (``<carried>/partial/<suite>/checkpoints/...``:
    resume checkpoints, and the fitted methods of cells stopped while they were evaluated) into the
    grid's results, never over a file there; the trainings they belong to resume from them, the
    cells fitted already are only evaluated. A MAP network's partial fit whose finished network is
    there (kept since) is not copied (``stale``: consumed). Returns each file's :func:`partial_progress`
    by its path under ``results``. A worker removes the partial fits of the items it finds done
    (their records kept), so those are consumed too."""
    src_root = carried / PARTIAL_DIR
    fitted = src_root / suite / "checkpoints" / "fitted"
    restored = {}
    for src in partial_files(src_root, suite) + (sorted(fitted.rglob("seed*.pt")) if fitted.is_dir() else []):
        rel = src.relative_to(src_root)
        dest = results / rel
        if dest.exists():
            continue
        if dest.suffix == ".partial" and dest.with_suffix(".pt").is_file():  # a MAP network kept since: stale
            restored[rel.as_posix()] = {**partial_progress(src), "stale": "its network is kept"}
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        restored[rel.as_posix()] = partial_progress(dest)
    return restored


def held_seconds(info: dict) -> float:
    """The training seconds a :func:`partial_progress` says its file holds (0.0 when it does not say)."""
    t = info.get("train_seconds", 0.0)
    return t if t == t else 0.0


def resumed_seconds(paths) -> float:
    """The training seconds the resume checkpoints among ``paths`` hold (the most of them; 0.0 when
    none exists or none says)."""
    return max([held_seconds(partial_progress(Path(p), digest=False)) for p in paths if Path(p).is_file()] + [0.0])


def item_need(lower: float, finished: float, resumed: float) -> float:
    """Seconds an item is expected to need in this call: the most an earlier call ran it without
    finishing (``lower``) or took to finish it (``finished``), less the training seconds a partial
    fit restored for it holds (``resumed``; it goes on from there). 0: nothing known, or all done."""
    need = max(lower, finished)
    return max(0.0, need - resumed) if need else 0.0


def partial_outputs(results: Path, suite: str, out: Path, restored: dict[str, dict], most: int,
                    limit: int = MAP_ARCHIVE_BYTES, fitted=(), finished=()) -> dict:
    """Send back the partial fits left in ``results`` in ``partial-<k>.tar`` (at most ``most`` archives
    of ``limit`` bytes): each with its progress, those left out (too large, or no archive
    left: their trainings start again, or from the copy kept here), and the restored ones that are
    gone (``consumed``: their trainings ended, so ``keep_records.py merge`` removes the kept copy
    whose digest it names). ``fitted``: the fitted-method checkpoints of the cells stopped while they
    were evaluated (paths under ``results``), sent back too; ``finished``: those of the restored ones
    whose cells ended in this call (consumed). Where the archives cannot take them all, the ones
    holding the most training seconds go first."""
    progress = {p: partial_progress(p) for p in partial_files(results, suite)
                + [results / rel for rel in fitted if (results / rel).is_file()]}

    files = sorted(progress, key=lambda path: -held_seconds(progress[path]))  # stable: path order among equals
    got = write_file_archives(files, results, out, "partial", limit, most)  # most 0: every one left out
    present = {p.relative_to(results).as_posix() for p in files}
    return {"archives": got["archives"], "left_out": got["left_out"],
            "files": {p.relative_to(results).as_posix(): progress[p] for p in sorted(files)},
            "consumed": {rel: info["sha256"] for rel, info in restored.items()
                         if (rel not in present if rel.endswith(".partial") else rel in set(finished))}}


def grid_items(cells: list[dict], cached: set = frozenset()) -> list[dict]:
    """The grid's work in the order the workers take it. ``cells``: ``{"key", "cell", "needs",
    "done"}`` each, in run order, ``needs`` the ``(model, seed)`` MAP networks the cell builds on
    (:func:`bench.executors.grid.map_dependencies`). Before each cell that still has records to
    write come the networks it needs that no earlier item trains (``{"kind": "map", "key":
    "<model>/map/seed<k>"}``); a cell lists the keys of its networks in ``needs``, so a worker can
    leave it while another trains one of them (a paper-budget deep ensemble builds on 5 networks
    a seed: trained side by side, not one after the other inside the cell). A network in ``cached``
    (``(model, seed)``: trained already, e.g. restored from the kept ones) is no item."""
    items, listed = [], set()
    for c in cells:
        keys = []
        for model, seed in c["needs"]:
            key = f"{model}/map/seed{seed}"
            keys.append(key)
            if not c["done"] and key not in listed and (model, seed) not in cached:
                listed.add(key)
                items.append({"kind": "map", "key": key, "model": model, "seed": seed})
        items.append({"kind": "cell", "key": c["key"], "cell": c["cell"], "needs": keys, "done": c["done"]})
    return items


class Claims:
    """Which grid items a worker has taken (a file created exclusively, so two workers never take
    one) and which are finished (a second file), in a folder the session's workers share."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, suffix: str = "") -> Path:
        return self.root / (hashlib.sha1(key.encode()).hexdigest() + suffix)

    def take(self, key: str) -> bool:
        try:
            os.close(os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False

    def taken(self, key: str) -> bool:
        return self._path(key).exists()

    def finish(self, key: str) -> None:
        self._path(key, ".done").touch()

    def busy(self, key: str) -> bool:
        """Taken by a worker and not finished yet."""
        return self.taken(key) and not self._path(key, ".done").exists()


def next_item(items: list[dict], claims: Claims) -> tuple[dict | None, bool]:
    """The first item no worker has taken whose MAP networks no worker is training now, and whether
    a cell was passed over for that reason (then the caller waits and asks again)."""
    waiting = False
    for it in items:
        if claims.taken(it["key"]):
            continue
        if it["kind"] == "cell" and not it["done"] and any(claims.busy(k) for k in it["needs"]):
            waiting = True
            continue
        return it, waiting
    return None, waiting


def grid_worker(spec_path: str) -> int:
    """Child process: take the grid's items (:func:`grid_items`: MAP networks and cells) one at a
    time from the list all workers share (:class:`Claims`), printing one ``@@cell`` JSON line when
    an item starts, ends, or is not started (deferred, or out of time)."""
    spec = json.loads(Path(spec_path).read_text())
    index = spec.get("worker", 0)
    from bench.threads import apply_threads

    apply_threads(spec["threads"])
    import bench.harness as harness_mod
    from bench.config import parse_sets, resolve_plan
    from bench.executors.grid import cell_key, map_dependencies
    from bench.provenance import resolve_device
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from methods import METHODS

    if harness_mod.git_commit() == "unknown" and spec.get("commit", "unknown") != "unknown":
        commit = spec["commit"]
        harness_mod.git_commit = lambda: commit  # the device has no .git: the commit prepare wrote

    def say(**kw):
        print(CELL_TAG + json.dumps({**kw, "worker": index}), flush=True)

    suite = SUITES.get(spec["suite"])()
    plan = resolve_plan(suite, spec["profile"], spec["methods"], parse_sets(spec.get("sets") or []),
                        seeds=spec["seeds"], method_registry=METHODS)
    suite.results_dir = Path(spec["results"])
    if getattr(suite, "backbone_run", None) and suite.backbone_run(plan.data):
        # a network the grid starts from (camvid_multilabel's data.backbone=camvid): worker 0 makes it first,
        # as bench run does, in the grid's results; the others wait until it is there
        if index == 0:
            import argparse

            from bench.cli import run_backbone

            run_backbone(argparse.Namespace(out=spec["results"], device=spec["device"], data_root=spec["data_root"],
                                            threads=spec["threads"], loader_workers=0, quiet=True, no_report=True,
                                            no_download=True), suite, plan)
        else:
            while not suite.camvid_backbone_path(plan.data).is_file() and time.time() < spec["deadline"]:
                time.sleep(2.0)
    data = suite.load(Path(spec["data_root"]), plan.data, download=False)
    h = harness_mod.Harness(suite, plan, data, ResultsStore(spec["results"]), resolve_device(spec["device"]), METHODS,
                            progress=False, quiet=True, workers=0)
    h.write_artifacts()
    deps = map_dependencies(plan, METHODS, h.pretrained)

    cells = []
    for model, method, cfg, seed in h.cells():
        cid = h.cell_identity(model, method, cfg, seed)
        done = all(h.store.read(cid.run_dir, e.kind, e.shift, e.severity) is not None for e in data.eval_sets)
        cells.append({"key": f"{model}/{cid.label}/seed{seed}", "cell": (model, method, cfg, seed), "done": done,
                      "needs": deps.get(cell_key((model, method, cfg, seed)), []), "label": cid.label,
                      "run_dir": str(cid.run_dir)})
    cells = seed_major(cells, plan.seeds)
    by_key = {c["key"]: c for c in cells}
    cached = {(m, k) for c in cells for m, k in c["needs"] if h.map_cache(m).cached_path(k).exists()}
    items = grid_items(cells, cached)
    say(event="plan", cells=len(cells), models=plan.models, seeds=plan.seeds)
    finished, lower = spec.get("history", {}).get("finished", {}), spec.get("history", {}).get("lower_bound", {})
    claims = Claims(Path(spec["claims"]))

    def map_need(model: str, seed: int) -> tuple[float, float]:
        """(expected seconds, resumed seconds) of the MAP network of ``seed``; (0, 0) once it is there."""
        if h.map_cache(model).cached_path(seed).exists():
            return 0.0, 0.0
        resumed = resumed_seconds([h.map_cache(model).path(seed).with_suffix(".partial")])
        took = finished.get(f"{model}/map", 0.0) or finished.get(f"{model}/deterministic", 0.0)
        return item_need(lower.get(f"{model}/map/seed{seed}", 0.0), took, resumed), resumed

    while True:
        it, waiting = next_item(items, claims)
        if it is None:
            if not waiting or time.time() >= spec["deadline"]:
                break
            time.sleep(1.0)  # a network this worker's next cell needs is being trained by another
            continue
        if not claims.take(it["key"]):
            continue  # another worker took it first
        try:
            key, left = it["key"], spec["deadline"] - time.time()
            model = it["key"].split("/", 1)[0]
            # a partial fit an earlier call stopped goes on from there: its seconds are not needed again
            if it["kind"] == "map":
                need, resumed = map_need(model, it["seed"])
                partials = [h.map_cache(model).path(it["seed"]).with_suffix(".partial")]
            else:
                c = by_key[key]
                cid = h.cell_identity(*c["cell"])  # its partial fit, or its fitted method (stopped while evaluated)
                fitted = h.fitted_path(cid)
                partials = list(h.fit_work_dir(cid).glob("*.partial"))
                resumed = resumed_seconds([*partials, fitted])
                need = item_need(lower.get(key, 0.0), finished.get(f"{model}/{c['label']}", 0.0), resumed)
                # a network it builds on that is not there (e.g. deferred by another worker) is trained in it
                need = max([need] + [map_need(m, k)[0] for m, k in c["needs"]])
            if not it.get("done") and left < spec["min_cell_s"]:
                say(event="stop", cell=key,
                    why=f"{left:.0f} s left, a cell is started with at least {spec['min_cell_s']:.0f} s")
                break
            if not it.get("done") and need and need > left:
                say(event="deferred", cell=key, why=f"needs more than {need:.0f} s (earlier runs), {left:.0f} s left")
                continue
            if it["kind"] == "map":
                say(event="start", cell=key, kind="map", model=model, seed=it["seed"], resumed_s=resumed,
                    partials=_under(partials, spec["results"]))
                t0 = time.perf_counter()
                cache = h.map_cache(model)
                before, error = len(cache.trained_now), None
                try:
                    cache.get(it["seed"])
                    status = "trained" if len(cache.trained_now) > before else "cached"
                except Exception as exc:  # noqa: BLE001 - the cells built on it record the failure
                    status, error = "failed", f"{type(exc).__name__}: {exc}"
                say(event="done", cell=key, kind="map", model=model, seed=it["seed"], status=status, error=error,
                    seconds=round(time.perf_counter() - t0, 2))
                continue
            model, method, cfg, seed = c["cell"]
            say(event="start", cell=key, model=model, method=method, label=c["label"], seed=seed, run_dir=c["run_dir"],
                resumed_s=resumed, fitted=fitted.relative_to(spec["results"]).as_posix(),
                partials=_under(partials, spec["results"]))
            before = (h.summary.fitted, h.summary.loaded, h.summary.skipped, len(h.summary.failed))
            t0 = time.perf_counter()
            h.run_cell(model, method, cfg, seed)
            after = (h.summary.fitted, h.summary.loaded, h.summary.skipped, len(h.summary.failed))
            status = ("failed" if after[3] > before[3] else "kept (skipped)" if after[2] > before[2]
                      else "fitted" if after[0] > before[0] else "loaded")
            say(event="done", cell=key, model=model, method=method, label=c["label"], seed=seed, status=status,
                seconds=round(time.perf_counter() - t0, 2), run_dir=c["run_dir"])
        finally:
            claims.finish(it["key"])
    say(event="end")
    return 0


def _under(paths, root) -> list[str]:
    """The paths among ``paths`` that exist, relative to ``root`` (posix)."""
    return [Path(p).relative_to(root).as_posix() for p in paths if Path(p).is_file()]


def backbone_suites(suite_name: str, profile: str) -> list[str]:
    """The suites whose kept MAP networks a grid of ``suite_name`` at ``profile`` starts from
    (camvid_multilabel's ``data.backbone=camvid``: the camvid quick MAP UNet, kept in git so that every
    machine builds on the same file, docs/medical.md); [] for a suite that starts from none."""
    from bench.suites import SUITES

    suite = SUITES.get(suite_name)()
    run = getattr(suite, "backbone_run", None)
    spec = run(suite.profiles.get(profile, {}).get("data", {})) if run is not None else None
    return [spec["suite"]] if spec else []


def seed_major(cells: list[dict], seeds: list[int]) -> list[dict]:
    """The grid's cells (``{"cell": (model, method, cfg, seed), ...}``, in ``bench run``'s order) with
    every cell of the first seed first, models and methods in that order, then the next seed's: a
    series of lent calls reaches seed 0 of every model and method (issue 35's first aim) before
    seeds 1-2 of any."""
    rank = {s: i for i, s in enumerate(seeds)}
    return sorted(cells, key=lambda c: rank.get(c["cell"][3], len(rank)))


def grid_history(kept: list[dict], device_type: str) -> dict:
    """From kept device summaries on the same kind of device (``kept`` oldest first, as
    :func:`kept_summaries` reads them): each (model, method)'s longest finished time in the latest
    session that finished one (an older session's times are of older code and another number of
    workers side by side: the training loop's speed-ups made them pessimistic), and the longest time
    a cell ran before it was stopped (a lower bound, whenever it was measured)."""
    finished, lower = {}, {}
    for s in kept:
        if not (s.get("device") or {}).get("used", "").startswith(device_type):
            continue
        this: dict[str, float] = {}
        for c in (s.get("grid") or {}).get("cells", []):
            if c.get("status") in ("fitted", "loaded", "trained") and c.get("seconds"):
                k = c["cell"].rsplit("/", 1)[0]
                this[k] = max(this.get(k, 0.0), c["seconds"])
            elif c.get("status") == "stopped at the deadline" and c.get("seconds"):
                lower[c["cell"]] = max(lower.get(c["cell"], 0.0), c["seconds"])
        finished.update(this)  # the latest session's times replace the earlier ones
    return {"finished": finished, "lower_bound": lower}


# ------------------------------------------------------------------------------- the driver


class Session:
    def __init__(self, a, device, out: Path, work: Path):
        self.a, self.device, self.out, self.work = a, device, out, work
        self.cuda = device.type == "cuda"
        (work / "logs").mkdir(parents=True, exist_ok=True)
        self.deadline = a.started_at + a.budget_s
        self.kr = keep_records()
        self.info = device_info(device)
        self.info["requested"] = a.device
        self.commit, self.commit_source = carried_commit(Path(a.carried))
        CHILD_ENV.clear()
        if self.commit != "unknown":  # the records of the bench processes started below name it too
            CHILD_ENV["BENCH_GIT_COMMIT"] = self.commit
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.run_id = f"{stamp}-{device.type}"
        self.kept = kept_summaries(Path(a.kept))
        self.files = code_files(ROOT)  # the code the checks run: a pass holds for it
        self.code = code_digest(self.files)
        self.new_cells: list[dict] = []
        self._maps: dict = {"archives": [], "networks": 0, "left_out": []}
        self._maps_written: list = []
        self.restored_partials: dict[str, dict] = {}
        self.stopped_fitted: list[str] = []  # fitted methods of cells stopped while evaluated (sent back)
        self.finished_fitted: set[str] = set()  # fitted methods of cells that ended here
        self._partials: dict = {"archives": [], "left_out": [], "files": {}, "consumed": {}}
        self.summary = {
            "schema": SCHEMA, "run_id": self.run_id, "started_at": _dt.datetime.fromtimestamp(
                a.started_at, _dt.timezone.utc).isoformat(timespec="seconds"),
            "status": "running", "device": self.info, "git_commit": self.commit, "commit_source": self.commit_source,
            "budget_s": a.budget_s, "wheels": os.environ.get("DEVICE_SESSION_WHEELS", "not reported by the wrapper"),
            "code": {"digest": self.code, "of": list(CHECKED_CODE), "files": self.files},
            "setup": {}, "checks": {"policy": a.checks, "recheck_s": a.recheck_s, "suites": {}, "perf": None,
                                    "passed": None, "stale": []},
            "grid": {"suite": a.suite, "profile": a.profile, "seeds": a.seeds, "methods": a.methods,
                     "sets": a.sets, "status": "not started", "cells": [], "deferred": [], "history_used": {}},
            "outputs": {}, "merge": "python scripts/keep_records.py merge <files_at>/records.tar.gz",
        }

    def left(self) -> float:
        return self.deadline - time.time()

    def say(self, msg: str) -> None:
        print(f"[device_session {time.time() - self.a.started_at:6.0f} s] {msg}", file=sys.stderr, flush=True)

    # -- outputs --------------------------------------------------------------------------
    def write_outputs(self, final: bool = False) -> None:
        """summary.json and records.tar.gz, each written to a temporary file and renamed."""
        from bench.store import atomic_write_bytes

        s = self.summary
        s["elapsed_s"] = round(time.time() - self.a.started_at, 1)
        s["written_at"] = _now()
        if final:
            s["finished_at"] = s["written_at"]
        stage = self.work / "stage"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        results = self.work / "grid"
        dirs = {Path(c["run_dir"]) for c in self.new_cells}
        n = self.kr.save(results, self.a.suite, stage, only=dirs, packed=False) if dirs else 0
        perf = s["checks"].get("perf") or {}
        if perf.get("rows"):
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.info.get("name", "cuda"))
            (stage / "perf").mkdir(exist_ok=True)
            (stage / "perf" / f"cuda-{slug}.json").write_text(json.dumps({"rows": perf["rows"]}, indent=1))
        maps = new_map_checkpoints(results, self.a.suite, Path(self.a.kept), self.kr)
        if [(p, p.stat().st_mtime) for p in maps] != self._maps_written:  # archive them again only when they changed
            self._maps = write_map_archives(maps, results, self.out)
            self._maps_written = [(p, p.stat().st_mtime) for p in maps]
        if final:  # the trainings stopped at the deadline, to go on in the next call (archives the maps left)
            self._partials = partial_outputs(results, self.a.suite, self.out, self.restored_partials,
                                             MAP_ARCHIVES - len(self._maps["archives"]), fitted=self.stopped_fitted,
                                             finished=self.finished_fitted)
        s["outputs"] = {"archive": "records.tar.gz", "records": n, "summary": "summary.json", "maps": self._maps,
                        "partials": self._partials}
        s["merge"] = " ".join(["python scripts/keep_records.py merge <files_at>/records.tar.gz",
                               *(f"<files_at>/{name}" for name in self._maps["archives"] + self._partials["archives"])])
        (stage / "device").mkdir(exist_ok=True)
        body = json.dumps(s, indent=1, sort_keys=True, default=str)
        (stage / "device" / f"{self.run_id}.json").write_text(body + "\n")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for p in sorted(stage.rglob("*")):
                if p.is_file():
                    tar.add(p, arcname=str(p.relative_to(stage)))
        atomic_write_bytes(self.out / "records.tar.gz", buf.getvalue())
        atomic_write_bytes(self.out / "summary.json", (body + "\n").encode())

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        self.summary["setup"]["data_root"] = str(self.a.data_root)
        self.summary["setup"]["data"] = unpack_archives(Path(self.a.data_archives), needed_archives(self.a),
                                                        Path(self.a.data_root), Path(self.a.stage_dir), self.work)

    # -- checks ---------------------------------------------------------------------------
    def run_checks(self) -> None:
        chk = self.summary["checks"]
        a = self.a
        cores = os.cpu_count() or 1
        if a.checks == "skip":
            chk["passed"] = None
            chk["note"] = "skipped: --checks skip"
            return
        check_deadline = a.started_at + a.check_share * a.budget_s
        methods_of = {}
        for suite in a.check_suites:
            entry = chk["suites"].setdefault(suite, {})
            defaults = list(_suite(suite).default_methods)
            entry["methods"] = methods_of[suite] = [m for m in a.check_methods if m in defaults] \
                if a.check_methods else defaults
            if not methods_of[suite]:
                entry["smoke"] = entry["agreement"] = {"status": "ok", "note": "skipped: none of --check-methods is "
                                                                              "among the suite's methods"}
        todo = [s for s in a.check_suites if methods_of[s]]
        # on CUDA a suite whose checks passed on this code is not checked again; one that passed on other code
        # is stale: checked again after the suites never passed, as --recheck-s allows, the oldest pass first
        standing = {s: check_standing(self.kept, s, self.info, self.files) if (self.cuda and a.checks == "auto")
                    else {"state": "new"} for s in todo}
        rechecked_s = 0.0
        for suite in todo:
            if standing[suite]["state"] == "current":
                chk["suites"][suite]["smoke"] = chk["suites"][suite]["agreement"] = {
                    "status": "ok", "passed_in": standing[suite]["run"],
                    "note": f"skipped: passed in kept run {standing[suite]['run']} on this code"}
        for suite in check_order(standing, a.suite):
            entry, methods, st = chk["suites"][suite], methods_of[suite], standing[suite]
            left = min(check_deadline, self.deadline) - time.time()
            if st["state"] == "stale" and (rechecked_s + a.min_check_s > a.recheck_s or left < a.min_check_s):
                why = f"--recheck-s {a.recheck_s:g} spent" if left >= a.min_check_s else \
                    f"budget: {max(left, 0):.0f} s left for checks"
                changed = "an unrecorded number of" if st["changed"] is None else str(st["changed"])
                entry["smoke"] = entry["agreement"] = {
                    "status": "ok", "stale": True, "passed_in": st["run"], "changed_files": st["changed"],
                    "note": f"skipped: not checked again ({why}); passed in kept run {st['run']} on other code "
                            f"({changed} files of {', '.join(CHECKED_CODE)} changed since)"}
                chk["stale"].append(suite)
                continue
            if left < a.min_check_s:
                entry["smoke"] = {"status": "not run", "why": f"budget: {max(left, 0):.0f} s left for checks"}
                entry["agreement"] = {"status": NO_CUDA} if not self.cuda else dict(entry["smoke"])
                continue
            entry["code"] = self.code  # what a pass here holds for
            if st["state"] == "stale":
                entry["stale_since"] = st["run"]
            self.say(f"check {suite}: smoke on {self.device}" + (" and cpu" if self.cuda else ""))
            if suite in REAL_DATA:
                root, extra = Path(a.data_root), []
            else:
                root = self.work / "fixtures" / suite
                try:
                    extra = build_fixture(suite, root)
                except Exception as e:  # a suite without a fixture is a failed check, not a lost session
                    entry["smoke"] = {"status": "failed", "why": f"fixture: {type(e).__name__}: {e}"}
                    entry["agreement"] = {"status": NO_CUDA} if not self.cuda else dict(entry["smoke"])
                    self.say(f"check {suite}: {entry['smoke']['why']}")
                    self.write_outputs()
                    continue
            base = ["run", "--suite", suite, "--profile", "smoke", "--methods", ",".join(methods), "--data-root",
                    str(root), "--no-report", "--no-download", "--quiet", "--loader-workers", "0", *extra]
            threads = a.threads or cores
            t0 = time.perf_counter()
            out = self.work / "checks" / str(self.device).replace(":", "_") / suite
            shutil.rmtree(out, ignore_errors=True)
            log = self.work / "logs" / f"check-{suite}-{str(self.device).replace(':', '_')}.log"
            proc, fh = _start_bench(base + ["--device", str(self.device), "--out", str(out), "--threads", str(threads)],
                                    threads, log)
            rc, to = _finish(proc, fh, min(check_deadline, self.deadline) - time.time())
            entry["smoke"] = _smoke_result(out, suite, methods, rc, to, time.perf_counter() - t0, log)
            entry["smoke"]["device"] = str(self.device)
            if not self.cuda:
                entry["agreement"] = {"status": NO_CUDA}
            else:
                # the CPU evaluates the state the CUDA run fitted (its checkpoints), cell by cell
                cout = self.work / "checks" / "cpu" / suite
                shutil.rmtree(cout, ignore_errors=True)
                copied = share_fitted_state(out, cout, suite)
                clog = self.work / "logs" / f"check-{suite}-cpu.log"
                t1 = time.perf_counter()
                proc, fh = _start_bench(base + ["--device", "cpu", "--out", str(cout), "--threads", str(threads)],
                                        threads, clog)
                crc, cto = _finish(proc, fh, min(check_deadline, self.deadline) - time.time())
                ref = _smoke_result(cout, suite, methods, crc, cto, time.perf_counter() - t1, clog)
                agr = compare_runs(out, cout, suite, a.atol, a.rtol)
                agr["cpu_run"] = {k: ref[k] for k in ("status", "seconds", "returncode", "timed_out")}
                agr["cpu_run"]["checkpoint_files_from_cuda"] = copied
                if ref["status"] != "ok":
                    agr["status"] = "failed"
                    agr["cpu_run"]["log_tail"] = ref.get("log_tail", "")
                entry["agreement"] = agr
            if st["state"] == "stale":
                rechecked_s += time.perf_counter() - t0
            self.say(f"check {suite}: smoke {entry['smoke']['status']}, agreement {entry['agreement']['status']}")
            self.write_outputs()
        chk["cuda_tests"] = self.run_cuda_tests()
        self.write_outputs()
        chk["perf"] = self.run_perf()
        st = [v.get(k, {}).get("status") for v in chk["suites"].values() for k in ("smoke", "agreement")]
        chk["passed"] = bool(st) and all(s in ("ok", NO_CUDA) for s in st) and \
            (chk["perf"] or {}).get("status") in ("ok", NO_CUDA, "skipped: --perf-cases none") and \
            chk["cuda_tests"].get("status") in ("ok", NO_CUDA, "skipped: --cuda-tests none")

    def run_cuda_tests(self) -> dict:
        """``pytest -m cuda`` (the tests that need CUDA, skipped everywhere else) on the device;
        each failing test with the first line of its message. Skipped once they passed in a kept
        run with the same torch and GPU, the same test files (byte for byte) and the same code
        (:func:`code_files`)."""
        a = self.a
        if not self.cuda:
            return {"status": NO_CUDA}
        if a.cuda_tests == "none":
            return {"status": "skipped: --cuda-tests none"}
        prior = cuda_tests_passed_before(self.kept, self.info, a.cuda_tests.split(","), self.code) \
            if a.checks == "auto" else None
        if prior:
            return {"status": "ok", "note": f"skipped: passed in kept run {prior}"}
        left = min(a.started_at + a.check_share * a.budget_s, self.deadline) - time.time()
        if left < a.min_check_s:
            return {"status": "not run", "why": f"budget: {max(left, 0):.0f} s left for checks"}
        if importlib.util.find_spec("pytest") is None:
            return {"status": "failed", "why": "pytest is not importable (carry its wheels: scripts/device_prepare.sh)"}
        xml = self.work / "cuda_tests.xml"
        xml.unlink(missing_ok=True)
        log = self.work / "logs" / "cuda_tests.log"
        self.say(f"cuda tests: pytest -m cuda {a.cuda_tests}")
        t0 = time.perf_counter()
        proc, fh = _start("pytest", ["-m", "cuda", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                                     *a.cuda_tests.split(",")], a.threads or max(1, (os.cpu_count() or 1) // 2), log)
        rc, to = _finish(proc, fh, left)
        res = {"status": "failed", "returncode": rc, "timed_out": to, "seconds": round(time.perf_counter() - t0, 2),
               "paths": a.cuda_tests.split(","), "digests": test_file_digests(a.cuda_tests.split(",")),
               "code": self.code}
        res.update(junit_summary(xml))
        if rc == 0 and not to and res.get("tests", 0) > 0 and not res.get("skipped_all"):
            res["status"] = "ok"
        if res["status"] != "ok":
            res["log_tail"] = _tail(log)
        return res

    def run_perf(self) -> dict:
        a = self.a
        if not self.cuda:
            return {"status": NO_CUDA}
        if a.perf_cases == ["none"]:
            return {"status": "skipped: --perf-cases none"}
        cases = a.perf_cases or list(PERF_CASES)
        # a case kept runs measured on this GPU is not measured again (--checks always measures every one)
        before = perf_cases_measured_before(self.kept, self.info, self.code) if a.checks == "auto" else {}

        def measured_in(cs):
            return f"measured in kept run(s) {', '.join(sorted({before[c] for c in cs}))}"

        if all(c in before for c in cases):
            return {"status": "ok", "note": f"skipped: {measured_in(cases)}"}
        skipped = [c for c in cases if c in before]
        cases = [c for c in cases if c not in before]
        left = min(a.started_at + a.check_share * a.budget_s, self.deadline) - time.time()
        if left < a.min_check_s:
            return {"status": "not run", "why": f"budget: {max(left, 0):.0f} s left for checks"}
        save = self.work / "perf.json"
        save.unlink(missing_ok=True)
        log = self.work / "logs" / "perf.log"
        self.say(f"perf on {self.device}: {', '.join(cases)}")
        t0 = time.perf_counter()
        proc, fh = _start_bench(["perf", "--device", str(self.device), "--repeats", str(a.perf_repeats), "--case",
                                 ",".join(cases), "--save", str(save)], a.threads or max(1, (os.cpu_count() or 1) // 2),
                                log)
        rc, to = _finish(proc, fh, left)
        rows = json.loads(save.read_text())["rows"] if save.exists() else []
        res = {"status": "ok" if rows and rc in (0, 1) and not to else "failed", "returncode": rc, "timed_out": to,
               "seconds": round(time.perf_counter() - t0, 2), "cases": cases, "rows": rows, "code": self.code,
               "missed_targets": [f"{r['model']}: {r['measure']} = {r['ratio']:.3f} (target {r['op']} {r['target']})"
                                  for r in rows if not r.get("ok")]}
        if skipped:
            res["note"] = f"{', '.join(skipped)}: {measured_in(skipped)}"
        if res["status"] != "ok":
            res["log_tail"] = _tail(log)
        return res

    # -- grid -----------------------------------------------------------------------------
    def run_grid(self) -> None:
        a, g = self.a, self.summary["grid"]
        smoke = ((self.summary["checks"]["suites"].get(a.suite) or {}).get("smoke") or {}).get("status")
        if smoke not in (None, "ok"):
            g["status"] = f"not started: the {a.suite} smoke check did not pass on {self.device} ({smoke})"
            return
        if self.left() < a.min_cell_s + a.finish_s:
            g["status"] = f"not started: budget ({max(self.left(), 0):.0f} s left)"
            return
        results = self.work / "grid"
        kept_dir = Path(a.kept) / a.suite
        if (kept_dir / "records").is_dir() or self.kr.pack_path(kept_dir) is not None:  # loose or packed
            g["restored_records"] = self.kr.restore(results, a.suite, Path(a.kept))
        else:
            g["restored_records"] = 0
        for other in backbone_suites(a.suite, a.profile):  # the kept network the grid starts from, not a new one
            if (Path(a.kept) / other / self.kr.MAPS_TREE).is_dir():
                g.setdefault("restored_backbone_records", {})[other] = self.kr.restore(results, other, Path(a.kept))
        # the trainings an earlier call stopped at its deadline go on from their partial fits
        self.restored_partials = restore_partials(Path(a.carried), results, a.suite)
        g["restored_partials"] = self.restored_partials
        history = grid_history(self.kept, self.device.type)
        g["history_used"] = history
        workers = max(1, a.grid_workers or (CUDA_GRID_WORKERS if self.cuda else 1))
        g["workers"] = workers
        threads = a.threads or max(1, (os.cpu_count() or 1) // workers)
        claims = self.work / "claims"
        shutil.rmtree(claims, ignore_errors=True)  # the items this run's workers take: none yet
        spec = {"suite": a.suite, "profile": a.profile, "seeds": a.seeds, "methods": a.methods, "sets": a.sets,
                "data_root": str(a.data_root), "results": str(results), "device": str(self.device),
                "threads": threads, "deadline": self.deadline - a.finish_s, "claims": str(claims),
                "min_cell_s": a.min_cell_s, "history": history, "commit": self.commit}
        g["status"] = "running"
        self.say(f"grid {a.suite} {a.profile} seeds {a.seeds}, {workers} worker(s): {max(self.left(), 0):.0f} s left")
        lines: queue.Queue = queue.Queue()
        procs, errs = [], []
        for i in range(workers):  # processes side by side on the device, taking items from one list
            spec_path = self.work / f"grid-spec-{i}.json"
            spec_path.write_text(json.dumps({**spec, "worker": i}))
            err = open(self.work / "logs" / f"grid-{i}.log", "w")
            env = _bench_env(threads, {"BENCH_CHECKPOINT_INTERVAL_S": f"{a.checkpoint_interval_s:g}"})
            proc = subprocess.Popen([sys.executable, "-m", "bench.device_session", "grid-worker", str(spec_path)],
                                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err,
                                    text=True, start_new_session=True)
            threading.Thread(target=lambda p=proc: [lines.put(x) for x in p.stdout] + [lines.put(None)],
                             daemon=True).start()
            procs.append(proc)
            errs.append(err)
        running: dict[int, dict] = {}
        open_streams, ended = workers, 0
        try:
            while open_streams:
                try:
                    line = lines.get(timeout=max(0.1, min(5.0, spec["deadline"] - time.time())))
                except queue.Empty:
                    if time.time() >= spec["deadline"]:
                        for proc in procs:
                            _stop(proc)
                        for cell in running.values():
                            entry = {**cell, "status": "stopped at the deadline",
                                     "seconds": round(time.time() - cell["t"], 2)}
                            fitted = entry.pop("fitted", None)
                            entry.pop("partials", None)
                            if fitted and (results / fitted).is_file():  # stopped while evaluated: its fit goes back
                                entry["fitted_checkpoint"] = fitted
                                self.stopped_fitted.append(fitted)
                            g["cells"].append(entry)
                        running.clear()
                        g["status"] = "stopped: budget (the running cells were stopped; none of their records is kept)"
                        break
                    continue
                if line is None:
                    open_streams -= 1
                    continue
                if not line.startswith(CELL_TAG):
                    continue
                ev = json.loads(line[len(CELL_TAG):])
                kind, worker = ev.pop("event"), ev.pop("worker", 0)
                if kind == "plan":
                    g["models"], g["cells_in_grid"] = ev["models"], ev["cells"]
                elif kind == "start":
                    running[worker] = {"cell": ev["cell"], "worker": worker, "t": time.time()}
                    if ev.get("resumed_s"):  # from a partial fit an earlier call sent back
                        running[worker]["resumed_s"] = round(ev["resumed_s"], 2)
                    if ev.get("fitted"):
                        running[worker]["fitted"] = ev["fitted"]
                    running[worker]["partials"] = ev.get("partials") or []
                elif kind == "done":
                    started = running.pop(worker, None) or {}
                    if started.get("fitted") and ev["status"] in ("fitted", "loaded", "kept (skipped)"):
                        self.finished_fitted.add(started["fitted"])
                    if ev["status"] in ("kept (skipped)", "cached"):  # done before: a partial fit of it is stale
                        for rel in started.get("partials", []):
                            (results / rel).unlink(missing_ok=True)
                    cell = {k: ev[k] for k in ("cell", "status", "seconds")}
                    cell["worker"] = worker
                    if started.get("resumed_s"):
                        cell["resumed_s"] = started["resumed_s"]
                    if ev.get("kind") == "map":  # a MAP network trained ahead of the cells built on it
                        if ev.get("error"):
                            cell["error"] = ev["error"]
                        g["cells"].append(cell)
                        self.say(f"MAP {ev['cell']}: {ev['status']} in {ev['seconds']:.1f} s (worker {worker})")
                        self.write_outputs()
                    elif ev["status"] != "kept (skipped)":
                        g["cells"].append(cell)
                        self.new_cells.append(ev)
                        self.say(f"cell {ev['cell']}: {ev['status']} in {ev['seconds']:.1f} s (worker {worker})")
                        self.write_outputs()
                    else:
                        g["kept_cells"] = g.get("kept_cells", 0) + 1
                elif kind == "deferred":
                    g["deferred"].append(ev)
                elif kind == "stop":
                    if not g["status"].startswith("stopped"):
                        g["status"] = f"stopped: budget ({ev['why']})"
                elif kind == "end":
                    ended += 1
        finally:  # the workers have ended (their streams closed) or were stopped; one that lingers is stopped
            rcs = []
            for proc in procs:
                try:
                    rcs.append(proc.wait(timeout=60))
                except subprocess.TimeoutExpired:
                    _stop(proc)
                    rcs.append(proc.wait())
            for err in errs:
                err.close()
        for c in g["cells"]:
            c.pop("t", None)
        if ended == workers and g["status"] == "running":
            g["status"] = "complete" if not g["deferred"] else "complete but for the deferred cells"
        elif ended < workers and g["status"] == "running":
            failed = [i for i, rc in enumerate(rcs) if rc != 0]
            g["status"] = f"worker failed (exit {', '.join(str(rcs[i]) for i in failed) or '?'})"
            g["log_tail"] = "\n".join(_tail(self.work / "logs" / f"grid-{i}.log", 3000) for i in failed)

    def run(self) -> int:
        self.write_outputs()
        try:
            self.setup()
            self.write_outputs()
            self.run_checks()
            self.write_outputs()
            self.run_grid()
            self.summary["status"] = "finished"
        except Exception as exc:  # noqa: BLE001 - whatever broke is in the summary that comes back
            import traceback

            self.summary["status"] = f"error: {type(exc).__name__}: {exc}"
            self.summary["traceback"] = traceback.format_exc()[-3000:]
        self.write_outputs(final=True)
        g = self.summary["grid"]
        self.say(f"done: checks passed {self.summary['checks']['passed']}, grid {g['status']}, "
                 f"{len(g['cells'])} cell(s) run, {self.summary['outputs']['records']} record(s) in "
                 f"{self.out / 'records.tar.gz'}")
        return 0 if not self.summary["status"].startswith("error") else 1


def _suite(name: str):
    from bench.suites import SUITES

    return SUITES.get(name)()


# ---------------------------------------------------------------------------------- the CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.device_session", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT"), help="where summary.json and records.tar.gz go "
                                                                "(default: $OUT)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="seconds from --started-at to the end of this run (default 480, for a call of timeout_s 540)")
    p.add_argument("--started-at", type=float, default=None,
                   help="epoch seconds the budget counts from (the wrapper's start; default: now)")
    p.add_argument("--carried", default=str(ROOT / ".device"), help="the carried folder (default: .device)")
    p.add_argument("--data-archives", default=None, help="folder of the data archives (default: <carried>/data)")
    p.add_argument("--stage-dir", default=str(STAGE_DIR),
                   help="where earlier calls staged the parts of an archive (default: .device-staged)")
    p.add_argument("--data-root", default=None, help="where they are unpacked (default: <work>/data)")
    p.add_argument("--work", default=None, help="scratch folder (default: a new folder under $TMPDIR)")
    p.add_argument("--cuda-tests", default=CUDA_TESTS,
                   help=f"comma-separated test paths run with pytest -m cuda on CUDA ('none': skip; default: "
                        f"{CUDA_TESTS})")
    p.add_argument("--kept", default=str(ROOT / "docs" / "records"),
                   help="the kept records the grid resumes from (default: docs/records)")
    p.add_argument("--suite", default="mnist_rotated", help=f"the grid's suite, one of {', '.join(GRID_SUITES)}")
    p.add_argument("--profile", default="paper")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--methods", default=None, help="the grid's methods (default: the suite's)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE[,VALUE...]",
                   help="the grid's options, as bench run's --set (a method option's values sweep it)")
    p.add_argument("--check-suites", default=None, help="suites checked at smoke scale (default: every suite)")
    p.add_argument("--check-methods", default=None, help="methods checked (default: each suite's)")
    p.add_argument("--checks", choices=("auto", "always", "skip"), default="auto",
                   help="auto (default): skip the suites whose checks passed on CUDA in a kept run on this code; "
                        "those that passed on other code are checked again as --recheck-s allows")
    p.add_argument("--recheck-s", type=float, default=120.0,
                   help="seconds of the checks' share for checking again the suites that passed on other code, the "
                        "grid's suite first, then the oldest pass (120; the others stay marked stale)")
    p.add_argument("--check-share", type=float, default=0.6, help="share of the budget the checks may use (0.6)")
    p.add_argument("--min-check-s", type=float, default=20.0, help="no check starts with less left (20)")
    p.add_argument("--min-cell-s", type=float, default=30.0, help="no grid cell starts with less left (30)")
    p.add_argument("--finish-s", type=float, default=15.0, help="kept back to write the outputs (15)")
    p.add_argument("--checkpoint-interval-s", type=float, default=GRID_CHECKPOINT_INTERVAL_S,
                   help=f"seconds between two resume checkpoints of a grid training, sent back when the deadline "
                        f"stops it ({GRID_CHECKPOINT_INTERVAL_S:g}; 0: after every epoch)")
    p.add_argument("--atol", type=float, default=0.02, help="CUDA vs CPU metric tolerance, absolute (0.02)")
    p.add_argument("--rtol", type=float, default=0.05, help="and relative (0.05)")
    p.add_argument("--perf-cases", default=None, help=f"bench perf cases on CUDA, or none (default: "
                                                      f"{','.join(PERF_CASES)})")
    p.add_argument("--perf-repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (default: by core count)")
    p.add_argument("--grid-workers", type=int, default=None,
                   help=f"grid processes side by side, taking MAP networks and cells from one list "
                        f"(default: {CUDA_GRID_WORKERS} on CUDA, 1 else)")
    return p


def validate(a) -> None:
    """Everything checked before anything is written; BadInput names what is valid."""
    from bench.cli import check_datasets_package
    from bench.config import parse_sets, resolve_plan
    from bench.errors import BenchError
    from bench.provenance import resolve_device
    from bench.suites import PROFILES, SUITES
    from methods import METHODS

    try:
        check_datasets_package()
    except BenchError as exc:
        raise BadInput(str(exc)) from None
    if not a.out:
        raise BadInput("no --out and $OUT is not set: name the folder the summary and the archive go to")
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out} exists and is not a folder")
    valid = SUITES.names()
    if a.suite not in GRID_SUITES:
        why = "unknown suite" if a.suite not in valid else "its data does not travel to the device"
        raise BadInput(f"--suite {a.suite!r}: {why}; the grid runs one of {', '.join(GRID_SUITES)}")
    a.check_suites = _csv(a.check_suites) if a.check_suites is not None else list(valid)
    bad = [s for s in a.check_suites if s not in valid]
    if bad:
        raise BadInput(f"--check-suites: unknown suite(s) {', '.join(bad)}; valid suites: {', '.join(valid)}")
    if a.suite in a.check_suites:  # the grid's suite first: the grid waits for its smoke check
        a.check_suites = [a.suite] + [s for s in a.check_suites if s != a.suite]
    if a.profile not in PROFILES:
        raise BadInput(f"--profile {a.profile!r}: valid profiles: {', '.join(PROFILES)}")
    try:
        a.seeds = [int(s) for s in _csv(a.seeds)]
    except ValueError:
        raise BadInput(f"--seeds expects comma-separated integers, got {a.seeds!r}") from None
    suite = SUITES.get(a.suite)()
    a.methods = _csv(a.methods) or list(suite.default_methods)
    a.check_methods = _csv(a.check_methods)
    for m in a.methods + (a.check_methods or []):
        if m not in METHODS.names():
            raise BadInput(f"unknown method {m!r}; valid methods: {', '.join(METHODS.names())}")
    if a.cuda_tests != "none":
        missing = [t for t in _csv(a.cuda_tests) or [] if not (ROOT / t.split("::")[0]).exists()]
        if missing or not _csv(a.cuda_tests):
            raise BadInput(f"--cuda-tests: no such test file(s) {', '.join(missing) or repr(a.cuda_tests)}; give paths "
                           f"under {ROOT} (default tests/test_method_contract.py) or 'none'")
    a.perf_cases = _csv(a.perf_cases)
    if a.perf_cases and a.perf_cases != ["none"]:
        unknown = [c for c in a.perf_cases if c not in PERF_CASES]
        if unknown:
            raise BadInput(f"--perf-cases: unknown {', '.join(unknown)}; valid: none, {', '.join(PERF_CASES)}")
    if a.budget_s < 0 or not 0 <= a.check_share <= 1:
        raise BadInput("--budget-s must be >= 0 and --check-share within [0, 1]")
    if not a.recheck_s >= 0:
        raise BadInput(f"--recheck-s must be a number of seconds >= 0, got {a.recheck_s}")
    if not a.checkpoint_interval_s >= 0:
        raise BadInput(f"--checkpoint-interval-s must be a number of seconds >= 0, got {a.checkpoint_interval_s}")
    if a.grid_workers is not None and a.grid_workers < 1:
        raise BadInput(f"--grid-workers must be at least 1, got {a.grid_workers}")
    try:
        a.sets = a.sets or []
        resolve_plan(suite, a.profile, a.methods, parse_sets(a.sets), seeds=a.seeds, method_registry=METHODS)
        device = resolve_device(a.device)
    except BenchError as exc:
        raise BadInput(str(exc)) from None
    a.data_archives = a.data_archives or str(Path(a.carried) / "data")
    needed = needed_archives(a)
    arch = Path(a.data_archives)
    if needed and not arch.is_dir():
        files = ", ".join(n + ".tar.xz" for n in needed)
        raise BadInput(f"--data-archives {arch}: no such folder; it must hold {files} (bash "
                       f"scripts/device_prepare.sh copies them from ../shared/data)")
    missing, unstaged = [], []
    for n in needed:
        if (arch / f"{n}.tar.xz").is_file():
            continue
        parts = missing_parts(arch, n, Path(a.stage_dir))
        if parts is None:
            missing.append(n)
        elif parts:
            unstaged += parts
    if missing:
        present = sorted(p.name for p in arch.glob("*.tar.xz"))
        raise BadInput(f"--data-archives {arch}: missing {', '.join(m + '.tar.xz' for m in missing)} (present: "
                       f"{', '.join(present) or 'none'}); needed for {a.suite} and the check suites (bash "
                       f"scripts/device_prepare.sh --data {','.join(missing)})")
    if unstaged:
        raise BadInput(f"parts {', '.join(unstaged)} are neither carried nor staged in {a.stage_dir}: run the stage "
                       f"call(s) scripts/device_prepare.sh printed right before this one, on the same machine (one "
                       f"given back in between loses what they staged)")
    return device


def needed_archives(a) -> list[str]:
    """The archives a session unpacks: the grid suite's data and the real data of the check suites
    (none with ``--checks skip``)."""
    checked = [] if a.checks == "skip" else a.check_suites
    return sorted({*GRID_DATA.get(a.suite, ()), *(n for s in checked for n in REAL_DATA.get(s, ()))})


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grid-worker"]:
        return grid_worker(argv[1])
    a = build_parser().parse_args(argv)
    a.started_at = a.started_at or time.time()
    try:
        device = validate(a)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench-device-"))
    a.data_root = Path(a.data_root) if a.data_root else work / "data"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    return Session(a, device, out, work).run()


if __name__ == "__main__":
    sys.exit(main())
