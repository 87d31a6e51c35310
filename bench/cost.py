"""Cost measurements: parameters, FLOPs per example, wall time and peak memory."""
from __future__ import annotations

import gc
import os
import threading
import time

import torch

from bench.allocator import allocator_settings, glibc
from bench.measurement import CPU_MEMORY_PROBE, CUDA_MEMORY_PROBE, LEGACY_CPU_PROBE
from bench.provenance import cpu_model


def host_context(load_start: float | None, load_end: float | None, device) -> dict:
    """What a timing needs beside it: the 1-minute load average at the start and the end of the
    measured work (the larger counts), the process's torch threads, the machine's CPUs, their model
    (:func:`bench.provenance.cpu_model`: times on two CPU models are not comparable) and the C
    allocator's settings (:func:`bench.allocator.allocator_settings`: on the CPU they move a conv
    network's step time by a third)."""
    loads = [x for x in (load_start, load_end) if x is not None]
    return {"host_load_1m": max(loads) if loads else None, "torch_threads": torch.get_num_threads(),
            "host_cpus": os.cpu_count(), "cpu_model": cpu_model(), "timed_on": str(getattr(device, "type", device)),
            "allocator": allocator_settings()}


def release_free_memory() -> bool:
    """Hand memory that the process freed but its C allocator still holds back to the system
    (``gc.collect`` then glibc's ``malloc_trim(0)``), so that the resident set size counts live
    memory only. Returns whether the allocator could be asked (glibc); elsewhere a no-op."""
    gc.collect()
    libc = glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def memory_probe(device, legacy: bool = False) -> str:
    """The name of :class:`PeakMemory`'s measurement on ``device`` (``legacy``: before the CPU
    start was trimmed)."""
    if torch.device(device).type == "cuda":
        return CUDA_MEMORY_PROBE
    return LEGACY_CPU_PROBE if legacy else CPU_MEMORY_PROBE


def rss_high_water_mark() -> int | None:
    """The largest resident set size this process has had, in bytes (``VmHWM`` of
    /proc/self/status), or None where the system does not say."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class PeakMemory:
    """Peak memory above the starting level while the block runs, in MiB.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the process's resident set size, exact where
    the block raised the process's high-water mark (Linux's ``VmHWM``, read, never reset: tools
    outside bench read it too), else sampled by a background thread every 5 ms for the first second
    and every 50 ms after (an estimate: allocations shorter than the sampling interval can be
    missed). The starting level is taken after :func:`release_free_memory`: without it, memory that
    an earlier block of the same process (an earlier cell of a grid) freed stays resident in the
    allocator, is reused by this block, and its peak reads as far less than it needs (a fit measured
    at a few KiB after a 7 GiB one).
    Free memory that the trim cannot return (pages still shared with live allocations) can still
    be reused uncounted: after many blocks in one process the figure can read somewhat low.
    """

    def __init__(self, device: torch.device, interval_s: float = 0.005, later_interval_s: float = 0.05,
                 settle_s: float = 1.0):
        # every interval_s for the first settle_s seconds, every later_interval_s after: a fit of an
        # hour polled at 5 ms took about 4 % of a core (its training steps repeat the same peak)
        self.device, self.interval_s = torch.device(device), interval_s
        self.later_interval_s, self.settle_s = max(interval_s, later_interval_s), settle_s
        self.peak_mb, self.samples = float("nan"), 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        import psutil

        release_free_memory()
        self._proc = psutil.Process()
        self._base = self._peak = self._proc.memory_info().rss
        self._hwm = rss_high_water_mark()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        settled = time.perf_counter() + self.settle_s
        while not self._stop.is_set():
            self._peak = max(self._peak, self._proc.memory_info().rss)
            self.samples += 1
            self._stop.wait(self.interval_s if time.perf_counter() < settled else self.later_interval_s)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, self._proc.memory_info().rss)
            hwm = rss_high_water_mark()
            if hwm is not None and self._hwm is not None and hwm > self._hwm:
                self._peak = max(self._peak, hwm)  # a new high of the process: reached in this block
            self.peak_mb = (self._peak - self._base) / 2**20
        return False


def flops_per_example(predict, x: torch.Tensor) -> float:
    """FLOPs of one ``predict(x)`` call divided by the batch size (torch.utils.flop_counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        predict(x)
    return counter.get_total_flops() / len(x)


def synchronize(device: torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    def __init__(self, device):
        self.device = device
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds += time.perf_counter() - self._t0
        return False
