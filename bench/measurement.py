"""How bench's cost figures were measured, torch-free: the names of the memory probes and the
machine's state a record keeps beside a timing. Reports and the leaderboard read these without
loading torch; bench.cost measures with them."""
from __future__ import annotations

import os

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
HOST_KEYS = ("host_load_1m", "torch_threads", "host_cpus", "timed_on", "allocator")


def host_load() -> float | None:
    """The machine's 1-minute load average (runnable threads), or None where the OS has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None
