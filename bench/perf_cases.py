"""The registry of ``bench perf`` cases, apart from their code so that case modules
(``bench.perf``, ``bench.perf_scaleout``) register into it without importing one another."""
from __future__ import annotations

from typing import Callable

#: (model name, input shape) every case runs on, in order
MODELS = [("lenet_300_100", (1, 28, 28)), ("lenet5", (1, 28, 28))]

#: for a child process's code: ``peak_kb()``, the high-water mark of this process image's resident set
#: (VmHWM). ``ru_maxrss`` would not do: Linux carries the parent's resident size over fork + exec into
#: the child (children of a perf process at 8 GB read 8 GB)
PEAK_KB_CODE = """
def peak_kb():
    import resource
    try:
        return int([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1])
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

#: the registered cases, in registration order
REGISTERED: list[Callable] = []


def case(fn):
    """Register ``fn(model_name, in_shape, device, repeats, tmp) -> row(s)`` as a perf case."""
    REGISTERED.append(fn)
    return fn


def unmeasured(row: dict) -> bool:
    """A row that measured nothing: its peer is not installed (op ``skip``, no ratio)."""
    return row["op"] == "skip" and row["ratio"] != row["ratio"]


def merge_rows(old: list[dict], rows: list[dict]) -> tuple[list[dict], list[tuple[str, str]]]:
    """``old`` stored rows with a later run's ``rows`` merged in: a case the run measured replaces
    every row that case stored before (also rows whose measure it no longer reports), except that a
    run which measured nothing for a (case, network) (its peer not installed there) leaves the
    measured rows stored for it in place; the cases it did not run stay as they are; each row keeps
    its own date and commit. Returns the merged rows and the (case, network) pairs kept from ``old``."""
    key = lambda r: (r["case"], r["model"])  # noqa: E731
    new_keys = {key(r) for r in rows}
    keep_old = {k for k in new_keys
                if all(unmeasured(r) for r in rows if key(r) == k)
                and any(not unmeasured(o) for o in old if key(o) == k)}
    new_cases = {r["case"] for r in rows}
    merged = ([r for r in old if r["case"] not in new_cases or key(r) in keep_old]
              + [r for r in rows if key(r) not in keep_old])
    return merged, sorted(keep_old)
