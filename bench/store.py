"""Results store: one JSON file per (suite, method config, model, seed, evaluation set).

Every record is written atomically (temporary file in the same directory, fsync, rename),
so a run killed at any moment leaves only complete records behind. ``load_records``
returns every record under a results directory as one pandas DataFrame.

Layout::

    <results>/<suite>/records/<model>/<method>-<config_hash>/seed<k>/<eval_key>.json
    <results>/<suite>/checkpoints/...        (fitted methods, cached MAP networks)
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

RECORD_VERSION = 1
NESTED_COLUMNS = ("curves", "method_config", "diagnostics", "train_config", "data_config")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True, default=_json_default).encode())


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")


def config_hash(obj: Any, length: int = 10) -> str:
    """Stable short hash of a JSON-able configuration (key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, default=_json_default, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", str(name))


def eval_key(kind: str, shift: str, severity) -> str:
    sev = "na" if severity is None else (f"{float(severity):g}")
    return _safe(f"{kind}-{shift}-{sev}")


class ResultsStore:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # -- paths -------------------------------------------------------------
    def run_dir(self, suite: str, model: str, method: str, cfg_hash: str, seed: int) -> Path:
        return self.root / _safe(suite) / "records" / _safe(model) / f"{_safe(method)}-{cfg_hash}" / f"seed{seed}"

    def checkpoint_dir(self, suite: str) -> Path:
        return self.root / _safe(suite) / "checkpoints"

    def record_path(self, run_dir: Path, kind: str, shift: str, severity) -> Path:
        return run_dir / f"{eval_key(kind, shift, severity)}.json"

    # -- records -----------------------------------------------------------
    def write(self, run_dir: Path, record: dict) -> Path:
        record = {"record_version": RECORD_VERSION, **record}
        path = self.record_path(run_dir, record["kind"], record["shift"], record["severity"])
        atomic_write_json(path, record)
        return path

    def has(self, run_dir: Path, kind: str, shift: str, severity) -> bool:
        return self.record_path(run_dir, kind, shift, severity).exists()

    def iter_records(self, suite: str | None = None) -> Iterable[dict]:
        base = self.root / _safe(suite) if suite else self.root
        for path in sorted(base.rglob("*.json")):
            if "records" not in path.parts:
                continue
            with open(path) as fh:
                yield json.load(fh)


def load_records(results: str | os.PathLike, suite: str | None = None) -> pd.DataFrame:
    """All records under ``results`` (optionally one suite) as a flat DataFrame.

    Nested dictionaries become dotted columns (``metrics.nll``, ``cost.train_time_s``);
    ``curves``, ``method_config`` and ``diagnostics`` stay dictionaries, one column each.
    """
    rows = []
    for rec in ResultsStore(results).iter_records(suite):
        kept = {k: rec.pop(k, None) for k in NESTED_COLUMNS}
        flat = pd.json_normalize(rec, sep=".").iloc[0].to_dict() if rec else {}
        flat.update(kept)
        rows.append(flat)
    return pd.DataFrame(rows)
