"""Executors: where the cells of a run grid run.

* ``local`` (default): one process, cell after cell (:meth:`bench.harness.Harness.run`).
* ``dask``: every cell is a task on a ``dask.distributed`` cluster (an existing one at
  ``--scheduler``, else a ``LocalCluster`` of ``--workers`` processes on 127.0.0.1); the MAP
  networks the cells build on are tasks of their own that the cells depend on.
* ``slurm``: the same tasks on a Dask cluster whose workers are SLURM jobs (``dask-jobqueue``).

Workers write records, checkpoints and the events log into the shared results directory exactly
as a local run does; resumption, per-cell locks and failed cells work the same way.
"""
from __future__ import annotations

EXECUTORS = ("local", "dask", "slurm")
