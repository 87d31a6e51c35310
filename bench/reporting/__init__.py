"""Benchmark reports: per suite, a self-contained ``index.html`` (figures embedded), a
``README.md`` with ``figures/*.png`` beside it.

Modules: ``data`` (tidy the record frame), ``tables`` (leaderboard, cost, regression and
failure tables), ``plots`` (figures as PNG bytes), ``document`` / ``render`` (report model,
HTML and markdown output), ``write`` (``write_report``: to disk), ``build`` (``build_report``).
"""
from .build import build_report, suite_document
from .write import write_report

__all__ = ["build_report", "suite_document", "write_report"]
