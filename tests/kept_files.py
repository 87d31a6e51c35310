"""Reading what a run keeps on disk, shared by the tests of kept predictions (imported as ``kept_files``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def records_under(root: Path) -> dict[str, dict]:
    """Every JSON record under ``root`` (files inside a ``records`` folder), by relative path."""
    return {p.relative_to(root).as_posix(): json.loads(p.read_text())
            for p in sorted(root.rglob("*.json")) if "records" in p.relative_to(root).parts}


def npz_arrays(root: Path, rec: dict) -> dict[str, np.ndarray]:
    """The arrays of the predictions file a record names (read without pickle)."""
    with np.load(root / rec["predictions"]["file"], allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
