"""Tensor memory of a call, measured the same way on a CPU and a GPU.

On CUDA the allocator reports its peak (``torch.cuda.max_memory_allocated``). On a CPU the
process RSS is too coarse for one forward pass (the allocator keeps freed pages), so
:func:`peak_tensor_bytes` follows every tensor storage the call's ATen operators create
(a ``TorchDispatchMode``) and frees it when the last Python tensor using it dies; the peak of
that running total plus the ``resident`` tensors (parameters, the input batch) is the peak
tensor memory, i.e. what ``max_memory_allocated`` would report on a GPU. Storages kept alive
only inside C++ (autograd's saved tensors) are not seen: use it for ``no_grad`` calls, and
:func:`saved_activation_bytes` for what a training step keeps for the backward pass.
"""
from __future__ import annotations

import weakref
from typing import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


class _Tracker(TorchDispatchMode):
    def __init__(self, resident_keys: set):
        super().__init__()
        self.resident = resident_keys
        self.live: dict[tuple[int, int], int] = {}  # storage -> tracked Python tensors alive
        self.current = 0
        self.peak = 0

    def _release(self, key):
        n = self.live.get(key)
        if n is None:
            return
        if n <= 1:
            del self.live[key]
            self.current -= key[1]
        else:
            self.live[key] = n - 1

    def _track(self, t: torch.Tensor):
        if t.device.type == "meta" or t.is_sparse:
            return
        key = _storage_key(t)
        if key in self.resident:
            return
        if key not in self.live:
            self.live[key] = 0
            self.current += key[1]
            self.peak = max(self.peak, self.current)
        self.live[key] += 1
        weakref.finalize(t, self._release, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


def peak_tensor_bytes(fn: Callable[[], object], resident: Iterable[torch.Tensor] = (),
                      device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor storage while ``fn()`` runs, ``resident`` tensors included."""
    resident = [t for t in resident if isinstance(t, torch.Tensor)]
    keys = {_storage_key(t) for t in resident}
    base = sum(k[1] for k in keys)
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = fn()
        torch.cuda.synchronize(device)
        del out
        return base + torch.cuda.max_memory_allocated(device) - before
    tracker = _Tracker(keys)
    with tracker:
        out = fn()
    del out
    return base + tracker.peak


def saved_activation_bytes(fn: Callable[[], torch.Tensor], exclude: Iterable[torch.Tensor] = ()) -> tuple[int, object]:
    """Bytes of the distinct tensor storages autograd saves for the backward pass of ``fn()``
    (parameters in ``exclude`` not counted); returns (bytes, fn's result)."""
    skip = {_storage_key(t) for t in exclude}
    seen: dict[tuple[int, int], int] = {}

    def pack(t):
        key = _storage_key(t)
        if key not in skip:
            seen[key] = key[1]
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def state_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)
