"""``python -m bench rescore``: recompute the metrics of stored records from their kept predictions.

No method is refitted or evaluated: each record whose predictive was kept (``bench run
--keep-predictions``, :mod:`bench.predictions`) is rescored from its ``.npz`` by the metric code
of this checkout (``bench.metrics``), OOD records with their cell's in-distribution file. Optional
metrics registered in :data:`bench.metrics.METRICS` are added with ``--metrics``.

Order of work: every file named by a record is checked first (its sha256 against the record's,
its schema, the identity in its ``meta`` against the record naming it, its array shapes); one that
fails stops the command with exit code 2 before anything is written (a changed file is not
evidence of the run). Then each cell is rescored under its lock (a cell being run is skipped) and
a record is rewritten, atomically, only when a metric was added or a value changed; it then
carries ``rescored`` (when, the commit, what was added, what changed with its stored value, what
could not be recomputed). Metrics the file cannot give (mutual information when the samples were
dropped by the size bound) keep their stored values and are listed.

A recomputed value equals the stored one when ``|a - b| <= ATOL + RTOL |b|`` (RTOL 1e-9, ATOL
1e-12): with float32 files the values are those the run scored, so the metrics come out
bit-identical unless the metric code changed; float16 files agree to about 1e-3 and are listed as
changed. Exit codes: 0 something was rescored (records lacking predictions are listed), 1 no record
had kept predictions, 2 bad input or a file that fails its check.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bench import metrics as M
from bench.errors import BenchError
from bench.predictions import IDENTITY, SAMPLE_METRICS, SCHEMA, labels_sha256
from bench.store import PACK_NAME, ResultsStore, _safe, atomic_write_json, find_packs, read_record

RTOL, ATOL = 1e-9, 1e-12


class PredictionsError(BenchError):
    """A kept predictions file that fails its check (sha256, schema, identity, shapes): exit 2."""


@dataclass
class Found:
    path: Path  # the record file
    rec: dict


@dataclass
class Summary:
    records: int = 0  # records rescored (recomputed from a file)
    cells: set = field(default_factory=set)
    written: int = 0
    reproduced: int = 0  # records whose every recomputed metric equals the stored one
    added: dict = field(default_factory=lambda: defaultdict(int))  # metric -> records
    changed: dict = field(default_factory=lambda: defaultdict(list))  # metric -> [|delta|]
    not_recomputed: dict = field(default_factory=lambda: defaultdict(int))  # metric -> records
    not_applicable: dict = field(default_factory=lambda: defaultdict(int))  # registered metric -> records
    lacking: dict = field(default_factory=lambda: defaultdict(list))  # cell -> [(set, why)]
    skipped_locked: list = field(default_factory=list)


def _cell(rec: dict) -> str:
    return f"{rec['suite']} / {rec['model']} {rec.get('method_label') or rec['method']} seed {rec['seed']}"


def _set(rec: dict) -> str:
    sev = "" if rec.get("severity") is None else f" {rec['severity']:g}"
    return f"{rec['kind']} {rec['shift']}{sev}"


def find_records(root: Path, suites) -> tuple[list[Found], int]:
    """The loose evaluation records (status ok) under ``root`` (or its ``suites``), and how many
    packed records there are (``records.jsonl.xz`` of docs/records: read-only, not rescored)."""
    bases = [root / _safe(s) for s in suites] if suites else [root]
    out, packed = [], 0
    for base in bases:
        for path in sorted(base.rglob("*.json")):
            if "records" not in path.relative_to(root).parts:
                continue
            rec, problem = read_record(path)
            if problem is not None:
                print(f"rescore: skipping damaged record {path}: {problem}", file=sys.stderr)
                continue
            if rec["status"] == "ok" and rec["kind"] != "fit":
                out.append(Found(path, rec))
        packed += len(find_packs(base))
    return out, packed


def _lacking_why(root: Path, rec: dict) -> str | None:
    """Why ``rec`` has no usable predictions file (None: it names one that exists)."""
    p = rec.get("predictions")
    if p is None:
        return "made without --keep-predictions (bench run --keep-predictions re-evaluates it, no refit)"
    if not isinstance(p, dict):
        return "its predictions entry is not an object"
    if not p.get("kept"):
        return f"not kept: {p.get('why', 'no reason given')}"
    f = p.get("file")
    if not isinstance(f, str) or not (root / f).is_file():
        return f"its predictions file {f} is missing"
    return None


def load_predictions(root: Path, rec: dict) -> tuple[dict, dict]:
    """``(meta, arrays)`` of the file ``rec`` names, checked: PredictionsError when its sha256 is not
    the record's, it lies outside ``root``, its schema is unknown, its identity is another record's,
    its labels are not those hashed, or its arrays do not fit the record."""
    info = rec["predictions"]
    path = (root / info["file"]).resolve()
    if not path.is_relative_to(root.resolve()):
        raise PredictionsError(f"{rec['suite']}: a record names the predictions file {info['file']!r}, outside the "
                               f"results directory {root}; refused")
    blob = path.read_bytes()
    sha = hashlib.sha256(blob).hexdigest()
    if sha != info.get("sha256"):
        raise PredictionsError(f"{path}: sha256 {sha[:16]}... is not the {str(info.get('sha256'))[:16]}... its record "
                               f"states: the file changed after the run wrote it (or belongs to another record); "
                               f"refused, nothing rescored")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except Exception as exc:  # noqa: BLE001 - any unreadable content is the same refusal
        raise PredictionsError(f"{path}: unreadable ({type(exc).__name__}: {exc}); refused") from None
    if meta.get("schema") != SCHEMA:
        raise PredictionsError(f"{path}: schema {meta.get('schema')!r}, this code reads {SCHEMA!r}")
    wrong = [k for k in IDENTITY if meta.get(k) != rec.get(k)]
    if wrong:
        diff = ", ".join(f"{k} {meta.get(k)!r} != {rec.get(k)!r}" for k in wrong)
        raise PredictionsError(f"{path}: its meta names another record ({diff}); refused")
    y = arrays.get("labels", arrays.get("targets"))
    if y is not None and labels_sha256(y) != meta.get("labels_sha256"):
        raise PredictionsError(f"{path}: its labels do not hash to the labels_sha256 its meta states")
    n, k = rec.get("n"), rec.get("num_labels") if rec.get("task") == "multilabel" else rec.get("num_classes")
    first = arrays.get("probs", arrays.get("mean"))
    if first is None or (n is not None and first.shape[0] != n) or \
            ("probs" in arrays and (first.ndim != 2 or (k is not None and first.shape[1] != k))):
        raise PredictionsError(f"{path}: arrays {({a: v.shape for a, v in arrays.items()})} do not fit the record "
                               f"(n {n}, classes {k})")
    return meta, arrays


def _t(a: np.ndarray | None) -> torch.Tensor | None:
    """A stored array as the tensor that was scored: float16 (stored at reduced precision) back to
    float32, anything else as it is."""
    if a is None:
        return None
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.float() if t.dtype == torch.float16 else t


def recompute(rec: dict, arrays: dict, id_arrays: dict | None, extra: list) -> tuple[dict, dict, list]:
    """(metrics, curves, registered metrics left out for want of the per-sample predictive) of ``rec``
    from its arrays, with the in-distribution set's arrays for an OOD record, by the run's scoring
    functions (bench.metrics). Registered metrics are computed on labelled classification sets."""
    skipped = []
    if rec["task"] == "regression":
        mean, var, y = arrays["mean"], arrays["var"], arrays["targets"]
        return M.regression_metrics(_t(mean), _t(var), _t(y)), {}, skipped
    if rec["task"] == "multilabel":  # bench.multilabel_metrics, as the harness scores it; no registered metrics
        from bench import multilabel_metrics as ML

        probs, sp = _t(arrays["probs"]), _t(arrays.get("sample_probs"))
        if rec["kind"] == "ood":
            return (*ML.ood_metrics(_t(id_arrays["probs"]), probs, _t(id_arrays.get("sample_probs")), sp), skipped)
        return (*ML.multilabel_metrics(probs, _t(arrays["targets"]), sp), skipped)
    probs = _t(arrays["probs"])
    sp, var = _t(arrays.get("sample_probs")), _t(arrays.get("variance"))
    if rec["kind"] == "ood":
        metrics, curves = M.ood_metrics(_t(id_arrays["probs"]), probs, sp, _t(id_arrays.get("variance")), var,
                                        sample_probs_in=_t(id_arrays.get("sample_probs")))
        return metrics, curves, skipped
    y = torch.from_numpy(arrays["labels"].astype(np.int64))
    metrics, curves = M.classification_metrics(probs, y, sp, var)
    for name in extra:
        m = M.METRICS.get(name)
        if m.needs_samples and sp is None:
            skipped.append(name)
            continue
        metrics[name] = float(m.fn(probs, y, sp))
    return metrics, curves, skipped


def _equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):  # per-label lists (multilabel)
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= ATOL + RTOL * abs(b)
    return a == b


def _delta(a, b) -> float:
    """|a - b|, the largest over the entries of per-label lists; NaN where it is not a number."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        d = [_delta(x, y) for x, y in zip(a, b) if not (x is None and y is None)]
        return max(d) if d else float("nan")
    try:
        return abs(float(a) - float(b))
    except (TypeError, ValueError):
        return float("nan")


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def rescore(results, suites=None, metrics=(), dry_run: bool = False, out=None) -> int:
    """Rescore the records under ``results`` (see the module doc); prints a summary to ``out``
    (stdout) and returns the exit code."""
    from bench.locks import file_lock
    from bench.provenance import git_commit, now

    out = out or sys.stdout
    root = Path(results)
    if not root.is_dir():
        raise BenchError(f"--results {results}: no such directory")
    extra = list(M.METRICS.names()) if list(metrics) == ["all"] else list(dict.fromkeys(metrics))
    for name in extra:
        M.METRICS.get(name)  # UnknownNameError (exit 2) listing the registered ones
    found, packed = find_records(root, suites)
    if not found:
        where = f" of suite(s) {', '.join(suites)}" if suites else ""
        raise BenchError(f"no evaluation records{where} under {root}"
                         + (f" other than {packed} pack(s) ({PACK_NAME}: read-only, not rescored)" if packed else ""))
    s = Summary()
    cells: dict[Path, list[Found]] = defaultdict(list)
    for f in found:
        why = _lacking_why(root, f.rec)
        if why is not None:
            s.lacking[_cell(f.rec)].append((_set(f.rec), why))
            continue
        cells[f.path.parent].append(f)
    # every file is checked before anything is written
    for group in cells.values():
        for f in group:
            load_predictions(root, f.rec)
    store = ResultsStore(root)
    stamp = {"at": now(), "git_commit": git_commit(), "tolerance": {"rtol": RTOL, "atol": ATOL}}
    for run_dir, group in sorted(cells.items()):
        rec0 = group[0].rec
        lock = store.lock_path(rec0["suite"], rec0["model"], rec0["method"], rec0["config_hash"], int(rec0["seed"]))
        with (file_lock(lock, wait=False) if not dry_run else contextlib.nullcontext(True)) as held:
            if not held:
                s.skipped_locked.append(_cell(rec0))
                continue
            _rescore_cell(root, group, extra, dry_run, stamp, s)
    _print_summary(s, root, extra, dry_run, packed, out)
    return 0 if s.records else 1


def _rescore_cell(root: Path, group: list[Found], extra: list, dry_run: bool, stamp: dict, s: Summary) -> None:
    """Rescore one cell's records (one file in memory at a time, besides the in-distribution set's,
    which its OOD records need). The records are read again under the lock: a run may have
    rewritten one since they were checked."""
    fresh = []
    for f in group:
        rec, problem = read_record(f.path)
        if problem is None and _lacking_why(root, rec) is None:
            fresh.append(Found(f.path, rec))
        elif problem is None:
            s.lacking[_cell(rec)].append((_set(rec), _lacking_why(root, rec)))
    group = fresh
    id_found = next((f for f in group if f.rec["kind"] == "id"), None)
    id_arrays = None if id_found is None else load_predictions(root, id_found.rec)[1]
    for f in sorted(group, key=lambda f: f.rec["kind"] != "id"):
        rec = f.rec
        arrays = id_arrays if f is id_found else load_predictions(root, rec)[1]
        if rec["kind"] == "ood" and id_arrays is None:
            s.lacking[_cell(rec)].append((_set(rec), "the cell's in-distribution set has no kept predictions, "
                                                     "which its OOD scores need"))
            continue
        new, curves, skipped = recompute(rec, arrays, id_arrays, extra)
        for name in skipped:
            s.not_applicable[name] += 1
        old = rec.get("metrics") or {}
        # what the file cannot give keeps its stored value (e.g. mutual information, samples dropped)
        missing = [k for k in old if (k not in new or new[k] is None) and old[k] is not None]
        for k in missing:
            s.not_recomputed[k] += 1
        added = [k for k in new if k not in old and k not in missing]
        changed = {k: {"stored": old[k], "now": new[k]} for k in new
                   if k in old and k not in missing and not _equal(new[k], old[k])}
        s.records += 1
        s.cells.add(_cell(rec))
        for k in added:
            s.added[k] += 1
        for k, v in changed.items():
            s.changed[k].append(_delta(v["now"], v["stored"]))
        if not changed:
            s.reproduced += 1
        new_curves = _jsonable({**(rec.get("curves") or {}), **curves})
        if dry_run or not (added or changed or new_curves != (rec.get("curves") or {})):
            continue
        updated = {**rec, "metrics": {**old, **{k: v for k, v in new.items() if k not in missing}},
                   "curves": new_curves,
                   "rescored": {**stamp, "added": added, "changed": changed, "not_recomputed": missing,
                                "predictions_sha256": rec["predictions"]["sha256"]}}
        atomic_write_json(f.path, updated)
        s.written += 1


def _print_summary(s: Summary, root: Path, extra: list, dry_run: bool, packed: int, out) -> None:
    def p(line=""):
        print(line, file=out)

    verb = "checked (--dry-run, nothing written)" if dry_run else f"rescored, {s.written} record file(s) rewritten"
    p(f"rescore {root}: {s.records} record(s) of {len(s.cells)} cell(s) {verb}")
    p(f"  reproduced: {s.reproduced} of {s.records} record(s) have every recomputed metric equal to the stored one "
      f"(|a - b| <= {ATOL:g} + {RTOL:g} |b|)")
    for k, deltas in sorted(s.changed.items()):
        p(f"  changed: {k} in {len(deltas)} record(s), max |delta| {max(deltas):.3g}")
    for k, n in sorted(s.added.items()):
        p(f"  added: {k} in {n} record(s)")
    for k, n in sorted(s.not_recomputed.items()):
        why = " (the per-sample predictive was dropped by the size bound)" if k in SAMPLE_METRICS else ""
        p(f"  not recomputed, stored value kept: {k} in {n} record(s){why}")
    for k, n in sorted(s.not_applicable.items()):
        p(f"  {k}: not computed in {n} record(s) (needs the per-sample predictive, not kept)")
    if extra:
        p(f"  registered metrics requested: {', '.join(extra)} (labelled classification sets only)")
    for c in s.skipped_locked:
        p(f"  skipped: {c} (being run by another process; rescore it afterwards)")
    if packed:
        p(f"  {packed} pack(s) ({PACK_NAME}) left alone: packed records are read-only")
    if s.lacking:
        n = sum(len(v) for v in s.lacking.values())
        p(f"lacking kept predictions: {n} record(s) of {len(s.lacking)} cell(s), not rescored")
        for cell, sets in sorted(s.lacking.items()):
            whys = sorted({w for _, w in sets})
            p(f"  {cell}: {len(sets)} set(s) ({', '.join(x for x, _ in sets)}): {'; '.join(whys)}")
