"""How bench's cost figures were measured, torch-free: the names of the memory probes, the
machine's state a record keeps beside a timing and how it is taken (:class:`ThreadUsage`: stops of
the process, waits for a core) and judged (the limits). Reports and the leaderboard read these
without loading torch; bench.cost and the harness measure with them."""
from __future__ import annotations

import math
import os
import threading
import time

#: How the CPU peak is measured (:class:`bench.cost.PeakMemory`); stored with every record's cost
CPU_MEMORY_PROBE = "rss-above-trimmed-start"
#: records without a probe, or with this one, were measured above an untrimmed starting level: an
#: underestimate when earlier cells of the process had freed memory that the allocator kept
LEGACY_CPU_PROBE = "rss-above-start"
CUDA_MEMORY_PROBE = "cuda-max-allocated"

#: other work beyond the fit's own threads, in runnable threads (1-minute load average), from which a
#: timing counts as measured on a shared machine (bench.leaderboard.board.shared_machine_notes): an
#: upper bound, not a speed
SHARED_LOAD = 0.5

#: the cost keys bench.cost.host_context adds: the machine's state, not costs of a method (kept out of
#: the cost tables)
HOST_KEYS = ("host_load_1m", "torch_threads", "host_cpus", "cpu_model", "timed_on", "allocator",
             "fit_paused_fraction", "fit_run_delay_fraction", "fit_cores_used")
#: the same, of the MAP networks a method is built from (their trainings' usage, from the MAP cache), and
#: of each record's evaluation set (its prediction and scoring: beside ``predict_time_per_example_s``)
USAGE_KEYS = ("upstream_paused_fraction", "upstream_run_delay_fraction",
              "predict_paused_fraction", "predict_run_delay_fraction")

#: a timing whose process did not run at all (stopped with SIGSTOP or by a job scheduler, its machine
#: suspended) for more than this fraction of its wall time counts the pause: an upper bound of the
#: compute time (bench.leaderboard.board.timing_flags); :class:`PauseWatch` measures it
PAUSED_LIMIT = 0.05
#: a CPU timing whose thread waited, runnable, for a core for more than this fraction of its wall time
#: ran beside other work: an upper bound, not a speed (the load average, sampled at the ends of the
#: fit only, misses work that came and went in between). Calibration: docs/running.md, Outputs
RUN_DELAY_LIMIT = 0.1


def thread_cpu_times() -> tuple[float, float | None]:
    """``(running, waiting)``: the seconds the calling thread has run on a CPU and the seconds it has
    waited, runnable, for one (Linux's ``/proc/thread-self/schedstat``); where the system does not
    say, ``(time.thread_time(), None)``."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return time.thread_time(), None


class PauseWatch:
    """The seconds this process did not run at all: a daemon thread wakes every ``TICK`` seconds; a
    wake-up late by more than ``GAP - TICK`` seconds beyond what the process did meanwhile means the
    process was stopped (SIGSTOP, a scheduler's suspend, a suspended machine) for that excess. What
    it did: the CPU time of all its threads, and, where the system says (Linux), the seconds the
    thread that started the watch (the timed work's) and the watch's own thread ran or waited,
    runnable, for a core (a stopped thread does neither). A thread that waits for input or a GPU
    still wakes on time; a long call that holds the interpreter's lock keeps the watch from waking,
    but runs on, or waits for a core where other work shares the machine: neither counts. Where the
    system does not say, a late wake-up counts only when the CPU time is under a quarter of it. One
    per process (:func:`paused_seconds`), started on first use."""

    TICK = 0.1
    GAP = 0.5

    def __init__(self):
        self.lock = threading.Lock()
        self.total = 0.0
        self.pid = os.getpid()
        self.starter, self.watcher = threading.get_native_id(), -1  # the watch's thread: set when it runs
        self._files: dict[int, int] = {}  # tid -> its open schedstat file
        self.last, self.last_cpu, self.last_busy = time.perf_counter(), time.process_time(), self._busy()
        threading.Thread(target=self._run, name="bench-pause-watch", daemon=True).start()

    def _busy(self) -> dict[int, float]:
        """The seconds the starter and the watch's thread have run or waited, runnable, for a core, by
        thread (``/proc/self/task/<tid>/schedstat``, each file kept open: a read is a few microseconds;
        a thread the system does not say of, e.g. a starter that has ended, left out)."""
        busy = {}
        for tid in (self.starter, self.watcher):
            try:
                if tid not in self._files:
                    self._files[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
                fields = os.pread(self._files[tid], 128, 0).split()
                busy[tid] = (int(fields[0]) + int(fields[1])) / 1e9
            except (OSError, ValueError, IndexError):
                fd = self._files.pop(tid, None)
                if fd is not None:
                    os.close(fd)
        return busy

    def _gap(self, now: float, cpu: float, busy: dict[int, float]) -> float:
        late, ran = now - self.last - self.TICK, cpu - self.last_cpu
        threads = [b - self.last_busy[t] for t, b in busy.items() if t in self.last_busy]
        if not threads:  # the system does not say when a thread waited for a core
            return late - ran if late > self.GAP - self.TICK and ran < late / 4 else 0.0
        # stopped, no thread ran or waited; a long call holding the interpreter's lock keeps the
        # watch from waking, but its thread runs on or waits for a core (threads overlap: the most)
        unexplained = late - max(ran, *threads)
        return unexplained if unexplained > self.GAP - self.TICK else 0.0

    def _run(self):
        with self.lock:
            self.watcher = threading.get_native_id()
            self.last_busy = self._busy()
        while True:
            time.sleep(self.TICK)
            with self.lock:
                now, cpu, busy = time.perf_counter(), time.process_time(), self._busy()
                self.total += self._gap(now, cpu, busy)
                self.last, self.last_cpu, self.last_busy = now, cpu, busy

    def seconds(self) -> float:
        """Paused seconds so far, a pause the watcher has not woken from yet included."""
        with self.lock:
            return self.total + self._gap(time.perf_counter(), time.process_time(), self._busy())


_WATCH: PauseWatch | None = None
_WATCH_LOCK = threading.Lock()


def _after_fork_in_child():
    global _WATCH_LOCK
    _WATCH_LOCK = threading.Lock()  # a fork while another thread held it must not leave it held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def paused_seconds() -> float:
    """:class:`PauseWatch` seconds of this process (a forked child starts its own; threads that ask
    at once share one)."""
    global _WATCH
    with _WATCH_LOCK:
        if _WATCH is None or _WATCH.pid != os.getpid():
            _WATCH = PauseWatch()
        watch = _WATCH
    return watch.seconds()


class ThreadUsage:
    """What a timed block did with its wall time: from construction to :meth:`usage`, the wall
    seconds, the seconds the block's thread ran on a CPU and waited for one (contention), the
    process's CPU seconds (all threads: torch's intra-op pool too) and the seconds the process did
    not run at all (:class:`PauseWatch`). Plain seconds, so usages of a training's pieces (a resume)
    add up."""

    def __init__(self):
        self.s0 = paused_seconds()
        self.t0 = time.perf_counter()
        self.p0 = time.process_time()
        self.run0, self.wait0 = thread_cpu_times()

    def usage(self) -> dict:
        run, wait = thread_cpu_times()
        return {"wall_s": time.perf_counter() - self.t0, "thread_cpu_s": run - self.run0,
                "run_delay_s": None if wait is None or self.wait0 is None else wait - self.wait0,
                "process_cpu_s": time.process_time() - self.p0, "paused_s": paused_seconds() - self.s0}


def add_usage(a: dict | None, b: dict | None) -> dict | None:
    """Two pieces of one timing together (:class:`ThreadUsage`): None when either is unknown; a run
    delay only where both pieces have one."""
    if a is None or b is None:
        return None
    delay = None if a.get("run_delay_s") is None or b.get("run_delay_s") is None else a["run_delay_s"] + b["run_delay_s"]
    return {**{k: a[k] + b[k] for k in ("wall_s", "thread_cpu_s", "process_cpu_s", "paused_s")}, "run_delay_s": delay}


#: a piece of timing that took no time (nothing resumed)
NO_USAGE = {"wall_s": 0.0, "thread_cpu_s": 0.0, "run_delay_s": 0.0, "process_cpu_s": 0.0, "paused_s": 0.0}


def usage_fractions(usage: dict | None, prefix: str) -> dict:
    """A usage as the record keeps it: ``<prefix>_paused_fraction`` (the share of the wall time the
    process did not run), ``_run_delay_fraction`` (the block's thread waited for a core; None where
    the system does not say) and, for fits, ``_cores_used`` (process CPU seconds per wall second).
    None where unknown (a piece measured before bench recorded it)."""
    keys = [f"{prefix}_paused_fraction", f"{prefix}_run_delay_fraction"] + ([f"{prefix}_cores_used"] if prefix == "fit" else [])
    if usage is None or not usage.get("wall_s") or not math.isfinite(usage["wall_s"]):
        return dict.fromkeys(keys)
    wall, delay = usage["wall_s"], usage.get("run_delay_s")
    out = {keys[0]: round(usage["paused_s"] / wall, 4), keys[1]: None if delay is None else round(delay / wall, 4)}
    if prefix == "fit":
        out[keys[2]] = round(usage["process_cpu_s"] / wall, 3)
    return out


def _known(v) -> bool:
    return v is not None and v == v  # None or NaN: the record does not say


def stopped_too_long(paused_fraction) -> bool:
    """A timing that counts a stop of its process (above :data:`PAUSED_LIMIT`; unknown: no)."""
    return _known(paused_fraction) and paused_fraction > PAUSED_LIMIT


def waited_too_long(run_delay_fraction) -> bool:
    """A timing whose thread waited for a core above :data:`RUN_DELAY_LIMIT` (unknown: no)."""
    return _known(run_delay_fraction) and run_delay_fraction > RUN_DELAY_LIMIT


def loaded_machine(load_1m, threads) -> bool:
    """A 1-minute load average :data:`SHARED_LOAD` or more above the timed work's threads (unknown: no)."""
    return _known(load_1m) and _known(threads) and load_1m - threads >= SHARED_LOAD


def timing_caveat(fractions: dict) -> str:
    """What a progress line says after a fit time that counts a stop or waiting for cores
    (:func:`usage_fractions` with prefix ``fit``), else ''."""
    paused, delay = fractions.get("fit_paused_fraction"), fractions.get("fit_run_delay_fraction")
    why = ([f"stopped {paused:.0%} of it"] if stopped_too_long(paused) else []) + \
          ([f"waited {delay:.0%} of it for a core"] if waited_too_long(delay) else [])
    return f" (an upper bound: {', '.join(why)})" if why else ""


#: a side-by-side ratio (``bench perf``) during which processes other than the timing one and its
#: children kept more than this many of its cores busy on average was taken beside other work. The
#: load average cannot say so for a case that starts processes of its own (a busy neighbour, a Dask
#: cluster, ``bench run`` children): it counts them, and their load lingers into the next case
OTHER_CORES_LIMIT = 0.25


def _allowed_cpus_busy_seconds() -> float | None:
    """CPU seconds the cores this process may run on have spent busy since boot (``/proc/stat``:
    user, nice, system, irq, softirq, steal of each such core), or None where the system does not say."""
    try:
        allowed = os.sched_getaffinity(0)
        ticks = os.sysconf("SC_CLK_TCK")
        busy = 0
        with open("/proc/stat") as f:
            for line in f:
                name, *fields = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in allowed:
                    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
                    busy += user + nice + system + irq + softirq + steal
        return busy / ticks
    except (OSError, ValueError, AttributeError):
        return None


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for (theirs and their own)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OtherWork:
    """The cores that processes other than this one and its children kept busy, on average, from
    construction to :meth:`cores` (the machine's busy time on this process's cores less this process
    tree's CPU time; children still running at the end count as others). None where the system does
    not say."""

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.perf_counter(), _allowed_cpus_busy_seconds(), _own_cpu_seconds()

    def cores(self) -> float | None:
        busy, wall = _allowed_cpus_busy_seconds(), time.perf_counter() - self.t0
        if busy is None or self.busy0 is None or wall <= 0:
            return None
        return max(0.0, (busy - self.busy0) - (_own_cpu_seconds() - self.own0)) / wall


def beside_other_work(other_cores) -> bool:
    """A ratio taken while other processes kept above :data:`OTHER_CORES_LIMIT` cores busy (unknown: no)."""
    return _known(other_cores) and other_cores > OTHER_CORES_LIMIT


def host_load() -> float | None:
    """The machine's 1-minute load average (runnable threads), or None where the OS has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None
