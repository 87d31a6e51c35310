"""bench: side-by-side benchmark of Bayesian subnetwork uncertainty methods.

The three top-level packages are ``bench`` (harness, metrics, store, reports, CLI),
``methods`` (one plugin module per method) and ``datasets`` (loaders and shifts).
"""

__version__ = "0.1.0"
