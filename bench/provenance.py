"""Where a result came from: git commit, package versions, device, timestamps."""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


#: tracked paths whose changes do not make a run's code dirty: the prose and the kept records,
#: which bench itself writes into (``bench perf --save docs/records/perf/cpu.json``,
#: ``scripts/keep_records.py save``), so a second run after a first one's save is not "+dirty"
NOT_CODE = ("docs", "README.md")


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """``git rev-parse HEAD`` (``+dirty`` when tracked files other than :data:`NOT_CODE` differ), or
    ``$BENCH_GIT_COMMIT`` when set (bench.device_session sets it from the commit carried to a device,
    where git may be stale)."""
    if os.environ.get("BENCH_GIT_COMMIT"):
        return os.environ["BENCH_GIT_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in NOT_CODE)], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (commit or "unknown") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "torchvision", "numpy", "pandas", "laplace-torch", "backpack-for-pytorch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    from bench.version import __version__

    out["bench"] = __version__
    return out


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}:{torch.get_num_threads()}threads"


def cpu_model() -> str:
    """The CPU's model name and the widest vector extension torch's CPU kernels use here (``AMD EPYC
    (AVX512)``): a CPU fit repeats bit for bit only on one such CPU at one thread count."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    try:
        isa = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        isa = None
    return f"{name} ({isa})" if isa else name


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def resolve_device(name: str) -> torch.device:
    from bench.errors import BenchError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BenchError(f"--device {name}: CUDA is not available on this machine; use --device cpu or auto")
    if name.split(":")[0] not in ("cpu", "cuda"):
        raise BenchError(f"--device {name!r}: valid devices are auto, cpu, cuda, cuda:N")
    return torch.device(name)


#: batch schedulers' job-id variables, in the order they are looked for (a record names its job)
JOB_ID_VARIABLES = {"SLURM_JOB_ID": "slurm", "PBS_JOBID": "pbs", "LSB_JOBID": "lsf", "JOB_ID": "sge"}


def batch_job() -> str | None:
    """``<scheduler>:<job id>`` of the batch job this process runs in (SLURM, PBS, LSF, SGE), or None."""
    for var, kind in JOB_ID_VARIABLES.items():
        if os.environ.get(var):
            return f"{kind}:{os.environ[var]}"
    return None


#: the folders whose Python files are the benchmark's code (plugins elsewhere are added by name)
CODE_PACKAGES = ("bench", "methods", "datasets")


def code_fingerprint(extra_files=()) -> str:
    """A hash of the code a process runs: every ``.py`` file of :data:`CODE_PACKAGES` under this
    checkout (path and contents) plus ``extra_files`` (plugin sources outside them). Two processes
    with the same commit but edited files, or another checkout, differ; the driver of a distributed
    run compares its own with every worker's before sending work. Computed once per process (the
    code it imported at its start, not files edited while it runs)."""
    return _code_fingerprint(tuple(sorted(str(x) for x in extra_files)))


@functools.lru_cache(maxsize=8)
def _code_fingerprint(extra_files: tuple) -> str:
    import hashlib

    h = hashlib.sha256()
    files = sorted(f for pkg in CODE_PACKAGES for f in (REPO / pkg).rglob("*.py") if "__pycache__" not in f.parts)
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    for f in sorted(set(Path(x).resolve() for x in extra_files) - set(files)):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")  # its folder may differ between hosts
    return h.hexdigest()[:16]


def worker_identity() -> dict:
    """The host and worker this code runs on: ``{"host", "worker", "pid"}``, and ``"job"`` (e.g.
    ``slurm:123456``) inside a batch job. Inside a Dask worker the worker is its name and address
    (``dask:<name>@<address>``), else ``local``."""
    import socket

    worker = "local"
    try:
        from distributed import get_worker

        w = get_worker()
        worker = f"dask:{w.name}@{w.address}"
    except (ImportError, ValueError):  # not inside a Dask worker
        pass
    out = {"host": socket.gethostname(), "worker": worker, "pid": os.getpid()}
    job = batch_job()
    if job:
        out["job"] = job
    return out
