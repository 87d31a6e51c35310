"""``bench run --executor dask|slurm``: open the cluster, run the grid on it, close it."""
from __future__ import annotations

import contextlib
import sys

from bench.errors import BenchError
from bench.executors.spec import RunSpec


def batch_options(args, threads: int) -> dict:
    """The batch-job options of ``args`` (only those given; the rest come from jobqueue.yaml)."""
    return dict(threads=threads, queue=args.job_queue, account=args.job_account, walltime=args.job_time,
                memory=args.job_memory, gpus=args.job_gpus, scheduler_host=args.scheduler_host,
                log_dir=args.job_log_dir)


def job_script(args, threads: int) -> str:
    """The script ``--executor slurm|pbs|lsf`` would submit (``--dry-run``)."""
    from bench.executors.driver import batch_cluster

    opts = batch_options(args, threads)
    opts["scheduler_host"] = opts["scheduler_host"] or "127.0.0.1"  # this throw-away scheduler listens nowhere else
    with batch_cluster(args.executor, 1, retries=args.retries, dry_run=True, **opts) as script:
        return (script.rstrip() + "\n# (--dry-run: the scheduler address above is this dry run's own; a run writes "
                "its own; one such job per --workers, replaced when it reaches its wall time)")


#: how long a run waits for an existing Dask scheduler (--scheduler, --scheduler-file) to answer
CONNECT_TIMEOUT = "20s"


@contextlib.contextmanager
def open_client(args, workers: int, threads: int):
    """A ``distributed.Client`` for ``args``: ``--scheduler`` / ``--scheduler-file`` (an existing
    cluster), batch jobs (slurm, pbs, lsf), or a LocalCluster of ``workers`` processes on 127.0.0.1."""
    from bench.executors import BATCH_EXECUTORS
    from bench.executors.driver import batch_cluster, local_cluster

    if args.executor in BATCH_EXECUTORS:
        with batch_cluster(args.executor, workers, retries=args.retries, **batch_options(args, threads)) as client:
            yield client
    elif args.scheduler or args.scheduler_file:
        from distributed import Client

        where = args.scheduler or f"the scheduler of --scheduler-file {args.scheduler_file}"
        try:
            client = (Client(args.scheduler, timeout=CONNECT_TIMEOUT) if args.scheduler
                      else Client(scheduler_file=args.scheduler_file, timeout=CONNECT_TIMEOUT))
        except (OSError, TimeoutError, ValueError, KeyError) as exc:
            raise BenchError(f"{where}: no Dask scheduler answers there ({exc})") from None
        with client:
            yield client
    else:
        with local_cluster(workers, retries=args.retries) as client:
            yield client


def run_distributed(args, suite, plan, data_root, device, pretrained, store, registry, workers: int,
                    threads: int | None, on_connect=None, finished=None):
    """Run the grid of ``plan`` on a Dask cluster; returns the :class:`bench.harness.RunSummary`.
    ``finished(cell)`` (the driver's harness) names the cells that need no work: not sent."""
    from bench.executors.driver import run_grid

    def say(msg):
        if not args.quiet:
            print(f"[{suite.name}] {msg}", file=sys.stderr, flush=True)

    from pathlib import Path

    from bench.executors.preflight import check_workers, plugin_files
    from bench.provenance import code_fingerprint
    from bench.suites import SUITES

    # absolute paths: a worker's working directory is not the driver's
    code = code_fingerprint(plugin_files(sorted(plan.methods), registry))
    spec = RunSpec(suite=suite.name, plan=plan, data_root=str(Path(data_root).resolve()),
                   out=str(Path(args.out).resolve()), device=str(args.device), force=args.force,
                   loader_workers=args.loader_workers, threads=threads, pretrained=pretrained, download=False,
                   quiet=args.quiet, tags={"code": code}, keep_predictions=getattr(args, "prediction_policy", None),
                   plugins=tuple(str(Path(f).resolve()) for f in getattr(args, "plugins", [])),
                   force_methods=tuple(getattr(args, "force_methods", ())),
                   redo_predating=bool(getattr(args, "redo_predating", False)),
                   suite_object=None if suite.name in SUITES else suite)  # bench.evaluate's own suite
    with open_client(args, workers, threads or 1) as client:
        check_workers(client, spec, registry, say=say)  # exit 2 before any work when a worker cannot run it
        if on_connect is not None:
            on_connect()
        info = client.scheduler_info()
        n = len(info.get("workers", {})) or workers
        where = (args.scheduler or args.scheduler_file or
                 (f"{args.executor.upper()} jobs" if args.executor != "dask" else "a LocalCluster on 127.0.0.1"))
        say(f"executor {args.executor}: {n} worker(s) on {where}, {threads or 'auto'} torch thread(s) each, "
            f"retries {args.retries}; scheduler {info.get('address')}")
        link = getattr(client, "dashboard_link", None)
        if link and _has_bokeh():
            say(f"Dask dashboard: {link}")
        return run_grid(client, spec, suite, store, registry, device, retries=args.retries, parallel=max(1, n),
                        say=say, finished=finished)


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None
