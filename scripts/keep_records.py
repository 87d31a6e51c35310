"""Keep the records behind the README's quick-profile tables in git (docs/records/), so that a grid
longer than one machine's life resumes where it stopped and its tables stay reproducible.

    .venv/bin/python scripts/keep_records.py save SUITE [SUITE ...]     # results -> docs/records
    .venv/bin/python scripts/keep_records.py restore SUITE [SUITE ...]  # docs/records -> results
    .venv/bin/python scripts/keep_records.py merge ARCHIVE.tar.gz      # a device run's records -> docs/records
    .venv/bin/python scripts/keep_records.py pack SUITE [SUITE ...]     # loose kept records -> the suite's pack
    .venv/bin/python scripts/keep_records.py save-maps SUITE [SUITE ...]  # results' MAP networks -> docs/records

Kept records are packed: ``docs/records/<suite>/records.jsonl.xz`` holds every kept record of the
suite, a line each naming its path in the store's layout (``bench.store``: the store, the report and
the leaderboard read packs and loose files alike). ``save`` and ``merge`` write loose files and then
pack the suites they touched; ``pack`` does it by hand (and replaces a gzip pack of older code,
``records.jsonl.gz``, with the xz one). Thousands of small JSON files were 31 MB of the tree, which
must travel to a GPU machine beside a dataset (docs/device.md); in gzip packs they were 28.5 MB, in xz 18.9 MB.

``save`` copies every record of the suites (``<results>/<suite>/records/**.json``, the store's
layout) without its ``curves`` (entropy histograms, reliability bins, confusion matrices: 2/3 of a
segmentation record's 55 kB) and marks it ``"curves_kept": false``; metrics, costs, diagnostics and
provenance are kept whole, which is what the tables and the leaderboard read. One part of the curves
is kept: the uncertainty maps of a segmentation suite (``curves.maps``, on the few sets the report
draws them for), of the first seed of each configuration, the one the report's map figure shows,
with the suite's ``artifacts/`` (the images and labels those maps are drawn beside), so that
``python -m bench report --results docs/records`` draws them. ``restore`` puts them
back into the results folder without overwriting a record there, so ``bench run`` skips their cells;
a report's calibration and shift plots need the other curves: rerun those cells with ``--force``.
Checkpoints are not kept, but for the MAP networks a device run trains (below): a method whose
records are not all there refits from its seed.

``merge`` takes the ``records.tar.gz`` a device run (``python -m bench.device_session``,
docs/device.md) sends back: records already slimmed by ``save``, in the kept layout
(``<suite>/records/...``, ``<suite>/artifacts/...``), that run's summary (``device/<run_id>.json``)
and its perf rows (``perf/<device>.json``, merged: the cases the run measured replace those cases' rows, the
others stay). A record is added when absent and left alone when the
kept one is the same; a different kept record is kept (a conflict, reported; ``--replace`` takes the
archive's); a cell the archive holds from another fit than its kept records (fitted again) is
merged whole or not at all: left out (its records conflicts), or with ``--replace`` replacing the
kept cell, so no kept cell mixes two fits; perf rows, artifacts and the run's summary (a later
archive of the same run) replace the kept file. Merging twice changes nothing. The same run's
``maps-<k>.tar`` archives hold the MAP networks it trained
(``<suite>/checkpoints/map/<model>/<key hash>/seed<k>.pt``, the results folder's layout, each checked
to load as a torch file of tensors and plain data): they are kept
like records (added when absent, a different kept file kept as it is), and ``restore`` puts them
back into the results folder (never over a file there), so the next device run builds its methods
on these networks instead of training them again: a paper-budget deep ensemble needs 15 MAP
networks a seed model, more than one call can train (docs/device.md). Its ``partial-<k>.tar``
archives hold the resume checkpoints of the trainings its deadline stopped (``*.partial``, the
results layout): they go to ``--partials`` (default ``.device/partial``, git-excluded, carried by
the next call, which resumes those trainings), each checked to load with its ``epoch``; one already
there is replaced only by one of as many epochs or more; beside them, the fitted methods of the cells
the deadline stopped while they were evaluated (``<suite>/checkpoints/fitted/...``, checked to load
with their ``method`` state and ``fit_cost``), which the next call evaluates without fitting again.
The run's summary names the partial fits it resumed whose trainings then ended, and the fitted
methods whose cells then ended (``outputs.partials.consumed``, with their digests): merging it
removes those copies.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.store import one_fit, record_fit_key  # noqa: E402
from bench.store import (OLD_PACK_NAME, PACK_NAME, atomic_write_bytes, pack_bytes, pack_path, read_pack,  # noqa: E402
                         read_record)
from bench.tuning import VALIDATION_FIRST_KINDS  # noqa: E402

ARCHIVE = ROOT / "docs" / "records"
#: where ``merge`` keeps the partial fits a device run sends back (``partial-<k>.tar``): the carried,
#: git-excluded folder the next device call restores them from (bench.device_session.PARTIAL_DIR)
PARTIALS = ROOT / ".device" / "partial"


_MAPS = "@@maps@@"


def slim(rec: dict, keep_maps: bool = False) -> dict:
    """The record less its curves; with ``keep_maps``, less every curve but its uncertainty maps."""
    out = {k: v for k, v in rec.items() if k != "curves"}
    out["curves_kept"] = False
    maps = (rec.get("curves") or {}).get("maps")
    if keep_maps and maps:
        out["curves"] = {"maps": maps}
        out["curves_kept"] = "maps"
    return out


def encode(rec: dict) -> bytes:
    """One field per line (diff-friendly), the maps' pixel lists on one line each (compact)."""
    maps = (rec.get("curves") or {}).get("maps")
    if not maps:
        return (json.dumps(rec, sort_keys=True, indent=0) + "\n").encode()
    body = json.dumps({**rec, "curves": {"maps": _MAPS}}, sort_keys=True, indent=0)
    return (body.replace(json.dumps(_MAPS), json.dumps(maps, separators=(",", ":")), 1) + "\n").encode()


def first_seeds(cells) -> set[Path]:
    """The run directories (``.../<method>-<hash>/seed<k>``) of each configuration's lowest seed."""
    first: dict[Path, Path] = {}
    for cell in cells:
        best = first.get(cell.parent)
        if best is None or _seed(cell) < _seed(best):
            first[cell.parent] = cell
    return set(first.values())


def _seed(cell: Path) -> int:
    try:
        return int(cell.name.removeprefix("seed"))
    except ValueError:
        return 1 << 30


def save(results: Path, suite: str, archive: Path = ARCHIVE, only: set[Path] | None = None, packed: bool = True) -> int:
    """Copy the suite's records, less their curves. A cell (a run directory) is kept whole or not
    at all: one with fewer evaluation records than the suite's other cells on the same data is
    still being evaluated (but for its validation and clean-test records when it has both: those of
    a validation-first tuning candidate, whose other sets are being evaluated), and its fitted
    checkpoint is not kept, so a later machine refits it and evaluates every set from that one fit
    (a cell of two fits would mix their records). One whose records come from two fits
    (:func:`bench.store.one_fit`: fitted again, e.g. by ``--force-method`` or ``--redo-predating``) is
    its newest fit's records, judged as above: kept whole, kept as a validation-first candidate (a
    candidate refitted validation first), or not yet; the earlier fit's are not. A saved cell replaces its kept records
    where they come from another fit (the cell fitted again): those the results folder lacks are
    removed, not left beside the new fit's records.
    ``only``: copy just these run directories (a device run's new cells; the others still count
    for completeness)."""
    src = results / suite / "records"
    if not src.is_dir():
        raise SystemExit(f"keep_records: no records under {src}")
    cells: dict[Path, list[tuple[Path, dict]]] = {}
    for path in sorted(src.rglob("*.json")):
        rec, problem = read_record(path)
        if rec is None:
            print(f"keep_records: {path} skipped ({problem})", file=sys.stderr)
            continue
        cells.setdefault(path.parent, []).append((path, rec))
    data = {cell: json.dumps(recs[0][1].get("data_config"), sort_keys=True) for cell, recs in cells.items()}
    full: dict[str, int] = {}
    for cell, recs in cells.items():
        full[data[cell]] = max(full.get(data[cell], 0), len(recs))
    complete = {}
    for cell, recs in cells.items():
        failed = any(r["status"] == "failed" and r["kind"] == "fit" for _, r in recs)
        newest, fits = one_fit([r for _, r in recs])
        if len(fits) > 1:
            # fitted again (--force-method, --redo-predating) after the records of an earlier fit: the newest
            # fit is the cell's, the earlier fit's records beside it superseded (not kept, and removed where
            # kept: _other_fits); the newest fit's are then whole, a validation-first candidate's, or not yet
            recs = [(path, r) for path, r in recs if record_fit_key(r) in (None, newest)]
            print(f"keep_records: {cell.relative_to(results)}: its records come from {len(fits)} fits "
                  f"({', '.join(f'{n} from {k}' for k, n in sorted(fits.items()))}): the newest fit's "
                  f"{fits[newest]} are the cell's, the earlier fit's superseded", file=sys.stderr)
        if len(recs) < full[data[cell]] and not failed:
            # a tuning candidate scored validation first (bench tune --validation-first) is whole with its
            # validation and clean-test records: a full run evaluates the validation split last, so a cell
            # that has them is a candidate, its other records those of a chosen configuration (or of a full
            # run stopped before the tune scored it validation first) still being evaluated: those two kept
            scored = [(path, r) for path, r in recs if r["kind"] in VALIDATION_FIRST_KINDS]
            if {r["kind"] for _, r in scored} != set(VALIDATION_FIRST_KINDS):
                print(f"keep_records: {cell.relative_to(results)} not kept: {len(recs)} of {full[data[cell]]} "
                      f"records (still being evaluated)", file=sys.stderr)
                continue
            if len(scored) < len(recs):
                print(f"keep_records: {cell.relative_to(results)}: its validation and clean-test records kept, "
                      f"not its {len(recs) - len(scored)} other(s) (still being evaluated)", file=sys.stderr)
            recs = scored
        complete[cell] = recs
    with_maps = first_seeds(complete)
    if only is not None:
        only = {Path(d).resolve() for d in only}
        complete = {cell: recs for cell, recs in complete.items() if cell.resolve() in only}
    entries = {path.relative_to(results).as_posix(): slim(rec, keep_maps=cell in with_maps)
               for cell, recs in complete.items() for path, rec in recs}
    stale = _other_fits(complete, results, kept(archive, suite), entries)
    if packed:
        pack(suite, archive, entries, drop=stale)
    else:
        for rel, rec in entries.items():
            body, dest = encode(rec), archive / rel
            if not dest.exists() or dest.read_bytes() != body:
                atomic_write_bytes(dest, body)
        for rel in stale:
            (archive / rel).unlink(missing_ok=True)
        packed_file = pack_path(archive / suite)
        in_pack = read_pack(packed_file) if packed_file is not None and stale else {}
        if stale & set(in_pack):
            atomic_write_bytes(archive / suite / PACK_NAME,
                               pack_bytes({k: v for k, v in in_pack.items() if k not in stale}))
            if packed_file.name != PACK_NAME:
                packed_file.unlink()
    for tree in SMALL_TREES:
        _copy_tree(results / suite / tree, archive / suite / tree, overwrite=True)
    return len(entries)


def _other_fits(cells: dict[Path, list[tuple[Path, dict]]], results: Path, kept_now: dict[str, dict],
                entries: dict[str, dict]) -> set[str]:
    """The kept records of the cells being saved that the results folder lacks and that come from
    another fit than the cell's records there: the cell was fitted again (a refit in a restored copy
    whose old cell was removed, a tuning candidate scored validation first where a full cell of an
    earlier fit was kept), so its kept records are replaced, not merged file by file (a cell of two
    fits would pair one fit's validation score with another's shifted-set records)."""
    stale: set[str] = set()
    kept_cells = by_cell(kept_now)
    for cell, recs in cells.items():
        rel = cell.relative_to(results).as_posix()
        fit = one_fit([r for _, r in recs])[0]
        old = [path for path, rec in kept_cells.get(rel, {}).items()
               if path not in entries and record_fit_key(rec) != fit]
        if old:
            print(f"keep_records: {rel}: {len(old)} kept record(s) of another fit than its records here "
                  f"removed (the cell was fitted again)", file=sys.stderr)
            stale.update(old)
    return stale


def by_cell(records: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """``{path: record}`` (paths in the store's layout, posix) grouped by their cell, the run directory
    ``<suite>/records/<model>/<method>-<hash>/seed<k>``: ``{cell: {path: record}}``."""
    out: dict[str, dict[str, dict]] = {}
    for path, rec in records.items():
        out.setdefault(path.rsplit("/", 1)[0], {})[path] = rec
    return out


def kept(archive: Path, suite: str) -> dict[str, dict]:
    """Every kept record of ``suite``: ``{path relative to the archive (posix): record}``, from the
    suite's pack and its loose files (a loose file wins)."""
    out = {}
    packed = pack_path(archive / suite)
    if packed is not None:
        out.update(read_pack(packed))
    src = archive / suite / "records"
    for path in sorted(src.rglob("*.json")) if src.is_dir() else []:
        rec, problem = read_record(path)
        if rec is None:
            raise SystemExit(f"keep_records: {path} is damaged ({problem}); fix or remove it first")
        out[path.relative_to(archive).as_posix()] = rec
    return out


def pack(suite: str, archive: Path = ARCHIVE, new: dict[str, dict] | None = None, drop: set[str] = frozenset()) -> int:
    """Move the suite's loose kept records, and ``new`` ones (``{path: record}``, winning over
    both), into its pack (written atomically first, then the loose files removed), less the records
    of ``drop`` (paths); returns the number of records packed."""
    entries = {path: rec for path, rec in {**kept(archive, suite), **(new or {})}.items() if path not in drop}
    if not entries:
        return 0
    body = pack_bytes(entries)
    dest = archive / suite / PACK_NAME
    if not dest.exists() or dest.read_bytes() != body:
        atomic_write_bytes(dest, body)
    (archive / suite / OLD_PACK_NAME).unlink(missing_ok=True)  # older code's gzip pack: its records are in this one
    src = archive / suite / "records"
    if src.is_dir():
        for path in sorted(src.rglob("*.json")):
            path.unlink()
        for d in sorted((d for d in src.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            d.rmdir()
        src.rmdir()
    return len(entries)


#: a suite's small files kept beside its records, copied as they are: the artifacts (data summary,
#: the maps' images), the stored tuning (``bench tune``: the choices --chosen-only reads) and the
#: selections (``bench select``)
SMALL_TREES = ("artifacts", "tuning", "selections")


def _copy_tree(src: Path, dest: Path, overwrite: bool) -> None:
    """Small files, copied as they are."""
    if not src.is_dir():
        return
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dest / path.relative_to(src)
        data = path.read_bytes()
        if not target.exists() or (overwrite and target.read_bytes() != data):
            atomic_write_bytes(target, data)


def restore(results: Path, suite: str, archive: Path = ARCHIVE) -> int:
    entries = kept(archive, suite)
    if not entries:
        raise SystemExit(f"keep_records: nothing kept for {suite} under {archive / suite}")
    n = 0
    for rel, rec in sorted(entries.items()):
        dest = results / rel
        if not dest.exists():
            atomic_write_bytes(dest, encode(rec))
            n += 1
    for tree in SMALL_TREES + (MAPS_TREE,):
        _copy_tree(archive / suite / tree, results / suite / tree, overwrite=False)
    return n


#: the kept MAP networks of a suite, under docs/records/<suite>/ as under <results>/<suite>/
MAPS_TREE = "checkpoints/map"
_MAP_FILE = re.compile(r"seed\d+\.pt")


def is_map_checkpoint(name: str) -> bool:
    """``<suite>/checkpoints/map/<model>/<key hash>/seed<k>.pt``: a finished MAP network (not a
    partial training, a lock or a failure note)."""
    parts = PurePosixPath(name).parts
    return len(parts) == 6 and parts[1:3] == ("checkpoints", "map") and bool(_MAP_FILE.fullmatch(parts[5]))


_PARTIAL_FIT = re.compile(r"[A-Za-z0-9_.-]+\.partial")


def is_partial_fit(name: str) -> bool:
    """A training's resume checkpoint, in the results layout: a MAP network's
    (``<suite>/checkpoints/map/<model>/<key hash>/seed<k>.partial``) or a fit's
    (``<suite>/checkpoints/partial/<model>/<method>-<fit hash>/seed<k>/<tag>.partial``); or the fitted
    method of a cell a device call stopped while it was evaluated
    (``<suite>/checkpoints/fitted/<model>/<method>-<fit hash>/seed<k>.pt``)."""
    parts = PurePosixPath(name).parts
    if name.startswith("/") or any(p.startswith(".") for p in parts):  # nothing outside the folder it names
        return False
    if len(parts) == 6 and parts[1:3] == ("checkpoints", "map"):
        return bool(re.fullmatch(r"seed\d+\.partial", parts[5]))
    if len(parts) == 6 and parts[1:3] == ("checkpoints", "fitted"):
        return "-" in parts[4] and bool(re.fullmatch(r"seed\d+\.pt", parts[5]))
    return (len(parts) == 7 and parts[1:3] == ("checkpoints", "partial") and bool(re.fullmatch(r"seed\d+", parts[5]))
            and bool(_PARTIAL_FIT.fullmatch(parts[6])))


def partial_epoch(body: bytes) -> int | None:
    """The epochs a resume checkpoint holds (a torch file of tensors and plain data with the network's
    ``model`` state and the ``epoch`` it goes on from), or None when the bytes are not one."""
    obj, _ = _torch_load(body)
    if not (isinstance(obj, dict) and isinstance(obj.get("model"), dict) and isinstance(obj.get("epoch"), int)):
        return None
    return obj["epoch"]


def is_fitted_method(body: bytes) -> bool:
    """A fitted method's checkpoint: a torch file of tensors and plain data with its ``method`` state
    and its ``fit_cost``."""
    obj, _ = _torch_load(body)
    return isinstance(obj, dict) and isinstance(obj.get("method"), dict) and isinstance(obj.get("fit_cost"), dict)


def _torch_load(body: bytes) -> tuple[object, str | None]:
    """(the object, None) of a torch file of tensors and plain data; (None, the error's type) else."""
    import io

    import torch

    try:
        return torch.load(io.BytesIO(body), map_location="cpu", weights_only=True), None
    except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types
        return None, type(exc).__name__


def map_problem(body: bytes) -> str | None:
    """Why the bytes are not a MAP checkpoint (a torch file of tensors and plain data with the
    network's ``model`` state), or None."""
    obj, error = _torch_load(body)
    if error:
        return f"not a torch file of tensors and plain data ({error})"
    if not isinstance(obj, dict) or not isinstance(obj.get("model"), dict):
        return "a torch file without the network's 'model' state"
    return None


class MergeError(Exception):
    """Exit 2: not an archive of kept records."""


def _member_kind(name: str) -> str | None:
    """'record', 'artifact', 'device', 'perf', 'map', 'partial', or None for a path a device archive never holds."""
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    if parts[0] in ("device", "perf") and len(parts) == 2 and parts[1].endswith(".json"):
        return parts[0]
    if len(parts) >= 3 and parts[1] == "records" and name.endswith(".json"):
        return "record"
    if len(parts) >= 3 and parts[1] == "artifacts":
        return "artifact"
    if is_map_checkpoint(name):
        return "map"
    if is_partial_fit(name):
        return "partial"
    return None


def _keep(dest: Path, body: bytes, counts: dict[str, int], overwrite: bool, differs: str) -> None:
    """Write ``body`` at ``dest`` when absent (added); the same bytes are unchanged; other bytes are
    written over when ``overwrite`` (replaced), else the kept file stays (a conflict, ``differs`` reported)."""
    if not dest.exists():
        atomic_write_bytes(dest, body)
        counts["added"] += 1
    elif dest.read_bytes() == body:
        counts["unchanged"] += 1
    elif overwrite:
        atomic_write_bytes(dest, body)
        counts["replaced"] += 1
    else:
        counts["conflicts"] += 1
        print(f"keep_records: {differs}", file=sys.stderr)


def merge(tarball: Path, archive: Path = ARCHIVE, replace: bool = False, partials: Path = PARTIALS) -> dict[str, int]:
    """Merge a device run's ``records.tar.gz`` into the kept records (see the module's text), its
    ``partial-<k>.tar`` into ``partials``. Everything is read and checked first: a bad archive
    changes nothing (MergeError)."""
    from bench.store import record_problem

    tarball = Path(tarball)
    if not tarball.is_file():
        raise MergeError(f"{tarball}: no such file (give the records.tar.gz a device run wrote to $OUT)")
    try:
        with tarfile.open(tarball, "r:*") as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
            odd = [m.name for m in tar.getmembers() if not (m.isfile() or m.isdir())]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise MergeError(f"{tarball}: not a readable tar archive ({exc})") from None
    if odd:
        raise MergeError(f"{tarball}: holds links or devices ({', '.join(odd[:3])}); only files are merged")
    plan = []
    for m, body in members:
        kind = _member_kind(m.name)
        if kind is None:
            raise MergeError(f"{tarball}: {m.name} is outside the kept layout (<suite>/records/**.json, "
                             f"<suite>/artifacts/..., device/*.json, perf/*.json, "
                             f"<suite>/checkpoints/map/<model>/<hash>/seed<k>.pt, a partial fit "
                             f"<suite>/checkpoints/map/<model>/<hash>/seed<k>.partial or "
                             f"<suite>/checkpoints/partial/<model>/<method>-<hash>/seed<k>/<tag>.partial, "
                             f"a fitted method <suite>/checkpoints/fitted/<model>/<method>-<hash>/seed<k>.pt)")
        if kind == "partial":
            if m.name.endswith(".pt") and not is_fitted_method(body):
                raise MergeError(f"{tarball}: {m.name}: not a fitted method's checkpoint (a torch file of tensors "
                                 f"and plain data with its 'method' state and 'fit_cost')")
            if m.name.endswith(".partial") and partial_epoch(body) is None:
                raise MergeError(f"{tarball}: {m.name}: not a resume checkpoint (a torch file of tensors and plain "
                                 f"data with the network's 'model' state and its 'epoch')")
            plan.append((kind, partials / m.name, body))
            continue
        if kind == "map":
            problem = map_problem(body)
            if problem:
                raise MergeError(f"{tarball}: {m.name}: {problem}")
        if kind in ("record", "device", "perf"):
            try:
                obj = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise MergeError(f"{tarball}: {m.name} is not JSON ({exc})") from None
            if kind == "record":
                problem = record_problem(obj) or (None if obj["suite"] == PurePosixPath(m.name).parts[0]
                                                  else f"suite {obj['suite']!r} under another suite's folder")
                if problem:
                    raise MergeError(f"{tarball}: {m.name}: {problem}")
        plan.append((kind, archive / m.name, body))
    counts = {"added": 0, "unchanged": 0, "replaced": 0, "conflicts": 0}
    for kind, dest, body in plan:  # the trainings that ended in the run: the partial fit it resumed is spent
        if kind == "device":
            for rel, digest in ((json.loads(body).get("outputs") or {}).get("partials") or {}).get("consumed",
                                                                                                 {}).items():
                spent = partials / rel
                if is_partial_fit(rel) and spent.is_file() and hashlib.sha256(spent.read_bytes()).hexdigest() == digest:
                    spent.unlink()
                    counts["partials_spent"] = counts.get("partials_spent", 0) + 1
    suites = sorted({PurePosixPath(dest.relative_to(archive).as_posix()).parts[0] for kind, dest, _ in plan
                     if kind == "record"})
    kept_now: dict[str, dict] = {}  # a loose file wins over its packed record; where it exists it is compared below
    for suite in suites:
        kept_now.update(kept(archive, suite))
    plan, stale = _cells_of_other_fits(plan, archive, kept_now, replace, counts)
    for kind, dest, body in plan:
        if kind == "partial":  # a later run's fit has gone further: an older one never replaces it
            old = partial_epoch(dest.read_bytes()) if dest.is_file() and dest.suffix == ".partial" else None
            _keep(dest, body, counts, overwrite=old is None or partial_epoch(body) >= old,
                  differs=f"{dest} holds more epochs than the archive's; kept as it is")
            continue
        rel = dest.relative_to(archive).as_posix()
        if kind == "record" and not dest.exists() and rel in kept_now:
            if kept_now[rel] == json.loads(body):
                counts["unchanged"] += 1
            elif replace:
                atomic_write_bytes(dest, body)  # the loose file wins over the packed one, then is packed
                counts["replaced"] += 1
            else:
                counts["conflicts"] += 1
                print(f"keep_records: {rel} (packed) differs from the archive's; kept as it is (--replace takes "
                      f"the archive's)", file=sys.stderr)
            continue
        if kind == "perf" and dest.is_file():  # the cases the run measured replace theirs; the others stay
            from bench.perf_cases import merge_rows

            rows, _ = merge_rows(json.loads(dest.read_text()).get("rows", []), json.loads(body).get("rows", []))
            body = (json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n").encode()
        newer = kind in ("perf", "artifact", "device")  # a newer measurement, image or summary
        _keep(dest, body, counts, overwrite=replace or newer,
              differs=f"{dest} differs from the archive's; kept as it is (--replace takes the archive's)")
    for suite in suites:
        pack(suite, archive, drop=stale)  # the stale records go from the pack and their loose files with the rest
    return counts


def _cells_of_other_fits(plan: list, archive: Path, kept_now: dict[str, dict], replace: bool,
                         counts: dict[str, int]) -> tuple[list, set[str]]:
    """``merge``'s rule for a cell the archive holds from another fit than the kept records of that cell
    (a device run that fitted a kept cell again): not merged file by file, which would leave a cell of
    two fits. Without ``replace`` the archive's cell is left out (its records counted as conflicts);
    with it the archive's cell replaces the kept one: the plan, less the cells left out, and the kept
    records to remove (``replace``: those of the replaced cells the archive lacks); ``kept_now``: the
    kept records of the archive's suites."""
    cells = by_cell({dest.relative_to(archive).as_posix(): json.loads(body)
                     for kind, dest, body in plan if kind == "record"})
    kept_cells = by_cell(kept_now)
    skip, stale = set(), set()
    for cell, recs in cells.items():
        fit = one_fit(list(recs.values()))[0]
        old = kept_cells.get(cell, {})
        old_fits = {record_fit_key(rec) for rec in old.values()} - {None}
        if fit is None or not old_fits or old_fits == {fit}:
            continue
        if replace:
            stale.update(path for path in old if path not in recs)
            print(f"keep_records: {cell}: the archive's records come from another fit than the kept ones; "
                  f"the kept cell replaced by the archive's", file=sys.stderr)
        else:
            skip.update(recs)
            counts["conflicts"] += len(recs)
            print(f"keep_records: {cell}: the archive's records come from another fit than the kept ones; the kept "
                  f"cell kept as it is (--replace takes the archive's cell)", file=sys.stderr)
    plan = [(kind, dest, body) for kind, dest, body in plan
            if not (kind == "record" and dest.relative_to(archive).as_posix() in skip)]
    return plan, stale


def save_maps(results: Path, suite: str, archive: Path = ARCHIVE) -> dict[str, int]:
    """Keep the suite's MAP networks (``<results>/<suite>/checkpoints/map/<model>/<key>/seed<k>.pt``),
    each checked to load as ``merge`` checks a device run's, beside its records: added when absent,
    a different kept file kept as it is (reported). For a network other runs start from and whose
    training a later machine need not reproduce bit for bit: camvid_multilabel's backbone
    (``data.backbone=camvid``, the camvid quick MAP UNet of seed 0), whose digest is part of every
    cell's identity there (docs/medical.md)."""
    src = results / suite / MAPS_TREE
    files = sorted(p for p in src.rglob("seed*.pt") if is_map_checkpoint(p.relative_to(results).as_posix())) \
        if src.is_dir() else []
    if not files:
        raise SystemExit(f"keep_records: no MAP network under {src} (<model>/<key hash>/seed<k>.pt)")
    bodies = {path: path.read_bytes() for path in files}
    for path, body in bodies.items():  # every file checked before any is kept
        problem = map_problem(body)
        if problem:
            raise SystemExit(f"keep_records: {path}: {problem}; nothing kept")
    counts = {"added": 0, "unchanged": 0, "replaced": 0, "conflicts": 0}
    for path, body in bodies.items():
        _keep(archive / path.relative_to(results), body, counts, overwrite=False,
              differs=f"{archive / path.relative_to(results)} differs from {path}; the kept network stays "
                      f"(records were made on it)")
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("save", "restore", "merge", "pack", "save-maps"))
    p.add_argument("suites", nargs="+", help="save / restore / pack / save-maps: suite names; merge: a device run's "
                                             "records.tar.gz and maps-<k>.tar file(s)")
    p.add_argument("--replace", action="store_true", help="merge: a kept record that differs takes the archive's")
    p.add_argument("--results", default=str(ROOT / "results"))
    p.add_argument("--archive", default=str(ARCHIVE), help="where the records are kept (default: docs/records)")
    p.add_argument("--partials", default=str(PARTIALS),
                   help="merge: where the partial fits a device run sends back are kept, for the next call to carry "
                        "(default: .device/partial)")
    a = p.parse_args(argv)
    results, archive = Path(a.results).resolve(), Path(a.archive).resolve()
    if a.action == "merge":
        for tarball in a.suites:
            try:
                c = merge(Path(tarball), archive, replace=a.replace, partials=Path(a.partials).resolve())
            except MergeError as exc:
                print(f"keep_records: {exc}", file=sys.stderr)
                return 2
            spent = f", {c['partials_spent']} spent partial fit(s) removed" if c.get("partials_spent") else ""
            print(f"merged {tarball} into {archive}: {c['added']} added, {c['unchanged']} unchanged, "
                  f"{c['replaced']} replaced, {c['conflicts']} conflict(s) kept as they were{spent}")
        return 0
    for suite in a.suites:
        if a.action == "save":
            print(f"saved {save(results, suite, archive)} record(s) of {suite} to {archive}")
        elif a.action == "save-maps":
            c = save_maps(results, suite, archive)
            print(f"kept the MAP networks of {suite} in {archive / suite / MAPS_TREE}: {c['added']} added, "
                  f"{c['unchanged']} unchanged, {c['conflicts']} conflict(s) kept as they were")
        elif a.action == "pack":
            print(f"packed {pack(suite, archive)} record(s) of {suite} into {archive / suite / PACK_NAME}")
        else:
            try:
                n = restore(results, suite, archive)
            except ValueError as exc:  # a pack naming a path outside the store: nothing restored from it
                print(f"keep_records: {archive / suite}: {exc}", file=sys.stderr)
                return 2
            print(f"restored {n} record(s) of {suite} into {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
