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
