"""Torch files written atomically and read safely: ``save_torch`` / ``load_torch`` (weights only,
never running code) and ``load_or_set_aside`` (a damaged file is moved aside and its content
recomputed). Used by the MAP cache, the fitted-method checkpoints and resumable training."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

import torch

from bench.errors import BenchError
from bench.store import atomic_write_bytes, set_aside


def save_torch(obj, path: Path) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


class DamagedCheckpointError(BenchError):
    """A checkpoint that cannot be loaded safely: truncated, not a torch file, or holding objects
    other than tensors and plain Python data (``weights_only``: loading never runs code)."""


def load_torch(path: Path):
    """The object saved at ``path``, loaded with ``weights_only=True``; anything else is a
    :class:`DamagedCheckpointError` naming the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DamagedCheckpointError(f"checkpoint {path} cannot be loaded safely ({type(exc).__name__}: {first})") from exc


def load_or_set_aside(path: Path, apply: Callable | None = None):
    """``load_torch(path)`` (and ``apply(state)``, e.g. ``load_state_dict``), or None after the
    damaged file was set aside: callers then recompute what it held (refit, retrain, restart)."""
    try:
        state = load_torch(path)
        if apply is not None:
            apply(state)
        return state
    except DamagedCheckpointError as exc:
        set_aside(path, f"{exc}; it will be recomputed")
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:  # loads, but not what it should hold
        set_aside(path, f"checkpoint {path} does not match ({type(exc).__name__}: {exc}); it will be recomputed")
    return None
