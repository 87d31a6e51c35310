"""An append-only log of the expensive work a run did, and where: ``<results>/<suite>/events.jsonl``.

One JSON line per event (a MAP network trained, a method fitted), with the host, worker and
process that did it. The log answers "was this network trained twice?" and "which machine did
this fit?"; records carry the same host and worker fields.

Each process writes a file of its own, ``<results>/<suite>/events/<host>-<pid>.jsonl``: appends
from several NFS clients to one file can lose or interleave lines (``O_APPEND`` is not atomic
across NFS clients), a file with one writer cannot. :func:`read_events` merges those files (and
the single ``events.jsonl`` that older runs wrote) in time order; the log is named by that path.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bench.provenance import now, worker_identity


def writer_dir(path: Path) -> Path:
    """The folder of per-process files of the log named ``path`` (``.../events.jsonl`` -> ``.../events``)."""
    path = Path(path)
    return path.with_name(path.stem)


def log_event(path: Path, event: str, **fields) -> None:
    """Append one event to this process's file of the log named ``path`` (created when absent)."""
    who = worker_identity()
    own = writer_dir(path) / (re.sub(r"[^A-Za-z0-9_.-]", "_", f"{who['host']}-{who['pid']}") + ".jsonl")
    own.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"event": event, "at": now(), **who, **fields}, default=str) + "\n"
    fd = os.open(own, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_events(path: Path, event: str | None = None) -> list[dict]:
    """Every event of the log named ``path`` (only those named ``event`` when given), from every
    process's file and an older single file, in time order; a line that is not JSON (a process
    killed mid-write) is skipped."""
    path = Path(path)
    files = ([path] if path.is_file() else []) + sorted(writer_dir(path).glob("*.jsonl"))
    out = []
    for f in files:
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and (event is None or rec.get("event") == event):
                out.append(rec)
    out.sort(key=lambda r: str(r.get("at", "")))  # stable: a process's own order within a second
    return out
