"""bench.measurement.ThreadUsage tells a timing that counts pauses or waiting for a core from one
that ran: checked against what was done to a child process (stopped with SIGSTOP for a known
time; pinned with a second busy process to one core), and carried across a resume."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.measurement import NO_USAGE, add_usage, thread_cpu_times, usage_fractions

ROOT = Path(__file__).resolve().parents[1]

#: a block of `seconds` wall time under a ThreadUsage, busy (a Python loop, or torch matmuls on
#: `threads` threads) or asleep (waiting for input); prints its fractions and wall time
BLOCK = r"""
import json, sys, time
seconds, kind, threads, size = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "torch":
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(256, 256)
if kind == "gil":  # one long C call that holds the interpreter's lock (a sort of `size` floats)
    import random
    values = [random.random() for _ in range(size)]
from bench.measurement import ThreadUsage, usage_fractions
u = ThreadUsage()
print("ready", flush=True)
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    if kind == "sleep":
        time.sleep(0.05)
    elif kind == "torch":
        a = (a @ a).tanh()
    elif kind == "gil":
        sorted(values)
usage = u.usage()
print(json.dumps({**usage_fractions(usage, "fit"), "wall_s": usage["wall_s"]}), flush=True)
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGSTOP and affinity: Linux")


def block(seconds: float, kind: str = "busy", threads: int = 1, cpu: int | None = None,
          size: int = 4_000_000) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    p = subprocess.Popen([sys.executable, "-c", BLOCK, str(seconds), kind, str(threads), str(size)],
                         stdout=subprocess.PIPE, text=True, env=env, preexec_fn=pre)
    assert p.stdout.readline().strip() == "ready"
    return p


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


def stopped(p: subprocess.Popen, after: float, stop: float) -> dict:
    time.sleep(after)
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(stop)
    os.kill(p.pid, signal.SIGCONT)
    return result(p)


@linux_only
@pytest.mark.parametrize("kind,threads", [("busy", 1), ("torch", 2), ("sleep", 1)])
def test_a_stopped_process_shows_as_paused(kind, threads):
    """A 3 s block whose process is stopped for 1.2 s of it: paused for about 40 % of its wall time,
    whether it computes on one thread or two, or waits for input."""
    f = stopped(block(3.0, kind, threads), 0.6, 1.2)
    assert 0.33 <= f["fit_paused_fraction"] <= 0.45, f


@linux_only
def test_waiting_for_input_or_running_is_not_a_pause():
    """A block that sleeps (waits for input: its thread is off the CPU nearly all the time),
    computes on two threads, or holds the interpreter's lock for seconds (the watch cannot wake, but
    the process's CPU time runs on), unstopped, has no pause."""
    for p in (block(1.5, "sleep"), block(1.5, "torch", 2), block(1.5, "gil")):
        assert result(p)["fit_paused_fraction"] < 0.02


@linux_only
@pytest.mark.skipif(thread_cpu_times()[1] is None, reason="the system does not record run delays")
def test_two_busy_processes_on_one_core_show_as_waiting_for_it():
    """Two busy blocks pinned to the same core each wait for it about half the time: the run delay
    says so, and neither counts as paused."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    a, b = block(2.0, cpu=cpu), block(2.0, cpu=cpu)
    for f in (result(a), result(b)):
        assert 0.3 <= f["fit_run_delay_fraction"] <= 0.9, f  # about half; more if other work shares the core
        assert f["fit_paused_fraction"] < 0.05, f


@linux_only
@pytest.mark.skipif(thread_cpu_times()[1] is None, reason="the system does not record run delays")
def test_a_long_call_holding_the_interpreters_lock_on_a_crowded_core_is_not_a_pause():
    """A block whose long calls hold the interpreter's lock, pinned with four busy processes to one
    core (a fifth of it: its CPU time alone looks like a stopped process to the watch, which cannot
    wake), waits for the core the rest of the time: no pause. Stopped there, it shows the stop."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    crowd = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {cpu})) for _ in range(4)]
    try:
        f = result(block(2.0, "gil", cpu=cpu, size=1_000_000))
        assert f["fit_paused_fraction"] < 0.05 and f["fit_run_delay_fraction"] > 0.5, f
        f = stopped(block(3.0, "gil", cpu=cpu, size=1_000_000), 0.6, 1.2)  # its last sort runs on past 3 s
        assert 0.9 <= f["fit_paused_fraction"] * f["wall_s"] <= 1.5, f
    finally:
        for p in crowd:
            p.kill()
            p.wait()


def test_a_late_wake_up_counts_what_no_thread_ran_or_waited_for():
    """The watch's rule by hand: of a wake-up 1.1 s after the last (1 s late), what neither the CPU
    time nor the busiest watched thread (ran or waited for a core) explains, where it is over 0.4 s;
    without the threads' figures, all of it less the CPU time when that is under a quarter."""
    from bench.measurement import PauseWatch

    w = PauseWatch.__new__(PauseWatch)  # no watch thread: the rule alone
    w.last, w.last_cpu, w.last_busy = 0.0, 0.0, {1: 5.0, 2: 5.0}
    assert w._gap(1.1, 0.1, {1: 5.2, 2: 5.1}) == pytest.approx(0.8)  # stopped for most of it
    assert w._gap(1.1, 0.2, {1: 5.9, 2: 5.3}) == 0.0  # its thread waited for a core (a crowded one)
    assert w._gap(1.1, 0.7, {1: 5.0, 2: 5.0}) == 0.0  # threads ran (other threads: the CPU time)
    assert w._gap(1.1, 0.1, {3: 9.0}) == pytest.approx(0.9)  # no figures of the threads before: CPU time
    assert w._gap(1.1, 0.3, {}) == 0.0  # a quarter ran: no pause said
    assert w._gap(0.45, 0.0, {}) == 0.0  # late by 0.35 s: no pause said


def test_pieces_add_up_and_an_unknown_piece_makes_the_whole_unknown():
    first = {"wall_s": 10.0, "thread_cpu_s": 4.0, "run_delay_s": 1.0, "process_cpu_s": 8.0, "paused_s": 5.0}
    second = {"wall_s": 10.0, "thread_cpu_s": 9.0, "run_delay_s": 0.0, "process_cpu_s": 18.0, "paused_s": 0.0}
    whole = add_usage(first, second)
    assert usage_fractions(whole, "fit") == {"fit_paused_fraction": 0.25, "fit_run_delay_fraction": 0.05,
                                             "fit_cores_used": 1.3}
    assert add_usage(NO_USAGE, first) == first
    assert usage_fractions(add_usage(first, None), "upstream") == {"upstream_paused_fraction": None,
                                                                   "upstream_run_delay_fraction": None}
    # a system that does not record run delays: none for the whole
    assert usage_fractions(add_usage(first, {**second, "run_delay_s": None}), "fit")["fit_run_delay_fraction"] is None


def test_the_progress_line_says_when_a_fit_time_is_an_upper_bound():
    from bench.measurement import timing_caveat

    assert timing_caveat({"fit_paused_fraction": 0.0, "fit_run_delay_fraction": 0.01}) == ""
    assert timing_caveat({"fit_paused_fraction": None, "fit_run_delay_fraction": None}) == ""
    assert timing_caveat({"fit_paused_fraction": 0.3, "fit_run_delay_fraction": 0.2}) == \
        " (an upper bound: stopped 30% of it, waited 20% of it for a core)"


BUSY = "import time, sys\nend = time.process_time() + float(sys.argv[1])\nwhile time.process_time() < end: pass\n"


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's busy time comes from /proc/stat")
def test_other_processes_work_is_seen_and_the_timing_process_trees_is_not():
    """bench.measurement.OtherWork (the perf table's "beside other work"): a busy process that is not
    this process's finished child reads as other work; a child that this process waited for, busy for
    the same CPU time, is this process tree's own work (as the busy neighbours, Dask workers and
    `bench run` children of perf's own cases are), whatever else the machine does meanwhile."""
    from bench.measurement import OtherWork

    # a neighbour still running at the end of the block: another process's work
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY, "60"])
    try:
        time.sleep(0.5)  # started
        w = OtherWork()
        time.sleep(2.0)
        beside = w.cores()
    finally:
        neighbour.kill()
        neighbour.wait()
    assert beside is not None and beside >= 0.3, beside  # a core, less what the rest of the machine took

    # a child waited for inside the block is this process tree's: other work is the machine's busy time
    # less the child's CPU time (as the child itself reports it) and this process's, whatever else runs
    allowed = {f"cpu{c}" for c in os.sched_getaffinity(0)}  # test workers may be pinned to a core

    def machine_busy():  # everything but idle and iowait of the cores this process may use
        total = 0
        for ln in open("/proc/stat"):
            parts = ln.split()
            if parts and parts[0] in allowed:
                fields = [int(v) for v in parts[1:9]]
                total += sum(fields) - fields[3] - fields[4]
        return total / os.sysconf("SC_CLK_TCK")

    busy0, self0, w = machine_busy(), time.process_time(), OtherWork()
    t0 = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", BUSY + "print(time.process_time())", "1.5"], check=True,
                           capture_output=True, text=True)
    other = w.cores() * (time.perf_counter() - t0)
    expected = machine_busy() - busy0 - float(child.stdout) - (time.process_time() - self0)
    assert abs(other - expected) < 0.4, (other, expected)  # counting the child as other work: 1.5 s more
