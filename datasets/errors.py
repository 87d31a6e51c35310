"""The error every loader raises when data is missing or malformed."""
from __future__ import annotations

from pathlib import Path

from bench.errors import BenchError


class DatasetNotFoundError(BenchError):
    def __init__(self, name: str, expected: list[Path], layout: str, how: str, reason: str = "missing"):
        self.name, self.expected = name, expected
        lines = [f"{name}: dataset {reason}. Expected file(s):"]
        lines += [f"  {p}" for p in expected]
        lines += [f"Layout: {layout}", f"How to obtain it: {how}"]
        super().__init__("\n".join(lines))
