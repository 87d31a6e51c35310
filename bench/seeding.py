"""Deterministic seeding: the same seed gives the same numbers on CPU."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def derive_seed(*parts) -> int:
    """A stable 31-bit seed from a tuple of ints/strings (not Python's salted hash)."""
    import hashlib

    blob = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little") & 0x7FFFFFFF


@contextlib.contextmanager
def isolated_rng(device: torch.device | str | None = None):
    """Run a block without changing the caller's random streams (Python, NumPy, torch CPU and the
    block's CUDA device): what the block draws is invisible after it. Used around the training of
    a shared MAP network, so that a method's numbers do not depend on whether the network it builds
    on was trained inside its fit or loaded from the cache (as under a distributed executor)."""
    py, np_state = random.getstate(), np.random.get_state()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    devices = [dev] if dev.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(np_state)
