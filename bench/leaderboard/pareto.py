"""Cost-quality Pareto view: the ranking metric against train time, predict time and the
number of stochastic parameters, with the Pareto front of each panel drawn.

:data:`AXES` is the leaderboard report's figure; :data:`MACHINE_FREE_AXES` the costs that do not
depend on how loaded the machine was (``--pareto-figure``: the README's figure)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from bench.reporting.plots import make_styles, to_png, wrap_label
from bench.validity import SYMBOLS

from .board import Board

#: (cost column, axis label); a panel is drawn when at least two configurations have the cost
AXES = [("cost.train_time_s", "train time (s, log)"),
        ("cost.predict_time_per_example_s", "predict time per example (ms, log)"),
        ("cost.stochastic_params", "stochastic parameters (log; 0 drawn at the left edge)")]
#: costs counted, not timed: the same whatever else ran on the machine
MACHINE_FREE_AXES = [("cost.flops_per_example", "prediction MFLOP per example (log)"),
                     ("cost.stochastic_params", "stochastic parameters (log; 0 drawn at the left edge)")]
#: cost column -> factor to the axis unit
SCALE = {"cost.predict_time_per_example_s": 1e3, "cost.flops_per_example": 1e-6}
#: the uniform predictor's line: long dashes, unlike the Pareto front's
REFERENCE_DASHES = (0, (8, 4))
#: the opacity of a row that is not method evidence (drawn hollow)
FADED = 0.55
#: what a row that is not method evidence means, per bench.validity status (the legend's entries)
NOT_EVIDENCE = {"fail": "fails its validity checks: not method evidence",
                "unverified": "could not be checked: not method evidence"}


def pareto_front(x, y, higher_is_better: bool) -> list[int]:
    """Indices of the points no other point beats on both axes (lower x and better y; a tie on one
    axis and better on the other also dominates), ordered by x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    yy = -y if higher_is_better else y
    front = []
    for i in range(len(x)):
        dominated = any((x[j] <= x[i] and yy[j] <= yy[i]) and (x[j] < x[i] or yy[j] < yy[i])
                        for j in range(len(x)) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (x[i], yy[i]))


def short_labels(board: Board) -> dict:
    """label -> its method's name where that names one row of the board, else the label itself
    (wrapped after commas): legible legends for a board of one configuration per method."""
    method = {lab: board.provenance.get(lab, {}).get("method", lab) for lab in board.rows}
    names = list(method.values())
    return {lab: method[lab] if names.count(method[lab]) == 1 else wrap_label(lab, 40) for lab in board.rows}


def pareto_figure(board: Board, axes=AXES, short: bool = False) -> bytes | None:
    """PNG of the board's Pareto panels (one per cost of ``axes`` that at least two configurations
    have), or None when there is none. Rows that are not method evidence (bench.validity) are
    hollow and faded, their symbol beside their label; the uniform predictor's value of the metric,
    where the board has one, is a long-dashed line. ``short``: legend labels are method names
    (:func:`short_labels`). The same board gives the same bytes (bench.reporting.plots.to_png)."""
    mean, std = board.mean(), board.std()
    metric = board.metric
    col = board.column(metric)
    panels = [(key, label) for key, label in axes
              if key in mean.columns and (np.isfinite(mean[key]) & np.isfinite(mean[metric])).sum() >= 2]
    if not panels:
        return None
    if any(n.startswith("train s of ") for n in board.notes):  # bench.leaderboard.board.shared_machine_notes
        panels = [(k, lab.replace(", log)", ", log; upper bounds: shared machine)") if k == "cost.train_time_s"
                   else lab) for k, lab in panels]
    styles = make_styles(board.rows)
    names = short_labels(board) if short else {lab: lab for lab in board.rows}
    reference = board.reference.get(metric) if board.reference else None
    reference = float(reference) if reference is not None and np.isfinite(reference) else None
    fig = Figure(figsize=(4.8 * len(panels), 4.0))
    axs = fig.subplots(1, len(panels), squeeze=False)[0]
    higher = col.better == "max"
    for ax, (key, label) in zip(axs, panels):
        ok = [lab for lab in board.rows if np.isfinite(mean.at[lab, key]) and np.isfinite(mean.at[lab, metric])]
        scale = SCALE.get(key, 1.0)
        x = np.array([mean.at[lab, key] * scale for lab in ok])
        positive = x[x > 0]
        floor = positive.min() / 3 if len(positive) else 1.0
        xs = np.where(x > 0, x, floor)     # zero stochastic parameters (MAP) at the left edge
        y = np.array([mean.at[lab, metric] for lab in ok])
        evidence = np.array([board.is_evidence(lab) for lab in ok], dtype=bool)
        for i, lab in enumerate(ok):
            st = styles[lab]
            err = std.at[lab, metric]
            rank = board.rows.index(lab) + 1
            # a row that is not method evidence (bench.validity): hollow, faded, its symbol in the legend
            ax.errorbar(xs[i], y[i], yerr=err if np.isfinite(err) else None, color=st["color"],
                        marker=st["marker"], markersize=7, markeredgecolor="#333", linestyle="none",
                        capsize=3, alpha=1.0 if evidence[i] else FADED,
                        markerfacecolor=st["color"] if evidence[i] else "none")
            ax.annotate(str(rank), (xs[i], y[i]), textcoords="offset points", xytext=(5, 4), fontsize=7,
                        color="#333")
        if evidence.sum() >= 2:  # the front of the rows that are method evidence only
            idx = np.flatnonzero(evidence)
            front = idx[pareto_front(xs[idx], y[idx], higher)]
            ax.step(xs[front], y[front], where="post", color="#555", linewidth=1.2, linestyle="--", zorder=0)
        if reference is not None:
            ax.axhline(reference, color="#777", linewidth=1.2, linestyle=REFERENCE_DASHES, zorder=0)
            ax.annotate("uniform predictor" if board.reference_name.startswith("uniform") else "reference",
                        (1.0, reference), xycoords=("axes fraction", "data"), textcoords="offset points",
                        xytext=(-4, 4), ha="right", fontsize=7, color="#555")
        ax.set_xscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        narrow = xs.max() / xs.min() < 30 if len(xs) else True
        ax.xaxis.set_minor_formatter(plain if narrow else NullFormatter())
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel(f"{col.title} ({'higher' if higher else 'lower'} is better)")
        ax.grid(True, alpha=0.3)
    handles = []
    for rank, lab in enumerate(board.rows, 1):
        st, evidence = styles[lab], board.is_evidence(lab)
        mark = "" if evidence else " " + SYMBOLS.get(board.status(lab), "")
        handles.append(Line2D([], [], color=st["color"], marker=st["marker"], markersize=7, markeredgecolor="#333",
                              linestyle="none", alpha=1.0 if evidence else FADED,
                              markerfacecolor=st["color"] if evidence else "none", label=f"{rank}. {names[lab]}{mark}"))
    for status, what in NOT_EVIDENCE.items():
        if any(board.status(lab) == status for lab in board.rows):
            handles.append(Line2D([], [], color="#777", marker="o", markersize=7, markerfacecolor="none",
                                  linestyle="none", alpha=0.6, label=f"{SYMBOLS.get(status, '')} {what}"))
    if reference is not None:
        handles.append(Line2D([], [], color="#777", linewidth=1.2, linestyle=REFERENCE_DASHES,
                              label=f"{board.reference_name}: {col.title} {reference:.3g}"))
    ncol = 2 if len(panels) > 1 else 1
    fig.legend(handles=handles, loc="upper center", ncol=ncol, frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 0.0), title=f"rank. {'method' if short else 'configuration'} (ranked by "
               f"{col.title})", title_fontsize=8)
    smoke = " — SMOKE PROFILE, not results" if board.profile == "smoke" else ""
    fig.suptitle(f"{board.suite} / {board.model_title} ({board.profile} profile): {col.title} (mean ± std over seeds) "
                 f"against cost{smoke}\ndashed: Pareto front of the rows that are method evidence; hollow "
                 f"(✗ / ?): not method evidence", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return to_png(fig)


def write_pareto_figure(boards: list[Board], path) -> None:
    """``--pareto-figure PATH``: the one board's Pareto figure over :data:`MACHINE_FREE_AXES`, with
    method names as labels, written to ``path`` (a committed figure: the same records give the
    same bytes). BenchError when there is not exactly one board or it has no such cost."""
    from pathlib import Path

    from bench.errors import BenchError
    from bench.store import atomic_write_bytes

    if len(boards) != 1:
        raise BenchError(f"--pareto-figure draws one board; these filters leave {len(boards)} "
                         "(narrow them with --suite, --model, --profile)")
    png = pareto_figure(boards[0], MACHINE_FREE_AXES, short=True)
    if png is None:
        raise BenchError("--pareto-figure: fewer than two configurations have a prediction MFLOP or "
                         "stochastic-parameter count")
    atomic_write_bytes(Path(path), png)
