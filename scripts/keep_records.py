"""Keep the records behind the README's quick-profile tables in git (docs/records/), so that a grid
longer than one machine's life resumes where it stopped and its tables stay reproducible.

    .venv/bin/python scripts/keep_records.py save SUITE [SUITE ...]     # results -> docs/records
    .venv/bin/python scripts/keep_records.py restore SUITE [SUITE ...]  # docs/records -> results

``save`` copies every record of the suites (``<results>/<suite>/records/**.json``, the store's
layout) without its ``curves`` (entropy histograms, reliability bins, confusion matrices: 2/3 of a
segmentation record's 55 kB) and marks it ``"curves_kept": false``; metrics, costs, diagnostics and
provenance are kept whole, which is what the tables and the leaderboard read. One part of the curves
is kept: the uncertainty maps of a segmentation suite (``curves.maps``, on the few sets the report
draws them for), of the first seed of each configuration, the one the report's map figure shows,
with the suite's ``artifacts/`` (the images and labels those maps are drawn beside), so that
``python -m bench report --results docs/records`` draws them. ``restore`` puts them
back into the results folder without overwriting a record there, so ``bench run`` skips their cells;
a report's calibration and shift plots need the other curves: rerun those cells with ``--force``.
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


_MAPS = "@@maps@@"


def slim(rec: dict, keep_maps: bool = False) -> dict:
    """The record less its curves; with ``keep_maps``, less every curve but its uncertainty maps."""
    out = {k: v for k, v in rec.items() if k != "curves"}
    out["curves_kept"] = False
    maps = (rec.get("curves") or {}).get("maps")
    if keep_maps and maps:
        out["curves"] = {"maps": maps}
        out["curves_kept"] = "maps"
    return out


def encode(rec: dict) -> bytes:
    """One field per line (diff-friendly), the maps' pixel lists on one line each (compact)."""
    maps = (rec.get("curves") or {}).get("maps")
    if not maps:
        return (json.dumps(rec, sort_keys=True, indent=0) + "\n").encode()
    body = json.dumps({**rec, "curves": {"maps": _MAPS}}, sort_keys=True, indent=0)
    return (body.replace(json.dumps(_MAPS), json.dumps(maps, separators=(",", ":")), 1) + "\n").encode()


def first_seeds(cells) -> set[Path]:
    """The run directories (``.../<method>-<hash>/seed<k>``) of each configuration's lowest seed."""
    first: dict[Path, Path] = {}
    for cell in cells:
        best = first.get(cell.parent)
        if best is None or _seed(cell) < _seed(best):
            first[cell.parent] = cell
    return set(first.values())


def _seed(cell: Path) -> int:
    try:
        return int(cell.name.removeprefix("seed"))
    except ValueError:
        return 1 << 30


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
    complete = {}
    for cell, recs in cells.items():
        failed = any(r["status"] == "failed" and r["kind"] == "fit" for _, r in recs)
        if len(recs) < full[data[cell]] and not failed:
            print(f"keep_records: {cell.relative_to(results)} not kept: {len(recs)} of {full[data[cell]]} "
                  f"records (still being evaluated)", file=sys.stderr)
            continue
        complete[cell] = recs
    with_maps = first_seeds(complete)
    for cell, recs in complete.items():
        for path, rec in recs:
            body = encode(slim(rec, keep_maps=cell in with_maps))
            dest = archive / path.relative_to(results)
            if not dest.exists() or dest.read_bytes() != body:
                atomic_write_bytes(dest, body)
            n += 1
    _copy_tree(results / suite / "artifacts", archive / suite / "artifacts", overwrite=True)
    return n


def _copy_tree(src: Path, dest: Path, overwrite: bool) -> None:
    """The suite's artifacts (data summary, the maps' images): small files, copied as they are."""
    if not src.is_dir():
        return
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dest / path.relative_to(src)
        data = path.read_bytes()
        if not target.exists() or (overwrite and target.read_bytes() != data):
            atomic_write_bytes(target, data)


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
    _copy_tree(archive / suite / "artifacts", results / suite / "artifacts", overwrite=False)
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
