"""Writing a report document to disk: figures, markdown and self-contained HTML, each atomically."""
from __future__ import annotations

import os
from pathlib import Path

from bench.store import atomic_write_bytes

from .document import Document
from .render import to_html, to_markdown

FIGURES_DIR = "figures"


def write_report(doc: Document, dest: Path, html_name: str = "index.html", md_name: str = "README.md") -> Path:
    """Write figures, README.md and index.html (each atomically; other names with ``html_name`` and
    ``md_name``); returns the HTML file's path.

    PNGs left in ``figures/`` by an earlier report that this one does not contain are removed.
    """
    dest = Path(dest)
    fig_dir = dest / FIGURES_DIR
    figures = doc.figures()
    names = [f"{f.name}.png" for f in figures]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate figure names in report: {names}")
    for fig in figures:
        atomic_write_bytes(fig_dir / f"{fig.name}.png", fig.png)
    if fig_dir.is_dir():
        for old in fig_dir.glob("*.png"):
            if old.name not in names:
                os.unlink(old)
    atomic_write_bytes(dest / md_name, to_markdown(doc, FIGURES_DIR).encode("utf-8"))
    index = dest / html_name
    atomic_write_bytes(index, to_html(doc).encode("utf-8"))
    return index
