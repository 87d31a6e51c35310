"""Bad option values are refused when the run is planned: exit 2, a message naming the option and
what is valid, and nothing written (issue: "a harness that validates everything before it trains").
Each case below was a traceback or a silently wrong result before."""
from __future__ import annotations

import math

import pytest

from bench.cli import main
from bench.options import AnyOf, ListOf, OneOf, Range, problems


@pytest.mark.parametrize("sets, expect", [
    (["train.epochs=-3"], "epochs=-3 must be an integer >= 1"),
    (["train.epochs=0"], "epochs=0 must be an integer >= 1"),  # an untrained network is not a result
    (["train.epochs=abc"], "epochs='abc'"),
    (["train.lr=NaN"], "lr=nan"),
    (["train.batch_size=0"], "batch_size=0"),
    (["deep_ensemble.members=0"], "members=0 must be an integer >= 1"),
    (["seeds=abc"], "seeds= expects non-negative integers"),
    (["data.n_train=-5"], "n_train=-5 must be an integer >= 1"),
    (["data.bogus=1"], "unknown data option(s) ['bogus'] for suite toy"),
    (["models="], "has no value"),
])
def test_invalid_values_exit_2_before_anything_is_written(tmp_path, capsys, sets, expect):
    out = tmp_path / "results"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--methods", "deterministic,deep_ensemble", "--quiet",
            "--out", str(out), "--report-dir", str(tmp_path / "reports")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expect in err, err
    assert not out.exists() and not (tmp_path / "reports").exists()


def test_method_option_out_of_range_is_named_with_the_valid_range(tmp_path, capsys):
    args = ["run", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--set", "mc_dropout.p=2",
            "--out", str(tmp_path / "r")]
    assert main(args) == 2
    assert "mc_dropout" in (err := capsys.readouterr().err) and "p=2 must be a number >= 0 and < 1" in err
    assert not (tmp_path / "r").exists()


def test_a_method_that_does_not_support_the_task_is_skipped_at_plan_time(tmp_path, capsys):
    """The toy suite is regression; subnet_laplace is classification-only: skipped with its reason
    when the run is planned, the deterministic method runs (issue 37: a refused method does not stop
    the grid); alone, it is refused (exit 2) before anything is written."""
    args = ["run", "--suite", "toy", "--profile", "smoke", "--methods", "subnet_laplace", "--out", str(tmp_path / "r")]
    assert main(args) == 2
    assert "does not support regression tasks" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    args = ["run", "--suite", "toy", "--profile", "smoke", "--methods", "deterministic,subnet_laplace", "--no-report",
            "--out", str(tmp_path / "r"), "--set", "train.epochs=20"]
    assert main(args) == 0
    assert "subnet_laplace: skipped (method 'subnet_laplace' does not support regression tasks" in capsys.readouterr().err
    assert [p.name.split("-")[0] for p in (tmp_path / "r" / "toy" / "records" / "mlp_100").iterdir()] == ["deterministic"]


def test_empty_method_and_seed_lists_are_errors(tmp_path, capsys):
    base = ["run", "--suite", "toy", "--profile", "smoke", "--out", str(tmp_path / "r")]
    assert main(base + ["--methods", ","]) == 2
    assert "no method to run" in capsys.readouterr().err
    assert main(base + ["--seeds", ","]) == 2
    assert "no seed to run" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_unknown_and_invalid_data_options_of_a_data_suite_fail_before_the_data_is_read(tmp_path, capsys):
    """No data root exists: the option error comes first (plan time), not the missing dataset."""
    base = ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--data-root", str(tmp_path / "none"),
            "--out", str(tmp_path / "r")]
    assert main(base + ["--set", "data.angel=[0,90]"]) == 2
    assert "unknown data option(s) ['angel']" in capsys.readouterr().err
    assert main(base + ["--set", "data.angles=[0,720]"]) == 2
    assert "angles" in capsys.readouterr().err


def test_constraints_against_hand_cases():
    assert Range(0, 1, hi_open=True).problem(0.0) is None and Range(0, 1, hi_open=True).problem(1.0)
    assert Range(1, integer=True).problem(2.0)  # a float where an integer is required
    assert Range().problem(math.inf) and Range().problem(True)  # infinite; a bool is not a number
    assert Range(optional=True).problem(None) is None and Range().problem(None)
    assert OneOf("a", "b").problem("c") and OneOf("a", optional=True).problem(None) is None
    assert ListOf(OneOf(1, 3)).problem([1, 3]) is None and ListOf(OneOf(1, 3)).problem([1, 2])
    assert ListOf(Range(), min_len=1).problem([])
    either = AnyOf(OneOf("all"), ListOf(OneOf("x", "y")))
    assert either.problem("all") is None and either.problem(["x"]) is None and either.problem(["z"])
    # without a constraint, the default's type decides; an int default accepts any finite number
    assert problems({"lr": 0.5, "n": 3.5, "flag": True, "name": "x"}, {"lr": 1, "n": 2, "flag": False, "name": "y"}) == []
    assert len(problems({"n": "3", "flag": 1, "name": 2, "xs": 1}, {"n": 2, "flag": False, "name": "y", "xs": [1]})) == 4


@pytest.mark.parametrize("suite_name", __import__("bench.suites", fromlist=["SUITES"]).SUITES.names())
def test_every_suite_has_the_three_profiles_and_each_resolves(suite_name):
    """`bench list` promises smoke, quick and paper for every suite: each resolves into a plan with
    the suite's default methods (options and task support checked), without data."""
    from bench.config import resolve_plan
    from bench.suites import PROFILES, SUITES
    from methods import METHODS

    suite = SUITES.get(suite_name)()
    assert set(PROFILES) <= set(suite.profiles), suite.profiles.keys()
    for profile in suite.profiles:
        plan = resolve_plan(suite, profile, list(suite.default_methods), {}, method_registry=METHODS)
        assert plan.models and plan.seeds
