"""``python -m bench perf --save``: the stored rows behind README's speed table (no timing is
asserted: speed targets are checked by running the benchmark, not by tests)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench.cli import main  # noqa: E402


def test_perf_save_stores_each_row_once_with_its_machine_and_renders(tmp_path, capsys):
    out = tmp_path / "perf.json"
    args = ["perf", "--case", "ensemble_vs_single", "--repeats", "1", "--save", str(out)]
    main(args)
    main(args)  # a second run of the same case replaces its rows
    rows = json.loads(out.read_text())["rows"]
    assert [(r["case"], r["model"]) for r in rows] == [("ensemble_vs_single", "lenet_300_100"),
                                                       ("ensemble_vs_single", "lenet5")]
    assert all(r["ratio"] > 0 and r["repeats"] == 1 and r["threads"] >= 1 and r["device"] for r in rows)
    import perf_table

    capsys.readouterr()
    assert perf_table.main(["--file", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 2 + 2 and "LeNet-5" in table[-1] and "deep ensemble M=5" in table[-1]


def test_unknown_perf_case_is_a_clear_error(tmp_path):
    assert main(["perf", "--case", "no_such_case", "--save", str(tmp_path / "p.json")]) == 2
    assert not (tmp_path / "p.json").exists()
