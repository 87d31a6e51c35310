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
    # each row keeps what the machine did while its case ran (bench.measurement.ThreadUsage)
    assert all(0 <= r["case_paused_fraction"] < 1 and r["case_run_delay_fraction"] is not None for r in rows)


def test_the_speed_table_names_rows_taken_beside_other_work_or_across_a_stop():
    """A stored row whose case waited for a core, ran at a high load average or was stopped is named
    so in its "measured on" cell; a row from before the conditions were recorded says that."""
    import perf_table

    base = {"case": "c", "model": "m", "measure": "x / y", "ratio": 1.0, "op": "<=", "target": 1.1, "ok": True,
            "detail": "", "device": "cpu", "threads": 1, "repeats": 3, "at": "2026-12-03T00:00", "git_commit": "abc1234"}
    rows = [{**base, "case_paused_fraction": 0.0, "case_run_delay_fraction": 0.01, "host_load_1m": 1.1},
            {**base, "case_paused_fraction": 0.0, "case_run_delay_fraction": 0.3, "host_load_1m": 1.1},
            {**base, "case_paused_fraction": 0.2, "case_run_delay_fraction": 0.0, "host_load_1m": 1.0},
            {**base, "case_paused_fraction": 0.0, "case_run_delay_fraction": 0.0, "host_load_1m": 2.6},
            base]
    lines = perf_table.render(rows).splitlines()[2:]
    assert "beside other work" not in lines[0] and "not recorded" not in lines[0]
    assert "waited 30% of the time for a core" in lines[1]
    assert "stopped 20% of the time" in lines[2]
    assert "load average 2.6" in lines[3]
    assert "load not recorded" in lines[4]


def test_unknown_perf_case_is_a_clear_error(tmp_path):
    assert main(["perf", "--case", "no_such_case", "--save", str(tmp_path / "p.json")]) == 2
    assert not (tmp_path / "p.json").exists()
