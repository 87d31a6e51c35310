"""benchmarks/refresh_tables.py: tables between markers are replaced by their command's output."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("refresh_tables", ROOT / "benchmarks" / "refresh_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
