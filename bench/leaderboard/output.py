"""The leaderboard as a document (HTML, markdown) and as CSV, written atomically."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from bench.reporting.write import write_report
from bench.reporting.data import slugify
from bench.reporting.render import markdown_table
from bench.reporting.document import Banner, Bullets, Document, Figure, KeyValues, Paragraph, Section
from bench.reporting.tables import Column as TableColumn
from bench.reporting.tables import Table, TextTable
from bench.store import atomic_write_bytes

from .board import Board
from .pareto import pareto_figure
from .stats import ALPHA, format_value
from .summary import summary_lines

PUBLISHED = Path(__file__).with_name("published.json")

HOW_TO_READ = (
    "Rows are ranked by {metric} on the MAP network's seeds: MAP's mean plus the row's paired difference to "
    "MAP (a row sharing no seed with MAP: its own mean), so that rows run on different seeds are ranked on the "
    "same ones. Each cell is the mean ± sample std over seeds, rounded "
    "so that the std keeps two significant digits (one seed: three significant digits, no std). Bold: best "
    "in its column beyond the seed noise: a two-sided paired t-test over the seeds both rows have rejects "
    f"equality with every other row at {ALPHA:g}. Italic: the rows that the top row cannot be told apart "
    "from (including the top row itself): a tie; with fewer than two common seeds nothing can be told apart. "
    "Δ vs MAP: the ranking metric minus the MAP network's (the `deterministic` configuration at its "
    "defaults), paired over common seeds, mean ± std (n pairs); a seed pairs two rows built on the seed's MAP "
    "network only where both stand on the same fit of it (its weights' digest, else its validation curve, where "
    "the records give them: a retrain on another machine or code version is another network, see the notes). ID = clean test set; shift = per seed the "
    "mean over every shifted test set (a seed that misses some is left out of the shift columns, see the "
    "notes); OOD AUROC from predictive entropy. Cost columns come from each run's records: train time "
    "includes the MAP network a method builds on; predict time and memory as measured on the device named "
    "in the provenance table (CPU memory is the process's resident-set growth, an estimate). Validity "
    "(bench/validity.py, docs/validity.md): a row marked ✗ fails its checks (its fit did not converge, or the "
    "setting cannot test the method), one marked ? could not be checked; neither is method evidence, neither "
    "is ever bold or italic, and the summary sentences leave both out. The uniform-predictor row is what "
    "a prediction of 1/K for every class scores, whatever the data.")


def board_table(board: Board) -> Table:
    mean, std = board.mean(), board.std()
    cols = [TableColumn("seeds", "seeds", None, integers=True)]
    texts = {}
    for lab in board.rows:
        texts[(lab, "seeds")] = str(len(board.seeds(lab)))
    quality = [c for c in board.columns if c.better]
    cost = [c for c in board.columns if not c.better]
    for c in quality:
        title = c.title + (" ↑" if c.better == "max" else " ↓")
        if c.key == board.metric:
            title = "▸ " + title
        cols.append(TableColumn(c.key, title, c.better))
        for lab in board.rows:
            texts[(lab, c.key)] = format_value(mean.at[lab, c.key], std.at[lab, c.key])
    if board.delta is not None:
        cols.append(TableColumn("delta", f"Δ {board.column(board.metric).title} vs MAP", None))
        for lab in board.rows:
            d = board.delta.loc[lab]
            texts[(lab, "delta")] = ("–" if lab == board.map_label or d["n"] == 0 else
                                     f"{format_value(d['mean'], d['std'])} ({int(d['n'])})")
    for c in cost:
        cols.append(TableColumn(c.key, c.title, None, integers=c.integers))
        for lab in board.rows:
            texts[(lab, c.key)] = format_value(mean.at[lab, c.key], std.at[lab, c.key], c.scale, c.integers)
    keys = [c.key for c in cols]
    m = pd.DataFrame(index=board.rows, columns=keys, dtype=float)
    for c in quality:
        m[c.key] = mean[c.key]
    marks = {c.key: board.marks.get(c.key, (set(), set())) for c in quality}
    # rows that fail their validity checks carry a symbol (the reasons are in the notes)
    shown = {lab: display_label(board, lab) for lab in board.rows}
    m.index = [shown[lab] for lab in board.rows]
    texts = {(shown.get(r, r), k): v for (r, k), v in texts.items()}
    marks = {k: ({shown[r] for r in best}, {shown[r] for r in tied}) for k, (best, tied) in marks.items()}
    if board.reference:
        ref = board.reference_name
        m.loc[ref] = np.nan
        for key in keys:
            texts[(ref, key)] = (format_value(board.reference[key]) if key in board.reference else "–")
    caption = (f"{board.suite} / {board.model_title}, {board.profile} profile: ranked by {board.column(board.metric).title}."
               + (f" {VALIDITY_KEY}" if any(not board.is_evidence(r) for r in board.rows) else ""))
    return Table(f"leaderboard-{board.suite}-{board.model_slug}", cols, m, m * np.nan, m * 0, index_title="method",
                 caption=caption, texts=texts, marks=marks)


VALIDITY_KEY = ("✗: fails its validity checks, ?: could not be checked (bench.validity): not method evidence, never "
                "marked best; reasons in the notes.")


def display_label(board: Board, lab: str) -> str:
    from bench.validity import marked_label

    return marked_label(lab, board.status(lab))


def validity_notes(board: Board) -> list[str]:
    """One note per row that is not method evidence: its symbol, label and reasons."""
    out = []
    for lab in board.rows:
        status, reasons = board.validity.get(lab, ("ok", []))
        if status != "ok":
            out.append(f"{display_label(board, lab)}: " + "; ".join(reasons))
    return out


def provenance_table(board: Board) -> TextTable:
    fields = ["seeds", "training", "data", "commits", "versions", "devices", "config"]
    rows = [[lab] + [board.provenance[lab][f] for f in fields] for lab in board.rows]
    return TextTable(f"provenance-{board.suite}-{board.model_slug}", ["method"] + fields, rows,
                     caption="Where each row's numbers come from: the training setup actually used (the "
                             "profile's, with the method's own overrides), the data the shifted sets were read "
                             "from, the code and packages, the device and threads, and the full method options.",
                     code_columns=(7,))


def published_rows(suite: str) -> list[dict]:
    """The published reference blocks for ``suite`` (``published.json``)."""
    data = json.loads(PUBLISHED.read_text())
    return list(data.get(suite, []))


def published_table(block: dict) -> TextTable:
    metrics = block["metrics"]
    rows = []
    for r in block["rows"]:
        rows.append([r["method"], r.get("analogue", "")] + [f"{v:g}" for v in r["values"]] + [r.get("cost", "")])
    return TextTable("published", ["method (as published)", "our analogue"] + metrics + ["cost (as published)"],
                     rows, caption=f"Source: {block['source']} ({block['url']}). Setup: {block['setup']}. Not "
                                   f"ranked with the rows above: the network, training and data differ.")


def board_section(board: Board, with_figure: bool = True) -> Section:
    smoke = board.profile == "smoke"
    title = f"{board.suite} / {board.model_title} ({board.profile} profile)" + (" — SMOKE, NOT RESULTS" if smoke else "")
    s = Section(title, anchor=f"board-{board.suite}-{board.model_slug}-{board.profile}")
    if smoke:
        s.add(Banner("SMOKE PROFILE: tiny data and a few training steps to check that the code runs; these "
                        "numbers say nothing about the methods."))
    s.add(Paragraph("What this shows:"))
    s.add(Bullets(summary_lines(board)))
    s.add(board_table(board))
    notes = validity_notes(board) + board.notes
    if notes:
        s.add(Paragraph("Notes:"))
        s.add(Bullets(notes))
    if with_figure:
        png = pareto_figure(board)
        if png is not None:
            s.add(Figure(slugify(f"pareto-{board.suite}-{board.model_slug}-{board.profile}"), png,
                         f"Cost against quality ({board.column(board.metric).title}, mean ± std over seeds): every "
                         f"configuration of the table; dashed: the Pareto front (no other configuration is both "
                         f"cheaper and better).{' SMOKE PROFILE.' if smoke else ''}",
                         alt=f"Pareto view {board.suite} {board.model_title}"))
    p = Section("Provenance")
    p.add(provenance_table(board))
    s.add(p)
    blocks = published_rows(board.suite)
    if blocks:
        r = Section("Published reference rows (not ranked)")
        for b in blocks:
            r.add(published_table(b))
        s.add(r)
    return s


def _joined(values) -> str:
    """A filter's values as one string: comma-separated, or ``; `` where a value (a label) has commas."""
    return ("; " if any("," in str(v) for v in values) else ",").join(map(str, values))


def leaderboard_document(boards: list[Board], results_dirs, filters: dict, metric: str) -> Document:
    doc = Document(title="Leaderboard")
    o = Section("How to read it", anchor="how-to-read")
    generated = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    o.add(KeyValues([("results", ", ".join(map(str, results_dirs))), ("ranked by", metric),
                     ("filters", ", ".join(f"{k}={_joined(v)}" for k, v in filters.items() if v) or "none"),
                     ("generated", generated)]))
    o.add(Paragraph(HOW_TO_READ.format(metric=metric)))
    if any(b.profile == "smoke" for b in boards):
        o.add(Banner("Contains SMOKE-profile boards (marked in their titles): they check code, not methods."))
    doc.sections.append(o)
    for b in boards:
        doc.sections.append(board_section(b))
    return doc


def tables_markdown(boards: list[Board]) -> str:
    """The boards' tables and notes as markdown, for embedding in README/docs (``--print-tables``)."""
    parts = []
    for b in boards:
        smoke = " — SMOKE PROFILE, not results" if b.profile == "smoke" else ""
        parts.append(f"**{b.suite} / {b.model_title} ({b.profile} profile){smoke}**")
        parts.append(markdown_table(board_table(b)))
        notes = validity_notes(b) + b.notes
        if notes:
            parts.append("\n".join(f"- {n}" for n in notes))
    return "\n\n".join(parts) + "\n"


def board_csv(boards: list[Board]) -> str:
    """One row per (board, configuration): every column's mean, std and seed count at full
    precision, the marks, the difference to MAP and the provenance."""
    rows = []
    for b in boards:
        mean, std = b.mean(), b.std()
        count = b.per_seed.groupby(level=0).count().reindex(b.rows)
        for rank, lab in enumerate(b.rows, 1):
            row = {"suite": b.suite, "model": b.model, "model_identity": b.variant or "", "profile": b.profile, "task": b.task, "ranked_by": b.metric,
                   "rank": rank, "label": lab, "seeds": " ".join(map(str, b.seeds(lab))),
                   "validity": b.status(lab),
                   "validity_reasons": "; ".join(b.validity.get(lab, ("ok", []))[1])}
            for c in b.columns:
                row[f"{c.key}.mean"] = mean.at[lab, c.key]
                row[f"{c.key}.std"] = std.at[lab, c.key]
                row[f"{c.key}.n"] = int(count.at[lab, c.key])
                if c.better:
                    best, tied = b.marks.get(c.key, (set(), set()))
                    row[f"{c.key}.mark"] = "best" if lab in best else "tied" if lab in tied else ""
            if b.delta is not None:
                row.update({f"delta_vs_map.{k}": b.delta.at[lab, k] for k in ("mean", "std", "n")})
            row.update({f"provenance.{k}": v for k, v in b.provenance[lab].items()})
            rows.append(row)
    frame = pd.DataFrame(rows)
    buf = io.StringIO()
    frame.to_csv(buf, index=False, quoting=csv.QUOTE_MINIMAL)
    return buf.getvalue()


def write_leaderboard(boards: list[Board], out_dir, results_dirs, filters: dict, metric: str) -> dict:
    """Write ``leaderboard.html``, ``leaderboard.md`` (+ ``figures/``) and ``leaderboard.csv``
    into ``out_dir``; returns the three paths."""
    out = Path(out_dir)
    doc = leaderboard_document(boards, results_dirs, filters, metric)
    html_path = write_report(doc, out, html_name="leaderboard.html", md_name="leaderboard.md")
    md_path = out / "leaderboard.md"
    csv_path = out / "leaderboard.csv"
    atomic_write_bytes(csv_path, board_csv(boards).encode("utf-8"))
    return {"html": html_path, "markdown": md_path, "csv": csv_path}
