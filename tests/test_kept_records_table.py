"""benchmarks/kept_records.py: the index of the kept-record folders, counted from the records themselves."""
from __future__ import annotations

import json
from pathlib import Path

from bench.store import pack_bytes, read_pack
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _records():
    """Real kept records (the rotated-MNIST edge probes): {path: record}."""
    return read_pack(ROOT / "docs" / "tuning-edge-probes" / "mnist_rotated" / "records.jsonl.xz")


def test_the_index_counts_each_folder_s_records_and_fits_and_names_the_pages_that_name_it(tmp_path):
    kept = _records()
    by_cell: dict[str, dict] = {}
    for rel, rec in kept.items():
        by_cell.setdefault(str(Path(rel).parent), {})[rel] = rec
    cells = sorted(by_cell)[:3]
    docs = tmp_path / "docs"
    # "docs/a": two cells, loose; "docs/a-b": one cell, packed, with a README naming what it is
    for cell in cells[:2]:
        for rel, rec in by_cell[cell].items():
            path = docs / "a" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec))
    (docs / "a-b" / "mnist_rotated").mkdir(parents=True)
    (docs / "a-b" / "mnist_rotated" / "records.jsonl.xz").write_bytes(pack_bytes(by_cell[cells[2]]))
    (docs / "a-b" / "README.md").write_text("# History: one cell\n\nMore words. Names docs/a too.\n")
    (docs / "figures").mkdir()  # no records: not a kept folder
    (docs / "page.md").write_text("The board reads `docs/a-b/mnist_rotated` and docs/a.\n")
    (tmp_path / "README.md").write_text("See docs/a-b for the history.\n")

    mod = load_script("benchmarks/kept_records.py")
    assert [f.name for f in mod.kept_folders(docs)] == ["a", "a-b"]
    summary = mod.folder_summary(docs / "a")["mnist_rotated"]
    recs = [r for c in cells[:2] for r in by_cell[c].values()]
    assert summary["records"] == len(recs) and summary["fits"] == 2
    assert summary["first"] == min(r["finished_at"][:10] for r in recs)
    assert mod.folder_summary(docs / "a-b")["mnist_rotated"]["records"] == len(by_cell[cells[2]])
    table = mod.kept_table(tmp_path)
    row_a, row_ab = (x for x in table.splitlines() if x.startswith("| `docs/a"))
    assert row_a.startswith("| `docs/a` | no README.md | mnist_rotated: ") and row_a.endswith("| docs/page.md |")
    # the prefix docs/a of docs/a-b is not a naming of docs/a; a kept folder's README is no page
    assert row_ab.startswith("| `docs/a-b` | History: one cell |") and row_ab.endswith("| README.md, docs/page.md |")
    # this table on a page names every folder in its rows: no reading of them
    (docs / "page.md").write_text(f"Nothing here.\n\n<!-- table: python benchmarks/kept_records.py -->\n{table}"
                                  "<!-- /table -->\n")
    (docs / "a").joinpath("README.md").write_text("# Orphan\n")
    row_a = next(x for x in mod.kept_table(tmp_path).splitlines() if x.startswith("| `docs/a` "))
    assert "**no page**" in row_a and "| Orphan |" in row_a
