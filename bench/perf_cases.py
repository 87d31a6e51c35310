"""The registry of ``bench perf`` cases, apart from their code so that case modules
(``bench.perf``, ``bench.perf_scaleout``) register into it without importing one another."""
from __future__ import annotations

from typing import Callable

#: (model name, input shape) every case runs on, in order
MODELS = [("lenet_300_100", (1, 28, 28)), ("lenet5", (1, 28, 28))]

#: the registered cases, in registration order
REGISTERED: list[Callable] = []


def case(fn):
    """Register ``fn(model_name, in_shape, device, repeats, tmp) -> row(s)`` as a perf case."""
    REGISTERED.append(fn)
    return fn
