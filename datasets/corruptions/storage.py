"""Atomic files and an exclusive directory lock, shared by the corruption writers
(``datasets/cifar10c/generate.py``, ``datasets/corruptions/folder.py``)."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, write) -> None:
    """Write through a temporary file in the same directory, then os.replace (atomic)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_manifest_file(path: Path, dataset: str, entries: str, layout: str, how: str) -> dict | None:
    """The JSON object of a regenerated copy's manifest at ``path`` (None: absent, an official
    copy). One that is not a JSON object whose ``entries`` (``corruptions`` / ``cells``) map names
    to objects is a :class:`DatasetNotFoundError` (exit 2) saying so and how to recover."""
    from datasets.errors import DatasetNotFoundError

    path = Path(path)
    if not path.exists():
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            manifest = json.load(fh)
        problem = None if isinstance(manifest, dict) else f"a JSON {type(manifest).__name__}, not an object"
        cells = manifest.get(entries, {}) if problem is None else {}
        if problem is None and not (isinstance(cells, dict) and all(isinstance(v, dict) for v in cells.values())):
            problem = f"its {entries!r} is not an object of per-file objects"
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem is None:
        return manifest
    raise DatasetNotFoundError(
        dataset, [path], f"{layout}; {path.name}: the JSON object bench's generator writes beside the files it made",
        f"delete {path.parent} so that bench regenerates it, or {how} (deleting only {path.name} would make "
        f"the regenerated files pass for an official release)",
        reason=f"malformed {path.name} ({problem})")


def write_json(path: Path, data: dict) -> None:
    blob = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(path, lambda fh: fh.write(blob))


@contextlib.contextmanager
def directory_lock(directory: Path, name: str = ".generate.lock"):
    """An exclusive flock on ``directory/name``: two processes never generate at once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(directory / name, "a") as fh:  # "a": taking the lock changes no file
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
