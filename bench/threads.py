"""How many threads torch may use, so that a run never oversubscribes the cores it has.

Measured here (issue 17): next to one other busy process on 2 cores, torch's default 2 OpenMP
threads trained LeNet-300-100 80x slower than with 1 thread or with ``OMP_WAIT_POLICY=PASSIVE``,
because OpenMP threads spin waiting for a peer the kernel has descheduled. So:

* ``python -m bench`` sets ``OMP_WAIT_POLICY=PASSIVE`` before torch is imported (``bench/__init__``;
  a value the user set is kept);
* the cores are those of the CPU affinity mask (what ``taskset`` / a SLURM allocation / a container
  gives the process), not the machine's count;
* a run with W worker processes gives each ``cores // W`` threads (at least 1): W x threads <= cores;
* ``--threads N`` overrides it.

``python -m bench perf --case thread_policy`` measures the ratios idle and beside a busy process.
"""
from __future__ import annotations

import os


def set_passive_wait_policy() -> None:
    """Idle OpenMP threads sleep instead of spinning (only effective before torch is imported)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Threads for each of ``workers`` processes sharing ``cores``: ``cores // workers``, at least 1."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, workers))


def apply_threads(n: int) -> int:
    """Make torch (and the child processes it starts) use ``n`` threads; returns ``n``."""
    import torch

    n = max(1, int(n))
    torch.set_num_threads(n)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    return n


def default_workers() -> int:
    """Loader workers for file-backed evaluation sets: one per CPU core but one, at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(8, cores - 1))
