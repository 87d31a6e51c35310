"""``bench.evaluate``: the benchmark's methods on a researcher's own network and data.

::

    import bench
    result = bench.evaluate(model=build_my_net, train=train_ds, val=val_ds, test={"clean": test_ds},
                            shifts={"blur": {1: blur1, 3: blur3}}, ood={"svhn": svhn_ds},
                            methods=["deterministic", "deep_ensemble", "subnet_laplace", "pbn"],
                            seeds=[0, 1, 2], out="results/mine", train_config={"epochs": 20, "lr": 0.05})
    result.metrics          # one row per evaluation record: model, method, seed, set, metrics.*
    result.table("nll")     # mean over seeds: a row per method configuration, a column per set

The data is read into memory (:mod:`bench.user_data`) and becomes an in-memory suite
(:class:`bench.user_suite.UserSuite`) that the ``bench run`` code path runs
(:func:`bench.cli.run_plan`): the same harness, MAP cache (each seed's MAP network trained once and
shared by the methods built on it, or the user's checkpoint), records, resumption (a second call
skips finished cells) and report as a suite run. ``docs/your_model.md`` has the whole contract.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchError

TASKS = ("classification", "segmentation", "regression", "multilabel")
#: the methods run when ``methods=`` is not given: cheap ones that work on any network
DEFAULT_METHODS = {"classification": ("deterministic", "temperature_scaling", "deep_ensemble", "laplace_last_layer"),
                   "segmentation": ("deterministic", "temperature_scaling", "deep_ensemble"),
                   "regression": ("deterministic", "deep_ensemble"),
                   "multilabel": ("deterministic", "temperature_scaling", "deep_ensemble")}
#: the tasks whose predictive gives OOD scores (ood= sets)
OOD_TASKS = ("classification", "multilabel")
#: the executors bench.evaluate runs on (the batch executors need bench run's job options)
API_EXECUTORS = ("local", "dask")
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_SET_NAME = re.compile(r"[A-Za-z0-9_.=+-]+")
#: the record columns kept in :attr:`Evaluation.metrics` (besides the flattened ``metrics.*``)
COLUMNS = ("model", "method", "method_label", "config_hash", "seed", "kind", "shift", "severity", "status", "n")


@dataclass
class Evaluation:
    """What :func:`evaluate` ran and wrote.

    ``exit_code`` is ``bench run``'s (0: the grid ran, failed cells recorded; 1: every cell
    failed), ``summary`` the harness's counts (fitted, loaded, skipped, failed), ``records`` the
    JSON records of this grid's cells under ``out``, ``report`` the report's ``index.html`` (empty
    without ``report=True``), ``metrics`` those records as a DataFrame (one row per record:
    :data:`COLUMNS`, ``validity`` and every ``metrics.<name>``)."""

    out: Path
    suite: str
    exit_code: int
    summary: object
    records: list[Path] = field(default_factory=list)
    report: list[Path] = field(default_factory=list)
    metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the (model, method configuration) pairs refused when the run was planned, not run:
    #: ``{model, method, label, reason}`` each (bench.config.RunPlan.not_run); the other cells ran
    not_run: list = field(default_factory=list)

    def table(self, metric: str = "nll") -> pd.DataFrame:
        """``metrics.<metric>`` averaged over seeds: a row per (model, method configuration), a
        column per evaluation set (``kind/shift/severity``); failed cells are left out."""
        col = f"metrics.{metric}"
        df = self.metrics
        if df.empty or col not in df:
            have = sorted(c[len("metrics."):] for c in df.columns if c.startswith("metrics."))
            raise BenchError(f"no metric {metric!r} in these records; metrics: {', '.join(have) or 'none'}")
        df = df[df["status"] == "ok"].assign(set=lambda d: d["kind"] + "/" + d["shift"].astype(str) + "/"
                                             + d["severity"].map(lambda s: "-" if pd.isna(s) else f"{s:g}"))
        return df.pivot_table(index=["model", "method_label"], columns="set", values=col, aggfunc="mean")


def _check_name(name: str, what: str, pattern=_PLAIN) -> str:
    if not isinstance(name, str) or not pattern.fullmatch(name) or ".." in name:
        raise BenchError(f"{what} {name!r}: use letters, digits, '_' and '-'" +
                         (" (and '.', '=', '+')" if pattern is _SET_NAME else "") + "; it names files")
    return name


def _model_name(model, given: str | None) -> str:
    """The name records carry: ``given``, else the factory's ``__name__`` or the template's class."""
    if given is not None:
        return _check_name(given, "model_name", _SET_NAME)
    if isinstance(model, str):  # a model name: its canonical name (bench.model_specs)
        from bench.model_specs import canonical_name

        return canonical_name(model)
    from torch import nn

    raw = type(model).__name__ if isinstance(model, nn.Module) else getattr(model, "__name__", "")
    raw = getattr(getattr(model, "func", None), "__name__", raw)  # a functools.partial: its function's
    return raw if _PLAIN.fullmatch(raw or "") else "model"  # a lambda: "model"


def _eval_sets(test, shifts, ood, task_kind: str, what_reads):
    """``{set name: Split}`` of the evaluation sets and their EvalSet headers, in order: the test
    set (kind ``id``), every shift family x severity (``shift``), every OOD set (``ood``)."""
    if isinstance(test, dict):
        if len(test) != 1:
            raise BenchError(f"test= holds {len(test)} sets; it is the in-distribution test set: one dataset, or "
                             f"{{name: dataset}} with one entry (shifted sets go in shifts=, OOD sets in ood=)")
        (test_name, test_set), = test.items()
    else:
        test_name, test_set = "clean", test
    heads = [("id", _check_name(str(test_name), "test set name", _SET_NAME), 0.0, test_set, True)]
    for family, sevs in (shifts or {}).items():
        _check_name(str(family), "shift family", _SET_NAME)
        if not isinstance(sevs, dict):
            sevs = {1: sevs}
        for sev, ds in sevs.items():
            try:
                sev = float(sev)
            except (TypeError, ValueError):
                raise BenchError(f"shifts[{family!r}]: severity {sev!r} is not a number; shifts= is {{family: "
                                 f"{{severity: dataset}}}}") from None
            heads.append(("shift", str(family), sev, ds, True))
    if ood and task_kind not in OOD_TASKS:
        raise BenchError(f"ood= sets are scored by how well a classifier's uncertainty separates them; a {task_kind} "
                         f"task has no OOD scores (leave ood= out; OOD sets: {', '.join(OOD_TASKS)})")
    for name, ds in (ood or {}).items():
        heads.append(("ood", _check_name(str(name), "OOD set name", _SET_NAME), None, ds, False))
    return [(kind, shift, sev, what_reads(ds, f"{kind} set {shift}" + ("" if sev is None else f" {sev:g}"), labels))
            for kind, shift, sev, ds, labels in heads]


def _map_checkpoint(map_checkpoint, seeds, network, in_shape, num_outputs) -> tuple[dict | None, object]:
    """(provenance for the records, the data option that puts the files' hashes in the cells'
    identity) of ``map_checkpoint``: one state-dict file for every seed, or ``{seed: file}``. Each
    file is loaded into the network now (a BenchError when it does not fit)."""
    if map_checkpoint is None:
        return None, None
    from bench.models import load_pretrained, weights_provenance

    files = ({int(s): p for s, p in map_checkpoint.items()} if isinstance(map_checkpoint, dict)
             else {None: map_checkpoint})
    missing = [s for s in seeds if None not in files and s not in files]
    if missing:
        raise BenchError(f"map_checkpoint= has no file for seed(s) {missing}; give {{seed: file}} for every seed of "
                         f"seeds= ({list(seeds)}) or one file for all")
    prov = {}
    for s, p in files.items():
        path = Path(p).expanduser()
        if not path.is_file():
            raise BenchError(f"map_checkpoint {path}: no such file")
        load_pretrained(network.build(in_shape, num_outputs), path)
        prov[s] = weights_provenance(path)
    if None in prov:
        return prov[None], prov[None]["sha256_16"]
    per_seed = {str(s): prov[s] for s in sorted(prov)}
    return {"path": None, "per_seed": per_seed}, {s: v["sha256_16"] for s, v in per_seed.items()}


def evaluate(model, train, val, test, *, shifts: dict | None = None, ood: dict | None = None,
             task: str = "classification", num_classes: int | None = None, methods=None, seeds=(0,),
             out="results", name: str = "custom", model_name: str | None = None, train_config: dict | None = None,
             method_options: dict | None = None, map_checkpoint=None, profile: str = "custom",
             eval_batch_size: int = 1000, device: str = "auto", force: bool = False, report: bool = True,
             report_dir=None, executor: str = "local", workers: int | None = None, scheduler: str | None = None,
             quiet: bool = False) -> Evaluation:
    """Run ``methods`` x ``seeds`` on ``model`` and the given data; write records under
    ``out/<name>/`` and a report; return an :class:`Evaluation`.

    ``model``: a callable returning an ``nn.Module`` (called with the arguments it names among
    ``in_shape``, ``num_outputs`` / ``num_classes``, ``dropout``; ``bench.model_specs.call_factory``),
    an ``nn.Module`` template (deep-copied and re-initialised per network), a model name
    (``lenet5``, ``mymodule:factory``, ``timm:resnet18``), or ``{name: any of these}`` to compare
    several. ``train``, ``val``: the training and validation sets; ``test``: the in-distribution
    test set (or ``{name: set}``); ``shifts``: ``{family: {severity: set}}``; ``ood``:
    ``{name: set}`` (classification, multilabel); sets as :mod:`bench.user_data` takes them.
    ``task``: classification | segmentation | regression | multilabel (targets ``(n, L)`` of 0/1, one
    logit per label, binary cross-entropy summed over the labels); ``num_classes``: the classes (the
    labels L for multilabel), else inferred from the labels (the targets' columns).
    ``train_config``: :class:`bench.training.TrainConfig` fields (epochs, lr, ...);
    ``method_options``: ``{method: {option: value}}``. ``map_checkpoint``: a state-dict file that is
    the MAP network of every seed, or ``{seed: file}`` (nothing trained for it; methods that train
    from scratch or from several MAP networks are then skipped, as on a pretrained suite).
    ``profile``: the records' profile name; a method's own per-profile defaults apply when it is
    smoke, quick or paper. ``executor``: local, or dask (``workers`` processes of a LocalCluster,
    or the cluster at ``scheduler``; the data is saved under ``out`` for the workers, the model
    must be importable or picklable there). Bad input raises :class:`bench.errors.BenchError`
    naming what is valid, before anything is trained.
    """
    if executor not in API_EXECUTORS:
        raise BenchError(f"executor={executor!r}; bench.evaluate runs on {', '.join(API_EXECUTORS)} (batch executors: "
                         f"save the data as a suite and use python -m bench run)")
    suite, plan = build_suite(model, train, val, test, shifts=shifts, ood=ood, task=task, num_classes=num_classes,
                              methods=methods, seeds=seeds, name=name, model_name=model_name,
                              train_config=train_config, method_options=method_options,
                              map_checkpoint=map_checkpoint, profile=profile, eval_batch_size=eval_batch_size)
    return run_suite(suite, plan, out=out, device=device, force=force, report=report, report_dir=report_dir,
                     executor=executor, workers=workers, scheduler=scheduler, quiet=quiet)


def build_suite(model, train, val, test, *, shifts=None, ood=None, task="classification", num_classes=None,
                methods=None, seeds=(0,), name="custom", model_name=None, train_config=None, method_options=None,
                map_checkpoint=None, profile="custom", eval_batch_size=1000):
    """The :class:`bench.user_suite.UserSuite` of :func:`evaluate`'s arguments (the data read into
    memory, every network built and checked) and its :class:`bench.config.RunPlan`; BenchError on
    bad input, before anything is trained."""
    from bench.config import resolve_plan
    from bench.data import EvalSet, SuiteData, data_digest
    from bench.suites import SUITES
    from bench.tasks import classification, multilabel, regression, segmentation
    from bench.user_data import cast_labels, check_shapes, infer_num_classes, infer_num_labels, materialise
    from bench.user_suite import UserNetwork, UserSuite
    from methods import METHODS

    _check_name(name, "name")
    if name in SUITES:
        raise BenchError(f"name={name!r} is a registered suite's; give your evaluation its own name (its records go "
                         f"under <out>/{name})")
    if task not in TASKS:
        raise BenchError(f"task={task!r}; valid: {', '.join(TASKS)}")
    seeds = list(seeds)
    methods = list(methods) if methods is not None else list(DEFAULT_METHODS[task])
    for m in methods:
        METHODS.get(m)  # an unknown method: BenchError naming the valid ones, before any data is read

    def read(ds, what, labels=True):
        return cast_labels(materialise(ds, what, labels=labels), task, what)

    splits = {"train": read(train, "train"), "val": read(val, "val")}
    evals = _eval_sets(test, shifts, ood, task, read)
    every = {**splits, **{f"{k} set {s}" + ("" if v is None else f" {v:g}"): sp for k, s, v, sp in evals}}
    in_shape = check_shapes(every, task)
    if task == "regression":
        task_obj = regression()
    elif task == "multilabel":
        task_obj = multilabel(infer_num_labels(every, num_classes))
    else:
        ignore = 255 if task == "segmentation" else None
        k = int(num_classes) if num_classes is not None else infer_num_classes(every, ignore)
        task_obj = classification(k) if task == "classification" else segmentation(k)
    eval_sets = [EvalSet(kind, shift, sev, sp.x, sp.y, fingerprint=data_digest(sp.x, sp.y))
                 for kind, shift, sev, sp in evals]
    data = SuiteData(splits["train"].x, splits["train"].y, splits["val"].x, splits["val"].y, eval_sets)

    if isinstance(model, dict) and model_name is not None:
        raise BenchError("model_name= names a single model; with model={name: ...} the keys are the names")
    models = model if isinstance(model, dict) else {_model_name(model, model_name): model}
    networks = {}
    for mname, m in models.items():
        if ":" in str(mname):
            raise BenchError(f"model name {mname!r}: ':' cannot be in a name that names files")
        networks[mname] = UserNetwork(_check_name(str(mname), "model name", _SET_NAME), m, in_shape, task_obj)
    if map_checkpoint is not None and len(networks) != 1:
        raise BenchError("map_checkpoint= is the MAP network of one model; give one model")
    provenance, ckpt_option = _map_checkpoint(map_checkpoint, seeds, next(iter(networks.values())), in_shape,
                                              task_obj.num_outputs)
    profile_cfg = {"models": list(networks), "seeds": seeds, "train": dict(train_config or {}),
                   "data": {"fit_digest": data_digest(data.train_x, data.train_y, data.val_x, data.val_y),
                            "map_checkpoint": ckpt_option, "eval_batch_size": int(eval_batch_size)},
                   "methods": dict(method_options or {}), "note": ""}
    suite = UserSuite(name, task_obj, in_shape, data, networks, profile, profile_cfg, tuple(methods),
                      map_checkpoint=provenance)
    return suite, resolve_plan(suite, profile, methods, {}, method_registry=METHODS)


def run_suite(suite, plan, *, out="results", device="auto", force=False, report=True, report_dir=None,
              executor="local", workers=None, scheduler=None, quiet=False) -> Evaluation:
    """Run ``plan`` of the in-memory ``suite`` through ``bench run``'s code path
    (:func:`bench.cli.run_plan`), then write the report; the :class:`Evaluation`."""
    from bench.cli import build_parser, default_report_dir, run_plan
    from methods import METHODS

    out = Path(out)
    argv = ["run", "--suite", suite.name, "--out", str(out), "--device", device, "--no-report", "--executor", executor,
            "--loader-workers", "0", "--data-root", str(out)]
    argv += ["--quiet"] if quiet else []
    argv += ["--force"] if force else []
    argv += ["--workers", str(workers)] if workers is not None else []
    argv += ["--scheduler", scheduler] if scheduler is not None else []
    args = build_parser().parse_args(argv)
    if executor != "local":  # the workers unpickle the suite without its tensors and read them from here
        folder = out / suite.name / "inputs"
        folder.mkdir(parents=True, exist_ok=True)
        args.data_root = str(suite.save_data(folder).parent)
    code, summary = run_plan(args, suite, plan, list(plan.methods))
    pages = []
    if report and summary is not None and summary_has_records(out, suite.name):
        from bench.reporting import build_report

        pages = build_report(out, report_dir if report_dir is not None else default_report_dir(out),
                             suites=[suite.name])
    records = grid_records(suite, plan, out, METHODS, args.device, suite.map_checkpoint)
    return Evaluation(out=out, suite=suite.name, exit_code=code, summary=summary, records=records, report=pages,
                      metrics=records_frame(records), not_run=plan.not_run())


def summary_has_records(out: Path, suite: str) -> bool:
    """Whether ``out/<suite>/records`` holds any record (a report needs one)."""
    return any((Path(out) / suite / "records").rglob("*.json"))


def grid_records(suite, plan, out: Path, registry, device: str, pretrained: dict | None) -> list[Path]:
    """The record files of the cells of ``plan`` (not other grids' under the same name)."""
    from bench.executors.grid import grid_cells
    from bench.harness import cell_identity
    from bench.provenance import resolve_device
    from bench.store import ResultsStore

    store, dev = ResultsStore(out), resolve_device(device)
    pre = {m: pretrained for m in plan.models} if pretrained else None
    paths = []
    for cell in grid_cells(plan):
        run_dir = cell_identity(suite, plan, store, registry, *cell, dev, pre).run_dir
        paths += sorted(Path(run_dir).glob("*.json"))
    return paths


def records_frame(paths: list[Path]) -> pd.DataFrame:
    """The records at ``paths`` as a DataFrame: :data:`COLUMNS`, ``validity`` (the row's verdict:
    ok, failed, unverified) and ``metrics.<name>`` per metric."""
    rows = []
    for p in paths:
        rec = json.loads(Path(p).read_text())
        row = {c: rec.get(c) for c in COLUMNS}
        row["validity"] = (rec.get("validity") or {}).get("status")
        row.update({f"metrics.{k}": v for k, v in (rec.get("metrics") or {}).items() if not isinstance(v, dict)})
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else list(COLUMNS))
