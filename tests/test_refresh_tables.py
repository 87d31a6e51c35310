"""benchmarks/refresh_tables.py: tables between markers are replaced by their command's output."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _module():
    return load_script("benchmarks/refresh_tables.py")


def test_marked_table_is_regenerated_and_the_rest_untouched(tmp_path):
    doc = tmp_path / "doc.md"
    cmd = """.venv/bin/python -c "print('| a |'); print('| --- |'); print('| 1 |')" """.strip()
    doc.write_text(f"intro\n<!-- table: {cmd} -->\n| stale typed table |\n<!-- /table -->\noutro\n")
    mod = _module()
    assert mod.main([str(doc), "--check"]) == 1 and "stale typed" in doc.read_text()  # --check changes nothing
    assert mod.main([str(doc)]) == 0
    assert doc.read_text() == f"intro\n<!-- table: {cmd} -->\n| a |\n| --- |\n| 1 |\n<!-- /table -->\noutro\n"
    assert mod.main([str(doc), "--check"]) == 0


def test_only_refreshes_the_tables_whose_command_matches(tmp_path):
    """--only docs/records: the tables of the records kept in git are regenerated, a table whose
    command reads a results folder this machine lacks is left as it is (its command never runs)."""
    doc = tmp_path / "doc.md"
    kept = """.venv/bin/python -c "print('| kept |')  # reads docs/records" """.strip()
    gone = """.venv/bin/python -c "raise SystemExit(2)" """.strip()
    doc.write_text(f"<!-- table: {kept} -->\n| old |\n<!-- /table -->\n<!-- table: {gone} -->\n| keep me |\n<!-- /table -->\n")
    mod = _module()
    assert mod.main([str(doc), "--only", "docs/records"]) == 0
    assert doc.read_text() == (f"<!-- table: {kept} -->\n| kept |\n<!-- /table -->\n"
                               f"<!-- table: {gone} -->\n| keep me |\n<!-- /table -->\n")


def test_marked_figure_is_regenerated_and_checked_by_its_bytes(tmp_path):
    """A figure marker's command is run and writes the figures it names; --check writes them to a
    temporary folder instead and compares their bytes with the committed files."""
    fig = tmp_path / "fig.png"
    doc = tmp_path / "doc.md"
    cmd = f""".venv/bin/python -c "import sys; open(sys.argv[1], 'wb').write(b'v2')" {fig}"""
    doc.write_text(f"<!-- figure: {cmd} -->\n![a figure]({fig.name})\n")
    fig.write_bytes(b"v1")
    mod = _module()
    assert mod.main([str(doc), "--check"]) == 1 and fig.read_bytes() == b"v1"  # --check changes nothing
    assert mod.main([str(doc)]) == 0 and fig.read_bytes() == b"v2"
    assert mod.main([str(doc), "--check"]) == 0
    fig.unlink()
    assert mod.main([str(doc), "--check"]) == 1 and not fig.exists()  # a missing figure is stale


def test_readme_pareto_figure_is_what_its_command_makes_from_the_kept_records(tmp_path):
    """The README's Pareto figure over docs/tuning (bench leaderboard --pareto-figure), regenerated
    into a temporary folder, has the committed file's bytes: the same records give the same PNG."""
    mod = _module()
    cmds = mod.figure_commands(ROOT / "README.md", only="--results docs/tuning")
    assert any("--pareto-figure docs/figures/" in c for c in cmds), cmds
    for cmd in cmds:
        for name, png in mod.make_figures(cmd, in_process=True, into=tmp_path).items():
            assert png == (ROOT / name).read_bytes(), \
                f"{name} is stale (run benchmarks/refresh_tables.py --only 'docs/tuning')"


def _docs():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_generated_table_names_its_command_visibly_under_it():
    """GitHub hides HTML comments: the command of each table (and figure) is also a line under it."""
    import re

    missing = []
    for f in _docs():
        lines = f.read_text().split("\n")
        cmd = None
        for i, line in enumerate(lines):
            m = re.match(r"<!-- table: (.+?) -->$", line)
            fig = re.match(r"<!-- figure: (.+?) -->$", line)
            if fig:  # the image, its caption, then the command
                after = " ".join(x for x in lines[i + 1:i + 6] if x.strip()).replace(".venv/bin/python ", "python ")
                if fig.group(1).replace(".venv/bin/python ", "python ") not in after:
                    missing.append(f"{f.relative_to(ROOT)}:{i + 1}")
            elif m:
                cmd = m.group(1).replace(".venv/bin/python ", "python ")
            elif line == "<!-- /table -->" and cmd:
                after = " ".join(x for x in lines[i + 1:i + 4] if x.strip())
                if cmd not in after.replace(".venv/bin/python ", "python "):
                    missing.append(f"{f.relative_to(ROOT)}:{i + 1}")
                cmd = None
    assert not missing, missing


def test_relative_links_of_readme_and_docs_resolve():
    import re

    broken = []
    for f in _docs():
        for target in re.findall(r"\]\(([^)\s]+)\)", f.read_text()):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            path = target.split("#")[0]
            if path and not (f.parent / path).exists():
                broken.append(f"{f.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_every_benchmarks_script_says_what_it_does_and_the_list_shows_it():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "list.py")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    scripts = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "list.py")
    listed = [line.split()[0] for line in res.stdout.splitlines() if line and not line.startswith(" ")]
    assert listed == scripts
    assert all(len(line.split(None, 2)) == 3 for line in res.stdout.splitlines() if line and not line.startswith(" "))
    assert "vi_tables.py" in res.stdout and "docs/pbn.md" in res.stdout  # a table script names its pages


@pytest.mark.parametrize("only", ["--results docs/records", "--results docs/tuning", "--out docs/tuning", "--out docs/records", "--file docs/records",
                                  "--results docs/ablations", "device_table", "--spaces", "-m bench.validity",
                                  "--from-json docs/records", "kept_records.py"])
def test_every_table_over_kept_records_is_what_its_command_makes_now(only):
    """The tables whose records are kept in git (docs/records, docs/tuning, the device summaries and
    perf rows, the tuning spaces of the code) are regenerated and compared with the committed text:
    a stale table, or a command that fails, fails here (tables over the earlier machines' results/
    cannot be rebuilt and are left out by the filter)."""
    mod = _module()
    # in this interpreter (the same code as the subprocess each table's command names, without a
    # start-up and the torch import per table: test_in_process_runs_are_the_subprocess_output)
    assert mod.main(["--check", "--in-process", f"--only={only}"]) == 0, \
        f"stale tables (run benchmarks/refresh_tables.py --only '{only}')"


def test_in_process_runs_are_the_subprocess_output():
    """A bench CLI command, a module and a script give the same text in this interpreter as in a
    subprocess, and a failing command fails both ways."""
    mod = _module()
    for cmd in (".venv/bin/python -m bench tune --suite toy --spaces",
                ".venv/bin/python benchmarks/perf_table.py --file docs/records/perf/cpu.json --cases thread_policy",
                ".venv/bin/python -m bench.validity --results docs/ablations"):
        assert mod.run(cmd, in_process=True) == mod.run(cmd), cmd
    for in_process in (False, True):
        with pytest.raises(SystemExit, match="table command failed"):
            mod.run(".venv/bin/python -m bench tune --suite nope --profile quick --out docs/tuning --markdown",
                    in_process=in_process)
