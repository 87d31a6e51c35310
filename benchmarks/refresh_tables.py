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


def run(cmd: str, in_process: bool = False) -> str:
    argv = shlex.split(cmd)
    if argv and argv[0].endswith("python"):
        argv[0] = sys.executable
    if in_process and argv and argv[0] == sys.executable:
        code, stdout, stderr = _run_in_process(argv[1:])
    else:
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    if code != 0:
        raise SystemExit(f"table command failed ({code}): {cmd}\n{stderr[-2000:]}")
    return stdout if stdout.endswith("\n") else stdout + "\n"


def _run_in_process(args: list[str]) -> tuple[int, str, str]:
    """``python ARGS`` in this interpreter (``-m MODULE ...`` or ``SCRIPT ...``), from the repository
    root, with its stdout and stderr captured: the same code as the subprocess without paying the
    start-up and imports (torch, pandas) once per table -- the check of every kept table (the tests)."""
    import contextlib
    import io
    import os
    import runpy

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd, old_path = sys.argv, os.getcwd(), list(sys.path)
    code = 0
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if args[0] == "-m":
                    sys.argv = [args[1], *args[2:]]
                    sys.path.insert(0, str(ROOT))
                    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
                else:
                    sys.argv = list(args)
                    runpy.run_path(str(ROOT / args[0]), run_name="__main__")
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        os.chdir(old_cwd)
    return code, out.getvalue(), err.getvalue()


def refresh(path: Path, only: str | None = None, in_process: bool = False, cache: dict | None = None) -> bool:
    """Regenerate the tables of ``path`` (those whose command contains ``only``, when given);
    ``cache``: command -> output, shared across files (a command is run once)."""
    text = path.read_text()
    cache = {} if cache is None else cache

    def sub(m):
        cmd = m.group("cmd")
        if only is not None and only not in cmd:
            return m.group(0)
        if cmd not in cache:
            cache[cmd] = run(cmd, in_process)
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
    p.add_argument("--in-process", action="store_true",
                   help="run the python table commands in this interpreter instead of a subprocess each "
                        "(the same code, without the start-up per table: the tests' check)")
    a = p.parse_args(argv)
    files = [Path(f) for f in a.files] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale, cache = [], {}
    for f in files:
        if a.check:
            before = f.read_text()
            changed = refresh(f, a.only, a.in_process, cache)
            if changed:
                stale.append(str(f))
                f.write_text(before)
        elif refresh(f, a.only, a.in_process, cache):
            print(f"updated {f}")
    if stale:
        print("stale tables in: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
