"""Advisory file locks so that concurrent runs on one results directory share the work.

A cell (suite, model, method config, seed) is run by one process at a time: a second process
that finds it locked skips it (the first one writes its records), or, on a cluster, waits for it.
A MAP network is trained by one process; the others wait for it and load the checkpoint. The
locks are ``flock`` locks on files under ``<results>/<suite>/locks/``: the kernel releases them
when a process dies, so a killed run never leaves a cell locked on a local disk. Where ``fcntl``
does not exist (Windows) locking is off.

Shared file systems: a file system without ``flock`` (Lustre mounted without ``-o flock``, some
FUSE mounts) fails loudly (:func:`check_locking` at the start of a run, and every lock), never
silently. A node that dies on NFS may leave its lock held on the server: the holder writes its
host, pid and a heartbeat into the lock file every :data:`HEARTBEAT_S` seconds, and a lock whose
heartbeat is older than :data:`STALE_AFTER_S` is taken over (the stale file is moved aside, one
taker at a time) instead of blocking or skipping that cell for ever.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from bench.errors import BenchError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

log = logging.getLogger(__name__)

#: a lock's holder rewrites its heartbeat this often (seconds)
HEARTBEAT_S = 30.0
#: a held lock whose heartbeat is older than this (seconds) belongs to a dead process: taken over
STALE_AFTER_S = 300.0
#: how often a waiting process tries again (seconds)
POLL_S = 0.5
#: flock errors that mean "this file system cannot lock", not "someone holds it"
UNSUPPORTED = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF}


def _unsupported(path: Path, exc: OSError) -> BenchError:
    return BenchError(f"cannot lock {path}: {exc.strerror or exc} (errno {exc.errno}): the file system under it "
                      f"does not support flock. Concurrent runs and cluster workers need it: mount Lustre with "
                      f"-o flock, use NFSv4 or a local disk for --out")


def check_locking(folder: Path) -> None:
    """BenchError (exit 2) unless ``flock`` works in ``folder`` (or, while it does not exist, its
    nearest existing parent: the same file system, nothing created); run once at the start of a
    run, before any work. The probe file is removed."""
    if fcntl is None:
        return
    folder = Path(folder).absolute()
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    probe = folder / f".flock-probe-{socket.gethostname()}-{os.getpid()}"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        pass
    except OSError as exc:
        raise _unsupported(probe, exc) from None
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def holder(path: Path) -> dict | None:
    """What the lock file at ``path`` says of its holder: ``{"host", "pid", "beat"}`` (``beat`` the
    holder's last heartbeat, epoch seconds; the file's mtime for a file without one), or None."""
    try:
        text = Path(path).read_text()
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    try:
        info = json.loads(text)
        if not isinstance(info, dict):
            raise ValueError
    except ValueError:  # an older lock file: the pid alone
        info = {"pid": text.strip() or None}
    info.setdefault("beat", mtime)
    return info


def held_here(path: Path, locks_table: Path = Path("/proc/locks")) -> dict | None:
    """The holder (:func:`holder`) of the lock file at ``path`` when a process of this machine holds its
    ``flock`` now, from the kernel's table of locks (Linux's ``/proc/locks``), else None (no lock file, no
    such table, or no holder here: a holder on another node of a shared file system is not seen). Only
    reads: a lock attempt, even one given back at once, could make a run beside skip the cell."""
    try:
        st = os.stat(path)
        lines = Path(locks_table).read_text().splitlines()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev:
            return holder(path) or {}
    return None


def _write_holder(fd: int) -> None:
    blob = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "beat": time.time()}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, blob, 0)
    with contextlib.suppress(OSError):
        os.fsync(fd)  # other NFS clients see the beat when they next open the file


def _take_over(path: Path, ino: int, info: dict, stale_after_s: float) -> None:
    """Move the stale lock file at ``path`` aside when it is still the one judged stale (inode
    ``ino``); one taker at a time (an ``O_EXCL`` marker file), a marker of a dead taker expires."""
    marker = path.with_name(path.name + ".takeover")
    try:
        mfd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        with contextlib.suppress(OSError):
            if time.time() - os.stat(marker).st_mtime > stale_after_s:
                marker.unlink()
        return
    try:
        if os.stat(path).st_ino == ino:
            aside = path.with_name(f"{path.name}.stale-{socket.gethostname()}-{os.getpid()}-{int(time.time())}")
            os.replace(path, aside)
            log.warning("lock %s was held by %s pid %s whose heartbeat stopped %.0f s ago: taken over (%s)", path,
                        info.get("host", "?"), info.get("pid", "?"), time.time() - float(info["beat"]), aside.name)
    except OSError:
        pass
    finally:
        os.close(mfd)
        marker.unlink(missing_ok=True)


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a folder (or a file in the way of one) where the lock file goes, no permission
        raise BenchError(f"cannot open the lock file {path}: {exc.strerror or exc}; a lock is a regular file under "
                         "<results>/<suite>/locks/ (remove what stands there, or make the results folder "
                         "writable)") from None


@contextlib.contextmanager
def file_lock(path: Path, *, wait: bool, heartbeat_s: float | None = None, stale_after_s: float | None = None):
    """Yield True while holding an exclusive lock on ``path`` (created if absent); with
    ``wait=False``, yield False at once when another live process holds it. A lock whose holder's
    heartbeat is older than ``stale_after_s`` is taken over; BenchError when the file system
    cannot lock."""
    if fcntl is None:
        yield True
        return
    path = Path(path)
    heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    stale_after_s = STALE_AFTER_S if stale_after_s is None else stale_after_s
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info, ino = holder(path), os.fstat(fd).st_ino
            os.close(fd)
            if info is not None and time.time() - float(info["beat"]) > stale_after_s:
                _take_over(path, ino, info, stale_after_s)
                continue
            if not wait:
                yield False
                return
            time.sleep(POLL_S)
            continue
        except OSError as exc:
            os.close(fd)
            if exc.errno in UNSUPPORTED:
                raise _unsupported(path, exc) from None
            raise
        try:
            if os.fstat(fd).st_ino != os.stat(path).st_ino:  # moved aside by a taker meanwhile: not the lock
                raise FileNotFoundError
        except FileNotFoundError:
            os.close(fd)
            continue
        break
    _write_holder(fd)
    stop = threading.Event()

    def beat():
        while not stop.wait(heartbeat_s):
            with contextlib.suppress(OSError):
                _write_holder(fd)

    beater = threading.Thread(target=beat, name=f"lock-heartbeat:{path.name}", daemon=True)
    beater.start()
    try:
        yield True
    finally:
        stop.set()
        beater.join()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
