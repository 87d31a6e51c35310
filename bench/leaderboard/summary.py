""""What this shows": a few sentences computed from a board's numbers, never typed by hand."""
from __future__ import annotations

import numpy as np

from .board import Board
from .stats import ALPHA, format_value, paired_p_value


def _tops(board: Board, key: str) -> tuple[list[str], bool]:
    best, tied = board.marks.get(key, (set(), set()))
    rows = [r for r in board.rows if r in (best or tied)]
    return rows, bool(best)


def _names(rows: list[str], limit: int = 4) -> str:
    shown = ", ".join(rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _against_map(board: Board, key: str, worse: bool) -> list[str]:
    """Rows better (or worse) than MAP beyond the seed noise on column ``key``."""
    if not board.map_label or key not in board.per_seed.columns:
        return []
    col = board.column(key)
    out = []
    for lab in board.evidence_rows:
        if lab == board.map_label:
            continue
        d = board.paired(lab, board.map_label, key)
        if len(d) < 2 or not (paired_p_value(d) < ALPHA):
            continue
        better = d.mean() > 0 if col.better == "max" else d.mean() < 0
        if better != worse:
            out.append(lab)
    return out


def summary_lines(board: Board) -> list[str]:
    """Sentences on the board: the top of the ranking metric (best or tied), MAP comparisons,
    the cheapest row among the top, clean accuracy and OOD detection."""
    lines = []
    failed = [r for r in board.rows if board.status(r) == "fail"]
    unverified = [r for r in board.rows if board.status(r) == "unverified"]
    if failed or unverified:
        lines.append(f"Validity: {len(failed)} of {len(board.rows)} configurations fail their checks (✗) and "
                     f"{len(unverified)} could not be checked (?): they measure the set-up, not the method, and are "
                     f"left out of the marks and of every sentence below (reasons under the table).")
    if len(board.evidence_rows) < 2:
        lines.append(f"{len(board.evidence_rows) or 'No'} configuration{'' if len(board.evidence_rows) == 1 else 's'} "
                     f"of this board {'is' if len(board.evidence_rows) == 1 else 'are'} method evidence: nothing is "
                     f"ranked or compared.")
        return lines
    metric = board.metric
    title = board.column(metric).title
    rows, best = _tops(board, metric)
    mean = board.mean()
    if best:
        lab = rows[0]
        extra = ""
        if board.delta is not None and lab != board.map_label and board.delta.at[lab, "n"] > 0:
            d = board.delta.loc[lab]
            extra = f" ({format_value(d['mean'], d['std'])} against MAP over {int(d['n'])} paired seeds)"
        lines.append(f"{title}: {lab} is best beyond the seed noise{extra}.")
    elif rows:
        lines.append(f"{title}: no configuration is better than the rest beyond the seed noise; tied at the top: "
                     f"{_names(rows)}.")
    else:
        lines.append(f"{title}: too few seeds to tell configurations apart.")
    if board.map_label and not board.is_evidence(board.map_label):
        lines.append(f"The MAP network ({board.map_label}) is not method evidence "
                     f"({board.status(board.map_label)}): no row is compared with it.")
    elif board.map_label:
        better, worse = _against_map(board, metric, worse=False), _against_map(board, metric, worse=True)
        lines.append(f"Against the MAP network ({board.map_label}) on {title}, paired over seeds: "
                     f"{len(better)} configuration(s) better beyond the noise"
                     + (f" ({_names(better)})" if better else "")
                     + f", {len(worse)} worse" + (f" ({_names(worse)})" if worse else "") + ".")
    cost_key = "cost.train_time_s"
    if rows and cost_key in mean.columns:
        timed = [r for r in rows if np.isfinite(mean.at[r, cost_key])]
        if len(timed) > 1:
            cheap = min(timed, key=lambda r: mean.at[r, cost_key])
            # a slower row whose time was measured beside other work, across a stop or on another
            # CPU may be the cheaper one (a faster row's upper bound changes nothing)
            unsure = [r for r in timed if r != cheap and r in board.unsure_times]
            if unsure:
                lines.append(f"Cheapest to train among the top on {title}, as measured: {cheap} "
                             f"({format_value(mean.at[cheap, cost_key])} s); not a verdict: the train times of "
                             f"{_names(unsure)} are upper bounds or from another CPU (the notes say why).")
            else:
                lines.append(f"Cheapest to train among the top on {title}: {cheap} "
                             f"({format_value(mean.at[cheap, cost_key])} s).")
    for key in [c.key for c in board.columns if c.key.endswith(".accuracy") and c.key.startswith("id.")] + \
               [c.key for c in board.columns if c.key.startswith("ood.")]:
        top, is_best = _tops(board, key)
        col = board.column(key)
        if is_best:
            lines.append(f"{col.title}: {top[0]} is best beyond the seed noise "
                         f"({format_value(mean.at[top[0], key], board.std().at[top[0], key])}).")
        elif top:
            lines.append(f"{col.title}: tied at the top: {_names(top)}.")
    return lines
