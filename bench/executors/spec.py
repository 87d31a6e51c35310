"""What a worker needs to rebuild a run's harness: a small, picklable description of the run."""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.config import RunPlan


@dataclass(frozen=True)
class RunSpec:
    suite: str
    plan: RunPlan
    data_root: str
    out: str
    device: str = "auto"  # auto | cpu | cuda | cuda:N; a worker of a multi-GPU host picks its own GPU
    force: bool = False
    loader_workers: int = 0
    threads: int | None = None  # torch threads per worker; None: the worker's cores / its task slots
    pretrained: dict | None = None
    download: bool = False
    quiet: bool = False
    tags: dict = field(default_factory=dict)  # free-form provenance (e.g. the executor) stored nowhere else
    keep_predictions: object = None  # a bench.predictions.PredictionPolicy (--keep-predictions), else None
    plugins: tuple = ()  # --plugin files (absolute paths): every worker loads them (bench.plugins)
    force_methods: tuple = ()  # --force-method: these methods' cells are refitted, the MAP networks kept
    redo_predating: bool = False  # --redo-predating: cells whose records predate a check are refitted
    # a suite that is not registered (bench.evaluate's in-memory suite, bench/user_suite.py): pickled
    # with its networks, without its tensors, which it reads from data_root
    suite_object: object = None

    def key(self) -> tuple:
        """Identifies the harness a worker may reuse across tasks of the same run."""
        import json

        return (self.suite, json.dumps(self.plan.__dict__, default=str, sort_keys=True), self.data_root, self.out,
                self.device, self.force, self.loader_workers, self.threads, self.keep_predictions, self.plugins,
                self.force_methods, self.redo_predating)
