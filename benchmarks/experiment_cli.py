"""The command line shared by the one-off experiments behind docs/ tables (an ablation, a scan).

Each experiment loads one suite's data at one profile for one seed, computes a JSON-able result,
optionally saves it (``--save PATH``, written atomically) and prints it as a markdown table;
``--from-json PATH`` prints a saved result again without recomputing (the form
``benchmarks/refresh_tables.py`` regenerates the docs' tables with). An experiment is its
``compute`` and its ``table``::

    def compute(args, suite, plan, model, data) -> dict: ...
    def table(result: dict) -> str: ...

    def main(argv=None) -> int:
        return run_experiment(argv, description=__doc__.splitlines()[0], method="pbn",
                              compute=compute, table=table, add_arguments=extra_flags)

The result carries ``suite``, ``profile``, ``model`` and ``seed`` besides what ``compute`` returns.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.config import resolve_plan  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.harness import map_network_key, model_builder  # noqa: E402
from bench.store import ResultsStore, atomic_write_json  # noqa: E402
from bench.suites import SUITES  # noqa: E402
from methods import METHODS  # noqa: E402


def experiment_parser(description: str) -> argparse.ArgumentParser:
    """The flags every experiment takes: where the records and the data are, which cell, save / reprint."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--results", default="results", help="the results directory whose cells the experiment reads")
    p.add_argument("--data-root", default="data")
    p.add_argument("--suite", default="camvid")
    p.add_argument("--profile", default="quick")
    p.add_argument("--model", default=None, help="default: the profile's first model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default=None, metavar="PATH", help="also write the result as JSON (atomically)")
    p.add_argument("--from-json", default=None, metavar="PATH", help="print a saved result; compute nothing")
    return p


def grid_map_cache(a, suite, plan, model: str, data):
    """The grid's cache of MAP networks in ``--results`` (the harness's key: an experiment finds the
    network every method of the grid started from, and trains it the same way when it is not
    there), on the CPU."""
    import torch

    from bench.checkpoints import MapCache

    return MapCache(ResultsStore(a.results).checkpoint_dir(suite.name), map_network_key(suite, plan, model),
                    model_builder(suite, plan.data, model), suite.task, data.train_x, data.train_y, plan.train,
                    torch.device("cpu"), augment=data.augment)


def run_experiment(argv, *, description: str, method: str, compute: Callable[..., dict],
                   table: Callable[[dict], str], add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                   task_kind: str | None = None) -> int:
    """Parse ``argv``, load the suite's data at the profile ``method`` runs with, compute, save, print."""
    p = experiment_parser(description)
    if add_arguments is not None:
        add_arguments(p)
    a = p.parse_args(argv)
    if a.from_json:
        print(table(json.loads(Path(a.from_json).read_text())))
        return 0
    import torch

    torch.set_num_threads(1)
    try:  # bad input (an unknown suite or profile, a missing dataset): a clear error, exit 2
        suite = SUITES.get(a.suite)()
        if task_kind is not None and suite.task.kind != task_kind:
            p.error(f"--suite {a.suite} is a {suite.task.kind} suite; this experiment needs a {task_kind} suite")
        plan = resolve_plan(suite, a.profile, [method], {}, method_registry=METHODS)
        model = a.model or plan.models[0]
        data = suite.load(Path(a.data_root), plan.data, download=False)
    except BenchError as e:
        p.error(str(e))
    try:  # e.g. a damaged or crafted checkpoint (bench.torch_files.DamagedCheckpointError): exit 2
        computed = compute(a, suite, plan, model, data)
    except BenchError as e:
        p.error(str(e))
    out = {"suite": a.suite, "profile": a.profile, "model": model, "seed": a.seed, **computed}
    if a.save:
        atomic_write_json(Path(a.save), out)
    print(table(out))
    return 0
