"""bench: side-by-side benchmark of Bayesian subnetwork uncertainty methods.

The three top-level packages are ``bench`` (harness, metrics, store, reports, CLI),
``methods`` (one plugin module per method) and ``datasets`` (loaders and shifts).
``bench.evaluate(...)`` runs the methods on a researcher's own network and data (docs/your_model.md).
"""
from bench.threads import set_passive_wait_policy as _passive

_passive()  # before anything imports torch: OpenMP threads must not spin (bench/threads.py)

from bench.allocator import tune_allocator as _tune_allocator  # noqa: E402

_tune_allocator()  # large tensors reused from the heap, in this process and every one it starts (bench/allocator.py)

from bench.version import __version__  # noqa: E402


def __getattr__(name: str):
    """``bench.evaluate`` (bench/api.py), imported on first use: ``import bench`` stays light (the CLI
    starts without torch's import until it needs it)."""
    if name == "evaluate":
        from bench.api import evaluate

        return evaluate
    raise AttributeError(f"module 'bench' has no attribute {name!r}")


__all__ = ["__version__", "evaluate"]
