"""Run a grid's cells as tasks on a ``dask.distributed`` client, with progress, retries and
failed cells recorded; the clusters (local processes on 127.0.0.1, SLURM jobs) it can open."""
from __future__ import annotations

import contextlib
import sys
import time
import traceback

from bench.executors.grid import cell_key, grid_cells, map_dependencies, map_jobs
from bench.executors.spec import RunSpec
from bench.harness import GridProgress, RunSummary, cell_identity
from bench.provenance import now


def _token(spec: RunSpec) -> str:
    from bench.store import config_hash

    return config_hash({"key": spec.key(), "at": time.time()}, length=8)


def run_grid(client, spec: RunSpec, suite, store, registry, device, *, retries: int = 2, parallel: int = 1,
             say=None) -> RunSummary:
    """Submit every MAP network and cell of ``spec`` to ``client``, wait for all of them and
    return the summary. A task that raises (or whose worker dies) is retried up to ``retries``
    times by Dask; after that the cell gets a failed record naming the error and the last host."""
    from distributed import as_completed

    import bench.executors.worker as W

    say = say or (lambda msg: print(f"[{suite.name}] {msg}", file=sys.stderr, flush=True))
    deps = map_dependencies(spec.plan, registry, spec.pretrained)
    token = _token(spec)
    map_futs = {}
    for model, s in map_jobs(deps):
        map_futs[(model, s)] = client.submit(W.train_map, spec, model, s, key=f"map-{model}-seed{s}-{token}",
                                             retries=retries, pure=False, priority=10)
    cells = grid_cells(spec.plan)
    cell_futs = {}
    for i, cell in enumerate(cells):
        needs = [map_futs[j] for j in deps[cell_key(cell)]]
        model, method, _, seed = cell
        fut = client.submit(W.run_cell, spec, cell, *needs, key=f"cell-{i:05d}-{model}-{method}-seed{seed}-{token}",
                            retries=retries, pure=False, priority=-i)
        cell_futs[fut.key] = (fut, cell)
    summary = RunSummary()
    progress = GridProgress(len(cells), parallel=parallel)
    pending = dict(cell_futs)
    try:
        for fut in as_completed([f for f, _ in cell_futs.values()] + list(map_futs.values())):
            if fut.key not in cell_futs:  # a MAP network
                model, s = next(k for k, f in map_futs.items() if f.key == fut.key)
                try:
                    r = fut.result()
                    if r["status"] == "trained":
                        say(f"{model} MAP seed {s}: trained in {r['seconds']:.1f} s on {r['host']} ({r['worker']})")
                    elif r["status"] == "failed":
                        say(f"{model} MAP seed {s}: FAILED on {r['host']} ({r['error']}); its cells record it")
                except Exception as exc:  # noqa: BLE001 - its cells fail in turn and are recorded
                    say(f"{model} MAP seed {s}: task lost ({type(exc).__name__}: {exc})")
                continue
            _, cell = pending.pop(fut.key)
            cid = cell_identity(suite, spec.plan, store, registry, *cell, device, spec.pretrained)
            try:
                r = fut.result()
                part = r["summary"]
                for k in ("fitted", "loaded", "skipped", "records", "eval_examples"):
                    setattr(summary, k, getattr(summary, k) + part[k])
                summary.eval_seconds += part["eval_seconds"]
                summary.failed.extend(part["failed"])
                worked = not part["skipped"]
                what = ("FAILED" if part["failed"] else "fitted" if part["fitted"] else "evaluated" if part["loaded"]
                        else "skipped (done earlier or run elsewhere)")
                say(f"{cid.tag}: {what}, {part['records']} record(s), {r['seconds']:.1f} s on {r['host']} "
                    f"({r['worker']})")
                progress.cell_done(r["seconds"], worked=worked)
            except Exception as exc:  # noqa: BLE001 - retries exhausted, or the worker kept dying
                msg = record_executor_failure(store, cid, exc, retries)
                summary.failed.append(f"{cid.tag}: {msg}")
                summary.records += 1
                say(f"{cid.tag}: FAILED after {retries} retr{'y' if retries == 1 else 'ies'} ({msg}); recorded, "
                    f"continuing")
                progress.cell_done(0.0, worked=False)
            say(progress.line())
    except BaseException:
        client.cancel([f for f, _ in pending.values()] + list(map_futs.values()))
        raise
    return summary


def record_executor_failure(store, cid, exc: BaseException, retries: int) -> str:
    """A failed record for a cell whose task never came back (retries exhausted, its worker died):
    flagged ``executor_failure`` so that the next run retries it (a method's own failure is
    kept until ``--force``). The host is the last worker's when Dask names it."""
    msg = exc.error if hasattr(exc, "error") and hasattr(exc, "worker") else f"{type(exc).__name__}: {exc}"
    rec = {**cid.base, "status": "failed", "kind": "fit", "shift": "fit", "severity": None, "error": msg,
           "expected": False, "executor_failure": True, "retries": retries,
           "traceback": "".join(traceback.format_exception(exc, limit=-8)), "finished_at": now()}
    last = getattr(exc, "last_worker", None)  # distributed's KilledWorker: only the worker's address
    if last is not None:
        rec["worker"] = f"dask:{getattr(last, 'name', '?')}@{getattr(last, 'address', last)}"
        rec["host"] = _host_of(rec["worker"]) or "unknown"
    elif hasattr(exc, "worker") and hasattr(exc, "host"):  # a TaskError: raised in a worker
        rec["worker"], rec["host"] = exc.worker, exc.host
    else:  # lost before any worker reported (e.g. cancelled): not where the cell ran
        rec["worker"], rec["host"] = "unknown", "unknown"
    rec["pid"] = None
    store.write(cid.run_dir, rec)
    return msg


def _host_of(worker: str) -> str | None:
    """The host part of ``dask:<name>@tcp://<host>:<port>`` (None when there is none)."""
    if "@" not in worker:
        return None
    addr = worker.split("@", 1)[1]
    addr = addr.split("://", 1)[-1]
    return addr.rsplit(":", 1)[0] or None


@contextlib.contextmanager
def local_cluster(workers: int, *, retries: int, dashboard: bool = True):
    """A ``LocalCluster`` of ``workers`` processes (one task each at a time) bound to 127.0.0.1,
    and a client on it. Workers may start loader processes (not daemonic); no memory limit, as for
    processes of a local run. The dashboard (when ``bokeh`` is installed) on 127.0.0.1, a free port."""
    import dask
    from distributed import Client, LocalCluster

    dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": retries})
    dash = "127.0.0.1:0" if dashboard else None
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=dash, memory_limit=0, silence_logs=40) as cluster, Client(cluster) as client:
        yield client


def _scheduler_options(host: str | None) -> dict:
    """The scheduler (and its dashboard) on ``host``; on a loopback host the dashboard takes a free
    loopback port, so that nothing listens beyond this machine."""
    if not host:
        return {}
    return {"host": host, **({"dashboard_address": f"{host}:0"} if host.startswith("127.") else {})}


@contextlib.contextmanager
def slurm_cluster(jobs: int, *, threads: int, retries: int, partition: str | None, walltime: str, memory: str,
                  gpus: int, scheduler_host: str | None, account: str | None, log_dir: str | None):
    """A Dask cluster whose ``jobs`` workers are SLURM jobs (``dask_jobqueue.SLURMCluster``): one
    worker per job running one task at a time with ``threads`` CPUs (``--cpus-per-task``) and
    ``gpus`` GPUs (``--gres=gpu:N``). The scheduler runs in this process (on ``scheduler_host``)."""
    import dask
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": retries})
    extra = [f"--gres=gpu:{gpus}"] if gpus else []
    kw = dict(queue=partition, account=account, cores=1, processes=1, job_cpu=threads, memory=memory,
              walltime=walltime, job_extra_directives=extra, python=sys.executable,
              scheduler_options=_scheduler_options(scheduler_host),
              log_directory=log_dir, job_script_prologue=[f"export OMP_NUM_THREADS={threads} OMP_WAIT_POLICY=PASSIVE"])
    with SLURMCluster(**{k: v for k, v in kw.items() if v is not None}) as cluster:
        cluster.scale(jobs=jobs)
        with Client(cluster) as client:
            yield client
