"""Benchmark suites. Every public module here registers one suite with ``@register_suite``."""
from bench.registry import import_submodules
from bench.suites.base import PROFILES, SUITES, Suite, register_suite

import_submodules(__name__)

__all__ = ["PROFILES", "SUITES", "Suite", "register_suite"]
