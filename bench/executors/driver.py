"""Run a grid's cells as tasks on a ``dask.distributed`` client, with progress, retries and
failed cells recorded; the clusters (local processes on 127.0.0.1, SLURM jobs) it can open."""
from __future__ import annotations

import contextlib
import shlex
import sys
import time
import traceback

from bench.executors import WORKER_CONFIG, worker_config_words
from bench.executors.grid import cell_key, grid_cells, map_dependencies, map_jobs
from bench.executors.spec import RunSpec
from bench.harness import GridProgress, RunSummary, cell_identity
from bench.provenance import now


def _token(spec: RunSpec) -> str:
    from bench.store import config_hash

    return config_hash({"key": spec.key(), "at": time.time()}, length=8)


#: how often (seconds) the driver says so while no worker is connected, and how long it waits
#: for one before it gives up (the cells left get failed records the next run retries)
NO_WORKER_SAY_S = 60.0
NO_WORKER_GIVE_UP_S = 6 * 3600.0


def run_grid(client, spec: RunSpec, suite, store, registry, device, *, retries: int = 2, parallel: int = 1,
             say=None, finished=None, no_worker_give_up_s: float | None = None) -> RunSummary:
    """Submit the MAP networks and cells of ``spec`` to ``client``, wait for all of them and
    return the summary. A task that raises (or whose worker dies) is retried up to ``retries``
    times by Dask; after that the cell gets a failed record naming the error and the last host.

    ``finished(cell) -> str | None`` says, in the driver, why a cell needs no work (its records
    exist): such a cell is not sent, and a MAP network only the finished cells need is not trained.
    While no worker is connected (batch jobs queued, or ended at their wall time and not yet
    replaced) the driver says so every :data:`NO_WORKER_SAY_S` seconds and gives up after
    ``no_worker_give_up_s``."""
    from distributed import as_completed

    import bench.executors.worker as W

    say = say or (lambda msg: print(f"[{suite.name}] {msg}", file=sys.stderr, flush=True))
    give_up = NO_WORKER_GIVE_UP_S if no_worker_give_up_s is None else no_worker_give_up_s
    cells = grid_cells(spec.plan)
    summary = RunSummary()
    done = {}
    if finished is not None and not spec.force:  # (the driver's `finished` knows --force-method's cells)
        for cell in cells:
            why = finished(cell)
            if why:
                done[cell_key(cell)] = why
    todo = [c for c in cells if cell_key(c) not in done]
    if done:
        summary.skipped += len(done)
        say(f"{len(done)} of {len(cells)} cell(s) finished earlier (their records exist): not sent")
    deps = {k: v for k, v in map_dependencies(spec.plan, registry, spec.pretrained).items() if k not in done}
    token = _token(spec)
    map_futs = {}
    for model, s in map_jobs(deps):
        map_futs[(model, s)] = client.submit(W.train_map, spec, model, s, key=f"map-{model}-seed{s}-{token}",
                                             retries=retries, pure=False, priority=10)
    cell_futs = {}
    for i, cell in enumerate(cells):
        if cell_key(cell) in done:
            continue
        needs = [map_futs[j] for j in deps[cell_key(cell)]]
        model, method, _, seed = cell
        fut = client.submit(W.run_cell, spec, cell, *needs, key=f"cell-{i:05d}-{model}-{method}-seed{seed}-{token}",
                            retries=retries, pure=False, priority=-i)
        cell_futs[fut.key] = (fut, cell)
    progress = GridProgress(len(cells), parallel=parallel)
    for _ in done:
        progress.cell_done(0.0, worked=False)
    pending = dict(cell_futs)
    watch = _WorkerWatch(client, say, give_up)
    try:
        for fut in _completed(as_completed([f for f, _ in cell_futs.values()] + list(map_futs.values())), watch):
            if fut is None:  # no worker for too long: the cells left are recorded as failed
                for key, (f, cell) in list(pending.items()):
                    cid = cell_identity(suite, spec.plan, store, registry, *cell, device, spec.pretrained)
                    msg = record_executor_failure(store, cid, TimeoutError(watch.reason()), retries)
                    summary.failed.append(f"{cid.tag}: {msg}")
                    summary.records += 1
                    pending.pop(key)
                client.cancel([f for f, _ in cell_futs.values()] + list(map_futs.values()))
                say(f"gave up: {watch.reason()}; {len(summary.failed)} cell(s) recorded as failed (the next run "
                    f"retries them)")
                break
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


class _WorkerWatch:
    """Notices a cluster without workers: says so now and then, and tells when to give up."""

    def __init__(self, client, say, give_up_s: float):
        self.client, self.say, self.give_up_s = client, say, give_up_s
        self.since = None  # monotonic time since which no worker has been connected
        self.said = 0.0

    def _workers(self) -> int:
        try:
            return len(self.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - a scheduler that does not answer counts as no workers
            return 0

    def tick(self) -> bool:
        """False when it is time to give up."""
        t = time.monotonic()
        if self._workers():
            if self.since is not None and t - self.since >= NO_WORKER_SAY_S:
                self.say("workers are back; continuing")
            self.since = None
            return True
        if self.since is None:
            self.since, self.said = t, t
        elif t - self.said >= NO_WORKER_SAY_S:
            self.said = t
            self.say(f"no worker connected for {t - self.since:.0f} s (batch jobs queued, or ended at their wall "
                     f"time and not yet replaced: see squeue and the job logs); waiting, giving up after "
                     f"{self.give_up_s:.0f} s")
        return t - self.since < self.give_up_s

    def reason(self) -> str:
        return f"no worker connected for {self.give_up_s:.0f} s"


def _completed(ac, watch: _WorkerWatch, poll_s: float = 0.5):
    """The futures of ``ac`` (a ``distributed.as_completed``) as they finish; ``None`` once when
    ``watch`` says to give up."""
    while not ac.is_empty():
        batch = ac.next_batch(block=False)
        if batch:
            yield from batch
            continue
        if not watch.tick():
            yield None
            return
        time.sleep(poll_s)


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

    dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": retries,
                     **WORKER_CONFIG})  # the nannies hand the workers this configuration
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


def walltime_seconds(text) -> float | None:
    """Seconds of a batch wall time: ``[D-]HH:MM:SS``, ``HH:MM`` (LSF's form, as dask-jobqueue
    writes it), ``MM`` minutes; None when absent or unreadable."""
    if not text:
        return None
    text = str(text).strip()
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    if len(parts) == 3:
        h, m, sec = parts
    elif len(parts) == 2:
        h, m, sec = parts[0], parts[1], 0
    elif len(parts) == 1:
        h, m, sec = 0, parts[0], 0
    else:
        return None
    return float(days * 86400 + h * 3600 + m * 60 + sec)


def worker_lifetime(walltime_s: float) -> tuple[int, int]:
    """(lifetime, stagger) in seconds for a worker in a job of ``walltime_s``: it retires (its
    task goes back to the scheduler and resumes from its partial checkpoint elsewhere) a margin
    before the batch system kills it, a fifth of the wall time at most five minutes."""
    margin = min(300.0, 0.2 * walltime_s)
    stagger = min(60.0, 0.05 * walltime_s)
    return max(1, int(walltime_s - margin - stagger)), int(stagger)


def jobqueue_options(kind: str, *, threads: int, queue=None, account=None, walltime=None, memory=None, gpus: int = 0,
                     scheduler_host=None, log_dir=None, site: dict | None = None) -> dict:
    """The keyword arguments of dask-jobqueue's cluster class for ``kind`` (slurm, pbs, lsf).

    What the user gave overrides the site's ``jobqueue.yaml`` (``site``: ``dask.config`` of
    ``jobqueue.<kind>``); what they did not give is not passed, so the site's value stands. Lists
    the site sets (job directives, prologue, worker arguments) are extended, never replaced. Always
    set: one worker process with one task slot per job (``threads`` CPUs for torch), this Python,
    and a worker ``--lifetime`` shorter than the wall time, so that workers retire before the batch
    system kills them and ``adapt`` submits new jobs."""
    from bench.errors import BenchError

    site = dict(site or {})
    kw = {"cores": 1, "processes": 1, "python": sys.executable}
    if queue:
        kw["queue"] = queue
    if account:
        kw["project" if kind == "lsf" else "account"] = account
    if walltime:
        kw["walltime"] = walltime
    if memory:
        kw["memory"] = memory
    elif not site.get("memory"):
        raise BenchError(f"--executor {kind}: no memory per job: give --job-memory (e.g. 8GB) or set "
                         f"jobqueue.{kind}.memory in ~/.config/dask/jobqueue.yaml")
    if log_dir:
        kw["log_directory"] = log_dir
    if scheduler_host:
        kw["scheduler_options"] = {**(site.get("scheduler-options") or {}), **_scheduler_options(scheduler_host)}
    if kind == "slurm":
        kw["job_cpu"] = threads
    elif kind == "lsf":
        kw["ncpus"] = threads
    elif kind == "pbs" and not site.get("resource-spec"):
        kw["resource_spec"] = f"select=1:ncpus={threads}:mem={memory or site.get('memory')}"
    directives = list(site.get("job-extra-directives") or site.get("job-extra") or [])
    if gpus:
        directives.append(f"--gres=gpu:{gpus}" if kind == "slurm" else
                          f"-gpu num={gpus}" if kind == "lsf" else f"-l ngpus={gpus}")
    if directives:
        kw["job_extra_directives"] = directives
    from bench.allocator import environment_words

    # the worker process starts with them, whatever the batch system passes on (bench/allocator.py)
    kw["job_script_prologue"] = [*(site.get("job-script-prologue") or site.get("env-extra") or []),
                                 " ".join(["export", f"OMP_NUM_THREADS={threads}", "OMP_WAIT_POLICY=PASSIVE",
                                           *map(shlex.quote, environment_words() + worker_config_words())])]
    wall = walltime_seconds(walltime or site.get("walltime"))
    args = list(site.get("worker-extra-args") or site.get("extra") or [])
    if wall and "--lifetime" not in args:
        life, stagger = worker_lifetime(wall)
        args += ["--lifetime", f"{life}s", "--lifetime-stagger", f"{stagger}s"]
    kw["worker_extra_args"] = args
    return kw


def _jobqueue_class(kind: str):
    import dask_jobqueue

    from bench.executors import BATCH_EXECUTORS

    return getattr(dask_jobqueue, BATCH_EXECUTORS[kind])


@contextlib.contextmanager
def batch_cluster(kind: str, jobs: int, *, retries: int, threads: int, dry_run: bool = False, **options):
    """A Dask cluster whose workers are ``jobs`` batch jobs of ``kind`` (slurm, pbs, lsf), kept at
    that number by ``adapt``: a worker that retires at its lifetime (or whose job dies) is replaced
    by a new job. Yields a client, or with ``dry_run`` the job script (nothing submitted). The
    scheduler runs in this process."""
    import dask
    from distributed import Client

    dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": retries})
    site = dask.config.get(f"jobqueue.{kind}", default={}) or {}
    kw = jobqueue_options(kind, threads=threads, site=site, **options)
    with _jobqueue_class(kind)(**kw) as cluster:
        if dry_run:
            yield cluster.job_script()
            return
        cluster.adapt(minimum_jobs=jobs, maximum_jobs=jobs)
        with Client(cluster) as client:
            yield client
