"""glibc's allocator set for training on the CPU: a large tensor is served from the heap and reused,
not mapped fresh from the kernel on every allocation and unmapped when it is freed.

glibc serves an allocation above its mmap threshold (adjusted as the process runs, at most 32 MiB)
with a mapping of its own and unmaps it on free, so every large activation and gradient tensor of a
convolutional network, made again on every training step, faults each of its pages in again (the
kernel zeroes every one). A thread other than the main one (a Dask worker trains in one) allocates
from an arena of 64 MiB heaps, which maps anything larger the same way whatever the threshold.
Measured here (2026-12-02; PBN's training step on camvid_multilabel's presence UNet, batches of 16
images at 120 x 160, one torch thread, in a worker thread, two steps, beside other work on the two
cores): with glibc's defaults 42 % of the step's CPU time was the kernel's (5.6 M page faults) and a
step took 22.7 s; with the settings below 11 % (0.9 M faults) and 15.8 s, at a higher peak resident
set (4.2 GB instead of 3.6: freed blocks stay in the heap for reuse). A Dask worker's lane of PBN
fits on that suite had 57 % of its training thread's CPU time in the kernel (216 M faults).
``python -m bench perf --case allocator`` measures the ratios side by side.

So ``import bench`` (:func:`tune_allocator`):

* puts the three settings in the environment, so that every process a run starts (Dask and batch
  workers, loader processes) has them from its first allocation, when glibc reads them;
* applies them to the running process with ``mallopt`` (a thread that allocated before keeps its
  arena; the thresholds apply to every arena).

A value the user set (any of the three variables, or ``GLIBC_TUNABLES`` naming a malloc tunable) is
kept, and none of the others is changed; ``BENCH_MALLOC=default`` leaves glibc's defaults. Elsewhere
than glibc (macOS, musl) nothing changes. Every record names the settings its timings ran under
(``cost.allocator``, :func:`allocator_settings`).

``mallopt`` after start is as good as the environment only while the process has one thread: a
thread that allocated before keeps its own arena, whose heaps (64 MiB at most) map every larger block
fresh whatever the thresholds. A Dask worker started by hand imports bench in a running worker, so
there ``mallopt`` came too late (measured 2026-12-03: 100 MB blocks in a ``dask worker``'s task thread
were mapped fresh every time with ``mallopt`` applied in the task, reused with the settings in the
worker's environment); and Dask's nanny puts ``MALLOC_TRIM_THRESHOLD_=65536`` in its workers'
environment, which reads as a user's choice. Such workers need the settings when they start:
``env $(python -m bench worker-env) dask worker ...`` (:func:`environment_words`); the pre-flight of a
distributed run names every worker whose settings differ from the driver's, and a record made in a
process where ``mallopt`` came after other threads had made arenas says so (:func:`arena_count`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
from pathlib import Path

#: (environment variable glibc reads at start, ``mallopt`` parameter, value): one arena for every
#: thread (the main one grows without the 64 MiB heap limit), no own mapping below 1 GiB, and the heap's
#: top returned to the kernel only when 128 MiB of it are free
SETTINGS = (("MALLOC_ARENA_MAX", -8, 1),
            ("MALLOC_MMAP_THRESHOLD_", -3, 1 << 30),
            ("MALLOC_TRIM_THRESHOLD_", -1, 128 << 20))
#: the variables of :data:`SETTINGS`
NAMES = frozenset(name for name, _, _ in SETTINGS)
#: ``BENCH_MALLOC=default``: glibc's own settings
OPT_OUT = "BENCH_MALLOC"
#: (settings applied to this process by :func:`tune_allocator`, the arenas it had then: None unknown);
#: None when it applied none (the settings came with the environment, the user chose, or not glibc)
_APPLIED_HERE: tuple[dict, int] | None = None


def is_glibc() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@functools.cache
def glibc():
    """The C library when it is glibc (``mallopt``, ``malloc_trim``), else None."""
    if not is_glibc():
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else None


def user_settings(environ) -> bool:
    """Whether the user chose the allocator's settings (or chose glibc's defaults)."""
    return (environ.get(OPT_OUT, "") == "default" or any(name in environ for name in NAMES)
            or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


def tune_allocator(environ=None, mallopt=None, apply: bool = True) -> dict[str, int]:
    """Put :data:`SETTINGS` in ``environ`` (default ``os.environ``) and, with ``apply``, apply them to
    this process with ``mallopt`` (default glibc's); nothing where the user chose
    (:func:`user_settings`) or off glibc. Returns the settings applied."""
    environ = os.environ if environ is None else environ
    if not apply:
        mallopt = lambda param, value: 0  # noqa: E731 - the environment only (a child's)
    this_process = apply and mallopt is None and environ is os.environ
    if mallopt is None:
        mallopt = getattr(glibc(), "mallopt", None)
    if user_settings(environ) or mallopt is None:
        return {}
    applied = {}
    for name, param, value in SETTINGS:
        environ[name] = str(value)
        if mallopt(param, value) == 1:
            applied[name] = value
    if this_process and applied:
        global _APPLIED_HERE
        _APPLIED_HERE = (applied, arena_count())
    return applied


def arena_count() -> int | None:
    """The arenas glibc's allocator has made in this process (one per thread that allocated while
    more were allowed; ``malloc_info``); None where it cannot be asked."""
    lib = glibc()
    if lib is None or not hasattr(lib, "open_memstream") or not hasattr(lib, "malloc_info"):
        return None
    open_memstream, malloc_info, fclose, free = lib.open_memstream, lib.malloc_info, lib.fclose, lib.free
    open_memstream.restype, fclose.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    malloc_info.argtypes, free.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return None
    try:
        ok = malloc_info(0, stream) == 0
    finally:
        fclose(stream)
    try:
        return ctypes.string_at(buf, size.value).count(b"<heap nr=") if ok else None
    finally:
        free(buf)


def start_environment() -> dict | None:
    """The environment this process started with, which glibc read (``/proc/self/environ``: later
    changes to ``os.environ`` are not in it); None where there is none to read."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def allocator_settings(environ=None) -> str:
    """The allocator settings a timing ran under, as a record states them: the variables set (by
    bench or the user), ``GLIBC_TUNABLES``'s malloc part, or ``glibc defaults``; ``not glibc``.
    Without ``environ``, this process's: what it started with (:func:`start_environment`) and what
    :func:`tune_allocator` applied to it, said to be partial when other threads had arenas by then."""
    if not is_glibc():
        return "not glibc"
    note = ""
    if environ is None:
        environ = start_environment()
        if environ is None:
            environ = os.environ
        elif _APPLIED_HERE is not None:
            applied, arenas = _APPLIED_HERE
            environ = {**environ, **{name: str(value) for name, value in applied.items()}}
            if arenas != 1:
                made = "an unknown number of" if arenas is None else f"{arenas - 1}"
                note = (f" (by mallopt after threads had made {made} arena(s) of their own: a thread allocating "
                        f"there keeps glibc's defaults)")
    parts = [f"{name}={environ[name]}" for name, _, _ in SETTINGS if name in environ]
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    return (" ".join(parts + [f"GLIBC_TUNABLES={':'.join(tunables)}"] * bool(tunables)) or "glibc defaults") + note


def environment_words(environ=None) -> list[str]:
    """``NAME=value`` words that give a process started by hand (a Dask worker: ``env $(python -m bench
    worker-env) dask worker ...``) the allocator settings of ``environ`` (default this process's, where
    ``import bench`` put bench's settings or kept the user's choice) from its start."""
    environ = os.environ if environ is None else environ
    words = [f"{name}={environ[name]}" for name, _, _ in SETTINGS if name in environ]
    if environ.get(OPT_OUT, "") == "default":
        words.append(f"{OPT_OUT}=default")
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        words.append(f"GLIBC_TUNABLES={environ['GLIBC_TUNABLES']}")
    return words


def child_environment(environ, tuned: bool) -> dict:
    """A copy of ``environ`` for a child process that starts with bench's settings (``tuned``: as
    every process a run starts has them) or with glibc's defaults, whatever ``environ`` holds."""
    env = {k: v for k, v in environ.items() if k not in NAMES and k != OPT_OUT}
    if tuned:
        tune_allocator(env, apply=False)
    else:
        env[OPT_OUT] = "default"
    return env
