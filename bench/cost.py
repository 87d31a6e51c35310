"""Cost measurements: parameters, FLOPs per example, wall time and peak memory."""
from __future__ import annotations

import threading
import time

import torch


class PeakMemory:
    """Peak memory above the starting level while the block runs, in MiB.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the process's resident set size,
    sampled every few milliseconds by a background thread (an estimate: allocations
    shorter than the sampling interval can be missed).
    """

    def __init__(self, device: torch.device, interval_s: float = 0.005):
        self.device, self.interval_s = torch.device(device), interval_s
        self.peak_mb = float("nan")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        import psutil

        self._proc = psutil.Process()
        self._base = self._peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
        else:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, self._proc.memory_info().rss)
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
