"""benchmarks/experiment_cli.py: the command line of the one-off experiments behind docs/ tables.
A result saved with --save prints the same table again with --from-json without computing; bad
input (an unknown suite, a suite of the wrong task, a missing dataset) exits 2 and writes nothing."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("experiment_cli", ROOT / "benchmarks" / "experiment_cli.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def _compute(calls):
    def compute(a, suite, plan, model, data):
        calls.append(a.extra)
        return {"n_train": len(data.train_x), "n_val": len(data.val_x), "extra": a.extra}
    return compute


def _table(out: dict) -> str:
    return f"{out['suite']} {out['profile']} {out['model']} seed {out['seed']}: {out['n_train']} / {out['n_val']} / {out['extra']}"


def _run(argv, calls, **kw):
    return mod.run_experiment(argv, description="t", method="deterministic", compute=_compute(calls), table=_table,
                              add_arguments=lambda p: p.add_argument("--extra", type=int, default=3), **kw)


def test_save_then_from_json_prints_the_same_table_without_computing(tmp_path, capsys):
    calls: list = []
    out = tmp_path / "r.json"
    assert _run(["--suite", "toy", "--profile", "smoke", "--seed", "1", "--extra", "7", "--save", str(out),
                 "--data-root", str(tmp_path)], calls) == 0
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert calls == [7]
    assert saved["suite"] == "toy" and saved["profile"] == "smoke" and saved["seed"] == 1 and saved["extra"] == 7
    assert saved["n_train"] > 0 and saved["n_val"] > 0
    assert not list(tmp_path.glob("*.tmp*"))
    assert _run(["--from-json", str(out)], calls) == 0
    assert capsys.readouterr().out == printed
    assert calls == [7]  # nothing computed the second time


@pytest.mark.parametrize("argv, kw, message", [
    (["--suite", "no_such_suite"], {}, "unknown suite"),
    (["--suite", "toy", "--profile", "smoke"], {"task_kind": "segmentation"}, "needs a segmentation suite"),
    (["--suite", "camvid", "--profile", "smoke"], {}, "CamVid"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, kw, message):
    calls: list = []
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        _run(argv + ["--data-root", str(tmp_path / "empty"), "--save", str(out)], calls, **kw)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert calls == [] and not out.exists() and not (tmp_path / "empty").exists()


def _load(name):
    s = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m


def test_the_weighted_ce_ablation_runs_through_it(tmp_path, capsys):
    m = _load("weighted_ce_ablation")
    saved = ROOT / "docs" / "records" / "camvid" / "diagnostics" / "weighted_ce_seed0.json"
    assert m.main(["--from-json", str(saved)]) == 0
    assert capsys.readouterr().out.strip() == m.table(json.loads(saved.read_text())).strip()
    with pytest.raises(SystemExit) as e:  # a classification suite: refused before any training
        m.main(["--suite", "toy", "--profile", "smoke", "--data-root", str(tmp_path), "--results", str(tmp_path / "r")])
    assert e.value.code == 2 and "segmentation" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
