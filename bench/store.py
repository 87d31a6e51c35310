"""Results store: one JSON file per (suite, method config, model, seed, evaluation set).

Every record is written atomically (temporary file in the same directory, fsync, rename),
so a run killed at any moment leaves only complete records behind. ``load_records``
returns every record under a results directory as one pandas DataFrame.

Layout::

    <results>/<suite>/records/<model>/<method>-<config_hash>/seed<k>/<eval_key>.json
    <results>/<suite>/checkpoints/...        (fitted methods, cached MAP networks)
    <results>/<suite>/locks/...              (one lock file per cell: concurrent runs share the work)

Records kept in git (``docs/records``, ``scripts/keep_records.py``) are packed: one
``<suite>/records.jsonl.xz`` per suite, a line per record naming its path in the layout above
(older code wrote gzip packs, ``records.jsonl.gz``, still read where no xz pack is beside them).
The store reads both; a loose file wins over the packed record of the same path.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import lzma
import os
import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

import pandas as pd

log = logging.getLogger(__name__)

RECORD_VERSION = 1
NESTED_COLUMNS = ("curves", "method_config", "diagnostics", "train_config", "data_config", "validity",
                  "predictions", "rescored")  # the last two: bench.predictions, bench.rescore
#: fields every record has, and what they hold
REQUIRED_FIELDS = {"record_version": int, "suite": str, "method": str, "model": str, "seed": int, "status": str,
                   "kind": str, "shift": str}
STATUSES = ("ok", "failed")


#: record fields that reach file names (figure names, report and artifact folders) besides suite,
#: model and method: a value with a path separator or ``..`` makes the record damaged
NAME_FIELDS = ("profile", "task", "kind", "shift", "config_hash", "fit_hash")


def record_problem(rec: Any) -> str | None:
    """What is wrong with a decoded record (None: nothing). Names that become paths (suite,
    model, method) must be plain names, and the other fields that reach file names
    (:data:`NAME_FIELDS`) must hold no path separator, NUL or ``..``: such a record is refused
    (readers skip it with a warning naming it), never sanitised, so that a record cannot make a
    report or leaderboard read or write outside its folders. Free text that reaches file names
    (labels, option names) is slugified where the name is made."""
    if not isinstance(rec, dict):
        return f"not a JSON object but {type(rec).__name__}"
    missing = [k for k in REQUIRED_FIELDS if k not in rec]
    if missing:
        return f"missing field(s) {missing}"
    wrong = [k for k, t in REQUIRED_FIELDS.items() if not isinstance(rec[k], t) or isinstance(rec[k], bool)]
    if wrong:
        return f"field(s) of the wrong type {wrong}"
    if rec["record_version"] > RECORD_VERSION:
        return f"record_version {rec['record_version']} is newer than this code's {RECORD_VERSION}"
    if rec["status"] not in STATUSES:
        return f"status {rec['status']!r} is not one of {STATUSES}"
    for k in ("suite", "model", "method"):
        if _safe(rec[k]) != rec[k] or rec[k] in ("", ".", "..") or rec[k].startswith("."):
            return f"{k} {rec[k]!r} is not a plain name"
    for k in NAME_FIELDS:
        if rec.get(k) is not None and re.search(r"[/\\\x00]|\.\.", str(rec[k])):
            return f"{k} {str(rec[k])!r} holds a path part (a separator or '..'), which file names cannot"
    return None


def set_aside(path: Path, why: str) -> Path:
    """Move a damaged file (record, checkpoint) to ``<name>.bad``, kept for inspection, with a
    warning saying ``why``; what it held is recomputed by the caller."""
    path = Path(path)
    bad = path.with_name(path.name + ".bad")
    os.replace(path, bad)
    log.warning("%s; moved to %s", why, bad.name)
    return bad


def read_record(path: Path) -> tuple[dict | None, str | None]:
    """``(record, None)`` or ``(None, problem)`` for the record file at ``path``."""
    try:
        with open(path) as fh:
            rec = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    problem = record_problem(rec)
    return (None, problem) if problem else (rec, None)


#: a suite's packed records: ``<root>/<suite>/records.jsonl.xz``. xz, not gzip: the kept records'
#: packs are most of the tree a device call carries (64 MiB with its data), and xz made them a third
#: smaller (the 22 kept packs: 28.5 MB in gzip at level 9, 18.9 MB in xz; 2026-12-06)
PACK_NAME = "records.jsonl.xz"
#: the pack older code wrote (gzip): read where no :data:`PACK_NAME` is beside it, replaced when repacked
OLD_PACK_NAME = "records.jsonl.gz"


def pack_path(folder: Path) -> Path | None:
    """The pack of a suite's folder: :data:`PACK_NAME`, else an older :data:`OLD_PACK_NAME`, else None."""
    for name in (PACK_NAME, OLD_PACK_NAME):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def find_packs(base: Path) -> list[Path]:
    """Every pack under ``base``, one a folder (:func:`pack_path`'s choice), in path order."""
    folders = {p.parent for name in (PACK_NAME, OLD_PACK_NAME) for p in Path(base).rglob(name) if p.is_file()}
    return sorted(pack_path(f) for f in folders)


def read_pack(path: Path) -> dict[str, Any]:
    """``{relative path: record}`` of a pack (xz, or gzip by its ``.gz`` name; paths relative to the
    store's root, posix); an unreadable pack, or one naming a path outside the store (absolute,
    ``..``), raises OSError / ValueError (a damaged xz stream too)."""
    opener = gzip.open if Path(path).suffix == ".gz" else lzma.open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return _pack_entries(fh)
    except lzma.LZMAError as exc:
        raise ValueError(f"not a readable xz stream ({exc})") from None


def _pack_entries(lines) -> dict[str, Any]:
    out = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        if not (isinstance(obj, dict) and isinstance(obj.get("path"), str) and "record" in obj):
            raise ValueError(f"line {n} is not {{'path': ..., 'record': ...}}")
        if obj["path"].startswith(("/", "\\")) or re.search(r"(^|[/\\])\.\.([/\\]|$)|\x00|^[A-Za-z]:", obj["path"]):
            raise ValueError(f"line {n}: path {obj['path']!r} is outside the store")
        out[obj["path"]] = obj["record"]
    return out


def pack_bytes(entries: dict[str, Any]) -> bytes:
    """A pack's bytes (:data:`PACK_NAME`): one line per record, sorted by path, in xz at its default
    preset (the same records give the same bytes, so git sees no change; preset 9 saved 0.5 % more
    at 1.2x the time)."""
    text = "".join(json.dumps({"path": path, "record": entries[path]}, sort_keys=True, separators=(",", ":")) + "\n"
                   for path in sorted(entries))
    return lzma.compress(text.encode(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


#: how old (last modified, seconds) a temporary file of :func:`atomic_write_bytes` must be to count
#: as left by a killed write: a write in progress is seconds old (the largest checkpoints included)
STALE_TEMP_S = 3600.0
#: the names ``tempfile.mkstemp(prefix=".<name>.", suffix=".tmp")`` gives: ``.<name>.<8 random>.tmp``
_TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def remove_stale_temp_files(directory: Path, older_than_s: float = STALE_TEMP_S) -> list[Path]:
    """Delete the temporary files that killed atomic writes left under ``directory`` (named as
    :func:`atomic_write_bytes` names them and older than ``older_than_s``; a concurrent run's write
    in progress is younger, a user's file is named otherwise); returns the paths removed. Run at
    the start of ``bench run`` on its suite's folder."""
    import time

    directory, out = Path(directory), []
    if not directory.is_dir():
        return out
    cutoff = time.time() - older_than_s
    for path in directory.rglob(".*.tmp"):
        try:
            if _TEMP_NAME.fullmatch(path.name) and path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                out.append(path)
        except OSError:  # gone meanwhile, or not ours to remove: left alone
            continue
    return out


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True, default=_json_default).encode())


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")


def config_hash(obj: Any, length: int = 10) -> str:
    """Stable short hash of a JSON-able configuration (key order does not matter)."""
    blob = json.dumps(obj, sort_keys=True, default=_json_default, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", str(name))


def eval_key(kind: str, shift: str, severity) -> str:
    sev = "na" if severity is None else (f"{float(severity):g}")
    return _safe(f"{kind}-{shift}-{sev}")


class ResultsStore:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # -- paths -------------------------------------------------------------
    def run_dir(self, suite: str, model: str, method: str, cfg_hash: str, seed: int) -> Path:
        return self.root / _safe(suite) / "records" / _safe(model) / f"{_safe(method)}-{cfg_hash}" / f"seed{seed}"

    def lock_path(self, suite: str, model: str, method: str, cfg_hash: str, seed: int) -> Path:
        return self.root / _safe(suite) / "locks" / _safe(model) / f"{_safe(method)}-{cfg_hash}" / f"seed{seed}.lock"

    def checkpoint_dir(self, suite: str) -> Path:
        return self.root / _safe(suite) / "checkpoints"

    def fitted_checkpoint(self, record) -> Path:
        """The fitted method a record was evaluated from: ``checkpoints/fitted/<model>/<method>-<fit_hash>/
        seed<k>.pt``; records made before ``fit_hash`` existed were fitted under their ``config_hash``."""
        h = record.get("fit_hash")
        if not isinstance(h, str) or not h:
            h = record["config_hash"]
        return (self.checkpoint_dir(record["suite"]) / "fitted" / _safe(record["model"]) / f"{_safe(record['method'])}-{h}"
                / f"seed{int(record['seed'])}.pt")

    def record_path(self, run_dir: Path, kind: str, shift: str, severity) -> Path:
        return run_dir / f"{eval_key(kind, shift, severity)}.json"

    # -- records -----------------------------------------------------------
    def write(self, run_dir: Path, record: dict) -> Path:
        record = {"record_version": RECORD_VERSION, **record}
        path = self.record_path(run_dir, record["kind"], record["shift"], record["severity"])
        atomic_write_json(path, record)
        return path

    def has(self, run_dir: Path, kind: str, shift: str, severity) -> bool:
        """A valid record exists. A damaged one (empty, truncated by a full disk, edited by
        hand) is moved aside to ``<name>.bad`` with a warning, so that its cell is redone."""
        return self.read(run_dir, kind, shift, severity) is not None

    def read(self, run_dir: Path, kind: str, shift: str, severity) -> dict | None:
        """The valid record of a cell, or None (a damaged one is set aside as in :meth:`has`)."""
        path = self.record_path(run_dir, kind, shift, severity)
        if not path.exists():
            return None
        record, problem = read_record(path)
        if problem is None:
            return record
        self.quarantine(path, problem)
        return None

    def remove(self, run_dir: Path, kind: str, shift: str, severity) -> bool:
        """Delete a record (e.g. an old failure once a retry succeeded); True if there was one."""
        path = self.record_path(run_dir, kind, shift, severity)
        if path.exists():
            path.unlink()
            return True
        return False

    @staticmethod
    def quarantine(path: Path, problem: str) -> Path:
        return set_aside(path, f"damaged record {path} ({problem}); its cell will be redone")

    def iter_records(self, suite: str | None = None, problems: list | None = None) -> Iterable[dict]:
        """Every valid record under the store (or one suite). Damaged files are skipped with a
        warning naming them (and appended to ``problems`` as ``(path, problem)``); reading
        never moves or deletes anything."""
        for _, rec in self.iter_located(suite, problems):
            yield rec

    def iter_located(self, suite: str | None = None, problems: list | None = None) -> Iterable[tuple[str, dict]]:
        """:meth:`iter_records` with each record's path in the store's layout (posix, relative to the root)."""
        base = self.root / _safe(suite) if suite else self.root
        loose = set()
        for path in sorted(base.rglob("*.json")):
            if "records" not in path.relative_to(self.root).parts:  # not the root's own name (docs/records)
                continue
            loose.add(path.relative_to(self.root).as_posix())
            rec, problem = read_record(path)
            if problem is not None:
                log.warning("skipping damaged record %s: %s", path, problem)
                if problems is not None:
                    problems.append((path, problem))
                continue
            yield path.relative_to(self.root).as_posix(), rec
        for pack in find_packs(base):
            try:
                entries = read_pack(pack)
            except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
                log.warning("skipping damaged pack %s: %s", pack, exc)
                if problems is not None:
                    problems.append((pack, f"unreadable pack ({type(exc).__name__}: {exc})"))
                continue
            for rel, rec in sorted(entries.items()):
                if rel in loose:  # a loose file of the same path wins
                    continue
                problem = record_problem(rec)
                if problem is not None:
                    log.warning("skipping damaged record %s in %s: %s", rel, pack, problem)
                    if problems is not None:
                        problems.append((pack / rel, problem))
                    continue
                yield rel, rec


def _flatten(rec: dict, prefix: str = "") -> dict:
    """Nested dictionaries as dotted keys, as ``pd.json_normalize(rec, sep=".")`` makes them (an empty
    dictionary leaves no key), without building a one-row DataFrame per record (30x faster)."""
    flat = {}
    for key, value in rec.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


#: the last frames :func:`load_records` built, by the files they were read from, up to
#: :data:`_FRAMES_KEPT_ROWS` records in all: a process that makes several tables over one store, as
#: ``benchmarks/refresh_tables.py --in-process`` does, reads and parses its records once (the kept
#: records, every suite and each one alone, are about 33,000)
_FRAMES: dict[tuple, pd.DataFrame] = {}
_FRAMES_KEPT_ROWS = 60_000


def _records_fingerprint(results: str | os.PathLike, suite: str | None) -> tuple:
    """What :meth:`ResultsStore.iter_records` would read: every loose record and pack under the
    store (or the suite), each with its inode, size and modification time (an atomic write is a new
    file, so any change to a record changes this)."""
    base = Path(results) / _safe(suite) if suite else Path(results)
    files = []
    for pattern in ("*.json", PACK_NAME, OLD_PACK_NAME):
        for path in sorted(base.rglob(pattern)):
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((path.as_posix(), st.st_ino, st.st_size, st.st_mtime_ns))
    return (Path(results).resolve().as_posix(), suite, tuple(files))


def fit_key(fit_digest: str | None, fit_time_s) -> str | None:
    """The identity of one fit of a method: its state's :func:`state_digest`, or for a fit
    checkpointed before the harness recorded it, its measured fit time (every record of one fit
    copies it from the checkpoint; two fits never measure the same float); None when neither is known."""
    if fit_digest:
        return f"state:{fit_digest}"
    if fit_time_s is None:
        return None
    return f"fit_time_s:{float(fit_time_s)!r}"


def record_fit_key(record: dict) -> str | None:
    """:func:`fit_key` of the fit an evaluation record comes from (None for a failure record)."""
    if record.get("kind") == "fit":
        return None
    return fit_key(record.get("fit_digest"), (record.get("cost") or {}).get("fit_time_s"))


def one_fit(records: list[dict]) -> tuple[str | None, dict[str, int]]:
    """The fit the newest of ``records`` (one cell's) comes from, and ``{fit key: records}`` of every
    fit among them: more than one key is a cell that mixes fits (e.g. a ``--force-method`` refit
    stopped during its evaluation, the rest of the records left from the fit before)."""
    counts: dict[str, int] = {}
    newest: tuple[str, str] | None = None
    for rec in records:
        key = record_fit_key(rec)
        if key is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        stamp = str(rec.get("finished_at") or rec.get("started_at") or "")
        if newest is None or stamp > newest[0]:
            newest = (stamp, key)
    return (newest[1] if newest else None), counts


def load_records(results: str | os.PathLike, suite: str | None = None) -> pd.DataFrame:
    """All records under ``results`` (optionally one suite) as a flat DataFrame.

    Nested dictionaries become dotted columns (``metrics.nll``, ``cost.train_time_s``);
    ``curves``, ``method_config`` and ``diagnostics`` stay dictionaries, one column each.
    The same files read again in one process give a copy of the frame built the first time.
    """
    key = _records_fingerprint(results, suite)
    if key in _FRAMES:
        _FRAMES[key] = _FRAMES.pop(key)  # the most recently used last
        return _FRAMES[key].copy()
    frame = _read_records(results, suite)
    _FRAMES[key] = frame
    while len(_FRAMES) > 1 and sum(len(f) for f in _FRAMES.values()) > _FRAMES_KEPT_ROWS:
        _FRAMES.pop(next(iter(_FRAMES)))  # the oldest
    return frame.copy()


def _read_records(results: str | os.PathLike, suite: str | None) -> pd.DataFrame:
    rows, cells = [], {}
    for path, rec in ResultsStore(results).iter_located(suite):
        cells.setdefault(PurePosixPath(path).parent, []).append((len(rows), rec))  # the cell: its run directory
        kept = {k: rec.pop(k, None) for k in NESTED_COLUMNS}
        flat = {k: v for k, v in rec.items() if not isinstance(v, dict)}  # json_normalize's column order
        flat.update(_flatten(rec))
        flat.update(kept)
        rows.append(flat)
    # a cell's records come from one fit: where a cell was fitted again (--force-method, --redo-predating)
    # and records of the fit before stand beside the new fit's (sets not evaluated again yet, or not at
    # all: a candidate refitted validation first), the newest fit's are the cell's, the others superseded
    superseded = set()
    for members in cells.values():
        newest, fits = one_fit([rec for _, rec in members])
        if len(fits) > 1:
            superseded.update(i for i, rec in members if record_fit_key(rec) not in (None, newest))
    return pd.DataFrame([row for i, row in enumerate(rows) if i not in superseded])
