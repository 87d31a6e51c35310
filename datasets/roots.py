"""Where datasets live: ``--data-root``, else ``$BENCH_DATA_ROOT``, else ``./data``."""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "BENCH_DATA_ROOT"


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    if data_root:
        return Path(data_root).expanduser()
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path("data")


class RemoveEmptyDirsOnFailure:
    """``with RemoveEmptyDirsOnFailure(root):`` around a download: when it raises, the
    directories it created under ``root`` that are still empty are removed (deepest first), so a
    failed download leaves the data root as it was. Files it left are kept (never delete data)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def _dirs(self) -> set[Path]:
        if not self.root.exists():
            return set()
        return {Path(d) for d, _, _ in os.walk(self.root)}

    def __enter__(self):
        self.existed_root = self.root.exists()
        self.before = self._dirs()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return False
        for d in sorted(self._dirs() - self.before, key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()  # only succeeds when empty
            except OSError:
                pass
        if not self.existed_root:
            try:
                self.root.rmdir()
            except OSError:
                pass
        return False
