"""What each script of benchmarks/ does and what it writes: ``python benchmarks/list.py``.

Every script here is one of three kinds, read from its own text (nothing is listed by hand):
``table`` prints a markdown table over stored records (the README's and docs/'s tables, regenerated
by ``refresh_tables.py``), ``experiment`` runs training or measurements of its own (an ablation, a
scan, a memory probe) and stores what it measured, ``tool`` does neither (compares, times, refreshes).
A script's first docstring line says what it is; the kind comes from the markers of README.md and
docs/ that name it (``table``), else from whether it trains or measures (``experiment``).
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
#: words in a script's source that mean it trains or measures something itself
EXPERIMENT_MARKS = ("train_model(", ".fit(", "Harness(", "perf_counter", "run_experiment", "cmd_run(")


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    m = re.match(r"(.+?[.?:])(\s|$)", text)  # the first sentence
    return m.group(1) if m else text


def table_users() -> dict[str, list[str]]:
    """``{script name: [files whose generated tables it makes]}`` from the table markers."""
    out: dict[str, list[str]] = {}
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for cmd in re.findall(r"<!-- table: (.+?) -->", f.read_text()):
            m = re.search(r"benchmarks/([\w]+\.py)", cmd)
            if m:
                out.setdefault(m.group(1), [])
                rel = str(f.relative_to(ROOT))
                if rel not in out[m.group(1)]:
                    out[m.group(1)].append(rel)
    return out


def rows() -> list[tuple[str, str, str, str]]:
    users = table_users()
    out = []
    for path in sorted(HERE.glob("*.py")):
        if path.name.startswith("_") or path == Path(__file__).resolve():
            continue
        src = path.read_text()
        if path.name in users:
            kind, writes = "table", "markdown on stdout, in " + ", ".join(users[path.name])
        elif any(m in src for m in EXPERIMENT_MARKS):
            kind, writes = "experiment", "its measurements (see --help)"
        else:
            kind, writes = "tool", "see --help"
        out.append((path.name, kind, first_line(path), writes))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--markdown", action="store_true", help="a markdown table instead of plain lines")
    a = p.parse_args(argv)
    rs = rows()
    if a.markdown:
        print("| script | kind | what it does | writes |\n| --- | --- | --- | --- |")
        for r in rs:
            print("| " + " | ".join(x.replace("|", "\\|") for x in r) + " |")
    else:
        width = max(len(r[0]) for r in rs)
        for name, kind, what, writes in rs:
            print(f"{name:<{width}}  {kind:<10}  {what}\n{'':<{width}}  {'':<10}  writes: {writes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
