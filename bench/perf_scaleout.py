"""``python -m bench perf`` cases of issue 17 (scale-out), registered into :mod:`bench.perf`:

* ``thread_policy``: LeNet-300-100 training throughput with the harness's thread policy (passive
  OpenMP wait, threads = cores of the affinity mask) against torch's default (the same threads,
  the OpenMP runtime's default wait policy), idle and with one busy process beside it; each
  measurement in a fresh child process, as the wait policy is read when torch starts;
* ``executor_dask_vs_local``: wall time of an 8-cell smoke grid (``toy``, 4 methods x 2 seeds) run
  by the local executor against a LocalCluster of 2 workers x 1 thread (target close to 2x on 2
  cores for CPU-bound cells), and the distributed path's overhead per cell: the same grid, every
  cell finished, through the warm cluster against through the local loop (target < 1 s).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.perf import MODELS, case

_STEP_CODE = r"""
import os, sys, time, torch
from torch import nn
threads, steps, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
net = nn.Sequential(nn.Flatten(), nn.Linear(784, 300), nn.ReLU(), nn.Linear(300, 100), nn.ReLU(), nn.Linear(100, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
def run():
    for _ in range(steps):
        opt.zero_grad(); nn.functional.cross_entropy(net(x), y).backward(); opt.step()
run()
rates = []
for _ in range(repeats):
    t0 = time.perf_counter(); run(); rates.append(steps * 128 / (time.perf_counter() - t0))
rates.sort()
print("RATE", rates[len(rates) // 2])
"""


def _step_rate(threads: int, passive: bool, repeats: int, steps: int = 40) -> float:
    """Training images / s of LeNet-300-100 (batch 128) in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    res = subprocess.run([sys.executable, "-c", _STEP_CODE, str(threads), str(steps), str(max(3, repeats))],
                         capture_output=True, text=True, env=env, timeout=900)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RATE")]
    if res.returncode or not line:
        raise RuntimeError(f"thread-policy child failed: {res.stderr[-2000:]}")
    return float(line[-1].split()[1])


class _BusyCore:
    """One other process spinning on the CPU, as a user's other work would."""

    def __enter__(self):
        self.p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()


@case
def thread_policy(model_name, in_shape, device, repeats, tmp):
    if model_name != MODELS[0][0] or device.type != "cpu":
        return []
    from bench.threads import available_cores

    cores = available_cores()
    idle_default, idle_policy = _step_rate(cores, False, repeats), _step_rate(cores, True, repeats)
    with _BusyCore():
        busy_default, busy_policy = _step_rate(cores, False, repeats), _step_rate(cores, True, repeats)
        busy_one = _step_rate(1, False, repeats)
    return [("thread policy / torch default, 1 busy process", busy_policy / busy_default, ">=", 2.0,
             f"{busy_policy:,.0f} vs {busy_default:,.0f} img/s, {cores} thread(s); 1 thread, default wait: "
             f"{busy_one:,.0f} img/s", "lenet_300_100"),
            ("thread policy / torch default, idle", idle_policy / idle_default, ">=", 0.9,
             f"{idle_policy:,.0f} vs {idle_default:,.0f} img/s, {cores} thread(s)", "lenet_300_100")]


_GRID = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--methods",
         "deterministic,mc_dropout,mfvi,pbn", "--seeds", "0,1", "--set", "train.epochs=400"]


def _bench_wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=1800,
                         cwd=Path(__file__).resolve().parent.parent)
    if res.returncode:
        raise RuntimeError(f"bench {' '.join(args)} failed: {res.stderr[-2000:]}")
    return time.perf_counter() - t0


@case
def executor_dask_vs_local(model_name, in_shape, device, repeats, tmp):
    if model_name != MODELS[0][0]:
        return []
    tmp = Path(tmp)
    walls_local, walls_dask = [], []
    for r in range(max(1, min(repeats, 2))):  # a grid takes a minute: at most 2 rounds, alternating
        walls_local.append(_bench_wall(_GRID + ["--out", str(tmp / f"exec-local-{r}")]))
        walls_dask.append(_bench_wall(_GRID + ["--out", str(tmp / f"exec-dask-{r}"), "--executor", "dask",
                                               "--workers", "2", "--threads", "1"]))
    local, dist = statistics.median(walls_local), statistics.median(walls_dask)
    per_cell, start = _overhead_per_cell(tmp / "exec-dask-0")
    cells = 8
    return [("dask 2 workers / local executor, 8-cell grid", local / dist, ">=", 1.5,
             f"wall {local:.1f} s vs {dist:.1f} s (process start, data, cluster start {start:.1f} s included)",
             "mlp_100"),
            ("dask overhead per cell (s, finished grid)", per_cell, "<", 1.0,
             f"{cells} finished cells through a warm 2-worker cluster vs the local loop", "mlp_100")]


def _overhead_per_cell(out: Path) -> tuple[float, float]:
    """Seconds per cell that the distributed path adds (cluster warm, every cell finished: what is
    left is turning a cell into a task and back), and the cluster's start-up time."""
    from bench.config import parse_sets, resolve_plan
    from bench.executors.driver import local_cluster, run_grid
    from bench.executors.spec import RunSpec
    from bench.harness import Harness
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from methods import METHODS
    import torch

    suite = SUITES.get("toy")()
    methods = ["deterministic", "mc_dropout", "mfvi", "pbn"]
    plan = resolve_plan(suite, "smoke", methods, parse_sets(["train.epochs=400"]), seeds=[0, 1], method_registry=METHODS)
    store, device = ResultsStore(out), torch.device("cpu")
    data = suite.load(Path("data"), plan.data, download=False)
    h = Harness(suite, plan, data, store, device, METHODS, quiet=True)
    t0 = time.perf_counter()
    h.run()
    local = time.perf_counter() - t0
    spec = RunSpec(suite="toy", plan=plan, data_root="data", out=str(out), device="cpu", threads=1, quiet=True)
    t0 = time.perf_counter()
    with local_cluster(2, retries=0, dashboard=False) as client:
        start = time.perf_counter() - t0
        quiet = lambda msg: None  # noqa: E731
        run_grid(client, spec, suite, store, METHODS, device, say=quiet)  # warm: each worker loads the data
        t0 = time.perf_counter()
        run_grid(client, spec, suite, store, METHODS, device, say=quiet)
        dist = time.perf_counter() - t0
    cells = len(h.cells())
    return (dist - local) / cells, start
