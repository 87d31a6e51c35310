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

#: Dask settings of every worker bench starts (LocalCluster, batch jobs) or tells how to start
#: (``python -m bench worker-env``): Dask's statistical profiler walks every thread's stack every
#: 10 ms; beside a task training on one thread, the worker's other threads took 5.5-5.8 % of a core
#: with it and 2.7 % without (/proc ticks over 30 s, nothing else running; the dashboard's profile
#: pages stay empty)
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}


def worker_config_words(config: dict = WORKER_CONFIG) -> list[str]:
    """``config`` as the environment words Dask reads when a worker starts
    (``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False``)."""
    return ["DASK_" + "__".join(key.upper().replace("-", "_").split(".")) + f"={value!r}"
            for key, value in config.items()]
