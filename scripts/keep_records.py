"""Keep the records behind the README's quick-profile tables in git (docs/records/), so that a grid
longer than one machine's life resumes where it stopped and its tables stay reproducible.

    .venv/bin/python scripts/keep_records.py save SUITE [SUITE ...]     # results -> docs/records
    .venv/bin/python scripts/keep_records.py restore SUITE [SUITE ...]  # docs/records -> results

``save`` copies every record of the suites (``<results>/<suite>/records/**.json``, the store's
layout) without its ``curves`` (entropy histograms, reliability bins, confusion matrices: 2/3 of a
segmentation record's 55 kB) and marks it ``"curves_kept": false``; metrics, costs, diagnostics and
provenance are kept whole, which is what the tables and the leaderboard read. ``restore`` puts them
back into the results folder without overwriting a record there, so ``bench run`` skips their cells;
a report's calibration and shift plots need the curves: rerun those cells with ``--force``.
Checkpoints are never kept: a method whose records are not all there refits from its seed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.store import atomic_write_bytes, read_record  # noqa: E402

ARCHIVE = ROOT / "docs" / "records"


def slim(rec: dict) -> dict:
    out = {k: v for k, v in rec.items() if k != "curves"}
    out["curves_kept"] = False
    return out


def save(results: Path, suite: str, archive: Path = ARCHIVE) -> int:
    """Copy the suite's records, less their curves. A cell (a run directory) is kept whole or not
    at all: one with fewer evaluation records than the suite's other cells on the same data is
    still being evaluated, and its fitted checkpoint is not kept, so a later machine refits it
    and evaluates every set from that one fit (a cell of two fits would mix their records)."""
    src = results / suite / "records"
    if not src.is_dir():
        raise SystemExit(f"keep_records: no records under {src}")
    cells: dict[Path, list[tuple[Path, dict]]] = {}
    for path in sorted(src.rglob("*.json")):
        rec, problem = read_record(path)
        if rec is None:
            print(f"keep_records: {path} skipped ({problem})", file=sys.stderr)
            continue
        cells.setdefault(path.parent, []).append((path, rec))
    data = {cell: json.dumps(recs[0][1].get("data_config"), sort_keys=True) for cell, recs in cells.items()}
    full: dict[str, int] = {}
    for cell, recs in cells.items():
        full[data[cell]] = max(full.get(data[cell], 0), len(recs))
    n = 0
    for cell, recs in cells.items():
        failed = any(r["status"] == "failed" and r["kind"] == "fit" for _, r in recs)
        if len(recs) < full[data[cell]] and not failed:
            print(f"keep_records: {cell.relative_to(results)} not kept: {len(recs)} of {full[data[cell]]} "
                  f"records (still being evaluated)", file=sys.stderr)
            continue
        for path, rec in recs:
            body = (json.dumps(slim(rec), sort_keys=True, indent=0) + "\n").encode()
            dest = archive / path.relative_to(results)
            if not dest.exists() or dest.read_bytes() != body:
                atomic_write_bytes(dest, body)
            n += 1
    return n


def restore(results: Path, suite: str, archive: Path = ARCHIVE) -> int:
    src = archive / suite / "records"
    if not src.is_dir():
        raise SystemExit(f"keep_records: nothing kept for {suite} under {src}")
    n = 0
    for path in sorted(src.rglob("*.json")):
        dest = results / path.relative_to(archive)
        if not dest.exists():
            atomic_write_bytes(dest, path.read_bytes())
            n += 1
    return n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("save", "restore"))
    p.add_argument("suites", nargs="+")
    p.add_argument("--results", default=str(ROOT / "results"))
    p.add_argument("--archive", default=str(ARCHIVE), help="where the records are kept (default: docs/records)")
    a = p.parse_args(argv)
    results, archive = Path(a.results).resolve(), Path(a.archive).resolve()
    for suite in a.suites:
        if a.action == "save":
            print(f"saved {save(results, suite, archive)} record(s) of {suite} to {archive}")
        else:
            print(f"restored {restore(results, suite, archive)} record(s) of {suite} into {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
