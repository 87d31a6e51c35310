"""Which folders of kept records the repository holds, what is in each, and which pages speak of it.

Every table of README.md and docs/ is generated from records kept in git (``scripts/keep_records.py``
keeps them, packed, as ``<folder>/<suite>/records.jsonl.xz``). This lists each such folder under
``docs/``: its suites with their records and fits (cells: one fit of a configuration on a seed), the
profiles and the days the records were made, what the folder is for (the heading of its
``README.md``), and the pages (README.md, docs/**/*.md) that name it. A folder no page names is kept
but read by no table a reader can find: the table says so.

Run from the repository root:
  .venv/bin/python benchmarks/kept_records.py               # every kept folder under docs/
  .venv/bin/python benchmarks/kept_records.py --root DIR    # another checkout
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
#: this table where a page holds it (refresh_tables' marker block): its rows name every folder, no reading
OWN_TABLE = re.compile(r"<!-- table: [^\n]*kept_records\.py[^\n]* -->\n.*?<!-- /table -->", re.S)


def kept_folders(docs: Path) -> list[Path]:
    """The folders directly under ``docs`` that hold kept records (a pack or a loose record in the store's
    layout, ``<suite>/records/...``), sorted by name."""
    from bench.store import find_packs

    def holds_records(folder: Path) -> bool:
        return bool(find_packs(folder)) or any(folder.glob("*/records/**/*.json"))

    return sorted(f for f in docs.iterdir() if f.is_dir() and holds_records(f))


def folder_summary(folder: Path) -> dict:
    """Per suite of ``folder``: its records, fits (distinct run directories and seeds: a cell), profiles and
    the first and last day a record of it was finished (``finished_at``)."""
    from bench.store import ResultsStore

    suites: dict[str, dict] = {}
    for rec in ResultsStore(folder).iter_records():
        s = suites.setdefault(rec.get("suite") or "?", {"records": 0, "cells": set(), "profiles": set(), "days": set()})
        s["records"] += 1
        s["cells"].add((rec.get("model"), rec.get("method"), rec.get("config_hash"), rec.get("seed")))
        s["profiles"].add(rec.get("profile") or "?")
        if rec.get("finished_at"):
            s["days"].add(str(rec["finished_at"])[:10])
    return {name: {"records": s["records"], "fits": len(s["cells"]), "profiles": sorted(s["profiles"]),
                   "first": min(s["days"], default=""), "last": max(s["days"], default="")}
            for name, s in sorted(suites.items())}


def about(folder: Path) -> str:
    """The heading (first line) of ``folder/README.md`` ("" without one)."""
    readme = folder / "README.md"
    lines = readme.read_text().strip().splitlines() if readme.is_file() else []
    return lines[0].lstrip("# ").strip() if lines else ""


def pages_naming(folder: Path, root: Path, kept: list[Path]) -> list[str]:
    """The pages (README.md and docs/**/*.md, less the READMEs of the ``kept`` folders) that name ``folder``
    by its path from the repository root (``docs/tuning``, not ``docs/tuning-augmented``)."""
    rel = folder.relative_to(root).as_posix()
    pattern = re.compile(rf"(?<![\w./-]){re.escape(rel)}(?![\w-])")
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    notes = {k / "README.md" for k in kept}
    return [p.relative_to(root).as_posix() for p in pages
            if p.is_file() and p not in notes and pattern.search(OWN_TABLE.sub("", p.read_text()))]


def kept_table(root: Path) -> str:
    rows = ["| folder | what it holds | suite: records / fits | profiles | recorded | named in |",
            "| --- | --- | --- | --- | --- | --- |"]
    kept = kept_folders(root / "docs")
    for folder in kept:
        summary = folder_summary(folder)
        counts = "; ".join(f"{s}: {v['records']:,} / {v['fits']:,}" for s, v in summary.items())
        profiles = ", ".join(sorted({p for v in summary.values() for p in v["profiles"]}))
        days = sorted({d for v in summary.values() for d in (v["first"], v["last"]) if d})
        when = f"{days[0]} to {days[-1]}" if len(days) > 1 else (days[0] if days else "not recorded")
        pages = pages_naming(folder, root, kept)
        named = ", ".join(pages) if pages else "**no page**: kept, but no table or text a reader can find reads it"
        rows.append(f"| `{folder.relative_to(root).as_posix()}` | {about(folder) or 'no README.md'} | {counts} | "
                    f"{profiles} | {when} | {named} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(ROOT), help="the repository root (default: this checkout)")
    a = p.parse_args(argv)
    root = Path(a.root).resolve()
    if not (root / "docs").is_dir():
        print(f"kept_records: no docs/ under {root}", file=sys.stderr)
        return 2
    print(kept_table(root), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
