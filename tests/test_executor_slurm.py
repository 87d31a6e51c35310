"""``--executor slurm`` end to end on a single-node SLURM on localhost (scripts/slurm_localhost.sh;
.ci/run starts one when it can): the Dask workers are SLURM jobs, the records those of a local
run. Skipped when no SLURM controller answers."""
import shutil
import time
import subprocess

import pytest

from bench.cli import main
from bench.store import load_records


def _slurm_up() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        res = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and any(s in res.stdout for s in ("idle", "mixed", "allocated"))


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not _slurm_up(), reason="no SLURM here (scripts/slurm_localhost.sh starts one)")]


def test_slurm_jobs_run_the_grid_with_the_records_of_a_local_run(tmp_path):
    pytest.importorskip("dask_jobqueue")
    grid = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
            "--methods", "pbn,deterministic,mc_dropout", "--seeds", "0"]
    assert main(grid + ["--out", str(tmp_path / "local")]) == 0
    assert main(grid + ["--out", str(tmp_path / "slurm"), "--executor", "slurm", "--workers", "2",
                        "--slurm-scheduler-host", "127.0.0.1", "--slurm-memory", "2GB", "--slurm-time", "00:20:00",
                        "--slurm-log-dir", str(tmp_path / "logs")]) == 0
    a, b = load_records(tmp_path / "local"), load_records(tmp_path / "slurm")
    assert (b["status"] == "ok").all() and len(b) == len(a) == 3 * 3
    assert b["worker"].str.startswith("dask:SLURMCluster").all()
    cols = sorted(c for c in a.columns if c.startswith("metrics."))
    key = ["method", "seed", "kind", "shift"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    assert a[key].equals(b[key])
    assert a[cols].equals(b[cols])  # identical metrics: same seeds, one thread each
    assert b["job"].str.startswith("slurm:").all()  # each record names its SLURM job


def test_jobs_that_reach_their_wall_time_are_replaced_and_the_grid_finishes(tmp_path):
    """A one-minute wall time and a grid longer than that: workers retire before SLURM kills them
    (``--lifetime``), ``adapt`` submits new jobs, every cell ends ok and each MAP network is
    trained once."""
    pytest.importorskip("dask_jobqueue")
    from bench.events import read_events

    out = tmp_path / "r"
    t0 = time.monotonic()
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
                 "--methods", "pbn,deterministic,mc_dropout,deep_ensemble", "--seeds", "0,1,2", "--out", str(out),
                 "--executor", "slurm", "--workers", "1", "--scheduler-host", "127.0.0.1", "--job-memory", "2GB",
                 "--job-time", "00:01:00", "--job-log-dir", str(tmp_path / "logs")]) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and len(df) == 4 * 3 * 3
    jobs = set(df["job"])
    if time.monotonic() - t0 > 60:  # the grid outlived a job: more than one job ran it
        assert len(jobs) > 1, jobs
    trained = read_events(out / "toy" / "events.jsonl", "map_trained")
    assert sorted((e["model"], e["seed"]) for e in trained) == [("mlp_100", s) for s in range(9)]
