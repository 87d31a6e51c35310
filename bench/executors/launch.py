"""``bench run --executor dask|slurm``: open the cluster, run the grid on it, close it."""
from __future__ import annotations

import contextlib
import sys

from bench.errors import BenchError
from bench.executors.spec import RunSpec


@contextlib.contextmanager
def open_client(args, workers: int, threads: int):
    """A ``distributed.Client`` for ``args``: ``--scheduler`` (an existing cluster), a SLURM
    cluster, or a LocalCluster of ``workers`` processes on 127.0.0.1."""
    from bench.executors.driver import local_cluster, slurm_cluster

    if args.executor == "slurm":
        with slurm_cluster(workers, threads=threads, retries=args.retries, partition=args.slurm_partition,
                           walltime=args.slurm_time, memory=args.slurm_memory, gpus=args.slurm_gpus,
                           scheduler_host=args.slurm_scheduler_host, account=args.slurm_account,
                           log_dir=args.slurm_log_dir) as client:
            yield client
    elif args.scheduler:
        from distributed import Client

        try:
            client = Client(args.scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise BenchError(f"--scheduler {args.scheduler}: no Dask scheduler answers there ({exc})") from None
        with client:
            yield client
    else:
        with local_cluster(workers, retries=args.retries) as client:
            yield client


def run_distributed(args, suite, plan, data_root, device, pretrained, store, registry, workers: int,
                    threads: int | None, on_connect=None):
    """Run the grid of ``plan`` on a Dask cluster; returns the :class:`bench.harness.RunSummary`."""
    from bench.executors.driver import run_grid

    def say(msg):
        if not args.quiet:
            print(f"[{suite.name}] {msg}", file=sys.stderr, flush=True)

    spec = RunSpec(suite=suite.name, plan=plan, data_root=str(data_root), out=str(args.out), device=str(args.device),
                   force=args.force, loader_workers=args.loader_workers, threads=threads, pretrained=pretrained,
                   download=False, quiet=args.quiet)
    with open_client(args, workers, threads or 1) as client:
        if on_connect is not None:
            on_connect()
        info = client.scheduler_info()
        n = len(info.get("workers", {})) or workers
        where = args.scheduler or ("SLURM jobs" if args.executor == "slurm" else "a LocalCluster on 127.0.0.1")
        say(f"executor {args.executor}: {n} worker(s) on {where}, {threads or 'auto'} torch thread(s) each, "
            f"retries {args.retries}; scheduler {info.get('address')}")
        link = getattr(client, "dashboard_link", None)
        if link and _has_bokeh():
            say(f"Dask dashboard: {link}")
        return run_grid(client, spec, suite, store, registry, device, retries=args.retries, parallel=max(1, n),
                        say=say)


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None
