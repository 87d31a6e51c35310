"""Regenerate every results table (and figure) of README.md and docs/*.md from the stored records.

A generated table sits between two markers that name the command producing it:

    <!-- table: .venv/bin/python benchmarks/vi_tables.py --model lenet_300_100 --table main -->
    | ... the command's markdown output ... |
    <!-- /table -->

This script runs each command (from the repository root) and replaces what is between the
markers with its output, so README and docs always agree with the results store. Tables are
never typed by hand.

A generated figure is a one-line marker naming the command that writes it (the command's
arguments ending in .png or .svg are the figures it writes, kept in git beside the page):

    <!-- figure: .venv/bin/python -m bench leaderboard ... --pareto-figure docs/figures/x.png -->

Each such command is run too; --check runs it with its figures written to a temporary folder
instead and compares their bytes with the committed files (figure commands give the same bytes
for the same records).

    .venv/bin/python benchmarks/refresh_tables.py                 # README.md and docs/**/*.md
    .venv/bin/python benchmarks/refresh_tables.py docs/pbn.md     # one file
    .venv/bin/python benchmarks/refresh_tables.py --check         # exit 1 if any table or figure is stale
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
FIGURE = re.compile(r"^<!-- figure: (?P<cmd>.+?) -->$", re.M)
FIGURE_SUFFIXES = (".png", ".svg")


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


def figure_commands(path: Path, only: str | None = None) -> list[str]:
    """The commands of the figure markers of ``path`` (those containing ``only``, when given)."""
    return [c for c in FIGURE.findall(path.read_text()) if only is None or only in c]


def make_figures(cmd: str, in_process: bool = False, into: Path | None = None) -> dict[str, bytes]:
    """Run a figure command; figure path named in it (relative to the repository root) -> the bytes
    written. ``into``: a folder the figures are written to instead of their own paths (a check
    that leaves the committed files alone)."""
    argv = shlex.split(cmd)
    named = [i for i, a in enumerate(argv) if a.endswith(FIGURE_SUFFIXES)]
    if not named:
        raise SystemExit(f"figure command names no .png or .svg file: {cmd}")
    written = {}
    for k, i in enumerate(named):
        written[argv[i]] = ROOT / argv[i] if into is None else Path(into) / f"{k}-{Path(argv[i]).name}"
        argv[i] = str(written[argv[i]])
    run(shlex.join(argv), in_process)
    return {name: p.read_bytes() for name, p in written.items()}


def refresh_figures(path: Path, only: str | None = None, in_process: bool = False, check: bool = False,
                    done: set | None = None) -> list[str]:
    """Regenerate (``check``: compare) the figures of ``path``'s figure markers; returns the figures
    that changed (``check``: that are stale or missing). ``done``: commands already run."""
    import tempfile

    done = set() if done is None else done
    changed = []
    for cmd in figure_commands(path, only):
        if cmd in done:
            continue
        done.add(cmd)
        names = [a for a in shlex.split(cmd) if a.endswith(FIGURE_SUFFIXES)]
        before = {n: (ROOT / n).read_bytes() if (ROOT / n).exists() else None for n in names}
        if check:
            with tempfile.TemporaryDirectory() as tmp:
                after = make_figures(cmd, in_process, into=Path(tmp))
        else:
            after = make_figures(cmd, in_process)
        changed += [n for n in names if after[n] != before[n]]
    return changed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*")
    p.add_argument("--check", action="store_true", help="report stale tables and figures and exit 1, change nothing")
    p.add_argument("--only", default=None, help="only the tables whose command contains this text, e.g. "
                   "'docs/records' (the records kept in git) on a machine whose results/ lacks the others")
    p.add_argument("--in-process", action="store_true",
                   help="run the python table commands in this interpreter instead of a subprocess each "
                        "(the same code, without the start-up per table: the tests' check)")
    a = p.parse_args(argv)
    files = [Path(f) for f in a.files] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    stale, stale_figures, cache, done = [], [], {}, set()
    for f in files:
        if a.check:
            before = f.read_text()
            changed = refresh(f, a.only, a.in_process, cache)
            if changed:
                stale.append(str(f))
                f.write_text(before)
            stale_figures += refresh_figures(f, a.only, a.in_process, check=True, done=done)
        else:
            if refresh(f, a.only, a.in_process, cache):
                print(f"updated {f}")
            for fig in refresh_figures(f, a.only, a.in_process, done=done):
                print(f"updated {fig}")
    if stale:
        print("stale tables in: " + ", ".join(stale))
    if stale_figures:
        print("stale figures: " + ", ".join(stale_figures))
    return 1 if stale or stale_figures else 0


if __name__ == "__main__":
    raise SystemExit(main())
