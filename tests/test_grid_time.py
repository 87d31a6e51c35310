"""benchmarks/grid_time.py adds up a grid's time from its records, leaving out what the records say
the process was stopped for (bench.measurement.PauseWatch)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench.cli import main  # noqa: E402


def test_grid_time_leaves_out_the_time_a_fit_was_stopped(tmp_path):
    import grid_time

    out = tmp_path / "r"
    assert main(["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
                 "--methods", "mc_dropout", "--threads", "1"]) == 0
    _, before, missing = grid_time.grid_time(str(out), "toy", "smoke")
    assert before > 0
    # the fit took 100 s more, half of which the process was stopped: 50 s more of grid time
    records = list(out.rglob("records/**/mc_dropout-*/seed0/*.json"))
    assert records
    for path in records:
        rec = json.loads(path.read_text())
        fit = rec["cost"]["fit_time_s"]
        rec["cost"].update(fit_time_s=fit + 100.0, train_time_s=rec["cost"]["train_time_s"] + 100.0,
                           fit_paused_fraction=(0.5 * (fit + 100.0)) / (fit + 100.0))
        path.write_text(json.dumps(rec))
    _, after, _ = grid_time.grid_time(str(out), "toy", "smoke")
    assert after - before == pytest.approx(50.0 - 0.5 * fit, abs=1e-6)
