"""Cost-quality Pareto view: the ranking metric against train time, predict time and the
number of stochastic parameters, with the Pareto front of each panel drawn."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from bench.reporting.plots import make_styles, to_png
from bench.validity import SYMBOLS

from .board import Board

#: (cost column, axis label); a panel is drawn when at least two configurations have the cost
AXES = [("cost.train_time_s", "train time (s, log)"),
        ("cost.predict_time_per_example_s", "predict time per example (ms, log)"),
        ("cost.stochastic_params", "stochastic parameters (log; 0 drawn at the left edge)")]


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


def pareto_figure(board: Board) -> bytes | None:
    """PNG of the board's Pareto panels, or None when no cost axis has two configurations."""
    mean, std = board.mean(), board.std()
    metric = board.metric
    col = board.column(metric)
    panels = [(key, label) for key, label in AXES
              if key in mean.columns and (np.isfinite(mean[key]) & np.isfinite(mean[metric])).sum() >= 2]
    if not panels:
        return None
    styles = make_styles(board.rows)
    fig = Figure(figsize=(4.8 * len(panels), 4.0))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    higher = col.better == "max"
    for ax, (key, label) in zip(axes, panels):
        ok = [lab for lab in board.rows if np.isfinite(mean.at[lab, key]) and np.isfinite(mean.at[lab, metric])]
        scale = 1e3 if key == "cost.predict_time_per_example_s" else 1.0
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
            mark = "" if evidence[i] else " " + SYMBOLS.get(board.status(lab), "")
            ax.errorbar(xs[i], y[i], yerr=err if np.isfinite(err) else None, color=st["color"],
                        marker=st["marker"], markersize=7, markeredgecolor="#333", linestyle="none",
                        capsize=3, label=f"{rank}. {lab}{mark}", alpha=1.0 if evidence[i] else 0.45,
                        markerfacecolor=st["color"] if evidence[i] else "none")
            ax.annotate(str(rank), (xs[i], y[i]), textcoords="offset points", xytext=(5, 4), fontsize=7,
                        color="#333")
        if evidence.sum() >= 2:  # the front of the rows that are method evidence only
            idx = np.flatnonzero(evidence)
            front = idx[pareto_front(xs[idx], y[idx], higher)]
            ax.step(xs[front], y[front], where="post", color="#555", linewidth=1.2, linestyle="--", zorder=0)
        ax.set_xscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        narrow = xs.max() / xs.min() < 30 if len(xs) else True
        ax.xaxis.set_minor_formatter(plain if narrow else NullFormatter())
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel(label)
        ax.set_ylabel(f"{col.title} ({'higher' if higher else 'lower'} is better)")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: int(labels[i].split(".", 1)[0]))
    ncol = 2 if len(panels) > 1 else 1
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper center", ncol=ncol,
               frameon=False, fontsize=8, bbox_to_anchor=(0.5, 0.0), title="rank. configuration (ranked by "
               f"{col.title})", title_fontsize=8)
    smoke = " — SMOKE PROFILE, not results" if board.profile == "smoke" else ""
    fig.suptitle(f"{board.suite} / {board.model} ({board.profile} profile): {col.title} against cost; "
                 f"dashed: Pareto front of the rows that are method evidence (hollow ✗ / ?: not evidence){smoke}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return to_png(fig)

