"""Writing a report document to disk: figures, markdown and self-contained HTML, each atomically."""
from __future__ import annotations

import re
from pathlib import Path

from bench.errors import BenchError
from bench.store import atomic_write_bytes

from .document import Document
from .render import to_html, to_markdown

FIGURES_DIR = "figures"


#: the figures a report wrote last, one file name a line, in its ``figures/`` folder: the only PNGs
#: a later report may remove (a user's own file there is never touched)
MANIFEST = ".written-by-bench"
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]*")


def _written_before(fig_dir: Path) -> set[str]:
    try:
        names = (fig_dir / MANIFEST).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError):
        return set()
    return {n for n in names if _PLAIN.fullmatch(n) and n.endswith(".png")}


def write_report(doc: Document, dest: Path, html_name: str = "index.html", md_name: str = "README.md") -> Path:
    """Write figures, README.md and index.html (each atomically; other names with ``html_name`` and
    ``md_name``); returns the HTML file's path.

    PNGs that an earlier report wrote into ``figures/`` (listed in its :data:`MANIFEST`) and that
    this one does not contain are removed; no other file there is (a user's own figure stays; so
    does a PNG of a report written before the manifest existed: remove those by hand once).
    A figure name that is not a plain file name (a path part, ``..``) is a ValueError: names made
    from record content are slugified where they are made, so nothing is written outside ``dest``.
    """
    dest = Path(dest)
    fig_dir = dest / FIGURES_DIR
    figures = doc.figures()
    names = [f"{f.name}.png" for f in figures]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate figure names in report: {names}")
    unsafe = [n for n in names if not _PLAIN.fullmatch(n)]
    if unsafe:
        raise ValueError(f"figure names that are not plain file names: {unsafe}")
    for d in (dest, fig_dir) if figures else (dest,):
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder goes, or no permission
            raise BenchError(f"cannot write the report into {d}: {exc.strerror or exc} (it must be a folder, or "
                             "creatable as one, that this user may write to)") from None
    before = _written_before(fig_dir)
    if figures or before:  # the manifest first names everything that may be on disk, then what is
        atomic_write_bytes(fig_dir / MANIFEST, "\n".join(sorted(before | set(names))).encode("utf-8"))
    for fig in figures:
        atomic_write_bytes(fig_dir / f"{fig.name}.png", fig.png)
    for old in sorted(before - set(names)):
        (fig_dir / old).unlink(missing_ok=True)
    if figures or before:
        atomic_write_bytes(fig_dir / MANIFEST, "\n".join(sorted(names)).encode("utf-8"))
    atomic_write_bytes(dest / md_name, to_markdown(doc, FIGURES_DIR).encode("utf-8"))
    index = dest / html_name
    atomic_write_bytes(index, to_html(doc).encode("utf-8"))
    return index
