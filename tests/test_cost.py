"""PeakMemory on a CPU: the peak of a block counts the memory it needs even when an earlier block
of the same process freed memory that the C allocator kept (the second cell of a grid). Run in a
fresh interpreter: the scenario is built there (in a long-lived test process, earlier tests leave
fragmented free memory that no trim returns, which the block would reuse)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cost import release_free_memory

SCENARIO = r"""
import json, torch
from bench.cost import PeakMemory

def hold(n_chunks=50):
    # n_chunks tensors of 1000 x 1000 float32 held at once; their bytes in MiB
    chunks = [torch.ones(1000, 1000) for _ in range(n_chunks)]
    return sum(c.numel() * c.element_size() for c in chunks) / 2**20

# a freed 32 MB block raises glibc's mmap threshold, so the 4 MB chunks below come from the heap
# and stay resident after they are freed: an untrimmed start would count them as already there
big = torch.ones(8_000_000)
del big
with PeakMemory("cpu") as first:
    held = hold()
with PeakMemory("cpu") as second:
    hold()
print(json.dumps({"held": held, "first": first.peak_mb, "second": second.peak_mb}))
"""


@pytest.mark.skipif(not release_free_memory(), reason="the allocator cannot be trimmed (not glibc)")
def test_peak_counts_memory_reused_from_an_earlier_block():
    out = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True, check=True,
                         env={"OMP_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[1])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    held = r["held"]  # independent figure: the bytes the block holds at once (190.7 MiB)
    assert r["first"] >= 0.9 * held
    assert r["second"] >= 0.9 * held, f"the second block's peak {r['second']:.0f} MiB misses the {held:.0f} MiB it holds"
    assert r["second"] <= 1.5 * held


BRIEF = r"""
import json, mmap
from bench.cost import PeakMemory

size = 256 << 20
# a block whose memory is resident for a moment between two samples (a sampling interval far
# longer than the block): only the process's high-water mark saw it
with PeakMemory("cpu", interval_s=600) as mem:
    m = mmap.mmap(-1, size)
    for i in range(0, size, mmap.PAGESIZE):
        m[i] = 1  # every page written: resident
    m.close()  # unmapped: the resident set falls back before the block ends
print(json.dumps({"held": size / 2**20, "peak": mem.peak_mb}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc: the high-water mark is not read")
def test_a_block_that_raised_the_high_water_mark_counts_memory_the_samples_missed():
    out = subprocess.run([sys.executable, "-c", BRIEF], capture_output=True, text=True, check=True,
                         env={"OMP_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[1])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0.95 * r["held"] <= r["peak"] <= 1.1 * r["held"], r  # 256 MiB of pages written, then unmapped


def test_sampling_slows_after_the_first_second():
    import time

    from bench.cost import PeakMemory

    with PeakMemory("cpu", interval_s=0.01, later_interval_s=0.2, settle_s=0.5) as mem:
        time.sleep(2.5)
    # about 50 samples in the first 0.5 s and 10 in the 2 s after; 250 at 10 ms throughout
    assert 15 <= mem.samples <= 90, mem.samples  # (fewer where a loaded machine oversleeps the waits)
