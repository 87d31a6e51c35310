"""Command line: ``python -m bench {run,report,leaderboard,select,list,perf,rescore,...}``. Bad input exits with code 2."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

from bench.errors import BenchError
from bench.executors import BATCH_EXECUTORS, EXECUTORS

EPILOG_RUN = """examples:
  python -m bench run --suite mnist_rotated --profile quick --data-root data
  python -m bench run --suite mnist_rotated --methods deterministic,deep_ensemble --seeds 0,1
  python -m bench run --suite toy --profile smoke --set train.epochs=100 --set mc_dropout.p=0.05,0.2
  python -m bench run --suite cifar10c --plan        # what the grid has left, cell by cell; runs nothing

--set key=value[,value...] overrides (several values sweep a method option):
  <method>.<option>   e.g. deep_ensemble.members=3, pbn.r_bayes=0.01,0.05
  train.<field>       epochs, batch_size, optimizer, lr, momentum, weight_decay, schedule, ...
  data.<field>        suite data options (e.g. data.n_train=5000)
  models=a,b / seeds=0,1  a model: a registered name, MODULE:FACTORY (your factory returning an nn.Module)
                         or timm:NAME (docs/your_model.md)

exit codes: 0 the grid ran (a failed cell is recorded and listed, the others go on); 1 every cell of
the grid failed; 2 bad input or bad data (nothing run); 130 interrupted (run again to resume)
"""


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


#: the kinds of evaluation set a cell scores (bench.data.EvalSet.kind; "val": the held-out validation split)
SET_KINDS = ("id", "val", "shift", "ood")


def _workers(text: str) -> int:
    if text == "auto":
        return -1  # resolved per executor (check_executor_args)
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"--loader-workers expects 'auto' or an integer >= 0, got {text!r}")
    return n


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return n


def _nonneg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return n


def _seeds(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds expects comma-separated integers, got {text!r}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _plugin_option(parser) -> None:
    parser.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="FILE",
                        help="a method plugin file outside the repository (repeatable; docs/plugins.md); installed "
                             "plugins of the entry-point group bench.methods are loaded without it")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m bench", description="Benchmark of Bayesian subnetwork uncertainty methods under shift.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="train and evaluate methods on a suite, then write its report",
                       epilog=EPILOG_RUN, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--suite", required=True, help="suite name (see `list`)")
    r.add_argument("--methods", type=_csv, default=None, help="comma-separated method names (default: the suite's)")
    r.add_argument("--seeds", type=_seeds, default=None, help="comma-separated seeds (default: the profile's)")
    r.add_argument("--profile", default="quick",
                   help="smoke | quick | paper, or a suite's own (mnist_rotated: tour, the 20-minute main job; "
                        "python -m bench list) (default: quick)")
    r.add_argument("--data-root", default=None, help="dataset root (default: $BENCH_DATA_ROOT or ./data)")
    r.add_argument("--out", default="results", help="results directory: records and checkpoints (default: results)")
    r.add_argument("--report-dir", default=None,
                   help="where the report is written (default: reports/ beside a results directory named "
                        "'results', else <out>/reports)")
    r.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    r.add_argument("--loader-workers", type=_workers, default="auto",
                   help="loader processes that decode file-backed evaluation sets (JPEG folders, .npy files) "
                        "in each process that evaluates; 0 reads them in that process; never changes a number "
                        "(default: auto = CPU cores - 1, at most 8, for --executor local; 0 on a cluster)")
    ex = r.add_argument_group("executors (where the cells run; see README 'Scale out')")
    ex.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="local: cell after cell in this process (default); dask: cells as tasks on a Dask "
                         "cluster (--scheduler / --scheduler-file, else a LocalCluster on 127.0.0.1); slurm, pbs, "
                         "lsf: Dask workers as batch jobs (dask-jobqueue), resubmitted when they reach their wall "
                         "time")
    ex.add_argument("--scheduler", default=None, metavar="ADDRESS",
                    help="dask: an existing scheduler, e.g. tcp://10.0.0.5:8786 (default: start a LocalCluster)")
    ex.add_argument("--scheduler-file", default=None, metavar="PATH",
                    help="dask: an existing scheduler's file (dask scheduler --scheduler-file PATH)")
    ex.add_argument("--workers", type=_positive, default=None,
                    help="dask: worker processes of the LocalCluster (default: CPU cores, or GPUs on CUDA, one GPU "
                         "each); slurm/pbs/lsf: batch jobs kept running, one worker each (default: 1)")
    ex.add_argument("--threads", type=_positive, default=None,
                    help="torch threads per process (default: local: $OMP_NUM_THREADS if set, else the CPU cores of "
                         "the affinity mask; dask: those cores divided by the workers, at least 1)")
    ex.add_argument("--retries", type=_nonneg, default=2,
                    help="dask and batch executors: times a task whose worker died or that raised is retried "
                         "before its cell is recorded as failed (default: 2)")
    jq = r.add_argument_group(
        "batch jobs (--executor slurm, pbs, lsf): an option given here overrides the site's jobqueue.yaml; one "
        "not given leaves it alone (docs/scaleout.md)")
    jq.add_argument("--job-queue", "--slurm-partition", dest="job_queue", default=None,
                    help="partition / queue (default: jobqueue.yaml's, else the cluster's)")
    jq.add_argument("--job-account", "--slurm-account", dest="job_account", default=None, help="account to charge")
    jq.add_argument("--job-time", "--slurm-time", dest="job_time", default=None, metavar="HH:MM:SS",
                    help="wall time per job (default: jobqueue.yaml's); workers retire shortly before it and new "
                         "jobs replace them")
    jq.add_argument("--job-memory", "--slurm-memory", dest="job_memory", default=None, metavar="SIZE",
                    help="memory per job, e.g. 8GB (default: jobqueue.yaml's; required when it has none)")
    jq.add_argument("--job-gpus", "--slurm-gpus", dest="job_gpus", type=_nonneg, default=0,
                    help="GPUs per job (slurm: --gres=gpu:N; default: 0)")
    jq.add_argument("--scheduler-host", "--slurm-scheduler-host", dest="scheduler_host", default=None,
                    help="address the Dask scheduler (in this process) listens on, reachable from the nodes "
                         "(default: dask-jobqueue's)")
    jq.add_argument("--job-log-dir", "--slurm-log-dir", dest="job_log_dir", default=None,
                    help="where the jobs' output goes (default: jobqueue.yaml's, else the cwd)")
    jq.add_argument("--dry-run", action="store_true",
                    help="print the job script the batch executor would submit and exit (nothing submitted, "
                         "nothing written)")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE[,VALUE...]",
                   help="override or sweep a setting (repeatable; see below)")
    r.add_argument("--force", action="store_true", help="redo finished cells instead of resuming")
    r.add_argument("--only-sets", type=_csv, default=None, metavar="KIND[,KIND]",
                   help=f"evaluate only the sets of these kinds ({', '.join(SET_KINDS)}) in this run: a cell's "
                        "other sets stay to do, and a later run without it evaluates them from the cell's fitted "
                        "checkpoint (bench tune --validation-first); local runs only")
    r.add_argument("--force-method", dest="force_methods", type=_csv, action="extend", default=[], metavar="NAME",
                   help="refit and re-evaluate the cells of these methods only (repeatable or comma-separated); "
                        "unlike --force, the cached MAP networks are kept, not retrained")
    r.add_argument("--redo-predating", action="store_true",
                   help="refit and re-evaluate the finished cells whose records predate a validity check a refit "
                        "measures (their verdict says 'it predates the check: rerun the cell'; "
                        "bench.validity.REFIT_MEASURES); the cached MAP networks are kept")
    r.add_argument("--plan", action="store_true",
                   help="print what this command would do with each cell of the grid, read from --out (nothing to "
                        "do, evaluate from its fitted checkpoint, fit or resume a stopped training, refit; the MAP "
                        "networks it would train) and stop: nothing is downloaded or fitted, nothing written under "
                        "--out (shifted sets a suite generates from its data are made first, as a run makes them)")
    _plugin_option(r)
    kp = r.add_argument_group("kept predictions (docs/predictions.md; python -m bench rescore)")
    kp.add_argument("--keep-predictions", action="store_true",
                    help="write each record's predictive (probabilities, per-sample probabilities of sampling "
                         "methods, labels; regression: mean, variance, targets) to a .npz beside it, for bench "
                         "rescore; a finished cell whose records lack them is re-evaluated (not refitted) to add "
                         "them. Segmentation records say they are not kept")
    kp.add_argument("--predictions-max-mb", type=float, default=None, metavar="MIB",
                    help="bound on one file's uncompressed arrays: the per-sample probabilities are dropped first "
                         "(the record says so), then nothing is kept (default: 64)")
    kp.add_argument("--predictions-dtype", choices=("float32", "float16"), default=None,
                    help="dtype of the kept class probabilities: float32 rescores to the same numbers, float16 "
                         "halves the size, metrics then agree to ~1e-3 (default: float32)")
    r.add_argument("--no-download", action="store_true", help="never try to download missing data")
    r.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    r.add_argument("--quiet", action="store_true", help="no progress output")

    rep = sub.add_parser("report", help="build HTML and markdown reports from stored records (no training)")
    rep.add_argument("--results", default="results", help="results directory (default: results)")
    rep.add_argument("--out", default=None, help="report directory (default: reports/ beside a results directory "
                                                 "named 'results', else <results>/reports)")
    rep.add_argument("--suite", action="append", default=None, help="only this suite (repeatable)")

    lb = sub.add_parser("leaderboard", help="rank method configurations across results directories (HTML, "
                                            "markdown, CSV), quality beside cost")
    lb.add_argument("--results", nargs="+", default=["results"], metavar="DIR",
                    help="one or more results directories, pooled (default: results)")
    lb.add_argument("--out", default="reports/leaderboard",
                    help="where leaderboard.{html,md,csv} and figures/ go (default: reports/leaderboard)")
    lb.add_argument("--metric", default="shift.nll",
                    help="ranking column: id.<m>, shift.<m> (m: accuracy, nll, brier, ece; segmentation: miou, "
                         "pixel_accuracy, dice (binary suites, e.g. camvid_binary); regression: rmse) or ood.<set>.auroc (default: shift.nll)")
    for name, what in (("suite", "suites"), ("model", "models"), ("profile", "profiles"), ("method", "methods"),
                       ("commit", "commits (prefixes)")):
        lb.add_argument(f"--{name}", type=_csv, default=None, help=f"only these {what}, comma-separated")
    lb.add_argument("--exclude-label", action="append", default=None, metavar="LABEL",
                    help="leave out this configuration, by its label as the tables show it (a label has commas: "
                         "one per flag, e.g. 'deterministic[lr=0.001,optimizer=adam,weight_decay=0]'; repeatable)")
    lb.add_argument("--chosen-only", action="store_true",
                    help="of a method tuned by bench tune, only the configuration it chose (the stored "
                         "<results>/<suite>/tuning/<profile>.json); its other configurations (rejected candidates, an "
                         "earlier space's sweep) are left out")
    lb.add_argument("--with-controls", action="store_true",
                    help="with --chosen-only: also rank each kept configuration's controls (the method's CONTROLS, "
                         "bench list: e.g. PBN's chosen options with a random subnetwork, or with no stochastic "
                         "weight), each named in a note")
    lb.add_argument("--include-smoke", action="store_true",
                    help="also rank smoke-profile records (marked as such wherever shown)")
    lb.add_argument("--print-tables", action="store_true",
                    help="print the ranked tables as markdown on stdout (for README/docs) instead of the summary")
    lb.add_argument("--pareto-figure", default=None, metavar="PATH",
                    help="also write the board's Pareto figure to PATH (PNG; for README/docs): the ranking metric "
                         "against costs that do not depend on the machine's load (prediction MFLOP per example, "
                         "stochastic parameters), method names as labels; the filters must leave one board")

    tu = sub.add_parser("tune", help="the tuning protocol: sweep every method's deciding options (the same number "
                                     "of configurations each, bench/tuning.py) and choose on the validation split")
    tu.add_argument("--suite", required=True)
    tu.add_argument("--profile", default="quick", help="the profile whose budget the sweeps run at (default: quick)")
    tu.add_argument("--methods", type=_csv, default=None,
                    help="comma-separated (default: the suite's default methods that have a space)")
    tu.add_argument("--out", default="results", help="results directory (default: results)")
    tu.add_argument("--data-root", default=None, help="data root (default: $BENCH_DATA_ROOT or data/)")
    tu.add_argument("--device", default="auto", help="auto, cpu or cuda[:k] (default: auto)")
    tu.add_argument("--threads", type=_positive, default=None, help="torch threads (default: as bench run)")
    tu.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="passed on to every sweep (e.g. models=lenet_300_100, seeds=0,1); not the tuned options")
    tu.add_argument("--select-only", action="store_true", help="no training: choose from the records there are")
    tu.add_argument("--validation-first", action="store_true",
                    help="score the candidates on the validation and clean test sets only, then the chosen one on "
                         "every set (from its fitted checkpoint): the others' shifted and OOD sets are not evaluated")
    tu.add_argument("--probe-edges", action="store_true",
                    help="after choosing, fit each choice one step past every end of its space it sits at (the "
                         "validation and clean test sets, the choice's seeds; with --select-only: from the records "
                         "there are) and store whether the protocol would have chosen that fit: a choice a probe "
                         "beats is at the edge of its space, its rows no verdict on the method (docs/validity.md); "
                         "a method built on the MAP network whose networks are not kept under --out is probed "
                         "beside the choice fitted again, on networks trained in <out>-edge-probes")
    tu.add_argument("--redo-predating", action="store_true",
                    help="passed on to the sweeps (bench run --redo-predating): candidates whose records predate a "
                         "validity check are refitted, so that the choice is made among fits the checks can judge")
    tu.add_argument("--plan", action="store_true",
                    help="print what each sweep would do with each of its cells (bench run --plan) and stop: "
                         "nothing fitted or chosen, nothing written under --out")
    tu.add_argument("--markdown", action="store_true",
                    help="print the stored tuning of --suite/--profile as a markdown table and write nothing")
    tu.add_argument("--candidates", metavar="METHOD", default=None,
                    help="with --markdown: METHOD's candidates instead (per-seed validation NLL, verdict, choice)")
    tu.add_argument("--quiet", action="store_true", help="no progress output from the sweeps")
    tu.add_argument("--spaces", action="store_true", help="print every method's space as markdown and exit")
    _plugin_option(tu)

    sel = sub.add_parser("select", help="choose swept options of a method on the validation split (no training)")
    sel.add_argument("--results", default="results", help="results directory (default: results)")
    sel.add_argument("--suite", required=True)
    sel.add_argument("--method", required=True)
    sel.add_argument("--tune", type=_csv, required=True, help="comma-separated option names that were swept")
    sel.add_argument("--model", default=None, help="only this model (default: every model with records)")
    sel.add_argument("--markdown", action="store_true",
                     help="print the choice as a markdown table (every candidate's per-seed validation score) and "
                          "write nothing (for README tables)")

    rs = sub.add_parser("rescore", help="recompute the metrics of records from their kept predictions (bench run "
                                        "--keep-predictions), no refitting; add metrics registered since")
    rs.add_argument("--results", default="results", help="results directory (default: results)")
    rs.add_argument("--suite", action="append", default=None, help="only this suite (repeatable)")
    rs.add_argument("--metrics", type=_csv, default=[],
                    help="registered metrics to add, comma-separated, or 'all' (bench.metrics.METRICS: "
                         "adaptive_ece, classwise_ece, ...); the records' own metrics are always recomputed")
    rs.add_argument("--dry-run", action="store_true",
                    help="recompute and compare with the stored metrics, write nothing (checks a published run)")

    _plugin_option(sub.add_parser("list", help="show methods, suites, profiles and each suite's shifts"))

    cp = sub.add_parser("check-plugin", help="check method plugins against the plugin contract (docs/plugins.md): "
                                             "the static rules, then the contract tests on each method")
    cp.add_argument("files", nargs="*", metavar="FILE", help="plugin files (as --plugin FILE)")
    cp.add_argument("--method", dest="check_methods", type=_csv, action="extend", default=[], metavar="NAME",
                    help="methods to check (default: those the files register; with no file, every entry-point "
                         "plugin's)")
    cp.add_argument("--static", action="store_true", help="only the static rules (no fitting, no pytest)")

    sub.add_parser("worker-env", help="print what a Dask worker started by hand needs in its environment from its "
                                      "start, as NAME=value words (glibc's allocator settings, OpenMP's wait "
                                      "policy, Dask's profiler off): env $(python -m bench worker-env) dask "
                                      "worker ... (docs/scaleout.md)")

    perf = sub.add_parser("perf", help="benchmarks that print speed ratios measured side by side")
    perf.add_argument("--repeats", type=int, default=5)
    perf.add_argument("--device", default="auto")
    perf.add_argument("--case", dest="cases", type=_csv, default=None, help="comma-separated case names (default: all)")
    perf.add_argument("--save", default=None, metavar="PATH",
                      help="also write the rows and the machine they ran on to PATH (JSON; "
                           "benchmarks/perf_table.py renders it), merged by (case, model, measure)")
    return p


def cmd_worker_env(_args) -> int:
    from bench.allocator import environment_words
    from bench.executors import worker_config_words

    words = [f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"] * ("OMP_WAIT_POLICY" in os.environ)
    print(" ".join(words + environment_words() + worker_config_words()))
    return 0


def cmd_list(_args) -> int:
    from bench.models import MODELS
    from bench.suites import PROFILES, SUITES
    from bench.plugins import source_of
    from bench.validity import CHECKS
    from methods import METHODS

    print("methods:")
    for name in METHODS.names():
        cls = METHODS.get(name)
        opts = ", ".join(f"{k}={v}" for k, v in cls.defaults.items()) or "no options"
        print(f"  {name:16s} {cls.description}\n  {'':16s} tasks: {', '.join(cls.tasks)}\n  {'':16s} options: {opts}")
        src = source_of(cls)
        if src.external:
            print(f"  {'':16s} plugin: {src.where} (sha256 {str(src.sha256)[:12]})")
        for key, why in cls.OWN_BUDGET.items():
            print(f"  {'':16s} replaces the profile's train.{key}: {why}")
        print(f"  {'':16s} validity checks: {', '.join(cls.VALIDITY_CHECKS)}")
        for cname, over in cls.CONTROLS.items():
            print(f"  {'':16s} control: {cname} ({', '.join(f'{k}={v}' for k, v in over.items())})")
    print("\nvalidity checks (bench.validity; a row that fails one is marked and never ranked best):")
    for cname in CHECKS.names():
        print(f"  {cname}: {CHECKS.get(cname).description}")
    print(f"\nmodels: {', '.join(MODELS.names())}; or your own: --set models=MODULE:FACTORY, timm:NAME "
          f"(docs/your_model.md)")
    print(f"profiles: {', '.join(PROFILES)} (every suite), and a suite's own where it lists one")
    print("\nsuites:")
    for name in SUITES.names():
        suite = SUITES.get(name)()
        print(f"  {name}: {suite.description}")
        print(f"    task: {suite.task.kind}; default methods: {', '.join(suite.default_methods)}")
        for prof in [*PROFILES, *(p for p in suite.profiles if p not in PROFILES)]:
            pc = suite.profiles[prof]
            print(f"    {prof}: models {','.join(pc['models'])}; seeds {','.join(map(str, pc['seeds']))}; "
                  f"epochs {pc['train']['epochs']}")
        print("    evaluation sets (quick/paper): " + "; ".join(suite.describe_shifts(suite.profiles["quick"].get("data", {}))))
    return 0


def default_report_dir(results) -> Path:
    """``reports/`` beside ``results/`` (the README's layout); for any other results directory,
    ``<results>/reports``, so that two runs with different ``--out`` never share a report."""
    results = Path(results)
    return results.parent / "reports" if results.name == "results" else results / "reports"


def check_writable(path, what: str) -> None:
    """BenchError (exit 2) unless ``path`` is, or can be created as, a writable directory:
    checked before any data is loaded or anything trained. Creates nothing."""
    p = Path(path).resolve()
    if p.exists() and not p.is_dir():
        raise BenchError(f"{what} {path} exists and is not a directory")
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise BenchError(f"{what} {path} cannot be created: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BenchError(f"{what} {path} is not writable ({probe} does not allow writing)")


def _env_threads() -> int | None:
    """OMP_NUM_THREADS as the user set it (a positive integer), else None."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n > 0 else None


def check_executor_args(args, device) -> tuple[int, int | None]:
    """Validate the executor options (BenchError on a contradiction) and fix the thread policy:
    returns (workers, torch threads per worker process). On ``local`` torch gets its threads here."""
    from bench.threads import apply_threads, available_cores, default_workers, threads_per_worker

    batch = args.executor in BATCH_EXECUTORS
    if args.dry_run and not batch:
        raise BenchError(f"--dry-run prints a batch job script: it is for --executor {', '.join(BATCH_EXECUTORS)}")
    if not batch:
        given = [opt for opt, val in (("--job-queue", args.job_queue), ("--job-account", args.job_account),
                                      ("--job-time", args.job_time), ("--job-memory", args.job_memory),
                                      ("--job-gpus", args.job_gpus), ("--scheduler-host", args.scheduler_host),
                                      ("--job-log-dir", args.job_log_dir)) if val]
        if given:
            raise BenchError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --executor "
                             f"{', '.join(BATCH_EXECUTORS)} (batch jobs)")
    if args.scheduler and args.scheduler_file:
        raise BenchError("--scheduler and --scheduler-file name the same thing: give one")
    if args.executor == "local":
        for opt, val in (("--scheduler", args.scheduler), ("--scheduler-file", args.scheduler_file),
                         ("--workers", args.workers)):
            if val is not None:
                raise BenchError(f"{opt} is for --executor dask or a batch executor (the loader processes of a "
                                 f"local run are --loader-workers)")
        if args.loader_workers < 0:
            args.loader_workers = default_workers()
        threads = args.threads or _env_threads() or available_cores()
        apply_threads(threads)
        return 1, threads
    if batch and (args.scheduler or args.scheduler_file):
        raise BenchError(f"--scheduler / --scheduler-file are for --executor dask; --executor {args.executor} starts "
                         f"its own scheduler")
    if args.scheduler_file and not Path(args.scheduler_file).is_file():
        raise BenchError(f"--scheduler-file {args.scheduler_file}: no such file (dask scheduler --scheduler-file "
                         f"PATH writes it)")
    if args.loader_workers < 0:
        args.loader_workers = 0
    if batch:
        return args.workers or 1, args.threads or 1
    if args.scheduler or args.scheduler_file:  # an existing cluster: its workers' cores / task slots
        if args.workers is not None:
            raise BenchError("--workers starts a LocalCluster's processes; with --scheduler the cluster has its own")
        return 0, args.threads
    import torch

    gpus = torch.cuda.device_count() if device.type == "cuda" and device.index is None else 0
    workers = args.workers or (gpus or available_cores())
    return workers, args.threads or threads_per_worker(workers)


def warn_contract(methods, registry, prefix: str = "") -> int:
    """Print a warning for every static plugin-contract rule a method of ``methods`` breaks
    (:func:`bench.plugins.static_contract_problems`, the rules tests/test_method_contract.py checks);
    returns how many."""
    from bench.plugins import source_of, static_contract_problems

    n = 0
    for m in methods:
        cls = registry.get(m)
        for problem in static_contract_problems(cls):
            print(f"{prefix}warning: method {m} ({source_of(cls).where}): {problem} (docs/plugins.md)",
                  file=sys.stderr)
            n += 1
    return n


#: the exit code of a ``bench run`` whose every cell failed (2 is bad input, 130 an interrupt)
EXIT_ALL_FAILED = 1


def cmd_run(args) -> int:
    from bench.config import parse_sets, resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    from bench.training import checkpoint_interval

    checkpoint_interval()  # a bad BENCH_CHECKPOINT_INTERVAL_S is exit 2 before anything runs
    suite = SUITES.get(args.suite)()
    methods = args.methods if args.methods is not None else list(suite.default_methods)
    for m in methods:
        METHODS.get(m)
    only = getattr(args, "only_sets", None)
    if only is not None:
        bad = [k for k in only if k not in SET_KINDS]
        if bad or not only:
            raise BenchError(f"--only-sets {','.join(bad) or '(empty)'}: valid kinds are {', '.join(SET_KINDS)}")
        if args.executor != "local":
            raise BenchError("--only-sets is for --executor local (a cell's workers load their own sets)")
    not_run = [m for m in getattr(args, "force_methods", []) if m not in methods]
    if not_run:
        raise BenchError(f"--force-method {','.join(not_run)}: not a method of this run "
                         f"(--methods {','.join(methods)})")
    warn_contract(methods, METHODS, prefix=f"[{suite.name}] ")
    from datasets.roots import resolve_data_root

    suite.data_root = resolve_data_root(args.data_root)  # the folder suite lists its tree there to check a model spec
    suite.results_dir = Path(args.out)
    plan = resolve_plan(suite, args.profile, methods, parse_sets(args.sets), seeds=args.seeds, method_registry=METHODS)
    if args.plan:
        return show_plan(args, suite, plan)
    if not args.dry_run:
        run_backbone(args, suite, plan)
    return run_plan(args, suite, plan, methods)[0]


def show_plan(args, suite, plan) -> int:
    """``bench run --plan``: what the command would do with each cell of ``plan``, as a table (the records
    under ``--out`` read as a run reads them, the data loaded to identify the evaluation sets, never
    downloaded; shifted sets a suite generates from its data are generated first, as a run would); nothing
    fitted, nothing written under ``--out``."""
    from bench.harness import Harness
    from bench.provenance import resolve_device
    from bench.store import ResultsStore
    from datasets.roots import resolve_data_root
    from methods import METHODS

    if args.dry_run:
        raise BenchError("--plan and --dry-run: give one (--dry-run prints a batch job script)")
    backbone = suite.backbone_run(plan.data) if hasattr(suite, "backbone_run") else None
    if backbone is not None and not suite.camvid_backbone_path(plan.data).is_file():
        print(f"[{suite.name}] data.backbone={plan.data['backbone']}: its network is not under {args.out} yet: a "
              f"run makes it first (bench {' '.join(backbone_argv(args, backbone))}); the grid's cells are named "
              f"once it exists")
        return 0
    device = resolve_device(args.device)
    pretrained = ({m: suite.pretrained_weights(m, plan.data, download=False) for m in plan.models}
                  if getattr(suite, "pretrained_map", False) else None)
    data = suite.load(resolve_data_root(args.data_root), plan.data, download=False)
    harness = Harness(suite, plan, data, ResultsStore(args.out), device, METHODS, force=args.force, progress=False,
                      quiet=True, force_methods=args.force_methods, only_kinds=getattr(args, "only_sets", None),
                      redo_predating=args.redo_predating, keep_predictions=prediction_policy(args),
                      pretrained=pretrained)
    rows = harness.plan_rows()
    todo = sum(not what.startswith("nothing to do") for _, what in rows)
    print(f"[{suite.name}] profile {plan.profile}, results {args.out}: {len(rows)} cells, {todo} with work to do\n")
    from bench.store import find_packs

    if find_packs(Path(args.out) / suite.name):  # kept records: the tables read them, a run does not
        print(f"[{suite.name}] the packed records under {args.out} (records.jsonl.xz) are not read by a run: "
              f"restore them into a results folder first (scripts/keep_records.py restore {suite.name} --results "
              f"DIR --archive {args.out})\n")
    print("| cell | what `bench run` would do |\n| --- | --- |")
    for tag, what in rows:
        print(f"| {tag} | {what} |")
    return 0


def run_backbone(args, suite, plan) -> None:
    """The run a suite's networks start from (``Suite.backbone_run``: camvid_multilabel's
    ``data.backbone=camvid``, the camvid suite's MAP UNet), made first in the same results folder
    when its network is not there yet; then the planned models are checked against it (exit 2
    when they do not fit, nothing else run)."""
    run = suite.backbone_run(plan.data) if hasattr(suite, "backbone_run") else None
    if run is None or suite.camvid_backbone_path(plan.data).is_file():
        return
    argv = backbone_argv(args, run)
    if not args.quiet:
        print(f"[{suite.name}] data.backbone={plan.data['backbone']}: its network is made first: bench "
              f"{' '.join(argv)}", file=sys.stderr)
    code = cmd_run(build_parser().parse_args(argv))
    path = suite.camvid_backbone_path(plan.data)
    if code != 0 or not path.is_file():
        raise BenchError(f"{suite.name}: data.backbone={plan.data['backbone']}: the run that makes it (bench "
                         f"{' '.join(argv)}) left no network at {path} (exit {code})")
    for model in plan.models:
        suite.check_model(model, plan.data)


def backbone_argv(args, run: dict) -> list[str]:
    """The ``bench run`` arguments of a suite's backbone run (``Suite.backbone_run``) under ``args``'s options."""
    argv = ["run", "--suite", run["suite"], "--profile", run["profile"], "--methods", ",".join(run["methods"]),
            "--seeds", ",".join(map(str, run["seeds"])), "--out", str(args.out), "--device", args.device]
    for key, values in run["sets"].items():
        argv += ["--set", f"{key}={json.dumps(values[0], separators=(',', ':')).strip(chr(34))}"]
    argv += ["--data-root", str(args.data_root)] if args.data_root else []
    argv += ["--threads", str(args.threads)] if args.threads else []
    argv += ["--loader-workers", "auto" if args.loader_workers < 0 else str(args.loader_workers)]
    return argv + [flag for flag, on in (("--quiet", args.quiet), ("--no-report", args.no_report),
                                         ("--no-download", args.no_download)) if on]


def run_plan(args, suite, plan, methods: list[str]):
    """Run the planned grid ``plan`` of ``suite`` as ``bench run`` does, from the checks of the
    output folders on (the options of ``args``: ``bench run``'s namespace), and write its report;
    returns ``(exit code, RunSummary)`` (the summary is None for ``--dry-run``). Shared by
    ``bench run`` and :func:`bench.api.evaluate`, whose suite holds the user's data in memory."""
    import torch  # noqa: F401 - loaded before the threads are set (check_executor_args)

    from bench.harness import Harness
    from bench.provenance import resolve_device
    from bench.store import STALE_TEMP_S, ResultsStore, remove_stale_temp_files
    from datasets.roots import resolve_data_root
    from methods import METHODS

    report_dir = args.report_dir if args.report_dir is not None else default_report_dir(args.out)
    args.prediction_policy = prediction_policy(args)
    check_writable(args.out, "results directory (--out)")
    for sub in ("", "records", "checkpoints", "locks", "artifacts"):  # <out>/<suite>/...: folders, writable
        check_writable(Path(args.out) / suite.name / sub, f"results folder of suite {suite.name}")
    if not args.no_report:
        check_writable(report_dir, "report directory (--report-dir)")
        check_writable(Path(report_dir) / suite.name, f"report folder of suite {suite.name}")
    from bench.locks import check_locking

    check_locking(Path(args.out) / suite.name / "locks")  # cells and MAP networks are locked there
    device = resolve_device(args.device)
    workers, threads = check_executor_args(args, device)
    if args.dry_run:  # before any data is read or anything written
        from bench.executors.launch import job_script

        print(job_script(args, threads))
        return 0, None
    data_root = resolve_data_root(args.data_root)
    if not args.quiet:
        print(f"[{suite.name}] profile {plan.profile}: models {plan.models}, methods {methods}, seeds {plan.seeds}, "
              f"device {device}, " + ("data in memory (bench.evaluate)" if getattr(suite, "IN_MEMORY", False)
                                      else f"data root {data_root}"), file=sys.stderr)
    for name, why in plan.skipped.items():
        print(f"[{suite.name}] {name}: skipped ({why})", file=sys.stderr)
    for r in plan.refused:  # a method that cannot run on a user's network: its cells there are not run
        print(f"[{suite.name}] warning: {r['label']} not run on {r['model']} (refused when planned; the other "
              f"cells run): {r['reason']}", file=sys.stderr)
    # a suite whose MAP network is pretrained: every model's weights file is found before the data
    pretrained = ({m: suite.pretrained_weights(m, plan.data, download=not args.no_download) for m in plan.models}
                  if getattr(suite, "pretrained_map", False) else None)
    from bench.store import find_packs

    if find_packs(Path(args.out) / suite.name):  # kept records: a run reads loose records only
        print(f"[{suite.name}] warning: the packed records under {args.out} (records.jsonl.xz) are not read by a "
              f"run: a cell kept there only is fitted again; restore them into a results folder first "
              f"(scripts/keep_records.py restore {suite.name} --results DIR --archive {args.out})", file=sys.stderr)
    data = suite.load(data_root, plan.data, download=not args.no_download)
    store = ResultsStore(args.out)
    stale = remove_stale_temp_files(Path(args.out) / suite.name)  # left by writes killed in earlier runs
    if stale:
        print(f"[{suite.name}] removed {len(stale)} temporary file(s) that killed writes left (older than "
              f"{STALE_TEMP_S / 3600:g} h), e.g. {stale[0]}", file=sys.stderr)
    if args.executor == "local":
        harness = Harness(suite, plan, data, store, device, METHODS, force=args.force, progress=not args.quiet,
                          force_methods=getattr(args, "force_methods", ()), only_kinds=getattr(args, "only_sets", None),
                          redo_predating=getattr(args, "redo_predating", False),
                          keep_predictions=args.prediction_policy,
                          quiet=args.quiet, workers=args.loader_workers, pretrained=pretrained)
        summary = harness.run()
    else:  # the data is loaded (and derived sets generated) here once, then read by every worker
        from bench.executors.launch import run_distributed

        artifacts = Harness(suite, plan, data, store, device, METHODS, quiet=True,
                            keep_predictions=args.prediction_policy, force_methods=getattr(args, "force_methods", ()),
                            redo_predating=getattr(args, "redo_predating", False))
        del data
        summary = run_distributed(args, suite, plan, data_root, device, pretrained, store, METHODS, workers, threads,
                                  on_connect=artifacts.write_artifacts,  # nothing written before the cluster answers
                                  finished=lambda cell: artifacts.finished(artifacts.cell_identity(*cell)))
    from bench.executors.grid import grid_cells

    # every cell of the grid failed in this run: the run made no result, and says so in its exit code
    # (a grid with some failed cells exits 0: its failed records sit beside the results)
    all_failed = bool(summary.failed) and len(summary.failed) >= len(grid_cells(plan))
    verdict = f"; every cell failed (exit code {EXIT_ALL_FAILED})" if all_failed else ""
    not_run = (f", {len(plan.refused) * len(plan.seeds)} not run (refused when planned: "
               f"{', '.join(sorted({r['label'] + ' on ' + r['model'] for r in plan.refused}))})" if plan.refused else "")
    if not args.quiet:
        print(f"[{suite.name}] done: {summary.fitted} fitted, {summary.loaded} loaded, {summary.skipped} skipped, "
              f"{len(summary.failed)} failed{not_run}, {summary.records} records written{verdict}", file=sys.stderr)
        for f in summary.failed:
            print(f"  failed: {f}", file=sys.stderr)
    elif all_failed:
        print(f"[{suite.name}] {len(summary.failed)} failed{verdict}; the first: {summary.failed[0]}", file=sys.stderr)
    if not args.no_report:
        from bench.reporting import build_report

        for path in build_report(args.out, report_dir, suites=[suite.name]):
            print(f"report: {path}")
    return (EXIT_ALL_FAILED if all_failed else 0), summary


def cmd_report(args) -> int:
    from bench.reporting import build_report

    out = args.out if args.out is not None else default_report_dir(args.results)
    check_writable(out, "report directory (--out)")
    for path in build_report(args.results, out, suites=args.suite):
        print(f"report: {path}")
    return 0


def cmd_leaderboard(args) -> int:
    from bench.leaderboard import build_boards, load_runs, select_runs, write_leaderboard

    if args.with_controls and not args.chosen_only:
        raise BenchError("--with-controls goes with --chosen-only (the controls of the configurations it keeps)")
    check_writable(args.out, "leaderboard directory (--out)")
    if args.pareto_figure:
        check_writable(Path(args.pareto_figure).parent, "folder of the Pareto figure (--pareto-figure)")
    filters = {"suite": args.suite, "model": args.model, "profile": args.profile, "method": args.method,
               "commit": args.commit, "exclude_label": args.exclude_label}
    df = select_runs(load_runs(args.results), suites=args.suite, models=args.model, profiles=args.profile,
                     methods=args.method, commits=args.commit, include_smoke=args.include_smoke,
                     exclude_labels=args.exclude_label)
    from bench.tuning import board_choice_notes, choice_notes

    # a tuned method's choice over a space no longer the suite's, on another validation split than the
    # profile's, on several networks, or at an end of its swept range is said on every board its rows
    # are on (read before --chosen-only drops the rest)
    notes = choice_notes(args.results, df)
    if args.chosen_only:
        from bench.tuning import chosen_configs, control_rows, not_chosen

        chosen = chosen_configs(args.results)
        if not chosen:
            raise BenchError(f"--chosen-only: no stored tuning under {', '.join(args.results)} "
                             "(<results>/<suite>/tuning/<profile>.json: run python -m bench tune)")
        kept = ~not_chosen(df, chosen)
        controls, control_notes = control_rows(df, kept) if args.with_controls else (kept & False, {})
        df = df[kept | controls]
    boards = build_boards(df, args.metric)
    for b in boards:
        b.notes += board_choice_notes(notes, b) + (control_notes.get((b.suite, b.profile, b.model), [])
                                                 if args.chosen_only else [])
    paths = write_leaderboard(boards, args.out, args.results, filters, args.metric)
    if args.pareto_figure:
        from bench.leaderboard.pareto import write_pareto_figure

        write_pareto_figure(boards, args.pareto_figure)
        paths["pareto figure"] = args.pareto_figure
    if args.print_tables:
        from bench.leaderboard.output import tables_markdown

        print(tables_markdown(boards), end="")
        return 0
    for b in boards:
        print(f"{b.suite} / {b.model} ({b.profile}): {len(b.rows)} configurations, ranked by {args.metric}; "
              f"first: {b.rows[0]}")
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def cmd_select(args) -> int:
    from bench.selection import flat_options, choose_from_store, select, selection_markdown

    if args.markdown:  # the sweeps only: a group whose tuned options hold one value (a later run) is no choice
        choices = choose_from_store(args.results, args.suite, args.method, args.tune, model=args.model)
        print(selection_markdown([c for c in choices if not flat_options(c)] or choices))
        return 0
    for c in select(args.results, args.suite, args.method, args.tune, model=args.model, swept_only=True):
        print(f"{c['model']} {c['method']}: chose {c['chosen']} ({c['metric']}, seeds {c['seeds']}) -> {c['path']}")
        for r in c["candidates"]:
            print(f"    {r['values']}  {r['score']:.5f}  {r['config_hash']}")
    return 0


def cmd_tune(args) -> int:
    """``bench tune`` (:mod:`bench.tune_command`), its sweeps run as ``bench run`` is here."""
    from bench.tune_command import cmd_tune as tune

    return tune(args, lambda argv: cmd_run(build_parser().parse_args(argv)))


def prediction_policy(args):
    """The :class:`bench.predictions.PredictionPolicy` of ``bench run --keep-predictions`` (None
    without it; BenchError when its options come without it)."""
    from bench.predictions import DEFAULT_MAX_MB, PredictionPolicy

    max_mb, dtype = getattr(args, "predictions_max_mb", None), getattr(args, "predictions_dtype", None)
    if not getattr(args, "keep_predictions", False):
        given = [o for o, v in (("--predictions-max-mb", max_mb), ("--predictions-dtype", dtype)) if v is not None]
        if given:
            raise BenchError(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} with --keep-predictions")
        return None
    return PredictionPolicy(DEFAULT_MAX_MB if max_mb is None else max_mb, dtype or "float32")


def cmd_rescore(args) -> int:
    from bench.rescore import rescore

    if not args.dry_run:
        check_writable(args.results, "results directory (--results)")
    return rescore(args.results, suites=args.suite, metrics=args.metrics, dry_run=args.dry_run)


def cmd_check_plugin(args) -> int:
    """``bench check-plugin FILE... [--method NAME]``: load the plugins (exit 2 when one cannot be
    loaded), print the static contract rules each method breaks, then run the contract tests
    (tests/test_method_contract.py) on those methods alone. Exit 0 when all pass, else 1."""
    import subprocess

    from bench.plugins import entry_point_methods, load_entry_points, load_file, source_of, static_contract_problems
    from bench.provenance import REPO
    from methods import METHODS

    load_entry_points()
    names = [n for f in args.files for n in load_file(f)]
    targets = list(dict.fromkeys(args.check_methods or names or entry_point_methods()))
    if not targets:
        raise BenchError("nothing to check: give plugin files, --method NAME, or install a plugin of the entry-point "
                         "group bench.methods")
    bad = 0
    for m in targets:
        cls = METHODS.get(m)
        problems = static_contract_problems(cls)
        bad += len(problems)
        verdict = "static rules ok" if not problems else f"{len(problems)} problem(s)"
        print(f"{m} ({source_of(cls).where}): {verdict}")
        for p in problems:
            print(f"  - {p}")
    if args.static:
        return 1 if bad else 0
    tests = REPO / "tests" / "test_method_contract.py"
    if not tests.is_file():
        raise BenchError(f"the contract tests ({tests}) are not here (an installed copy without tests/): run from a "
                         f"checkout of the benchmark, or use --static")
    env = {**os.environ, "BENCH_PLUGINS": os.pathsep.join(str(Path(f).resolve()) for f in args.files),
           "BENCH_CONTRACT_METHODS": ",".join(targets)}
    print(f"contract tests: {sys.executable} -m pytest {tests.relative_to(REPO)} (BENCH_PLUGINS, "
          f"BENCH_CONTRACT_METHODS={env['BENCH_CONTRACT_METHODS']})", flush=True)
    rc = subprocess.run([sys.executable, "-m", "pytest", str(tests)], cwd=REPO, env=env).returncode
    return 0 if rc == 0 and not bad else 1


def cmd_perf(args) -> int:
    from bench.perf import main as perf_main

    return perf_main(repeats=args.repeats, device=args.device, cases=args.cases, save=args.save)


def check_datasets_package() -> None:
    import datasets

    if not getattr(datasets, "BENCH_DATASETS", False):
        raise BenchError(f"`import datasets` found {getattr(datasets, '__file__', '?')} (probably the PyPI package), "
                         "not this project's datasets/; run from the repository root or install the project")


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``, a batch system's cancel or time limit) taken as Ctrl-C is: the run
    stops through the same path, its locks and half-written files cleaned up on the way out."""


def _on_sigterm(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """:func:`_on_sigterm` installed for the command's duration, the earlier handler put back after
    it; only in the main thread, where Python delivers signals (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _sigterm_as_interrupt():
            check_datasets_package()
            if hasattr(args, "plugins"):  # run, tune, list: entry-point plugins and --plugin files
                from bench.plugins import load_plugins

                load_plugins(args.plugins)
            return {"run": cmd_run, "report": cmd_report, "list": cmd_list, "perf": cmd_perf,
                    "select": cmd_select, "tune": cmd_tune, "leaderboard": cmd_leaderboard,
                    "rescore": cmd_rescore, "check-plugin": cmd_check_plugin,
                    "worker-env": cmd_worker_env}[args.command](args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(f"{how}: finished records are kept; run the same command again to resume", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
