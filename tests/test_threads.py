"""The thread policy (bench/threads.py): cores from the affinity mask, a passive OpenMP wait policy
set before torch starts, W x threads <= cores, ``--threads`` reaching torch."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main
from bench.store import load_records
from bench.threads import threads_per_worker

ROOT = Path(__file__).resolve().parents[1]


def _py(code: str, env=None, prefix=()):
    res = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.skipif(shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"),
                    reason="needs taskset and CPU affinity")
def test_cores_are_those_of_the_affinity_mask_not_the_machine():
    # taskset pins the child to one core: the machine may have more, the process may use one
    one = _py("from bench.threads import available_cores; print(available_cores())", prefix=("taskset", "-c", "0"))
    assert one == "1"
    assert int(_py("from bench.threads import available_cores; print(available_cores())")) == len(os.sched_getaffinity(0))


def test_bench_sets_a_passive_wait_policy_before_torch_and_keeps_the_users():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import bench, os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"
    assert _py(code, env=env) == "PASSIVE False"  # set, and torch not imported yet
    assert _py(code, env={**env, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE False"


def test_workers_share_the_cores_without_oversubscribing():
    for cores in range(1, 17):
        for workers in range(1, 9):
            t = threads_per_worker(workers, cores)
            assert t >= 1 and (workers * t <= cores or t == 1)
            assert workers * (t + 1) > cores  # and no thread left idle that could be given
    assert threads_per_worker(2, 2) == 1 and threads_per_worker(1, 2) == 2 and threads_per_worker(3, 2) == 1


def test_threads_option_reaches_torch_and_the_records(tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--methods", "deterministic",
                 "--threads", "1", "--out", str(out)]) == 0
    df = load_records(out)
    assert df["device"].str.endswith(":1threads").all()
