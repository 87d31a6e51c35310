"""The result tables (benchmarks/vi_tables.py, used by laplace_tables.py): a seed enters a row
only when every shift set of the suite was evaluated, so a run still evaluating (or killed half
way) cannot shift a mean with the sets it happens to have."""
from __future__ import annotations

import sys
from pathlib import Path

from bench.cli import main
from tests.conftest import make_fake_mnist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_a_seed_with_a_missing_shift_set_is_left_out(tmp_path):
    from vi_tables import Runs

    root = make_fake_mnist(tmp_path / "data")
    out = tmp_path / "results"
    assert main(["run", "--suite", "mnist_rotated", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                 "--methods", "deterministic", "--seeds", "0,1", "--quiet", "--no-report"]) == 0
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0, 1])
    (h,) = {h for h, _ in runs.configs("deterministic")}
    assert list(runs.per_seed(h)["seed"]) == [0, 1]
    shift = sorted(out.glob("mnist_rotated/records/*/*/seed1/shift-*.json"))
    shift[-1].unlink()  # seed 1 lost its last rotation
    runs = Runs(str(out), "mnist_rotated", "lenet_300_100", "smoke", [0, 1])
    assert list(runs.per_seed(h)["seed"]) == [0]
