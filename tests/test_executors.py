"""The Dask executor (issue 17), on LocalClusters bound to 127.0.0.1: the same records as a local
run, each MAP network trained once, failed tasks recorded and retried on the next run, a worker
killed mid-run, bad executor options rejected with exit 2."""
import json
import os
import signal
import threading
import time

import pytest

from bench.allocator import allocator_settings
from bench.cli import main
from bench.events import read_events
from bench.store import load_records

pytest.importorskip("distributed")

# pbn first: in a local run its fit trains the MAP network the later cells load; on the cluster the
# MAP network is a task of its own, so pbn loads it. The numbers must not notice the difference.
# 30 training steps, not the smoke profile's 300: what is checked here (identical records, which
# networks were trained where, failures recorded) does not depend on how long each network trains.
GRID = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
        "--methods", "pbn,deterministic,mc_dropout,deep_ensemble", "--set", "train.epochs=30", "--seeds", "0,1"]


def _metrics(out):
    df = load_records(out)
    assert (df["status"] == "ok").all(), df.loc[df["status"] != "ok", "error"].tolist()
    cols = sorted(c for c in df.columns if c.startswith("metrics."))
    keyed = {}
    for _, r in df.iterrows():
        keyed[(r["method"], r["config_hash"], r["seed"], r["kind"], r["shift"])] = [r[c] for c in cols]
    return keyed


def _map_trainings(out):
    events = [e for p in out.iterdir() if p.is_dir() for e in read_events(p / "events.jsonl", "map_trained")]
    counts = {}
    for e in events:
        counts[(e["model"], e["seed"])] = counts.get((e["model"], e["seed"]), 0) + 1
    return counts, events


@pytest.mark.slow
def test_dask_grid_gives_the_local_records_and_trains_each_map_network_once(tmp_path, capsys):
    local, dist = tmp_path / "local", tmp_path / "dask"
    assert main(GRID + ["--out", str(local)]) == 0
    assert main(GRID + ["--out", str(dist), "--executor", "dask", "--workers", "2"]) == 0
    # the LocalCluster's workers started with the driver's allocator settings (bench/allocator.py)
    assert "allocator settings" not in capsys.readouterr().err
    # whole, not partial as this process's own can be (bench imported after pytest-xdist's threads allocated)
    assert (load_records(dist)["cost.allocator"] == allocator_settings(os.environ)).all()
    a, b = _metrics(local), _metrics(dist)
    assert a.keys() == b.keys() and len(a) == 4 * 2 * 3  # 4 methods x 2 seeds x (id, shift, validation)
    for k in a:
        assert a[k] == b[k], k  # identical, not close: same seeds, same thread count
    # deep_ensemble (3 members in smoke) of seeds 0 and 1 needs MAP seeds 0..5; pbn and deterministic
    # need 0 and 1 again: every network trained once, by the two workers between them
    counts, events = _map_trainings(dist)
    assert counts == {("mlp_100", s): 1 for s in range(6)}
    df = load_records(dist)
    assert df["worker"].str.startswith("dask:").all() and df["host"].notna().all()
    assert len(set(df["worker"])) == 2  # both workers ran cells
    assert (load_records(local)["worker"] == "local").all()


@pytest.mark.slow
def test_two_cells_on_one_map_network_starting_together_train_it_once(tmp_path):
    # pbn and deterministic of seed 0 are the first two tasks, one per worker, both on MAP seed 0
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
            "--methods", "pbn,deterministic", "--seeds", "0", "--out", str(out), "--executor", "dask", "--workers", "2"]
    assert main(args) == 0
    counts, events = _map_trainings(out)
    assert counts == {("mlp_100", 0): 1}
    assert (load_records(out)["status"] == "ok").all()


class _FailCells:
    """A worker plugin that makes every mc_dropout cell raise in the worker, outside the method's
    own code (as a full scratch disk would), where the harness does not record it itself."""

    name = "fail-mc-dropout"

    def setup(self, worker):
        import bench.harness as H

        original = H.Harness.run_cell

        def failing(self, model, method, cfg, seed):
            if method == "mc_dropout":
                raise OSError("scratch disk full (injected by the test)")
            return original(self, model, method, cfg, seed)

        H.Harness.run_cell = failing


@pytest.mark.slow
def test_a_task_failing_past_its_retries_is_a_failed_cell_and_the_next_run_retries_it(tmp_path):
    from distributed import WorkerPlugin

    from bench.executors.driver import local_cluster

    class Plugin(_FailCells, WorkerPlugin):
        pass

    out = tmp_path / "r"
    args = GRID[:-2] + ["--seeds", "0", "--out", str(out), "--executor", "dask", "--retries", "1"]
    with local_cluster(2, retries=1, dashboard=False) as client:
        client.register_plugin(Plugin())
        assert main(args + ["--scheduler", client.scheduler.address]) == 0
    df = load_records(out)
    failed = df[df["status"] == "failed"]
    assert set(failed["method"]) == {"mc_dropout"} and failed["executor_failure"].all()
    assert failed["error"].iloc[0] == "OSError: scratch disk full (injected by the test)"
    assert failed["worker"].str.startswith("dask:").all() and failed["host"].notna().all()  # where it raised
    assert (df[df["method"] != "mc_dropout"]["status"] == "ok").all()  # the rest of the grid went on
    # the next run (no injected failure) retries the cell; its success replaces the failure record
    assert main(args + ["--workers", "2"]) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and set(df["method"]) == {"pbn", "deterministic", "mc_dropout",
                                                                   "deep_ensemble"}


@pytest.mark.slow
def test_a_worker_killed_mid_run_still_ends_with_every_cell_recorded(tmp_path):
    from bench.executors.driver import local_cluster

    out = tmp_path / "r"
    # long enough cells (mfvi and pbn train for a few seconds) that the kill lands inside one
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
            "--methods", "mfvi,pbn,mc_dropout", "--seeds", "0,1", "--set", "train.epochs=300",
            "--out", str(out), "--executor", "dask", "--retries", "2"]
    with local_cluster(2, retries=2, dashboard=False) as client:
        pids = client.run(os.getpid)  # worker address -> pid
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("code", main(args + ["--scheduler",
                                                                                   client.scheduler.address])))
        t.start()
        lock_dir = out / "toy" / "locks"
        deadline = time.time() + 120
        victim = None
        while time.time() < deadline and victim is None:  # a cell has started on some worker: kill it
            busy = [k for k in client.processing().values() if any(str(x).startswith("cell-") for x in k)]
            if busy and lock_dir.exists():
                addr = next(a for a, k in client.processing().items() if any(str(x).startswith("cell-") for x in k))
                victim = pids[addr]
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.2)
        t.join(timeout=600)
    assert victim is not None and result.get("code") == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and len(df) == 3 * 2 * 3
    assert victim not in set(df["pid"])  # the killed process wrote nothing; its cell ran again elsewhere


def test_executor_options_that_contradict_each_other_exit_2(tmp_path, capsys):
    base = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(tmp_path / "r")]
    assert main(base + ["--workers", "2"]) == 2
    assert "--loader-workers" in capsys.readouterr().err
    assert main(base + ["--executor", "slurm", "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert main(base + ["--executor", "dask", "--scheduler", "tcp://127.0.0.1:9", "--workers", "2"]) == 2
    with pytest.raises(SystemExit) as e:
        main(base + ["--executor", "spark"])
    assert e.value.code == 2
    assert not (tmp_path / "r").exists()  # nothing written


@pytest.mark.slow
def test_a_scheduler_that_does_not_answer_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import socket

    import bench.executors.launch as launch

    monkeypatch.setattr(launch, "CONNECT_TIMEOUT", "2s")  # the run's wait, not what the test checks

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nothing listens on
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(tmp_path / "r"),
            "--executor", "dask", "--scheduler", f"tcp://127.0.0.1:{port}"]
    assert main(args) == 2
    assert "no Dask scheduler answers" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_the_local_clusters_workers_run_without_dasks_profiler():
    """bench.executors.WORKER_CONFIG reaches the LocalCluster's workers through their nannies: no
    stack-sampling callback runs beside their tasks."""
    from bench.executors.driver import local_cluster

    def callbacks(dask_worker):
        return sorted(dask_worker.periodic_callbacks)

    with local_cluster(1, retries=0, dashboard=False) as client:
        (names,) = client.run(callbacks).values()
    assert "heartbeat" in names and "profile" not in names and "profile-cycle" not in names, names
