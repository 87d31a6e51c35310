"""Executors: where the cells of a run grid run.

* ``local`` (default): one process, cell after cell (:meth:`bench.harness.Harness.run`).
* ``dask``: every cell is a task on a ``dask.distributed`` cluster (an existing one at
  ``--scheduler``, else a ``LocalCluster`` of ``--workers`` processes on 127.0.0.1); the MAP
  networks the cells build on are tasks of their own that the cells depend on.
* ``slurm``, ``pbs``, ``lsf``: the same tasks on a Dask cluster whose workers are batch jobs
  (``dask-jobqueue``), kept at ``--workers`` jobs: a worker retires shortly before its wall time
  and a new job replaces it.

Before any work, every worker is checked (:mod:`bench.executors.preflight`): it sees the driver's
results directory and data root and runs the driver's code; the driver skips finished cells itself.

Workers write records, checkpoints and the events log into the shared results directory exactly
as a local run does; resumption, per-cell locks and failed cells work the same way.
"""
from __future__ import annotations

#: executors whose workers are batch jobs, and their dask-jobqueue cluster classes
BATCH_EXECUTORS = {"slurm": "SLURMCluster", "pbs": "PBSCluster", "lsf": "LSFCluster"}
EXECUTORS = ("local", "dask", *BATCH_EXECUTORS)
