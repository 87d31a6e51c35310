"""bench.allocator: glibc's allocator keeps large blocks in the heap for reuse (a user's choice kept),
checked by counting the page faults of large allocations in fresh processes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.allocator import (OPT_OUT, SETTINGS, allocator_settings, child_environment, environment_words, is_glibc,
                             tune_allocator)

ROOT = Path(__file__).resolve().parents[1]


def test_tune_puts_every_setting_in_the_environment_and_applies_it():
    env, calls = {"PATH": "/bin"}, []
    applied = tune_allocator(env, mallopt=lambda p, v: calls.append((p, v)) or 1)
    assert calls == [(-8, 1), (-3, 1 << 30), (-1, 128 << 20)]  # M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    assert env == {"PATH": "/bin", "MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
                   "MALLOC_TRIM_THRESHOLD_": str(128 << 20)}
    assert applied == {name: value for name, _, value in SETTINGS}
    # a parameter this glibc refuses is in the environment but not reported as applied
    assert tune_allocator({}, mallopt=lambda p, v: int(p != -3)).keys() == {"MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_"}


@pytest.mark.parametrize("users", [{"MALLOC_ARENA_MAX": "4"}, {"MALLOC_TRIM_THRESHOLD_": "0"},
                                   {OPT_OUT: "default"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}])
def test_a_users_choice_is_kept_and_nothing_else_changed(users):
    env, calls = dict(users), []
    assert tune_allocator(env, mallopt=lambda p, v: calls.append((p, v)) or 1) == {}
    assert env == users and calls == []


def test_tunables_of_other_parts_of_glibc_are_not_a_choice_of_the_allocator():
    env = {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}
    assert tune_allocator(env, mallopt=lambda p, v: 1) and env["MALLOC_ARENA_MAX"] == "1"


@pytest.mark.skipif(not is_glibc(), reason="glibc only")
def test_a_record_names_the_settings_its_timings_ran_under():
    assert allocator_settings({}) == "glibc defaults"
    assert allocator_settings({"MALLOC_ARENA_MAX": "1", "GLIBC_TUNABLES": "glibc.cpu.x=1:glibc.malloc.tcache_count=0"}) \
        == "MALLOC_ARENA_MAX=1 GLIBC_TUNABLES=glibc.malloc.tcache_count=0"
    assert allocator_settings(child_environment({}, tuned=True)) == (f"MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_={1 << 30} "
                                         f"MALLOC_TRIM_THRESHOLD_={128 << 20}")
    # this process: bench was imported (after threads had allocated under pytest-xdist: the note says so)
    assert allocator_settings().startswith(allocator_settings(os.environ))


# 20 blocks of 64 MiB, each written then freed, in a thread started after the process began (as a
# Dask worker trains): the minor page faults of that thread, in 4 KiB pages (transparent huge pages
# off for the process, which would fault a fresh mapping in 2 MiB at a time and hide the count)
_FAULTS = r"""
import ctypes, resource, sys, threading
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
import numpy as np
if sys.argv[1] == "import":
    import bench  # noqa: F401
out = []
def work():
    r0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(20):
        a = np.empty(8 << 20); a.fill(1.0); del a
    out.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - r0)
t = threading.Thread(target=work); t.start(); t.join()
print(out[0])
"""


def _faults(env: dict, how: str = "") -> int:
    res = subprocess.run([sys.executable, "-c", _FAULTS, how], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.split()[-1])


@pytest.mark.skipif(not is_glibc(), reason="glibc only")
def test_large_blocks_are_reused_instead_of_faulted_in_again():
    """16,384 pages a block: with glibc's defaults every one of the 20 blocks faults them in again;
    in a process that bench started (the settings in its environment) or that imported bench, about
    one block's worth in all."""
    default = _faults(child_environment(os.environ, tuned=False))
    inherited = _faults(child_environment(os.environ, tuned=True))
    plain = {k: v for k, v in child_environment(os.environ, tuned=False).items() if k != OPT_OUT}  # bench's choice
    imported = _faults(plain, "import")
    block = (64 << 20) // 4096
    assert default > 15 * block, default
    assert inherited < 3 * block and imported < 3 * block, (default, inherited, imported)


# what a process reports as its settings (cost.allocator of its records): bench imported first, or
# after another thread started and allocated (a Dask worker started by hand imports bench in a task)
_REPORT = r"""
import sys, threading
if sys.argv[1] == "thread-first":
    started, stop = threading.Event(), threading.Event()
    def idle():
        b = bytearray(1 << 20); started.set(); stop.wait()
    t = threading.Thread(target=idle); t.start(); started.wait()
import bench  # noqa: F401
from bench.allocator import allocator_settings
print(allocator_settings())
if sys.argv[1] == "thread-first":
    stop.set(); t.join()
"""


def _report(env: dict, how: str) -> str:
    res = subprocess.run([sys.executable, "-c", _REPORT, how], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.skipif(not is_glibc(), reason="glibc only")
def test_a_process_whose_threads_allocated_before_bench_says_its_settings_are_partial():
    """mallopt after start covers the threads that allocate later only: a record says so, and a
    process started with the settings (``python -m bench worker-env``) reports them whole."""
    plain = {k: v for k, v in child_environment(os.environ, tuned=False).items() if k != OPT_OUT}  # bench's choice
    tuned = allocator_settings(child_environment({}, tuned=True))
    assert _report(plain, "bench-first") == tuned  # one thread when bench applied them: as good as at start
    late = _report(plain, "thread-first")
    assert late.startswith(tuned + " (by mallopt after threads had made 1 arena(s) of their own") and "glibc's" in late
    # the settings the process started with count, not what os.environ says later
    assert _report({**plain, "MALLOC_ARENA_MAX": "2"}, "thread-first") == "MALLOC_ARENA_MAX=2"
    # a worker started with the words of `python -m bench worker-env` runs under this process's settings
    res = subprocess.run([sys.executable, "-m", "bench", "worker-env"], capture_output=True, text=True, env=plain,
                         cwd=ROOT, timeout=120)
    words = res.stdout.split()
    assert res.returncode == 0 and "OMP_WAIT_POLICY=PASSIVE" in words and words[1:] == environment_words() + [
        "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False"], res
    started = {**plain, **dict(w.split("=", 1) for w in words)}
    assert _report(started, "thread-first") == tuned == allocator_settings(os.environ)


def test_worker_words_keep_the_users_choice():
    assert environment_words(child_environment({}, tuned=True)) == [f"{n}={v}" for n, _, v in SETTINGS]
    assert environment_words({"MALLOC_ARENA_MAX": "4", "PATH": "/bin"}) == ["MALLOC_ARENA_MAX=4"]
    assert environment_words({OPT_OUT: "default"}) == [f"{OPT_OUT}=default"]
    assert environment_words({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == ["GLIBC_TUNABLES=glibc.malloc.arena_max=2"]
    assert environment_words({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}) == []
