"""The code a Dask worker runs: train one MAP network, or run one cell, of a :class:`RunSpec`.

A worker process keeps the harness of a run (its loaded suite data) between tasks, so the data
is read once per worker, not once per cell. Failures of a method are recorded by the harness as
failed cells (as in a local run); anything else raises and is retried by Dask.
"""
from __future__ import annotations

import time
from dataclasses import asdict

from bench.executors.spec import RunSpec

_HARNESSES: dict = {}


class TaskError(RuntimeError):
    """An error raised in a worker outside the method (the harness records a method's own errors),
    carrying where it happened, so that the driver's failed record names the host and worker."""

    def __init__(self, error: str, host: str, worker: str):
        super().__init__(error)
        self.error, self.host, self.worker = error, host, worker

    def __reduce__(self):  # crosses process boundaries intact
        return (TaskError, (self.error, self.host, self.worker))


def worker_device(name: str):
    """The device of this worker: ``cuda`` on a host with several GPUs becomes ``cuda:<i>`` with i
    the worker's index (a LocalCluster names its workers 0, 1, ...), one GPU per worker."""
    import torch

    from bench.provenance import resolve_device

    device = resolve_device(name)
    if device.type == "cuda" and device.index is None and torch.cuda.device_count() > 1:
        try:
            from distributed import get_worker

            index = int(get_worker().name)
        except (ImportError, ValueError, TypeError):
            index = 0
        device = torch.device(f"cuda:{index % torch.cuda.device_count()}")
    return device


def worker_threads(spec: RunSpec) -> int:
    """``spec.threads``, or this worker's cores (affinity) divided by the tasks it runs at once."""
    from bench.threads import available_cores, threads_per_worker

    if spec.threads:
        return int(spec.threads)
    slots = 1
    try:
        from distributed import get_worker

        slots = int(get_worker().state.nthreads)
    except (ImportError, ValueError, AttributeError):
        pass
    return threads_per_worker(slots, available_cores())


def harness_for(spec: RunSpec):
    """The harness of ``spec`` in this process (built, with its data loaded, on first use)."""
    key = spec.key()
    if key not in _HARNESSES:
        from bench.executors.preflight import check_task, load_spec_plugins

        load_spec_plugins(spec.plugins)  # the driver's --plugin files, at the same paths (checked by the pre-flight)
        check_task(spec)  # a worker that joined after the pre-flight runs the driver's code, or nothing
        from pathlib import Path

        from bench.harness import Harness
        from bench.store import ResultsStore
        from bench.suites import SUITES
        from bench.threads import apply_threads
        from methods import METHODS

        apply_threads(worker_threads(spec))
        suite = spec.suite_object if getattr(spec, "suite_object", None) is not None else SUITES.get(spec.suite)()
        data = suite.load(Path(spec.data_root), spec.plan.data, download=spec.download)
        h = Harness(suite, spec.plan, data, ResultsStore(spec.out), worker_device(spec.device), METHODS,
                    force=spec.force, progress=False, quiet=spec.quiet, workers=spec.loader_workers,
                    pretrained=spec.pretrained, map_refresh=False, keep_predictions=spec.keep_predictions,
                    force_methods=spec.force_methods, redo_predating=spec.redo_predating)
        h.wait_for_locks = True  # a cell still locked by a dead node's process is waited for, then taken over
        h.write_artifacts()
        _HARNESSES.clear()  # one run at a time per worker: free the previous run's data
        _HARNESSES[key] = h
    return _HARNESSES[key]


def train_map(spec: RunSpec, model: str, seed: int) -> dict:
    """Train (or find cached) the MAP network of ``model`` and ``seed``; never raises for a network
    that diverges (the cells built on it record that failure themselves)."""
    from bench.provenance import worker_identity

    t0 = time.perf_counter()
    h = harness_for(spec)
    cache = h.map_cache(model)
    before = len(cache.trained_now)
    cache.refresh = spec.force  # --force retrains each MAP network once, here, not in every worker
    try:
        cache.get(seed)
        status, error = ("trained" if len(cache.trained_now) > before else "cached"), None
    except Exception as exc:  # noqa: BLE001 - recorded by the cells that need it
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        cache.refresh = False
    return {"status": status, "error": error, "seconds": time.perf_counter() - t0, **worker_identity()}


def run_cell(spec: RunSpec, cell: tuple, *map_results) -> dict:
    """Run one cell (model, method, config, seed) after the MAP tasks it depends on
    (``map_results``, only there to order the tasks); returns the cell's summary."""
    from bench.harness import RunSummary
    from bench.provenance import worker_identity

    t0 = time.perf_counter()
    try:
        h = harness_for(spec)
        h.summary = RunSummary()
        h.run_cell(*cell)
    except Exception as exc:  # noqa: BLE001 - re-raised with where it happened; Dask retries it
        who = worker_identity()
        raise TaskError(f"{type(exc).__name__}: {exc}", who["host"], who["worker"]) from exc
    return {"summary": asdict(h.summary), "seconds": time.perf_counter() - t0, **worker_identity()}
