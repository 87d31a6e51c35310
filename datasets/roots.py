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
