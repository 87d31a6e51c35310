"""Advisory file locks so that concurrent runs on one results directory share the work.

A cell (suite, model, method config, seed) is run by one process at a time: a second process
that finds it locked skips it (the first one writes its records). A MAP network is trained by
one process; the others wait for it and load the checkpoint. The locks are ``flock`` locks on
files under ``<results>/<suite>/locks/``: the kernel releases them when a process dies, so a
killed run never leaves a cell locked. Where ``fcntl`` does not exist (Windows) locking is off.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None


@contextlib.contextmanager
def file_lock(path: Path, *, wait: bool):
    """Yield True while holding an exclusive lock on ``path`` (created if absent); with
    ``wait=False``, yield False at once when another process holds it."""
    if fcntl is None:
        yield True
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
