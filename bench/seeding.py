"""Deterministic seeding: the same seed gives the same numbers on CPU."""
from __future__ import annotations

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
