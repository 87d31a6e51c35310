"""A method that cannot run on a user's network is skipped, not fatal (issue 37): the refused
(model, method configuration) pairs are left out of the grid when the run is planned, with their
reason printed, kept in the records (``not_run``) and listed in the report; the other cells run
(exit 0). Exit 2 only when nothing can run (every pair refused), and nothing is written then. A
refused pair is not a failed cell: it is checked again on the next run."""
from __future__ import annotations

import json
import pickle

import torch
from torch import nn

from bench.cli import main
from conftest import small_mnist_run


class CustomNet(nn.Module):
    """Its own forward (not an nn.Sequential): VDP++ has no conversion for it; every other
    method runs on it."""

    def __init__(self, in_shape, num_outputs):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(in_shape).prod()), 16), nn.ReLU())
        self.fc = nn.Linear(16, num_outputs)

    def forward(self, x):
        return self.fc(self.body(x))


def custom_net(in_shape, num_outputs):
    return CustomNet(in_shape, num_outputs)


SPEC, NAME = f"{__name__}:custom_net", f"{__name__}.custom_net"


def _records(out, model=NAME):
    return [json.loads(p.read_text()) for p in (out / "mnist_rotated" / "records" / model).rglob("*.json")]


def test_a_refused_pair_is_skipped_and_the_other_cells_run(fake_mnist, tmp_path, capsys):
    out, reports = tmp_path / "r", tmp_path / "reports"
    args = [a for a in small_mnist_run(fake_mnist, out, "deterministic,vdp", n_train=64, epochs=1)
            if a != "--no-report"] + ["--report-dir", str(reports), "--set", f"models={SPEC}",
                                      "--set", "data.angles=[0,90]"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"vdp not run on {NAME}" in err and "no conversion for CustomNet" in err
    recs = _records(out)
    assert recs and {r["method"] for r in recs} == {"deterministic"} and all(r["status"] == "ok" for r in recs)
    assert all([n["method"] for n in r["not_run"]] == ["vdp"] and "CustomNet" in r["not_run"][0]["reason"]
               for r in recs)
    cells = [p.name for p in (out / "mnist_rotated" / "records" / NAME).iterdir()]
    assert [c.split("-")[0] for c in cells] == ["deterministic"], cells  # no (failed) vdp record either
    page = (reports / "mnist_rotated" / "index.html").read_text()
    assert "Not run: refused when the run was planned" in page and f"vdp on {NAME}" in page
    assert "no conversion for CustomNet" in page

    # resumed: the finished cell is kept, the refused pair is checked again (and refused again)
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"vdp not run on {NAME}" in err
    assert sorted(json.dumps(r, sort_keys=True) for r in _records(out)) == sorted(json.dumps(r, sort_keys=True)
                                                                                for r in recs)


def test_every_pair_refused_exits_2_and_writes_nothing(fake_mnist, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(small_mnist_run(fake_mnist, out, "vdp") + ["--set", f"models={SPEC}"]) == 2
    err = capsys.readouterr().err
    assert f"vdp on {NAME}" in err and "no conversion for CustomNet" in err and "can run on suite mnist_rotated" in err
    assert not out.exists()


def test_the_grid_and_its_workers_leave_the_refused_pairs_out():
    """A registered network beside the user's: vdp runs on lenet5 only. The grid (local runs, the
    Dask driver, bench.evaluate's records) and the MAP networks the cluster trains have no
    (custom_net, vdp) cell; the plan pickles and keys as a worker's RunSpec needs."""
    from bench.config import resolve_plan
    from bench.executors.grid import grid_cells, map_dependencies, map_jobs
    from bench.executors.spec import RunSpec
    from bench.suites import SUITES
    from methods import METHODS

    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "smoke", ["deterministic", "vdp"], {"models": ["lenet5", SPEC]},
                        method_registry=METHODS)
    assert sorted(plan.methods) == ["deterministic", "vdp"]
    assert [(r["model"], r["method"]) for r in plan.refused] == [(NAME, "vdp")]
    cells = {(m, meth) for m, meth, _, _ in grid_cells(plan)}
    assert cells == {("lenet5", "deterministic"), ("lenet5", "vdp"), (NAME, "deterministic")}
    deps = map_dependencies(plan, METHODS)
    assert not any(k[0] == NAME and k[1] == "vdp" for k in deps)
    assert set(map_jobs(deps)) == {("lenet5", 0), (NAME, 0)}  # (custom_net's MAP network: deterministic's)
    again = pickle.loads(pickle.dumps(plan))
    assert grid_cells(again) == grid_cells(plan)
    RunSpec(suite="mnist_rotated", plan=plan, data_root=".", out=".").key()  # JSON-keyable


def test_the_report_lists_a_refused_pair_until_a_record_of_it_exists():
    import pandas as pd

    from bench.reporting.build import _refused_pairs

    refused = [{"model": "net", "method": "vdp", "label": "vdp", "reason": "no conversion"}]
    df = pd.DataFrame({"model": ["net"], "method_label": ["deterministic"], "not_run": [refused]})
    assert _refused_pairs(df) == ["vdp on net: no conversion"]
    later = pd.concat([df, pd.DataFrame({"model": ["net"], "method_label": ["vdp"], "not_run": [None]})])
    assert _refused_pairs(later) == []  # a later run ran it: no longer "not run"


def test_evaluate_runs_the_methods_that_can_and_names_the_refused_ones(tmp_path):
    import bench

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 1, 6, 6, generator=gen), torch.arange(60) % 3
    r = bench.evaluate(model=custom_net, model_name="mine", train=(x, y), val=(x[:15], y[:15]), test=(x[15:30], y[15:30]),
                       methods=["deterministic", "vdp"], out=tmp_path / "o", quiet=True, report=False,
                       train_config={"epochs": 1, "batch_size": 30})
    assert r.exit_code == 0 and set(r.metrics["method"]) == {"deterministic"} and (r.metrics["status"] == "ok").all()
    assert [(n["model"], n["method"]) for n in r.not_run] == [("mine", "vdp")]
    assert "no conversion for CustomNet" in r.not_run[0]["reason"]
