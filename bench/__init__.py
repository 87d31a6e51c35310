"""bench: side-by-side benchmark of Bayesian subnetwork uncertainty methods.

The three top-level packages are ``bench`` (harness, metrics, store, reports, CLI),
``methods`` (one plugin module per method) and ``datasets`` (loaders and shifts).
"""
from bench.threads import set_passive_wait_policy as _passive

_passive()  # before anything imports torch: OpenMP threads must not spin (bench/threads.py)

__version__ = "0.1.0"
