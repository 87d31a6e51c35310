"""An append-only log of the expensive work a run did, and where: ``<results>/<suite>/events.jsonl``.

One JSON line per event (a MAP network trained, a method fitted), with the host, worker and
process that did it. Lines are written with one ``write`` on a file opened with ``O_APPEND``, so
concurrent processes (the workers of a distributed run, two runs on one results directory) never
interleave within a line. The log answers "was this network trained twice?" and "which machine
did this fit?"; records carry the same host and worker fields.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from bench.provenance import now, worker_identity


def log_event(path: Path, event: str, **fields) -> None:
    """Append one event to the log at ``path`` (created with its folder when absent)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"event": event, "at": now(), **worker_identity(), **fields}, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_events(path: Path, event: str | None = None) -> list[dict]:
    """Every event in the log at ``path`` (only those named ``event`` when given); a line that is
    not JSON (a process killed mid-write on a file system without atomic appends) is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event is None or rec.get("event") == event:
            out.append(rec)
    return out
