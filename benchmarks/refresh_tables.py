"""Regenerate every results table of README.md and docs/*.md from the stored records.

A generated table sits between two markers that name the command producing it:

    <!-- table: .venv/bin/python benchmarks/vi_tables.py --model lenet_300_100 --table main -->
    | ... the command's markdown output ... |
    <!-- /table -->

This script runs each command (from the repository root) and replaces what is between the
markers with its output, so README and docs always agree with the results store. Tables are
never typed by hand.

    .venv/bin/python benchmarks/refresh_tables.py                 # README.md and docs/**/*.md
    .venv/bin/python benchmarks/refresh_tables.py docs/pbn.md     # one file
    .venv/bin/python benchmarks/refresh_tables.py --check         # exit 1 if any table is stale
    .venv/bin/python benchmarks/refresh_tables.py --only docs/records   # the tables of the kept records
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- table: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def run(cmd: str) -> str:
    argv = shlex.split(cmd)
    if argv and argv[0].endswith("python"):
        argv[0] = sys.executable
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"table command failed ({out.returncode}): {cmd}\n{out.stderr[-2000:]}")
    return out.stdout if out.stdout.endswith("\n") else out.stdout + "\n"


def refresh(path: Path, only: str | None = None) -> bool:
    """Regenerate the tables of ``path`` (those whose command contains ``only``, when given)."""
    text = path.read_text()
    cache: dict[str, str] = {}

    def sub(m):
        cmd = m.group("cmd")
        if only is not None and only not in cmd:
            return m.group(0)
        if cmd not in cache:
            cache[cmd] = run(cmd)
        return m.group(1) + cache[cmd] + m.group(4)

    new = BLOCK.sub(sub, text)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*")
    p.add_argument("--check", action="store_true", help="report stale tables and exit 1, change nothing")
    p.add_argument("--only", default=None, help="only the tables whose command contains this text, e.g. "
                   "'docs/records' (the records kept in git) on a machine whose results/ lacks the others")
    a = p.parse_args(argv)
    files = [Path(f) for f in a.files] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale = []
    for f in files:
        if a.check:
            before = f.read_text()
            changed = refresh(f, a.only)
            if changed:
                stale.append(str(f))
                f.write_text(before)
        elif refresh(f, a.only):
            print(f"updated {f}")
    if stale:
        print("stale tables in: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
