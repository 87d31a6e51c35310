"""Runs on a cluster that the driver did not start (issue 38): an external Dask scheduler and
workers started from other directories. Relative paths land where the driver expects, a worker
that cannot run the grid (no plugin, other code) stops the run with exit 2 before any work, a
finished grid resumes without work on Dask; the batch-job options (dask-jobqueue) leave the
site's jobqueue.yaml alone where the user gave nothing."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.events import read_events
from bench.store import load_records

pytest.importorskip("distributed")

REPO = Path(__file__).resolve().parents[1]
# 30 training steps, not the smoke profile's 300: where the records land, what is (not) retrained
# and what stops a run do not depend on how long the networks train
GRID = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
        "--methods", "pbn,deterministic", "--set", "train.epochs=30", "--seeds", "0"]


class ExternalCluster:
    """``dask scheduler`` and one ``dask worker``, each started in a directory of its own, the
    worker importing the benchmark from ``code`` (this checkout unless told otherwise). ``shell``:
    started as from a shell that never imported bench (none of its allocator settings), else with
    this process's environment."""

    def __init__(self, tmp: Path, code: Path = REPO, shell: bool = False):
        from bench.allocator import OPT_OUT, child_environment

        self.file = tmp / "scheduler.json"
        env = {**os.environ, "PYTHONPATH": str(code)}
        if shell:
            env = {k: v for k, v in child_environment(env, tuned=False).items() if k != OPT_OUT}
        for d in ("sched_cwd", "worker_cwd"):
            (tmp / d).mkdir(exist_ok=True)
        self.procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                        "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)],
                                       cwd=tmp / "sched_cwd", env=env, stderr=subprocess.DEVNULL)]
        for _ in range(120):
            if self.file.exists() and self.file.stat().st_size:
                break
            time.sleep(0.5)
        self.procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                            str(self.file), "--nthreads", "1", "--no-dashboard", "--name", "ext0"],
                                           cwd=tmp / "worker_cwd", env=env, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(scheduler_file=str(self.file), timeout="60s") as c:
            c.wait_for_workers(1, timeout=120)

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def external(tmp_path):
    clusters = []

    def start(code: Path = REPO, shell: bool = False):
        c = ExternalCluster(tmp_path, code, shell)
        clusters.append(c)
        return c

    yield start
    for c in clusters:
        c.close()


def _map_trainings(out: Path) -> int:
    return sum(len(read_events(p / "events.jsonl", "map_trained")) for p in out.iterdir() if p.is_dir())


@pytest.mark.slow
def test_a_relative_out_lands_in_the_drivers_directory_and_a_finished_grid_resumes_without_work(
        tmp_path, external, monkeypatch, capsys):
    """The worker is started as from a shell (without bench's allocator settings, as a user starts one
    by hand): the run goes on, warned (even under --quiet) that the worker should start with
    `python -m bench worker-env`, and its records name the settings they ran under."""
    from bench.allocator import allocator_settings

    cluster = external(shell=True)
    driver = tmp_path / "driver_cwd"
    driver.mkdir()
    monkeypatch.chdir(driver)
    args = GRID + ["--out", "rel_out", "--executor", "dask", "--scheduler-file", str(cluster.file)]
    assert main(args) == 0
    df = load_records(driver / "rel_out")
    assert len(df) == 2 * 3 and (df["status"] == "ok").all()
    err = capsys.readouterr().err
    theirs = df["cost.allocator"].iloc[0]
    assert (df["cost.allocator"] == theirs).all() and theirs != allocator_settings()
    assert "1 worker(s) did not start with the driver's C allocator settings" in err, err
    assert f": {theirs}\n" in err and "env $(python -m bench worker-env) dask worker" in err
    assert not (tmp_path / "worker_cwd" / "rel_out").exists()  # nothing in the worker's own directory
    assert _map_trainings(driver / "rel_out") == 1
    # the state a restore of kept records leaves: records, no checkpoints -> nothing retrained
    shutil.rmtree(driver / "rel_out" / "toy" / "checkpoints")
    assert main(args) == 0
    assert _map_trainings(driver / "rel_out") == 1
    assert len(load_records(driver / "rel_out")) == 2 * 3


@pytest.mark.slow
def test_a_worker_without_the_grids_plugin_stops_the_run_with_exit_2_before_any_work(
        tmp_path, external, capsys):
    from methods import METHODS, register_method
    from methods.deterministic import Deterministic

    @register_method("driver_only_plugin")
    class DriverOnly(Deterministic):  # noqa: F841 - registered in this process only
        description = "a plugin the workers do not have"

    try:
        cluster = external()
        out = tmp_path / "r"
        code = main(["run", "--suite", "toy", "--profile", "smoke", "--no-report", "--threads", "1",
                     "--methods", "driver_only_plugin", "--seeds", "0", "--out", str(out), "--executor", "dask",
                     "--scheduler-file", str(cluster.file)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "driver_only_plugin" in err and "not installed on this worker" in err
        assert not out.exists() or not list(out.rglob("*.json"))  # no record, nothing sent
    finally:
        METHODS._items.pop("driver_only_plugin", None)


@pytest.mark.slow
def test_a_worker_running_other_code_stops_the_run_with_exit_2(tmp_path, external, capsys):
    other = tmp_path / "other_checkout"
    for pkg in ("bench", "methods", "datasets"):
        shutil.copytree(REPO / pkg, other / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "bench" / "metrics.py", "a") as f:
        f.write("\n# edited in another checkout\n")
    cluster = external(other)
    out = tmp_path / "r"
    assert main(GRID + ["--out", str(out), "--executor", "dask", "--scheduler-file", str(cluster.file)]) == 2
    err = capsys.readouterr().err
    assert "runs other code" in err and str(other) in err
    assert not out.exists() or not list(out.rglob("*.json"))


def test_preflight_sees_a_relative_or_unshared_out_as_another_directory(tmp_path, monkeypatch):
    """The token check itself: a worker whose --out is not the driver's folder fails it."""
    from bench.executors.preflight import worker_report

    token = tmp_path / "shared" / "t.token"
    token.parent.mkdir()
    token.write_text("abc")
    ok = worker_report(str(tmp_path / "shared"), str(tmp_path), str(token), "abc", ["deterministic"])
    assert ok["problems"] == []
    monkeypatch.chdir(tmp_path)
    bad = worker_report("shared", str(tmp_path / "nodata"), "elsewhere/t.token", "abc", ["deterministic", "nope"])
    text = " ".join(bad["problems"])
    assert "absolute" in text and "token" in text and "data root" in text and "nope" in text


def test_batch_options_given_override_the_site_config_and_absent_ones_leave_it():
    from bench.errors import BenchError
    from bench.executors.driver import jobqueue_options, walltime_seconds

    site = {"memory": "32GB", "walltime": "02:00:00", "queue": "gpu", "job-extra-directives": ["--qos=long"],
            "job-script-prologue": ["module load cuda", "source ~/venv/bin/activate"],
            "worker-extra-args": []}
    kw = jobqueue_options("slurm", threads=4, site=site)
    for key in ("memory", "walltime", "queue", "account"):
        assert key not in kw  # the site's value stands
    assert kw["job_extra_directives"] == ["--qos=long"]
    assert kw["job_script_prologue"][:2] == site["job-script-prologue"]  # extended, not replaced
    assert kw["job_cpu"] == 4 and kw["cores"] == 1 and kw["processes"] == 1
    life = kw["worker_extra_args"][kw["worker_extra_args"].index("--lifetime") + 1]
    assert int(life[:-1]) < walltime_seconds("02:00:00")
    kw = jobqueue_options("slurm", threads=1, site=site, memory="4GB", walltime="00:10:00", queue="debug", gpus=1)
    assert (kw["memory"], kw["walltime"], kw["queue"]) == ("4GB", "00:10:00", "debug")
    assert kw["job_extra_directives"] == ["--qos=long", "--gres=gpu:1"]
    assert int(kw["worker_extra_args"][1][:-1]) < 600
    assert jobqueue_options("lsf", threads=2, site={"memory": "1GB"}, account="proj")["project"] == "proj"
    with pytest.raises(BenchError, match="--job-memory"):
        jobqueue_options("pbs", threads=1, site={})
    assert walltime_seconds("1-00:00:00") == 86400 and walltime_seconds("01:30") == 5400
    assert walltime_seconds(None) is None and walltime_seconds("soon") is None


def test_dry_run_prints_the_job_script_and_writes_nothing(tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    out = tmp_path / "r"
    assert main(GRID + ["--out", str(out), "--executor", "slurm", "--job-memory", "2GB", "--job-time", "00:20:00",
                        "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH -t 00:20:00" in script and "--lifetime" in script and "#SBATCH --mem=2G" in script
    from bench.allocator import environment_words  # the worker starts with the allocator settings, whatever sbatch passes on
    from bench.executors import worker_config_words  # and Dask's profiler off

    assert f"OMP_WAIT_POLICY=PASSIVE {' '.join(environment_words())} DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False\n" \
        in script and environment_words() and worker_config_words()
    assert not out.exists()
    assert main(GRID + ["--out", str(out), "--dry-run"]) == 2  # a local run has no job script
    assert main(GRID + ["--out", str(out), "--job-time", "00:20:00"]) == 2  # a batch option on a local run
    assert not out.exists()


_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def _hold_lock(path: Path) -> subprocess.Popen:
    """A process that holds ``path``'s flock and never writes a heartbeat (a node that died on NFS:
    the server still thinks it holds the lock)."""
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_lock_whose_heartbeat_stopped_is_taken_over_and_a_live_one_is_not(tmp_path):
    import json

    from bench.locks import file_lock, holder

    path = tmp_path / "locks" / "cell.lock"
    path.parent.mkdir()
    p = _hold_lock(path)
    try:
        path.write_text(json.dumps({"host": "dead-node", "pid": p.pid, "beat": time.time()}))
        with file_lock(path, wait=False, stale_after_s=60) as held:
            assert held is False  # a fresh heartbeat: the holder is alive, the cell is its
        path.write_text(json.dumps({"host": "dead-node", "pid": p.pid, "beat": time.time() - 600}))
        with file_lock(path, wait=False, stale_after_s=60) as held:
            assert held is True  # ten minutes without a heartbeat: taken over
            info = holder(path)
            assert info["pid"] == os.getpid() and time.time() - info["beat"] < 5
        assert list(path.parent.glob("cell.lock.stale-*"))  # the dead holder's file, moved aside
        assert not list(path.parent.glob("*.takeover"))
    finally:
        p.kill()
        p.wait()


def test_a_holder_keeps_its_heartbeat_fresh(tmp_path):
    from bench.locks import file_lock, holder

    path = tmp_path / "cell.lock"
    with file_lock(path, wait=False, heartbeat_s=0.2) as held:
        assert held
        first = holder(path)["beat"]
        time.sleep(0.7)
        assert holder(path)["beat"] > first


def test_a_file_system_without_flock_is_a_clear_error_before_any_work(tmp_path, monkeypatch, capsys):
    import errno

    import bench.locks as locks
    from bench.errors import BenchError

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(locks.fcntl, "flock", no_flock)
    with pytest.raises(BenchError, match="does not support flock"):
        with locks.file_lock(tmp_path / "x.lock", wait=True):
            pass
    out = tmp_path / "r"
    assert main(GRID + ["--out", str(out)]) == 2
    assert "does not support flock" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".flock-probe*"))


def test_events_of_concurrent_writers_go_to_files_of_their_own_and_read_back_merged(tmp_path):
    import json
    import multiprocessing

    from bench.events import writer_dir

    log = tmp_path / "toy" / "events.jsonl"
    log.parent.mkdir()
    log.write_text(json.dumps({"event": "fitted", "at": "2020-01-01T00:00:00+00:00", "n": -1}) + "\n")  # an older run's
    procs = [multiprocessing.Process(target=_write_events, args=((str(log), i),)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert len(list(writer_dir(log).glob("*.jsonl"))) == 3  # one file per process, no shared appends
    events = read_events(log, "fitted")
    assert sorted(e["n"] for e in events) == [-1] + sorted(100 * i + j for i in range(3) for j in range(50))
    assert events[0]["n"] == -1  # time order


def _write_events(arg):
    from bench.events import log_event

    path, i = arg
    for j in range(50):
        log_event(Path(path), "fitted", n=100 * i + j)
