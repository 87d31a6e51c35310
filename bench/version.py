"""The benchmark's version (records carry it: ``bench.provenance.versions``), in a module of its own
so that reading it does not import the package's public API (``bench.evaluate``)."""

__version__ = "0.1.0"
