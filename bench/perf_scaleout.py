"""``python -m bench perf`` cases of issue 17 (scale-out), registered into :mod:`bench.perf`:

* ``thread_policy``: LeNet-300-100 training throughput with the harness's thread policy (passive
  OpenMP wait, threads = cores of the affinity mask) against torch's default (the same threads,
  the OpenMP runtime's default wait policy), idle and with one busy process beside it; each
  measurement in a fresh child process, as the wait policy is read when torch starts;
* ``executor_dask_vs_local``: wall time of an 8-cell smoke grid (``toy``, 4 methods x 2 seeds)
  run by a LocalCluster of one 1-thread worker per core against the local executor with 1 thread
  (the same thread count per cell: target 1.5x, close to 2x on 2 cores for CPU-bound cells; each
  cell trains 2,000 epochs so that the cells, not the start-up, dominate) and
  with its default threads (one process using every core), and the distributed path's overhead
  per cell: the same grid, every cell finished, through a warm 1-worker cluster against the local
  loop (target < 1 s);
* ``allocator``: a conv network's CPU training step (activations of tens of MiB) with bench's glibc
  allocator settings (bench/allocator.py) against glibc's defaults, in the main thread and in a worker
  thread, each in a fresh process (target 1.1x), and the peak resident set that costs (target <= 1.5x).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.perf_cases import MODELS, PEAK_KB_CODE, case

_STEP_CODE = r"""
import os, sys, time, torch
from torch import nn
threads, steps, repeats, kind = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
torch.manual_seed(0)
if kind == "mlp":  # LeNet-300-100 on MNIST-size input
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 300), nn.ReLU(), nn.Linear(300, 100), nn.ReLU(), nn.Linear(100, 10))
    x = torch.randn(128, 1, 28, 28)
else:  # a small CNN on CIFAR-size input (the cost of a resnet_small step is of this kind)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(64, 10))
    x = torch.randn(128, 3, 32, 32)
y = torch.randint(0, 10, (128,))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
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


def _step_rate(threads: int, passive: bool, repeats: int, kind: str) -> float:
    """Training images / s (batch 128) of ``kind`` ("mlp": LeNet-300-100, "cnn": a small CNN on
    32 x 32 inputs) in a fresh process, torch's default wait policy unless ``passive``."""
    steps = 40 if kind == "mlp" else 4
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    res = subprocess.run([sys.executable, "-c", _STEP_CODE, str(threads), str(steps), str(max(3, repeats)), kind],
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
    rows = []
    for kind, net in (("mlp", "LeNet-300-100"), ("cnn", "small CNN 32x32")):
        idle_default, idle_policy = _step_rate(cores, False, repeats, kind), _step_rate(cores, True, repeats, kind)
        idle_one = _step_rate(1, False, repeats, kind)
        with _BusyCore():
            busy_default, busy_policy = _step_rate(cores, False, repeats, kind), _step_rate(cores, True, repeats, kind)
            busy_one = _step_rate(1, False, repeats, kind)
        rows += [(f"passive wait / torch default, busy process beside", busy_policy / busy_default, ">=", 1.0,
                  f"{busy_policy:,.0f} vs {busy_default:,.0f} img/s at {cores} threads; 1 thread: {busy_one:,.0f}", net),
                 (f"passive wait / torch default, idle", idle_policy / idle_default, ">=", 0.5,
                  f"{idle_policy:,.0f} vs {idle_default:,.0f} img/s at {cores} threads; 1 thread: {idle_one:,.0f}", net)]
    return rows


@case
def parallel_ceiling(model_name, in_shape, device, repeats, tmp):
    """What the machine allows: the training throughput of one 1-thread process per core running
    at once, against one such process alone (2.0 on 2 free cores; less on shared or SMT cores). The
    executor's speed-up is read against it."""
    if model_name != MODELS[0][0] or device.type != "cpu":
        return []
    from bench.threads import available_cores

    cores = available_cores()
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    rows = []
    for kind, net, steps in (("mlp", "LeNet-300-100", 200), ("cnn", "small CNN 32x32", 10)):
        def start():
            return subprocess.Popen([sys.executable, "-c", _STEP_CODE, "1", str(steps), str(max(3, repeats)), kind],
                                    stdout=subprocess.PIPE, text=True, env=env)

        solo = float(start().communicate()[0].split()[-1])
        procs = [start() for _ in range(cores)]
        together = sum(float(p.communicate()[0].split()[-1]) for p in procs)
        rows.append((f"{cores} processes at once / 1 process (ceiling)", together / solo, "skip", 0,
                     f"{together:,.0f} vs {solo:,.0f} img/s, 1 thread each", net))
    return rows


_ALLOC_CODE = r"""
import resource, sys, threading, time, torch
from torch import nn
steps, repeats, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
torch.manual_seed(0)
# activations of a segmentation network's size: 16 images at 120 x 160, 32-64 channels (camvid_multilabel's
# presence UNet is of this kind; its tensors are tens of MiB, above glibc's largest own mmap threshold)
net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                    nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 11, 1), nn.AdaptiveAvgPool2d(1),
                    nn.Flatten())
x, y = torch.randn(16, 3, 120, 160), torch.rand(16, 11).round()
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
def run():
    for _ in range(steps):
        opt.zero_grad(); nn.functional.binary_cross_entropy_with_logits(net(x), y).backward(); opt.step()
out = {}
def measure():
    run()
    times, r0 = [], resource.getrusage(resource.RUSAGE_THREAD)
    for _ in range(repeats):
        t0 = time.perf_counter(); run(); times.append((time.perf_counter() - t0) / steps)
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    times.sort()
    out.update(step=times[len(times) // 2], sys=(r1.ru_stime - r0.ru_stime) / (r1.ru_stime - r0.ru_stime + r1.ru_utime - r0.ru_utime))
if where == "thread":  # as a Dask worker trains: in a thread that is not the main one
    t = threading.Thread(target=measure); t.start(); t.join()
else:
    measure()
print("ALLOC", out["step"], out["sys"], peak_kb() / 1024)
"""


def _alloc_step(tuned: bool, where: str, repeats: int) -> tuple[float, float, float]:
    """(seconds a step, the kernel's share of the thread's CPU time, peak RSS MiB) of a conv network's
    training step in a fresh process (bench/allocator.py: glibc reads the settings when it starts),
    with bench's allocator settings or glibc's defaults."""
    from bench.allocator import child_environment

    env = child_environment(os.environ, tuned)
    res = subprocess.run([sys.executable, "-c", PEAK_KB_CODE + _ALLOC_CODE, "2", str(max(3, repeats)), where],
                         capture_output=True, text=True, env=env, timeout=900)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("ALLOC")]
    if res.returncode or not line:
        raise RuntimeError(f"allocator child failed: {res.stderr[-2000:]}")
    step, sys_share, rss = (float(v) for v in line[-1].split()[1:])
    return step, sys_share, rss


@case
def allocator(model_name, in_shape, device, repeats, tmp):
    """A conv network's CPU training step with glibc's allocator as bench sets it (bench/allocator.py)
    against glibc's defaults, in the main thread and in a worker thread, each in a fresh process,
    alternating; with the peak resident set beside (freed blocks stay in the heap)."""
    from bench.allocator import is_glibc

    if model_name != MODELS[0][0] or device.type != "cpu" or not is_glibc():
        return []
    rows = []
    for where, place in (("main", "in the main thread"), ("thread", "in a worker thread")):
        runs = {True: [], False: []}
        for _ in range(2):
            for tuned in (False, True):
                runs[tuned].append(_alloc_step(tuned, where, repeats))
        (d_step, d_sys, d_rss), (t_step, t_sys, t_rss) = (
            tuple(statistics.median(r[i] for r in runs[k]) for i in range(3)) for k in (False, True))
        net = "conv net 16 x 3 x 120 x 160"
        rows += [(f"step time glibc defaults / bench's allocator settings, {place}", d_step / t_step, ">=", 1.1,
                  f"{d_step * 1e3:,.0f} vs {t_step * 1e3:,.0f} ms a step; the kernel's share of the CPU time "
                  f"{d_sys:.0%} vs {t_sys:.0%}", net),
                 (f"peak RSS bench's allocator settings / glibc defaults, {place}", t_rss / d_rss, "<=", 1.5,
                  f"{t_rss:,.0f} vs {d_rss:,.0f} MiB", net)]
    return rows


_GRID = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--methods",
         "deterministic,mc_dropout,mfvi,pbn", "--seeds", "0,1", "--set", "train.epochs=2000"]


def _bench_wall(args: list[str]) -> float:
    # the caller's thread settings do not leak in: "default" must be bench's own default (every core)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=1800,
                         cwd=Path(__file__).resolve().parent.parent, env=env)
    if res.returncode:
        raise RuntimeError(f"bench {' '.join(args)} failed: {res.stderr[-2000:]}")
    return time.perf_counter() - t0


@case
def executor_dask_vs_local(model_name, in_shape, device, repeats, tmp):
    if model_name != MODELS[0][0]:
        return []
    from bench.threads import available_cores

    tmp = Path(tmp)
    cores = available_cores()
    walls: dict[str, list[float]] = {"one": [], "default": [], "dask": []}
    for r in range(max(1, min(repeats, 2))):  # a grid takes a minute or two: at most 2 rounds, alternating
        walls["one"].append(_bench_wall(_GRID + ["--out", str(tmp / f"exec-local-1-{r}"), "--threads", "1"]))
        walls["dask"].append(_bench_wall(_GRID + ["--out", str(tmp / f"exec-dask-{r}"), "--executor", "dask",
                                                  "--workers", str(cores), "--threads", "1"]))
    walls["default"].append(_bench_wall(_GRID + ["--out", str(tmp / "exec-local-n")]))
    one, default, dist = (statistics.median(walls[k]) for k in ("one", "default", "dask"))
    per_cell, start = _overhead_per_cell(tmp / "exec-dask-0")
    return [(f"dask {cores}x1 thread / local 1 thread, 8-cell grid", one / dist, ">=", 1.5,
             f"wall {one:.1f} s vs {dist:.1f} s, median of {len(walls['dask'])} (process start, data, cluster "
             f"start {start:.1f} s included)",
             "mlp_100"),
            (f"dask {cores}x1 thread / local {cores} threads (default)", default / dist, ">=", 1.0,
             f"wall {default:.1f} s (once) vs {dist:.1f} s", "mlp_100"),
            ("dask overhead per cell (s, 1 worker, finished grid)", per_cell, "<", 1.0,
             "8 finished cells through a warm 1-worker cluster minus the local loop, per cell", "mlp_100")]


def _overhead_per_cell(out: Path) -> tuple[float, float]:
    """Seconds per cell that the distributed path adds (a warm cluster of one worker, every cell
    finished: what is left is turning a cell into a task and back), and the cluster's start-up."""
    import torch

    from bench.config import parse_sets, resolve_plan
    from bench.executors.driver import local_cluster, run_grid
    from bench.executors.spec import RunSpec
    from bench.harness import Harness
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from methods import METHODS

    suite = SUITES.get("toy")()
    methods = ["deterministic", "mc_dropout", "mfvi", "pbn"]
    plan = resolve_plan(suite, "smoke", methods, parse_sets(["train.epochs=2000"]), seeds=[0, 1],
                        method_registry=METHODS)
    store, device = ResultsStore(out), torch.device("cpu")
    data = suite.load(Path("data"), plan.data, download=False)
    h = Harness(suite, plan, data, store, device, METHODS, quiet=True)
    h.run()  # warm (imports, first reads)
    t0 = time.perf_counter()
    h.run()
    local = time.perf_counter() - t0
    spec = RunSpec(suite="toy", plan=plan, data_root="data", out=str(out), device="cpu", threads=1, quiet=True)
    t0 = time.perf_counter()
    with local_cluster(1, retries=0, dashboard=False) as client:
        start = time.perf_counter() - t0
        quiet = lambda msg: None  # noqa: E731
        run_grid(client, spec, suite, store, METHODS, device, say=quiet)  # warm: the worker loads the data
        t0 = time.perf_counter()
        run_grid(client, spec, suite, store, METHODS, device, say=quiet)
        dist = time.perf_counter() - t0
    return (dist - local) / len(h.cells()), start
