"""PeakMemory on a CPU: the peak of a block counts the memory it needs even when an earlier block
of the same process freed memory that the C allocator kept (the second cell of a grid)."""
import pytest
import torch

from bench.cost import PeakMemory, release_free_memory

MIB = 2**20


def _hold(n_chunks: int = 50) -> float:
    """Holds n_chunks tensors of 1000 x 1000 float32 at once; returns their bytes in MiB."""
    chunks = [torch.ones(1000, 1000) for _ in range(n_chunks)]
    return sum(c.numel() * c.element_size() for c in chunks) / MIB


@pytest.mark.skipif(not release_free_memory(), reason="the allocator cannot be trimmed (not glibc)")
def test_peak_counts_memory_reused_from_an_earlier_block():
    # a freed 32 MB block raises glibc's mmap threshold, so the 4 MB chunks below come from the heap
    # and stay resident after they are freed: an untrimmed start would count them as already there
    big = torch.ones(8_000_000)
    del big
    with PeakMemory("cpu") as first:
        held = _hold()
    with PeakMemory("cpu") as second:
        _hold()
    # independent figure: the bytes the block holds at once (190.7 MiB)
    assert first.peak_mb >= 0.9 * held
    assert second.peak_mb >= 0.9 * held, (f"the second block's peak {second.peak_mb:.0f} MiB misses the "
                                          f"{held:.0f} MiB it holds")
    assert second.peak_mb <= 1.5 * held
