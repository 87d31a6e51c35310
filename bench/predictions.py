"""Kept predictions: an evaluation record's predictive in a compressed ``.npz`` beside it.

``bench run --keep-predictions`` writes, for every evaluation record, the predictive the metrics
were computed from (``<record>.predictions.npz`` next to ``<record>.json``) and names it in the
record (``predictions``: the file relative to the results directory, its sha256, what was kept).
``bench rescore`` (:mod:`bench.rescore`) recomputes the metrics from these files without refitting,
and adds metrics registered after the run (:data:`bench.metrics.METRICS`). The schema is
documented in ``docs/predictions.md`` (:data:`SCHEMA`); in short, a file holds ``meta`` (a JSON
string: the record's identity, the storage dtype, what happened to the samples, the labels' hash)
and the arrays:

* classification: ``probs`` (N, K) mean predictive at the storage dtype (float32 by default,
  the predictive's own values, float64 kept as such: the metrics are recomputed from the very
  values they were computed from; float16 halves the size and the metrics agree to ~1e-3),
  ``sample_probs`` (S, N, K) per-sample probabilities of a sampling method at the same dtype
  (the first thing dropped by the size bound), ``variance`` (N,) of moment-propagating methods,
  ``labels`` (N,) int64 (not on OOD sets, whose labels are not in the task's label space);
* regression: ``mean``, ``var`` (as the predictive's, float32), ``sample_means`` /
  ``sample_vars`` (S, ...) when the method samples (dropped first), ``targets`` (float);
* multilabel: ``probs`` (N, L) per-label probabilities (rows do not sum to 1), ``sample_probs``
  (S, N, L) of a sampling method (dropped first), both at the storage dtype as for
  classification, and ``targets`` (N, L) of 0/1 as the data gave them (not on OOD sets);
* segmentation: refused (the record says so): per-pixel probabilities of a test split are
  N x H x W x K values (CamVid's 233 test images at 360 x 480 x 11 classes: 1.8 GB at float32,
  885 MB at float16), beyond any bound that suits a results folder.

Labels are stored (they are 1/K of the probabilities, and a published run can be re-scored
without its data), with ``labels_sha256`` so that a copy of the data can be checked against them.

The size bound (``--predictions-max-mb``, default :data:`DEFAULT_MAX_MB`) applies to the
uncompressed arrays of one file: the samples are dropped first (the record says
``samples: "dropped"`` and why; mutual information and ``auroc_mi`` then cannot be rescored), and
when the mean predictive alone is over the bound nothing is written (``kept: false``).
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench.errors import BenchError
from bench.store import atomic_write_bytes

#: the ``schema`` of ``meta`` in every file this code writes
SCHEMA = "bench.predictions/1"
#: a record's predictions file: ``<eval_key>.json`` -> ``<eval_key>.predictions.npz``
SUFFIX = ".predictions.npz"
#: the default bound on one file's uncompressed arrays, in MiB
DEFAULT_MAX_MB = 64.0
DTYPES = ("float32", "float16")
#: the record fields a file's ``meta`` repeats (rescore checks they match the record naming it)
IDENTITY = ("suite", "model", "method", "config_hash", "seed", "kind", "shift", "severity", "task")
#: the tasks whose predictive is kept (segmentation's per-pixel one is refused)
KEPT_TASKS = ("classification", "regression", "multilabel")
#: what cannot be rescored without the per-sample predictive
SAMPLE_METRICS = ("mutual_information", "auroc_mi")


@dataclass(frozen=True)
class PredictionPolicy:
    """What ``bench run --keep-predictions`` keeps: the bound on one file's uncompressed arrays
    (MiB) and the dtype of the class probabilities (float32 or float16)."""

    max_mb: float = DEFAULT_MAX_MB
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise BenchError(f"--predictions-dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if not float(self.max_mb) > 0:
            raise BenchError(f"--predictions-max-mb {self.max_mb}: expected a size in MiB > 0")


def predictions_path(record_path: Path) -> Path:
    """The predictions file of the record at ``record_path`` (``<eval_key>.json``)."""
    p = Path(record_path)
    stem = p.name[: -len(".json")] if p.name.endswith(".json") else p.name
    return p.with_name(stem + SUFFIX)


def labels_sha256(labels: np.ndarray) -> str:
    """sha256 of labels as C-ordered little-endian int64 (class labels) or float64 (regression
    targets): the same labels give the same hash whatever dtype a loader used."""
    a = np.asarray(labels)
    canon = a.astype("<i8") if np.issubdtype(a.dtype, np.integer) or a.dtype == bool else a.astype("<f8")
    return hashlib.sha256(np.ascontiguousarray(canon).tobytes()).hexdigest()


def _mb(nbytes: int) -> float:
    return nbytes / 2**20


def _numpy(t: torch.Tensor, dtype=None) -> np.ndarray:
    a = t.detach().to("cpu").contiguous().numpy()
    return a if dtype is None or a.dtype == dtype else a.astype(dtype)


def _planned(task_kind: str, pred, policy: PredictionPolicy):
    """(essential, samples): name -> (tensor, numpy dtype or None for the tensor's own). float32
    keeps a float32 or float64 predictive as it is (the values scored); float16 converts."""
    def f(t):
        keep = policy.dtype == "float32" and t.dtype in (torch.float32, torch.float64)
        return None if keep else np.dtype(policy.dtype)

    if task_kind in ("classification", "multilabel"):
        main = {"probs": (pred.probs, f(pred.probs))}
        if getattr(pred, "variance", None) is not None:
            main["variance"] = (pred.variance, None)
        samples = {} if pred.sample_probs is None else {"sample_probs": (pred.sample_probs, f(pred.sample_probs))}
    else:
        main = {"mean": (pred.mean, None), "var": (pred.var, None)}
        samples = {k: (getattr(pred, k), None) for k in ("sample_means", "sample_vars")
                   if getattr(pred, k, None) is not None}
    return main, samples


def _nbytes(planned: dict) -> int:
    total = 0
    for t, dtype in planned.values():
        itemsize = np.dtype(dtype).itemsize if dtype is not None else t.element_size()
        total += t.numel() * itemsize
    return total


def refused(why: str, reason: str) -> dict:
    """A record's ``predictions`` entry when nothing was written (``reason``: "segmentation" or
    "bound", the latter redone by a run with a larger bound)."""
    return {"kept": False, "reason": reason, "why": why}


def keep_predictions(root: Path, record_path: Path, record: dict, pred, eval_set, policy: PredictionPolicy) -> dict:
    """Write the predictive ``pred`` of ``record`` (its evaluation set ``eval_set``) beside the
    record file, atomically, and return the record's ``predictions`` entry (see the module doc)."""
    task_kind = record["task"]
    if task_kind not in KEPT_TASKS:
        return refused(f"{task_kind}: per-pixel predictions are not kept (N x H x W x K values per split; "
                       "docs/predictions.md)", "segmentation")
    main, samples = _planned(task_kind, pred, policy)
    labels = None
    if eval_set.kind != "ood" and eval_set.y is not None:
        labels = np.ascontiguousarray(torch.as_tensor(eval_set.y).detach().cpu().numpy())
    label_bytes = 0 if labels is None else labels.nbytes
    bound = int(float(policy.max_mb) * 2**20)
    need = _nbytes(main) + label_bytes
    if need > bound:
        return {**refused(f"the mean predictive alone is {_mb(need):.3g} MiB, over the bound of {policy.max_mb:g} MiB "
                          f"(--predictions-max-mb)", "bound"), "max_mb": float(policy.max_mb)}
    entry = {"kept": True, "schema": SCHEMA, "dtype": policy.dtype, "max_mb": float(policy.max_mb)}
    if not samples:
        entry["samples"] = "none"
    elif need + _nbytes(samples) > bound:
        entry["samples"] = "dropped"
        shapes = ", ".join(f"{k} {tuple(t.shape)}" for k, (t, _) in samples.items())
        entry["samples_why"] = (f"{shapes}: {_mb(_nbytes(samples)):.3g} MiB would take the file to "
                                f"{_mb(need + _nbytes(samples)):.3g} MiB, over the bound of {policy.max_mb:g} MiB "
                                f"(--predictions-max-mb); {', '.join(SAMPLE_METRICS)} cannot be rescored")
        samples = {}
    else:
        entry["samples"] = "kept"
    arrays = {k: _numpy(t, dtype) for k, (t, dtype) in {**main, **samples}.items()}
    if labels is not None:
        arrays["labels" if task_kind == "classification" else "targets"] = labels  # multilabel: (N, L) 0/1
        entry["labels_sha256"] = labels_sha256(labels)
    entry["arrays"] = {k: list(a.shape) for k, a in arrays.items()}
    meta = {"schema": SCHEMA, **{k: record.get(k) for k in IDENTITY}, "n": record.get("n"),
            "num_classes": record.get("num_classes"), "num_labels": record.get("num_labels"),
            "method_label": record.get("method_label"),
            "dtype": policy.dtype, "samples": entry["samples"], "labels_sha256": entry.get("labels_sha256"),
            "arrays": {k: {"shape": list(a.shape), "dtype": a.dtype.str} for k, a in arrays.items()},
            "git_commit": record.get("git_commit"), "created_at": record.get("finished_at")}
    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    blob = buf.getvalue()
    path = predictions_path(record_path)
    atomic_write_bytes(path, blob)
    entry.update(file=Path(path).relative_to(root).as_posix(), sha256=hashlib.sha256(blob).hexdigest(),
                 bytes=len(blob))
    return entry


def satisfies(record: dict, root: Path, policy: PredictionPolicy) -> bool:
    """Whether ``record`` needs no re-evaluation for a run that keeps predictions under ``policy``:
    its file is there, or it was refused for a reason the policy cannot change (segmentation; a
    multilabel record refused so by code that did not keep multilabel predictives is redone), or
    its samples (or everything) were left out by a bound no smaller than ``policy``'s."""
    p = record.get("predictions")
    if not isinstance(p, dict):
        return False
    if p.get("kept"):
        f = p.get("file")
        if not isinstance(f, str) or not (Path(root) / f).is_file():
            return False
        limited = p.get("samples") == "dropped"
    else:
        if record.get("task") in KEPT_TASKS and p.get("reason") != "bound":  # refused by older code (multilabel)
            return False
        limited = p.get("reason") == "bound"
    return not (limited and float(policy.max_mb) > float(p.get("max_mb") or 0))
