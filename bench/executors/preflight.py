"""Before a distributed run sends work: every worker sees the driver's results directory and data
root, runs the driver's code and knows every method of the grid; otherwise stop with exit 2.

The check runs on every worker present (``client.run``) once at least one has joined; a worker that
joins later (a resubmitted SLURM job) is checked by each task it runs (:func:`check_task`), so a
mismatched late worker fails its cells with the reason instead of writing records from other code.

Seeing the results directory means seeing *the same* one: the driver writes a token file under
``<out>/<suite>/`` and each worker must read it back (a relative path, or a node-local folder of the
same name, does not pass).
"""
from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path

from bench.errors import BenchError

TOKEN_DIR = ".preflight"


def plugin_files(method_names, registry) -> list[str]:
    """Source files of the grid's methods that live outside the benchmark's own packages (plugins):
    part of the code fingerprint, so that an edited plugin on a worker is caught too."""
    from bench.provenance import CODE_PACKAGES, REPO

    out = []
    for name in method_names:
        if name not in registry:
            continue
        f = inspect.getsourcefile(registry.get(name))
        if f is None:
            continue
        f = Path(f).resolve()
        if not any(f.is_relative_to(REPO / pkg) for pkg in CODE_PACKAGES):
            out.append(str(f))
    return out


def load_spec_plugins(plugins) -> dict[str, str]:
    """Load the driver's ``--plugin`` files (and the installed entry-point plugins) in this worker;
    returns ``path -> sha256`` of each file. RuntimeError naming the file when one is missing here
    or fails to import (a worker task's error; the pre-flight reports it before any work)."""
    import hashlib

    from bench.errors import BenchError
    from bench.plugins import load_plugins

    try:
        load_plugins(plugins)
    except BenchError as exc:
        raise RuntimeError(f"{exc} (on this worker: --plugin files must exist at the same absolute path on every "
                           f"worker, e.g. on a shared file system)") from None
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in plugins}


def worker_report(out: str, data_root: str | None, token_file: str, token: str, methods: list[str],
                  plugins=()) -> dict:
    """What one process sees (run on each worker by ``client.run``; also callable locally).
    ``data_root`` None: not checked (the driver has none: a suite that reads no files).
    ``plugins``: the driver's ``--plugin`` files, loaded here first (at the same paths)."""
    from bench.provenance import REPO, code_fingerprint, git_commit, worker_identity
    from methods import METHODS

    problems = []
    plugin_sha = {}
    try:
        plugin_sha = load_spec_plugins(plugins)
    except RuntimeError as exc:
        problems.append(str(exc))
    if not Path(out).is_absolute() or (data_root is not None and not Path(data_root).is_absolute()):
        problems.append("paths sent to workers must be absolute")
    try:
        seen = Path(token_file).read_text()
    except OSError as exc:
        seen = None
        problems.append(f"cannot read the driver's token file {token_file} ({type(exc).__name__}): --out {out} "
                        f"is not the same directory here (use a path on a file system every node mounts)")
    if seen is not None and seen != token:
        problems.append(f"{token_file} holds another run's token: --out {out} is another directory here")
    if data_root is None:  # the driver has no data root either (a synthetic suite): nothing to see
        pass
    elif not Path(data_root).is_dir():
        problems.append(f"data root {data_root} does not exist here")
    elif not os.access(data_root, os.R_OK):
        problems.append(f"data root {data_root} is not readable here")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        problems.append(f"unknown method(s) {', '.join(unknown)} (known here: {', '.join(METHODS.names())}): "
                        f"the plugin is not installed on this worker")
    from bench.allocator import allocator_settings

    code = code_fingerprint(plugin_files(methods, METHODS))
    return {**worker_identity(), "commit": git_commit(), "code": code, "checkout": str(REPO), "cwd": os.getcwd(),
            "problems": problems, "plugins": plugin_sha, "allocator": allocator_settings()}


def check_workers(client, spec, registry, *, say, wait_s: float = 30.0, warn=None) -> dict:
    """Run :func:`worker_report` on every worker of ``client``; BenchError (exit 2) naming each
    worker and what is wrong when one does not match. Waits (saying so every ``wait_s`` seconds)
    until at least one worker has joined. ``warn`` (default: standard error, also under ``--quiet``)
    names the workers that did not start with the C allocator settings of the driver's environment
    (:func:`allocator_warning`).
    Returns the driver's own report."""
    from bench.store import atomic_write_bytes, config_hash

    methods = sorted(spec.plan.methods)
    data_root = spec.data_root if Path(spec.data_root).is_dir() else None  # what the driver sees, workers must
    token = config_hash({"out": spec.out, "at": time.time(), "pid": os.getpid()}, length=16)
    token_file = Path(spec.out) / spec.suite / TOKEN_DIR / f"{token}.token"
    created = [d for d in (token_file.parent, *token_file.parent.parents) if not d.exists()]
    atomic_write_bytes(token_file, token.encode())
    try:
        plugins = tuple(getattr(spec, "plugins", ()))
        mine = worker_report(spec.out, data_root, str(token_file), token, methods, plugins)
        waited = 0.0
        while not client.scheduler_info().get("workers"):
            try:
                client.wait_for_workers(1, timeout=wait_s)
            except (TimeoutError, OSError):
                waited += wait_s
                say(f"no worker has joined after {waited:.0f} s (batch jobs still queued? see squeue / the job "
                    f"logs); waiting")
        reports = client.run(worker_report, spec.out, data_root, str(token_file), token, methods, plugins)
    finally:
        token_file.unlink(missing_ok=True)
        for d in created:  # the folders this check made, deepest first: a refused run leaves nothing
            try:
                d.rmdir()
            except OSError:
                break
    bad = []
    for addr, r in sorted(reports.items()):
        problems = list(r["problems"])
        for path, sha in (mine.get("plugins") or {}).items():
            theirs = (r.get("plugins") or {}).get(path)
            if theirs is not None and theirs != sha:
                problems.append(f"its --plugin {path} is another file than the driver's (sha256 {theirs[:12]} here, "
                                f"{sha[:12]} there)")
        if r["code"] != mine["code"]:
            problems.append(f"runs other code (fingerprint {r['code']}, commit {r['commit']}, checkout {r['checkout']}) "
                            f"than the driver ({mine['code']}, commit {mine['commit']}, checkout {mine['checkout']}): "
                            f"start the workers from the driver's checkout and environment")
        if problems:
            bad.append(f"  worker {addr} on {r['host']}: " + "; ".join(problems))
    if bad:
        raise BenchError("the cluster's workers cannot run this grid (nothing was sent):\n" + "\n".join(bad))
    say(f"pre-flight: {len(reports)} worker(s) see --out and --data-root and run the driver's code "
        f"({mine['code']})")
    from bench.allocator import allocator_settings

    text = allocator_warning(allocator_settings(os.environ), reports)
    if text:
        (warn or (lambda msg: print(msg, file=sys.stderr, flush=True)))(text)
    return mine


def allocator_warning(want: str, reports: dict) -> str | None:
    """The warning for workers whose C allocator settings (``allocator`` of :func:`worker_report`)
    are not ``want``, those of a process started from the driver's environment (what ``python -m bench
    worker-env`` gives; the driver's own may be partial, when bench was imported after threads had
    allocated): a worker started by hand without them (Dask's nanny sets a trim threshold of its own)
    trains a conv network on the CPU with large blocks mapped fresh on every step (bench/allocator.py),
    and its records' timings ran under other settings. None when all agree."""
    odd = [f"  worker {addr} on {r.get('host')}: {r.get('allocator')}" for addr, r in sorted(reports.items())
           if r.get("allocator") != want]
    if not odd:
        return None
    return (f"warning: {len(odd)} worker(s) did not start with the driver's C allocator settings ({want}); on "
            f"the CPU their training steps can take much longer (docs/running.md), and their records' timings "
            f"name other settings:\n" + "\n".join(odd) +
            "\n  start each worker with them: env $(python -m bench worker-env) dask worker ... (docs/scaleout.md)")


def check_task(spec) -> None:
    """Raise RuntimeError when this worker runs other code than the driver that sent ``spec`` (a
    worker that joined after the pre-flight); a task's first step."""
    from bench.provenance import code_fingerprint
    from methods import METHODS

    want = spec.tags.get("code")
    if not want:
        return
    unknown = [m for m in spec.plan.methods if m not in METHODS]
    if unknown:
        raise RuntimeError(f"this worker does not know method(s) {', '.join(unknown)} (plugin not installed here)")
    have = code_fingerprint(plugin_files(sorted(spec.plan.methods), METHODS))
    if have != want:
        raise RuntimeError(f"this worker runs other code (fingerprint {have}) than the driver ({want}); "
                           f"its cells are not run here")
