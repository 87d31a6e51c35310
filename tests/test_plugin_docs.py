"""The example plugin of docs/plugins.md, exactly as printed there, runs through the harness:
the guide is complete enough to write a method from (issue: "a plugin contract a newcomer can
follow")."""
from __future__ import annotations

import re
from pathlib import Path

from bench.cli import main
from bench.store import load_records
from conftest import small_mnist_run

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def example_source() -> str:
    text = DOC.read_text()
    section = text[text.index("## A complete example"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_documented_plugin_is_the_shipped_method():
    assert example_source() == (Path(__file__).resolve().parents[1] / "methods" / "temperature_scaling.py").read_text()


def test_the_documented_plugin_runs_through_the_harness(fake_mnist, tmp_path, capsys):
    from methods import METHODS

    assert "temperature_scaling" in METHODS  # registered by its file in methods/, nothing else
    out = tmp_path / "results"
    args = small_mnist_run(fake_mnist, out, "deterministic,temperature_scaling")
    assert main(args) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and set(df["method"]) == {"deterministic", "temperature_scaling"}
    ts = df[(df["method"] == "temperature_scaling") & (df["kind"] == "id")].iloc[0]
    assert ts["diagnostics"]["temperature"] != 1.0
    # fitted on the validation split, so its validation NLL is at most the MAP network's
    val = df[df["kind"] == "val"].set_index("method")["metrics.nll"]
    assert val["temperature_scaling"] <= val["deterministic"] + 1e-6
    # it starts from the cached MAP network, whose training time the harness charged to it
    assert ts["cost.upstream_train_time_s"] > 0
    # a declared constraint refuses a bad value at plan time
    assert main(args + ["--set", "temperature_scaling.max_iter=0"]) == 2
    assert "max_iter=0 must be an integer >= 1" in capsys.readouterr().err
