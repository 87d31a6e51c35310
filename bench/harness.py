"""The run loop: for every model, method configuration and seed, fit once, evaluate every set.

Resumable at two levels: finished evaluation records are never redone (unless ``force``),
and a fitted method is checkpointed before evaluation, so a run killed during evaluation
does not retrain. MAP networks are shared through :class:`bench.checkpoints.MapCache`.
"""
from __future__ import annotations

import logging
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from functools import partial

import torch

from bench import metrics as M
from bench import validity
from bench.checkpoints import MapCache, load_or_set_aside, recorded_networks, save_torch, state_digest
from bench.config import RunPlan, method_label
from bench.cost import PeakMemory, Timer, flops_per_example, host_context, memory_probe
from bench.data import EvalSet, SuiteData, TensorLoader, batches, data_digest
from bench.errors import BenchError, DivergedError, InvalidPredictiveError, MethodFailedError
from bench.events import log_event
from bench.locks import file_lock, held_here
from bench.measurement import HOST_KEYS, ThreadUsage, add_usage, host_load, timing_caveat, usage_fractions
from bench.models import build_model
from bench.predictions import PredictionPolicy, keep_predictions, predictions_path, satisfies
from bench.predictive import concat
from bench.provenance import device_description, git_commit, now, versions, worker_identity
from bench.seeding import derive_seed, seed_everything
from bench.store import ResultsStore, config_hash, fit_key, one_fit, record_fit_key
from bench.training import earlier_training_time

log = logging.getLogger("bench")


def model_builder(suite, data_cfg: dict, model_name: str):
    """``build(dropout=...)``: a fresh network of ``model_name`` for the suite's outputs and its inputs
    under the data options ``data_cfg`` (a run plan's, or a record's ``data_config``): the suite's
    ``build_model`` (a registered name, a model spec, or a network the suite brings: bench.api)."""
    own = getattr(suite, "build_model", None)
    if own is not None:
        return partial(own, model_name, data_cfg)
    return partial(build_model, model_name, suite.input_shape(data_cfg), suite.task.num_outputs)


def model_identity(suite, data_cfg: dict, model_name: str) -> dict:
    """What the model adds to a cell's identity and its MAP networks' key (``Suite.model_identity``):
    nothing for a registered name, the source hash of a model spec or of a network bench.api got."""
    own = getattr(suite, "model_identity", None)
    return own(model_name, data_cfg) if own is not None else {}


def map_network_key(suite, plan: RunPlan, model_name: str) -> dict:
    """The key of the grid's MAP network in the suite's checkpoint cache. The network depends on the
    data it trains on, not on the evaluation sets (``Suite.EVAL_ONLY_DATA``), and on the model's
    source when it is not a registered one (an edited factory retrains)."""
    return {"suite": suite.name, "model": model_name, "train": plan.train.to_dict(), "data": suite.fit_data(plan.data),
            **model_identity(suite, plan.data, model_name)}


@dataclass
class RunSummary:
    fitted: int = 0
    loaded: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    records: int = 0
    eval_examples: int = 0
    eval_seconds: float = 0.0


#: failures a method may meet on valid input (divergence, a degenerate posterior, numerics);
#: anything else is recorded the same way, flagged ``expected: false`` (likely a bug)
EXPECTED_FAILURES = (DivergedError, MethodFailedError, FloatingPointError, torch.linalg.LinAlgError)


@dataclass
class GridProgress:
    """Cells done out of the whole grid, with an ETA from the mean time of the cells that did
    work so far (skipped cells take no time and are not counted in the mean)."""

    total: int
    parallel: int = 1  # cells running at once (workers of a distributed run): the ETA divides by it
    done: int = 0
    worked: int = 0
    seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    def cell_done(self, seconds: float, worked: bool) -> None:
        self.done += 1
        if worked:
            self.worked += 1
            self.seconds += seconds

    def eta_s(self) -> float | None:
        if not self.worked:
            return None
        return self.seconds / self.worked * (self.total - self.done) / max(1, self.parallel)

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        eta = self.eta_s()
        tail = "" if eta is None or self.done == self.total else f", ETA {_hms(eta)} (mean of {self.worked} cell(s) run)"
        return f"grid: {self.done}/{self.total} cells done, {_hms(elapsed)} elapsed{tail}"


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def predict_all(method, x, batch_size: int, device: torch.device, workers: int = 0):
    """Predictive for a whole evaluation set (a tensor or a source read per batch by ``workers``
    loader processes), gathered on the CPU; returns (predictive, seconds). The seconds include
    reading the data, as a user's evaluation loop would."""
    parts = []
    with Timer(device) as t, torch.no_grad():
        for xb in batches(x, batch_size, device, workers):
            parts.append(method.predict(xb).to("cpu"))
    return concat(parts), t.seconds


def _tensors(obj):
    """Every tensor inside a nested state dict."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def score_set(task_kind: str, pred, eval_set: EvalSet, id_pred=None) -> tuple[dict, dict]:
    if task_kind == "multilabel":
        from bench import multilabel_metrics as ML

        if eval_set.kind == "ood":
            return ML.ood_metrics(id_pred.probs, pred.probs, id_pred.sample_probs, pred.sample_probs)
        return ML.multilabel_metrics(pred.probs, eval_set.y, pred.sample_probs)
    if task_kind == "regression":
        return M.regression_metrics(pred.mean, pred.var, eval_set.y), {}
    if eval_set.kind == "ood":
        return M.ood_metrics(id_pred.probs, pred.probs, pred.sample_probs, id_pred.variance, pred.variance,
                             sample_probs_in=id_pred.sample_probs)
    return M.classification_metrics(pred.probs, eval_set.y, pred.sample_probs, pred.variance)


def score_segmentation(method, e: EvalSet, task, batch_size: int, device, workers: int = 0) -> tuple[dict, dict, float]:
    """Per-pixel metrics of one segmentation set (:class:`bench.segmentation_metrics.SegmentationScores`),
    accumulated batch by batch: images and label maps are read in step (``e.x`` and ``e.y``
    sources), each batch's predictive is scored and dropped. Returns (metrics, curves, seconds)."""
    from bench.segmentation_metrics import SegmentationScores

    if len(e.x) != len(e.y):
        raise ValueError(f"{e.kind} set {e.shift}: {len(e.x)} images but {len(e.y)} label maps")
    acc = SegmentationScores(task.num_outputs, ignore_index=task.ignore_index)
    maps, seen = [], 0
    with Timer(device) as t, torch.no_grad():
        for xb, yb in zip(batches(e.x, batch_size, device, workers), batches(e.y, batch_size, "cpu", workers)):
            pred = method.predict(xb)
            check_finite(pred, f"{e.kind} set {e.shift} severity {e.severity}")
            check_predictive(task, pred, len(yb), f"{e.kind} set {e.shift} severity {e.severity}",
                             pixels=tuple(yb.shape[-2:]))
            acc.update(pred.probs, yb.reshape(-1).to(pred.probs.device), pred.sample_probs, images=len(yb))
            for i in range(max(0, min(e.keep_maps - seen, len(xb)))):
                maps.append(uncertainty_maps(pred, i, xb.shape[-2:], task.num_outputs))
            seen += len(xb)
    curves = acc.curves()
    if maps:
        curves["maps"] = maps
    return acc.result(), curves, t.seconds


#: the report's uncertainty maps are stored at 1 / MAP_STRIDE of the image's resolution
MAP_STRIDE = 2


def uncertainty_maps(pred, i: int, hw, num_classes: int) -> dict:
    """Image ``i`` of a batch's per-pixel predictive as small maps for the report: the predicted
    class, the predictive entropy and (sampling methods) the mutual information, every
    ``MAP_STRIDE``-th pixel, entropies quantised to 0-255 over [0, log K]."""
    from bench.metrics import entropy, mutual_information

    h, w = int(hw[0]), int(hw[1])
    rows = slice(i * h * w, (i + 1) * h * w)
    probs = pred.probs[rows].float()
    scale = math.log(num_classes)

    def q(v):
        v = v.reshape(h, w)[::MAP_STRIDE, ::MAP_STRIDE]
        return (v / scale * 255).round().clamp(0, 255).to(torch.uint8).cpu().tolist()

    ent = entropy(probs)
    out = {"pred": probs.argmax(-1).reshape(h, w)[::MAP_STRIDE, ::MAP_STRIDE].to(torch.uint8).cpu().tolist(),
           "entropy": q(ent), "mi": None, "scale": scale, "stride": MAP_STRIDE}
    if pred.sample_probs is not None:
        out["mi"] = q(mutual_information(pred.sample_probs[:, rows].float()))
    return out


def check_finite(pred, where: str) -> None:
    """Raise :class:`DivergedError` when a predictive holds NaN or infinite values."""
    for name in ("probs", "mean", "var"):
        t = getattr(pred, name, None)
        if t is not None and not bool(torch.isfinite(t).all()):
            raise DivergedError(f"non-finite predictive {name} on the {where}")


#: how far a row of class probabilities may sum from 1 (relative), and a probability lie outside
#: [0, 1]: float32 rounding of a softmax over thousands of classes stays orders of magnitude below
PROB_TOLERANCE = 1e-3


def check_predictive(task, pred, n: int, where: str, *, targets: torch.Tensor | None = None,
                     pixels: tuple[int, int] | None = None) -> None:
    """Raise :class:`InvalidPredictiveError` unless ``pred`` can be scored as a predictive of ``n``
    examples of ``task``. Classification: ``probs`` (n, K) with K the task's classes (segmentation:
    a row per pixel of the ``pixels`` = (H, W) label maps, n H W rows), ``sample_probs`` (S, rows, K),
    ``variance`` (rows,) >= 0; probabilities in [0, 1], every row summing to 1 (within
    :data:`PROB_TOLERANCE`). Regression: ``mean`` and ``var`` shaped as the ``targets`` (else (n,)),
    variances >= 0, per-sample means and variances (S, ...) alike. Broadcasting would otherwise
    score a wrong shape, and an unnormalised predictive would be ranked, as if they were right."""
    def fail(msg: str):
        raise InvalidPredictiveError(f"{msg} on the {where}")

    def tensor(name: str) -> torch.Tensor | None:
        t = getattr(pred, name, None)
        if t is not None and not isinstance(t, torch.Tensor):
            fail(f"predictive {name} is a {type(t).__name__}, not a tensor")
        return t

    def nonnegative(name: str, t: torch.Tensor) -> None:
        if t.numel() and t.min().item() < 0:
            fail(f"predictive {name} has {int((t < 0).sum())} negative value(s) (min {t.min().item():.4g}); "
                 f"variances must be >= 0")

    if task.kind == "multilabel":  # per-label probabilities of independent Bernoullis: rows need not sum to 1
        from bench.multilabel_metrics import predictive_problem

        problem = predictive_problem(pred, n, int(task.num_outputs), PROB_TOLERANCE)
        if problem:
            fail(problem)
        return
    if task.per_class:
        k = int(task.num_outputs)
        rows = n if pixels is None else n * int(pixels[0]) * int(pixels[1])
        what = (f"{n} examples x {k} classes" if pixels is None else
                f"{n} label maps of {int(pixels[0])} x {int(pixels[1])} = {rows} pixels x {k} classes")
        probs = tensor("probs")
        if probs is None:
            fail(f"predictive is a {type(pred).__name__} without class probabilities (probs)")
        if tuple(probs.shape) != (rows, k):
            fail(f"predictive probs has shape {tuple(probs.shape)}, expected ({rows}, {k}) ({what})")
        sample_probs = tensor("sample_probs")
        if sample_probs is not None and (sample_probs.dim() != 3 or tuple(sample_probs.shape[1:]) != (rows, k)):
            fail(f"predictive sample_probs has shape {tuple(sample_probs.shape)}, expected (S, {rows}, {k}) ({what})")
        for name, p in (("probs", probs), ("sample_probs", sample_probs)):
            if p is None or not p.numel():
                continue
            sums = p.sum(-1, dtype=torch.float64)
            off = (sums - 1).abs()
            if off.max().item() > PROB_TOLERANCE:
                worst = sums.reshape(-1)[off.reshape(-1).argmax()].item()
                fail(f"predictive {name} rows sum to {worst:.4g}, not 1 ({int((off > PROB_TOLERANCE).sum())} of "
                     f"{off.numel()} rows off by more than {PROB_TOLERANCE:g})")
            lo, hi = p.min().item(), p.max().item()
            if lo < -PROB_TOLERANCE or hi > 1 + PROB_TOLERANCE:
                fail(f"predictive {name} outside [0, 1] (min {lo:.4g}, max {hi:.4g})")
        variance = tensor("variance")
        if variance is not None:
            if tuple(variance.shape) != (rows,):
                fail(f"predictive variance has shape {tuple(variance.shape)}, expected ({rows},)")
            nonnegative("variance", variance)
        return
    shape = tuple(targets.shape) if targets is not None else (n,)
    whose = "the targets'" if targets is not None else f"one per example of {n}"
    for name in ("mean", "var"):
        t = tensor(name)
        if t is None:
            fail(f"predictive is a {type(pred).__name__} without a {name}")
        if tuple(t.shape) != shape:
            fail(f"predictive {name} has shape {tuple(t.shape)}, expected {shape} ({whose})")
    nonnegative("var", pred.var)
    for name in ("sample_means", "sample_vars"):
        t = tensor(name)
        if t is not None and (t.dim() != len(shape) + 1 or tuple(t.shape[1:]) != shape):
            fail(f"predictive {name} has shape {tuple(t.shape)}, expected (S, {', '.join(map(str, shape))})")
    if tensor("sample_vars") is not None:
        nonnegative("sample_vars", pred.sample_vars)


@dataclass
class CellIdentity:
    """Everything that names one cell (model, method configuration, seed) without running it:
    its configuration hash, records folder, lock file, the fields every record of it carries."""

    cls: type
    label: str
    identity: dict
    chash: str
    run_dir: object
    lock: object
    tag: str
    base: dict



@dataclass
class CellState:
    """What the results store holds for one cell (:meth:`Harness.cell_state`): why it needs no work
    (None when it does), its failure record, the evaluation sets still to do and how many of those
    have a record made from other data."""

    why: str | None
    failure: dict | None
    pending: list
    stale: int
    unkept: int = 0  # of the pending sets, those whose record lacks the predictions a run keeps (--keep-predictions)
    # of the pending sets, those whose record stands on an earlier fit than the cell's newest record
    # (a --force-method refit stopped during its evaluation): a cell's records come from one fit
    mixed: int = 0
    kept_fits: dict = field(default_factory=dict)  # eval set's (kind, shift, severity) -> fit_key, of the records kept


def _set_key(e: EvalSet) -> tuple:
    """An evaluation set's name in a cell: (kind, shift, severity), as its record's file is named."""
    return (e.kind, e.shift, e.severity)


def cell_identity(suite, plan: RunPlan, store: ResultsStore, registry, model_name: str, method_name: str, cfg: dict,
                  seed: int, device: torch.device, pretrained: dict | None = None) -> CellIdentity:
    """The :class:`CellIdentity` of a cell: the same in every process (local run, Dask worker, the
    driver recording a task that never came back), as it depends on the plan alone. ``base``
    carries the host and worker of the calling process."""
    cls = registry.get(method_name)
    label = method_label(method_name, cfg, cls.defaults)
    later = getattr(cls, "LATER_OPTIONS", {})  # at the earlier behaviour: not part of the identity
    ident_cfg = {k: v for k, v in cfg.items() if not (k in later and v == later[k])}
    model_ident = model_identity(suite, plan.data, model_name)
    identity = {"suite": suite.name, "method": method_name, "method_config": ident_cfg, "model": model_name,
                "train": plan.train.to_dict(), "data": plan.data, **model_ident}
    from bench.plugins import identity_fields, record_fields

    # a plugin's source hash: an edited plugin makes new cells (a built-in adds nothing: kept hashes hold)
    identity.update(identity_fields(cls))
    chash = config_hash(identity)
    base = {"suite": suite.name, "profile": plan.profile, "task": suite.task.kind,
            "method": method_name, "method_label": label, "method_config": cfg, "config_hash": chash,
            "model": model_name, "seed": seed, "train_config": plan.train.to_dict(),
            "data_config": plan.data, "git_commit": git_commit(), "versions": versions(),
            "device": device_description(device), **worker_identity(), **record_fields(cls)}
    if model_ident:  # what the model's name does not say: a spec's source hash, a backbone's weights
        base["model_identity"] = model_ident
    if plan.note:
        base["eval_note"] = plan.note
    if plan.refused:  # the pairs a method refused when the run was planned: the report lists them (not run)
        base["not_run"] = plan.not_run()
    if pretrained and model_name in pretrained:
        base["pretrained_weights"] = pretrained[model_name]
    return CellIdentity(cls, label, identity, chash, store.run_dir(suite.name, model_name, method_name, chash, seed),
                        store.lock_path(suite.name, model_name, method_name, chash, seed),
                        f"{model_name} {label} seed {seed}", base)


def fit_hashes(suite, cid: CellIdentity) -> tuple[str, str]:
    """The cell's fit hash (its fitted checkpoint's and resume checkpoints' folder) and the one older
    code gave the same fit. Options that only change prediction (``cls.PREDICT_OPTIONS``) do not
    change the fit: the fit's identity takes them at their defaults, so a sweep over them shares one
    fit (and its seed); nor do the data options that only choose evaluation sets
    (``Suite.EVAL_ONLY_DATA``): changing them re-evaluates the fitted method. The older hash is the
    fit's identity before that second rule."""
    cls, identity, chash = cid.cls, cid.identity, cid.chash
    fit_cfg = {**identity["method_config"], **{k: cls.defaults[k] for k in cls.PREDICT_OPTIONS if k in cls.defaults}}
    fit_identity = {**identity, "method_config": fit_cfg, "data": suite.fit_data(identity["data"])}
    legacy = {**identity, "method_config": fit_cfg}
    return (chash if fit_identity == identity else config_hash(fit_identity),
            chash if legacy == identity else config_hash(legacy))


def eval_batch_size(suite, plan: RunPlan) -> int:
    """Examples per evaluation batch: the profile's ``data.eval_batch_size``, else the suite's
    default (CamVid: 8 images; a segmentation batch of 1,000 images held a UNet's activations for
    the whole test set at once: MC dropout's 10 copies of 233 images took 20 GB), else 1,000."""
    return int(suite.data_cfg(plan.data).get("eval_batch_size", 1000))


def num_observations(suite, plan: RunPlan, data: SuiteData) -> int:
    """N of the likelihood (e.g. the KL / N of an ELBO): training examples, or for segmentation
    training pixels (pixels are the observations, as the networks output a row per pixel)."""
    n = len(data.train_x)
    if suite.task.kind == "segmentation":
        h, w = suite.input_shape(plan.data)[-2:]
        n *= int(h) * int(w)
    return n


def check_labels(suite, data: SuiteData) -> None:
    """A :class:`BenchError` (exit 2) when a label held in memory lies outside the task's classes
    [0, K) (segmentation: and is not its ignore label; multilabel: targets not (N, L) 0/1 floats).
    Loaders check the files they read and name them (``datasets.labels``); this stops any other
    suite before every fit of the grid meets it."""
    from bench.multilabel_metrics import target_problem
    from datasets.labels import label_problem

    if suite.task.kind == "multilabel":
        label_problem = lambda y, k, _ignore: target_problem(y, k)  # noqa: E731 - the same loop below
    elif not suite.task.per_class:
        return
    sets = [("training", data.train_y), ("validation", data.val_y)]
    sets += [(f"{e.kind} set {e.shift}" + ("" if e.severity is None else f" severity {e.severity:g}"), e.y)
             for e in data.eval_sets]
    for what, y in sets:
        if isinstance(y, torch.Tensor) and y.numel():
            problem = label_problem(y, suite.task.num_outputs, suite.task.ignore_index)
            if problem:
                raise BenchError(f"{suite.name}: {what} labels: {problem}")


def data_hash(data: SuiteData) -> str:
    """What the cells of a run see (:func:`bench.data.data_digest`): the training and validation
    sets, and every evaluation set's name, fingerprint, labels and inputs (files by their paths)."""
    evals = [v for e in data.eval_sets for v in (f"{e.kind}/{e.shift}/{e.severity}/{e.fingerprint}", e.y)]
    return data_digest(data_digest(data.train_x, data.train_y, data.val_x, data.val_y, *evals),
                       data_digest(*(e.x for e in data.eval_sets), stat=False))


class Harness:
    def __init__(self, suite, plan: RunPlan, data: SuiteData, store: ResultsStore, device: torch.device,
                 methods_registry, *, force: bool = False, progress: bool = False, quiet: bool = False,
                 workers: int = 0, pretrained: dict[str, dict] | None = None, map_refresh: bool | None = None,
                 keep_predictions: PredictionPolicy | None = None, force_methods=(), only_kinds=None,
                 redo_predating: bool = False):
        self.suite, self.plan, self.data, self.store = suite, plan, data, store
        suite.results_dir = store.root  # a suite may read networks an earlier run left there (data.backbone=camvid)
        self.device, self.methods_registry = device, methods_registry
        self.force, self.progress, self.quiet = force, progress, quiet
        # --force-method: these methods' cells are refitted and re-evaluated; the MAP networks are not
        # retrained (the cache refreshes with ``force`` only)
        self.force_methods = frozenset(force_methods or ())
        # --redo-predating: a finished cell whose clean-test record predates a check a refit measures
        # (bench.validity.predating_checks) is refitted and re-evaluated, its MAP network kept
        self.redo_predating = bool(redo_predating)
        self._refits: dict = {}  # the run directories of such cells in this run -> the checks they predate
        self.workers = int(workers)  # loader processes for file-backed evaluation sets
        self.pretrained = pretrained or {}  # model -> {"path": weights file}: a pretrained MAP network
        self.summary = RunSummary()
        self.grid_progress: GridProgress | None = None  # set when the grid starts (run)
        self.eval_batch_size = eval_batch_size(suite, plan)
        self.map_refresh = map_refresh  # None: retrain cached MAP networks when ``force`` (see MapCache)
        # keep each record's predictive in a .npz beside it (bench.predictions); a finished record
        # without them is re-evaluated from the fitted checkpoint to add them (cell_state)
        self.keep_predictions = keep_predictions
        # a cell locked by another process: skipped (concurrent local runs share the work), or waited
        # for (a cluster worker: the driver sent it this cell, which must end with its records)
        self.wait_for_locks = False
        self._map_caches: dict[str, MapCache] = {}
        check_labels(suite, data)  # a label outside the classes: exit 2 before any cell
        self._data_hash: str | None = None  # data_hash(data), when a failure record needs it
        # The held-out validation split is scored like every evaluation set (kind "val"): the
        # one tuning protocol of the suite (bench/selection.py) chooses hyperparameters on it,
        # never on the test sets.
        if data.val_x is not None and len(data.val_x) and data.val_y is not None \
                and not any(e.kind == "val" for e in data.eval_sets):
            data.eval_sets.append(EvalSet("val", "validation", None, data.val_x, data.val_y))
        # ``only_kinds`` (bench run --only-sets): this run evaluates the sets of these kinds only; a cell's
        # other sets stay to do, from its fitted checkpoint, in a later run (bench tune --validation-first)
        # the clean test set stays at hand whatever --only-sets keeps: the cost probe predicts on it, OOD scores
        # need its predictions and the validity verdict is read from its record
        self.id_set = data.id_set()
        if only_kinds:
            kinds = set(only_kinds)
            data.eval_sets[:] = [e for e in data.eval_sets if e.kind in kinds]

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{self.suite.name}] {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------
    def cells(self) -> list[tuple[str, str, dict, int]]:
        """The grid as (model, method, method config, seed), in the order a local run does them."""
        from bench.executors.grid import grid_cells

        return grid_cells(self.plan)

    def map_cache(self, model_name: str) -> MapCache:
        """The shared MAP-network cache of ``model_name`` (one per model and harness)."""
        if model_name not in self._map_caches:
            build = model_builder(self.suite, self.plan.data, model_name)
            # a key that included the evaluation sets (older code) is still found
            map_key = map_network_key(self.suite, self.plan, model_name)
            legacy = {**map_key, "data": self.plan.data}
            self._map_caches[model_name] = MapCache(
                self.store.checkpoint_dir(self.suite.name), map_key, build, self.suite.task, self.data.train_x,
                self.data.train_y, self.plan.train, self.device, augment=self.data.augment, progress=self.progress,
                refresh=self.force if self.map_refresh is None else self.map_refresh,
                pretrained=self.pretrained.get(model_name), legacy_keys=[legacy] if legacy != map_key else [],
                val=(self.data.val_x, self.data.val_y) if self.data.val_x is not None and len(self.data.val_x) else None)
        return self._map_caches[model_name]

    def run(self) -> RunSummary:
        self.write_artifacts()
        cells = self.cells()
        self.grid_progress = GridProgress(len(cells))  # the clock starts with the grid
        for cell in cells:
            t0 = time.perf_counter()
            before = self.summary.skipped
            self.run_cell(*cell)
            self.grid_progress.cell_done(time.perf_counter() - t0, worked=self.summary.skipped == before)
            self.say(self.grid_progress.line())
        return self.summary

    def write_artifacts(self) -> None:
        """Files the suite hands to the report (``SuiteData.extras["artifacts"]``: name -> bytes,
        e.g. a corruption gallery), kept under ``<results>/<suite>/artifacts/<profile>/`` so that
        ``bench report`` rebuilds the report without the data."""
        from bench.store import atomic_write_bytes

        dest = self.store.checkpoint_dir(self.suite.name).parent / "artifacts" / self.plan.profile
        for name, blob in (self.data.extras.get("artifacts") or {}).items():
            atomic_write_bytes(dest / name, blob)

    def cell_identity(self, model_name, method_name, cfg, seed) -> CellIdentity:
        return cell_identity(self.suite, self.plan, self.store, self.methods_registry, model_name, method_name, cfg,
                             seed, self.device, self.pretrained)

    def fit_work_dir(self, cid: CellIdentity, fhash: str | None = None):
        """Where the cell's fit keeps its resume checkpoints (``<tag>.partial``, removed when the
        training ends; ``fhash``: the fit hash, when known): ``checkpoints/partial/<model>/<method>-<fit
        hash>/seed<k>``."""
        ident = cid.identity
        return (self.store.checkpoint_dir(self.suite.name) / "partial" / ident["model"]
                / f"{ident['method']}-{fhash or fit_hashes(self.suite, cid)[0]}" / f"seed{cid.base['seed']}")

    def fitted_path(self, cid: CellIdentity, fhash: str | None = None):
        """Where the cell's fitted method is kept once its fit ends (``fhash``: the fit hash, or an
        older one): ``checkpoints/fitted/<model>/<method>-<fit hash>/seed<k>.pt``."""
        ident = cid.identity
        fhash = fhash or fit_hashes(self.suite, cid)[0]
        return (self.store.checkpoint_dir(self.suite.name) / "fitted" / ident["model"] / f"{ident['method']}-{fhash}"
                / f"seed{cid.base['seed']}.pt")

    def run_cell(self, model_name, method_name, cfg, seed):
        cid = self.cell_identity(model_name, method_name, cfg, seed)
        with file_lock(cid.lock, wait=self.wait_for_locks) as held:
            if not held:  # a concurrent run on this results directory is doing this cell
                self.say(f"{cid.tag}: being run by another process, skipped")
                self.summary.skipped += 1
                return
            self._run_cell_locked(model_name, self.map_cache(model_name), method_name, cfg, seed, cid)

    def _run_cell_locked(self, model_name, map_cache, method_name, cfg, seed, cid):
        cls, label, identity, chash, run_dir, tag = cid.cls, cid.label, cid.identity, cid.chash, cid.run_dir, cid.tag
        build = map_cache.build_model
        base = dict(cid.base)
        state = self.cell_state(cid)
        if state.why:
            self.say(f"{tag}: {state.why}, skipped")
            self.summary.skipped += 1
            return
        failure, pending, stale, kept_fits = state.failure, state.pending, state.stale, state.kept_fits
        if failure is not None and not failure.get("executor_failure"):
            # made from other data (or by code that did not record which): the data may have been fixed
            self.say(f"{tag}: recorded as failed on other data (data_hash {failure.get('data_hash')}, now "
                     f"{self.data_hash()}), retried")
        if stale:
            self.say(f"{tag}: {stale} record(s) were made from other data (e.g. another corruption generator "
                     f"version); they are redone")
        if state.unkept:
            self.say(f"{tag}: {state.unkept} record(s) lack kept predictions (--keep-predictions); they are "
                     f"re-evaluated to add them (from the fitted checkpoint when there is one)")
        if state.mixed:
            self.say(f"{tag}: {state.mixed} record(s) stand on an earlier fit than the cell's newest record (e.g. "
                     f"a --force-method refit stopped during its evaluation); they are redone, so that the cell's "
                     f"records come from one fit")
        started = now()
        ctx_cls = sys.modules["methods.base"].MethodContext
        fhash, legacy_fhash = fit_hashes(self.suite, cid)
        base["fit_hash"] = fhash  # the fitted checkpoint's folder: checkpoints/fitted/<model>/<method>-<fit_hash>
        work_dir = self.fit_work_dir(cid, fhash)
        ctx = ctx_cls(task=self.suite.task, build_model=build, train=self.plan.train, device=self.device,
                      seed=seed, map_cache=map_cache, num_train=self.num_observations(), work_dir=work_dir,
                      progress=self.progress, extras=self.data.extras)
        fit_seed = derive_seed(self.suite.name, model_name, method_name, fhash, seed)
        seed_everything(fit_seed)  # initialisation inside the constructor depends on it
        method = cls(ctx, **cfg)
        ckpt, old_ckpt = self.fitted_path(cid, fhash), self.fitted_path(cid, legacy_fhash)
        if not ckpt.exists() and legacy_fhash != fhash and old_ckpt.exists() and not self.refitted(cid):
            ckpt = old_ckpt  # fitted by older code under the identity that included evaluation options
        try:
            state = None
            if ckpt.exists() and not self.refitted(cid):
                state = load_or_set_aside(ckpt, lambda st: method.load_state_dict(st["method"]))
            if state is not None:
                fit_cost, fit_digest = state["fit_cost"], state.get("fit_digest")  # None: a checkpoint of older code
                self.summary.loaded += 1
                self.say(f"{tag}: loaded fitted checkpoint")
            else:
                if ckpt.exists() or ckpt.with_name(ckpt.name + ".bad").exists():
                    seed_everything(fit_seed)  # a fresh method: a failed load may have changed this one
                    method = cls(ctx, **cfg)
                seed_everything(fit_seed)
                loader = TensorLoader(self.data.train_x, self.data.train_y, self.plan.train.batch_size,
                                      shuffle=True, seed=fit_seed, device=self.device, augment=self.data.augment)
                n_before, n_requested = len(map_cache.trained_now), len(map_cache.requested)
                load_start = host_load()
                with PeakMemory(self.device) as mem, Timer(self.device) as timer, earlier_training_time() as earlier:
                    usage = ThreadUsage()
                    method.fit(loader, (self.data.val_x, self.data.val_y))
                    usage = usage.usage()
                # what the fit's process did with its wall time, earlier processes' pieces too: a
                # stop (paused) or waiting for a core makes the time an upper bound
                host = {**host_context(load_start, host_load(), self.device),
                        **usage_fractions(add_usage(usage, earlier[1]), "fit")}
                # MAP networks trained inside this fit are not fit time; every MAP network the fit
                # used counts as upstream training time (added by measure_cost, from the cache)
                map_in_fit = sum(map_cache.in_process_s.get(s, 0.0) for s in map_cache.trained_now[n_before:])
                # a fit resumed from a partial checkpoint (killed mid-training): the epochs earlier
                # processes ran count (NaN: a checkpoint too old to say how long they took)
                fit_cost = {"fit_time_s": timer.seconds - map_in_fit + earlier[0], "fit_resumed_s": earlier[0],
                            "fit_peak_memory_mb": mem.peak_mb, "memory_probe": memory_probe(self.device),
                            "upstream_seeds": sorted(set(map_cache.requested[n_requested:])), **host}
                fitted_state = method.state_dict()
                fit_digest = state_digest(fitted_state)
                save_torch({"method": fitted_state, "fit_cost": fit_cost, "fit_digest": fit_digest}, ckpt)
                self.summary.fitted += 1
                log_event(map_cache.events_path, "fitted", model=model_name, method=method_name, config_hash=fhash,
                          seed=seed, seconds=timer.seconds + earlier[0], resumed_seconds=earlier[0],
                          paused_fraction=host.get("fit_paused_fraction"),
                          run_delay_fraction=host.get("fit_run_delay_fraction"))
                resumed = f" ({earlier[0]:.1f} s of it before a resume)" if earlier[0] else ""
                self.say(f"{tag}: fitted in {timer.seconds + earlier[0]:.1f} s{resumed}{timing_caveat(host)}")
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a method's error, sys.exit too (not Ctrl-C), is its cell's
            self.record_failure(run_dir, base, started, exc, tag)
            return
        if self.store.remove(run_dir, "fit", "fit", None):  # a retry (--force) succeeded
            self.say(f"{tag}: the earlier failure record is superseded, removed")
        if fit_digest:
            base["fit_digest"] = fit_digest  # which fit the records come from (bench.store.fit_key)
        # records kept from another fit than this one (its checkpoint was missing or set aside, so the
        # method was fitted again): redone, so that the cell's records come from one fit
        this_fit = fit_key(fit_digest, fit_cost.get("fit_time_s"))
        other = {k for k, key in kept_fits.items() if key is not None and key != this_fit}
        if other:
            todo = {_set_key(e) for e in pending} | other
            pending = [e for e in self.data.eval_sets if _set_key(e) in todo]
            self.say(f"{tag}: {len(other)} record(s) stand on another fit than the one used now (its checkpoint "
                     f"was missing, set aside or of another fit); they are re-evaluated, so that the cell's "
                     f"records come from one fit")
        try:
            cost = self.measure_cost(method, fit_cost, map_cache)
            self.evaluate(method, run_dir, base, cost, pending, started, tag, seed)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - e.g. a non-finite predictive: the fitted method is unusable
            self.record_failure(run_dir, base, started, exc, tag)

    def num_observations(self) -> int:
        return num_observations(self.suite, self.plan, self.data)

    def data_hash(self) -> str:
        """:func:`data_hash` of this run's data (computed once, when a failure record needs it)."""
        if self._data_hash is None:
            self._data_hash = data_hash(self.data)
        return self._data_hash

    def forced(self, method_name: str) -> bool:
        """Whether the cells of ``method_name`` are redone (``--force``, or ``--force-method`` naming it)."""
        return self.force or method_name in self.force_methods

    def finished(self, cid: CellIdentity) -> str | None:
        """Why the cell ``cid`` needs no work, or None when it does (always None with ``force``):
        it failed earlier on the data held now (kept until ``--force``; an executor failure or a
        failure on other data is retried), or every evaluation record exists, made from that data.
        Read-only: the driver of a distributed run asks it before sending a cell anywhere."""
        return self.cell_state(cid, complete=False).why

    def cell_state(self, cid: CellIdentity, complete: bool = True) -> CellState:
        """What the store holds for the cell ``cid``, read once: :meth:`finished`'s answer (``why``),
        its failure record, the evaluation sets still to do (``pending``: missing, or made from other
        data, counted in ``stale``). With ``force`` nothing is read and every set is pending.
        ``complete=False`` stops at the first pending set (``why`` is then right, the lists partial)."""
        if self.forced(cid.base["method"]):
            return CellState(None, None, list(self.data.eval_sets), 0)
        failure = self.store.read(cid.run_dir, "fit", "fit", None)
        if (failure is not None and not failure.get("executor_failure")
                and failure.get("data_hash") == self.data_hash()):
            return CellState("recorded as failed earlier (use --force to retry)", failure, [], 0)
        pending, stale, unkept, kept = [], 0, 0, {}
        for e in self.data.eval_sets:
            rec = self.store.read(cid.run_dir, e.kind, e.shift, e.severity)
            if rec is not None and not self.made_from(rec, e):
                rec, stale = None, stale + 1
            if (rec is not None and self.keep_predictions is not None
                    and not satisfies(rec, self.store.root, self.keep_predictions)):
                rec, unkept = None, unkept + 1
            if rec is None:
                pending.append(e)
                if not complete:
                    break
            else:
                kept[_set_key(e)] = rec
        # the records kept must come from one fit: those of an earlier fit than the newest record's
        # are redone (from the fitted checkpoint, which holds the newest fit)
        newest, fits = one_fit(list(kept.values()))
        mixed = 0
        if len(fits) > 1:
            redo = {k for k, rec in kept.items() if record_fit_key(rec) not in (None, newest)}
            todo = {_set_key(e) for e in pending} | redo
            pending = [e for e in self.data.eval_sets if _set_key(e) in todo]
            kept = {k: rec for k, rec in kept.items() if k not in redo}
            mixed = len(redo)
        if not pending and self.redo_predating and self.predating(cid, kept):
            return CellState(None, None, list(self.data.eval_sets), 0)
        why = None if pending else f"all {len(self.data.eval_sets)} evaluation records exist" + (
            self.predating_left(kept) if self.redo_predating else "")
        return CellState(why, failure, pending, stale, unkept, mixed,
                         {k: record_fit_key(rec) for k, rec in kept.items()})

    def predating(self, cid: CellIdentity, kept: dict) -> list[str]:
        """The checks the clean-test record among ``kept`` predates (bench.validity.predating_checks); the
        cell is then refitted in this run (:meth:`refitted`)."""
        from bench.validity import predating_checks

        rec = kept.get(_set_key(self.id_set))
        names = predating_checks(rec) if rec is not None else []
        if names:
            self._refits[cid.run_dir] = names
        return names

    def plan_rows(self) -> list[tuple[str, str]]:
        """``(cell tag, what a run would do with it)`` for every cell of the grid, in the order a local run
        does them, read from the store as :meth:`run_cell` would read it (``bench run --plan``): nothing is
        fitted, locked or written. A shared MAP network not cached yet is named where the first cell
        needing it would train it."""
        rows, planned = [], set()
        for model_name, method_name, cfg, seed in self.cells():
            cid = self.cell_identity(model_name, method_name, cfg, seed)
            if (who := held_here(cid.lock)) is not None:
                rows.append((cid.tag, f"skipped: being run by another process now (pid {who.get('pid', '?')})"))
                continue
            state = self.cell_state(cid)
            if state.why:
                rows.append((cid.tag, f"nothing to do: {state.why}"))
                continue
            sets = f"{len(state.pending)} of {len(self.data.eval_sets)} evaluation sets"
            hashes = [h for h in dict.fromkeys(fit_hashes(self.suite, cid)) if h]
            partial = sorted(p.name for h in hashes for p in self.fit_work_dir(cid, h).glob("*.partial"))
            resume = f", resuming the training a run stopped ({', '.join(partial)})" if partial else ""
            if self.refitted(cid):
                why = ("--force" if self.force else f"--force-method {method_name}" if self.forced(method_name)
                       else f"--redo-predating: its records predate {', '.join(self._refits[cid.run_dir])}")
                what = f"refit ({why}){resume}, then evaluate {sets}"
            elif any(self.fitted_path(cid, h).is_file() for h in hashes):
                rows.append((cid.tag, f"evaluate {sets} from its fitted checkpoint"))
                continue
            else:
                what = f"fit{resume}, then evaluate {sets}"
            if state.failure is not None:
                what += " (recorded as failed on other data or by its executor: retried)"
            cache = self.map_cache(model_name)
            seeds = [] if cache.pretrained else cid.cls.map_seeds(cfg, seed)
            new = [s for s in seeds if (model_name, s) not in planned
                   and (self.force or not cache.cached_path(s).is_file())]
            planned.update((model_name, s) for s in new)
            if new:
                resumed = [s for s in new if cache.path(s).with_suffix(".partial").is_file()]
                what += (f"; trains the MAP network of seed(s) {', '.join(map(str, new))} first"
                         + (f" (resuming seed(s) {', '.join(map(str, resumed))})" if resumed else ""))
                kept = {s: recorded_networks(cache.records_dir, model_name, s, cache.key.get("train")) for s in new}
                if any(kept.values()):
                    what += (": cells here stand on " + "; ".join(
                        f"seed {s}'s network {', '.join(sorted(d))}" for s, d in kept.items() if d)
                             + ", with which a network trained again pairs only if it repeats that fit bit for bit "
                               "(the same CPU and thread count); kept networks: scripts/keep_records.py save-maps")
            rows.append((cid.tag, what))
        return rows

    def predating_left(self, kept: dict) -> str:
        """Why --redo-predating leaves a cell whose clean-test record predates a check: it fails another
        (bench.validity.predating_checks); "" for a cell that predates none."""
        from bench.validity import refit_view

        rec = kept.get(_set_key(self.id_set))
        predates, failed = refit_view(rec) if rec is not None else ([], [])
        return (f"; they predate {', '.join(predates)} but fail {', '.join(failed)}, which a refit would fail "
                f"again" if predates and failed else "")

    def refitted(self, cid: CellIdentity) -> bool:
        """Whether the cell's fit is redone rather than loaded: ``--force``, ``--force-method`` naming its
        method, or ``--redo-predating`` finding its records predate a check."""
        return self.forced(cid.base["method"]) or cid.run_dir in self._refits

    def made_from(self, record: dict, e: EvalSet) -> bool:
        """Whether ``record`` was made from the data ``e`` holds now (same fingerprint)."""
        fp = record.get("data_fingerprint")
        if fp is None:
            fp = self.suite.legacy_fingerprint(record)
        return fp == e.fingerprint

    def record_failure(self, run_dir, base, started, exc, tag):
        msg = f"{type(exc).__name__}: {exc}"
        self.store.write(run_dir, {**base, "status": "failed", "kind": "fit", "shift": "fit", "severity": None,
                                   "error": msg, "expected": isinstance(exc, EXPECTED_FAILURES),
                                   "traceback": traceback.format_exc(limit=-12), "data_hash": self.data_hash(),
                                   "started_at": started, "finished_at": now()})
        self.summary.failed.append(f"{tag}: {msg}")
        self.summary.records += 1
        self.say(f"{tag}: FAILED ({msg}); recorded, continuing")

    def measure_cost(self, method, fit_cost, map_cache) -> dict:
        x = self.id_set.x[: min(64, len(self.id_set.x))].to(self.device)
        seed_everything(0)
        try:
            flops = flops_per_example(method.predict, x)
        except Exception as exc:  # noqa: BLE001 - a counter failure must not lose the results
            log.warning("FLOP counting failed: %s", exc)
            flops = float("nan")
        with PeakMemory(self.device) as mem, torch.no_grad():
            method.predict(self.id_set.x[: self.eval_batch_size].to(self.device))
        extra = method.extra_cost()
        upstream_host = {}
        if "upstream_seeds" in fit_cost:  # the MAP networks the fit used, from the cache
            upstream = map_cache.upstream_time(fit_cost["upstream_seeds"])
            if fit_cost["upstream_seeds"]:  # what their training threads did with that time
                upstream_host = usage_fractions(map_cache.upstream_usage(fit_cost["upstream_seeds"]), "upstream")
            extra.pop("upstream_train_time_s", None)
        else:  # a checkpoint fitted before the harness tracked them: what the plugin reported
            upstream = extra.pop("upstream_train_time_s", 0.0)
        state_bytes = sum(t.numel() * t.element_size() for t in _tensors(method.state_dict()))
        return {"total_params": method.num_params(), "stochastic_params": method.num_stochastic_params(),
                "state_mb": state_bytes / 2**20,
                "train_time_s": fit_cost["fit_time_s"] + upstream, "upstream_train_time_s": upstream,
                "fit_time_s": fit_cost["fit_time_s"], "peak_memory_mb": fit_cost["fit_peak_memory_mb"],
                # seconds of the fit that earlier processes ran (resumed from a partial checkpoint);
                # the train peak is then this process's part only
                "fit_resumed_s": fit_cost.get("fit_resumed_s", 0.0),
                "predict_peak_memory_mb": mem.peak_mb, "flops_per_example": flops,
                # how the train peak was measured (a checkpoint fitted by older code: untrimmed start)
                "peak_memory_probe": fit_cost.get("memory_probe", memory_probe(self.device, legacy=True)),
                # the machine's state while the fit ran (bench.leaderboard.board.timing_flags judges it):
                # absent in older checkpoints
                **{k: fit_cost[k] for k in HOST_KEYS if k in fit_cost}, **upstream_host,
                **extra}

    def evaluate(self, method, run_dir, base, cost, pending, started, tag, seed):
        kind = self.suite.task.kind
        id_set = self.id_set
        id_pred = None
        needs_id = kind in ("classification", "multilabel") and any(e.kind == "ood" for e in pending)
        times, n_seen = 0.0, 0
        order = sorted(pending, key=lambda e: e.kind != "id")  # the id set first: OOD scores need it
        if needs_id and id_set not in order:
            seed_everything(derive_seed("eval", seed, id_set.kind, id_set.shift, id_set.severity))
            id_pred, _ = predict_all(method, id_set.x, self.eval_batch_size, self.device, self.workers)
            check_predictive(self.suite.task, id_pred, id_set.n,
                             f"{id_set.kind} set {id_set.shift} (for the OOD scores)")
        from tqdm.auto import tqdm

        from bench.training import progress_enabled

        # the fit's validity verdict (bench.validity), from its clean-test record: computed when that
        # record is made (or read back when it exists already) and stored in every record of the fit
        checks = type(method).VALIDITY_CHECKS
        verdict_now = None
        if id_set not in order:
            stored = self.store.read(run_dir, id_set.kind, id_set.shift, id_set.severity)
            verdict_now = validity.verdict(validity.run_view(stored), checks) if stored else None
        for e in tqdm(order, desc=f"eval {tag}", leave=False, disable=not progress_enabled(self.progress)):
            seed_everything(derive_seed("eval", seed, e.kind, e.shift, e.severity))
            usage = ThreadUsage()  # stops and waits for a core during the set's prediction and scoring
            if kind == "segmentation":  # scored batch by batch: a split's pixels never sit in memory
                scores, curves, secs = score_segmentation(method, e, self.suite.task, self.eval_batch_size,
                                                          self.device, self.workers)
            else:
                pred, secs = predict_all(method, e.x, self.eval_batch_size, self.device, self.workers)
                check_finite(pred, f"{e.kind} set {e.shift} severity {e.severity}")
                check_predictive(self.suite.task, pred, e.n, f"{e.kind} set {e.shift} severity {e.severity}",
                                 targets=e.y if kind == "regression" else None)
                if e is id_set:
                    id_pred = pred
                scores, curves = score_set(kind, pred, e, id_pred)
            times += secs
            n_seen += e.n
            conditions = usage_fractions(usage.usage(), "predict")
            if e is id_set and kind == "regression" and "band_x" in self.data.extras:  # a 1-D suite's band grid (toy)
                curves["band"] = self.band_curve(method)
            rec = {**base, "status": "ok", "kind": e.kind, "shift": e.shift, "severity": e.severity, "n": e.n,
                   "metrics": scores, "curves": curves, "started_at": started, "finished_at": now(),
                   "cost": {**cost, "predict_time_per_example_s": secs / max(e.n, 1), **conditions},
                   "diagnostics": self.diagnostics_of(method, base, seed) if e is id_set else None}
            if e.note:
                rec["eval_note"] = "; ".join(filter(None, [base.get("eval_note"), e.note]))
            if e.fingerprint:
                rec["data_fingerprint"] = e.fingerprint
            if kind in ("classification", "segmentation"):
                rec["num_classes"] = int(self.suite.task.num_outputs)
            if kind == "multilabel":  # the labels, and the uninformed reference on this set's targets
                rec["num_labels"] = int(self.suite.task.num_outputs)
                if e.kind != "ood" and e.y is not None:
                    from bench.multilabel_metrics import prevalence_reference

                    rec["reference"] = prevalence_reference(self.data.train_y, e.y)
            if e is id_set:
                verdict_now = validity.verdict(validity.run_view(rec), checks)
            rec["validity"] = (verdict_now if verdict_now is not None
                               else validity.unverified("no clean-test record of this fit"))
            rec_path = self.store.record_path(run_dir, e.kind, e.shift, e.severity)
            if self.keep_predictions is not None:  # the .npz first: a record never names a missing file
                rec["predictions"] = keep_predictions(self.store.root, rec_path, rec,
                                                      None if kind == "segmentation" else pred, e,
                                                      self.keep_predictions)
            else:  # a record redone without them: an earlier record's file would outlive it
                predictions_path(rec_path).unlink(missing_ok=True)
            self.store.write(run_dir, rec)
            self.summary.records += 1
        self.summary.eval_examples += n_seen
        self.summary.eval_seconds += times
        rate = n_seen / times if times > 0 else float("inf")
        self.say(f"{tag}: evaluated {len(pending)} sets, {n_seen} examples in {times:.1f} s ({rate:,.0f} ex/s)")

    def diagnostics_of(self, method, base: dict, seed: int) -> dict:
        """The method's diagnostics; for a method built on the seed's MAP network, with that
        network's training curve (``map_training``, from the MAP cache) when the method does not
        report one itself: bench.validity's map_converged checks the network a row stands on."""
        diag = dict(method.diagnostics() or {})
        if "map_training" not in diag and type(method).starts_from(method.config) == "map":
            diag["map_training"] = self.map_cache(base["model"]).training_log(seed)
        return diag

    def band_curve(self, method) -> dict:
        ex = self.data.extras
        pred, _ = predict_all(method, ex["band_x"], self.eval_batch_size, self.device)
        check_predictive(self.suite.task, pred, len(ex["band_x"]), "band grid")
        s = ex.get("band_scale", 1.0)
        return {"x": ex["band_x"].squeeze(1).tolist(), "mean": (pred.mean * s).tolist(),
                "std": (pred.var.sqrt() * s).tolist(), "truth": (ex["band_truth"] * s).tolist(),
                "train_x": ex["train_x"].tolist(), "train_y": (ex["train_y"] * s).tolist()}
