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
