"""Prior precision of a Laplace approximation, chosen on the validation split: one procedure for
every Laplace variant (subnetwork, diagonal, last-layer).

The grid search minimises the validation NLL of the method's own predictive over a log10 grid
(default 1e-4 .. 1e4, 21 points). When the minimum lands on an edge the grid is extended by
``extend_decades`` in that direction (at most ``max_extensions`` times) so that the optimum is
interior whenever one exists; if it still sits on an edge the result says so
(``at_grid_edge``), and the method puts a warning in its record. An upper-edge optimum means the
validation data prefer the posterior collapsed onto the MAP network (tau -> infinity); a lower
edge that they prefer the widest posterior on offer.

laplace-torch 0.3's own ``optimize_prior_precision(method="gridsearch")`` is not used: it reuses
one running metric for every grid point without resetting it, so each point's "loss" is the
running mean over all points so far (measured: it picked 1e4 where the validation NLL is lowest
near 1; docs/subnet_laplace.md).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


def log_grid(log_min: float, log_max: float, size: int) -> list[float]:
    return [float(v) for v in np.linspace(float(log_min), float(log_max), int(size))]


def grid_search_prior_precision(val_nll: Callable[[float], float], *, log_min: float = -4.0, log_max: float = 4.0,
                                size: int = 21, extend_decades: float = 4.0, max_extensions: int = 2,
                                plateau_rtol: float = 1e-5,
                                val_nll_many: Callable[[list[float]], list[float]] | None = None) -> dict:
    """Minimise ``val_nll(tau)`` over a log10 grid, extending it past an edge optimum.

    An optimum within ``plateau_rtol`` (relative) of the loss at an edge counts as that edge: as
    tau -> infinity the predictive converges to the MAP network's and the loss flattens, so the
    first point of the plateau is the MAP limit, not an interior optimum. Returns ``{"prior_precision", "log10_grid", "val_nll", "at_grid_edge" ("lower" | "upper" |
    None), "n_extensions"}``; non-finite losses never win (``inf`` when all are).
    ``val_nll_many(taus)``, when given, evaluates several grid points in one call (a method
    whose predictive at every tau shares its expensive part) and must equal ``val_nll`` per tau."""

    def evaluate(logs: list[float]) -> list[float]:
        taus = [10.0 ** lg for lg in logs]
        vals = val_nll_many(taus) if val_nll_many is not None else [val_nll(t) for t in taus]
        return [_finite(v) for v in vals]

    if size < 2 or log_max <= log_min:
        raise ValueError("the prior-precision grid needs size >= 2 and log_max > log_min")
    step = (float(log_max) - float(log_min)) / (int(size) - 1)
    logs = log_grid(log_min, log_max, size)
    losses = dict(zip(logs, evaluate(logs)))
    n_ext = 0
    while True:
        grid = sorted(losses)
        best = min(grid, key=lambda lg: (losses[lg], lg))
        edge = _edge(grid, losses, best, plateau_rtol)
        if edge is None or best not in (grid[0], grid[-1]) or n_ext >= max_extensions:
            break  # interior, a plateau reaching the edge (more grid changes nothing), or out of extensions
        n_new = max(1, int(round(extend_decades / step)))
        new = ([grid[0] - step * (i + 1) for i in range(n_new)] if edge == "lower"
               else [grid[-1] + step * (i + 1) for i in range(n_new)])
        new = [round(v, 10) for v in new]
        losses.update(zip(new, evaluate(new)))
        n_ext += 1
    grid = sorted(losses)
    return {"prior_precision": 10.0 ** best, "log10_prior_precision": best, "log10_grid": grid,
            "val_nll": [losses[lg] for lg in grid], "at_grid_edge": edge, "n_extensions": n_ext,
            "n_infeasible": sum(not math.isfinite(losses[lg]) for lg in grid)}


def _edge(grid, losses, best, rtol) -> str | None:
    """``"lower"`` / ``"upper"`` when the best loss is (within ``rtol`` of) an edge of the grid's
    feasible part, else None (:func:`feasible_edge`)."""
    return feasible_edge(list(grid), [losses[g] for g in grid], best, rtol)


def feasible_edge(grid: list[float], losses: list[float], best: float, rtol: float = 1e-5) -> str | None:
    """``"lower"`` / ``"upper"`` when ``best`` is (within ``rtol`` of) an edge of the *feasible*
    part of the grid (its finite losses), else None. A grid point whose predictive could not be
    formed (``inf``: e.g. a failed Cholesky) is not a choice the data made: a best beside such
    points is at an edge, as at the grid's own end. None when no loss is finite."""
    pts = sorted((g, v) for g, v in zip(grid, losses) if v is not None and math.isfinite(v))
    by = dict(pts)
    if not pts or best not in by:
        return None
    tol = rtol * max(abs(by[best]), 1e-12)
    if best == pts[0][0] or pts[0][1] <= by[best] + tol:
        return "lower"
    if best == pts[-1][0] or pts[-1][1] <= by[best] + tol:
        return "upper"
    return None


def _finite(v) -> float:
    v = float(v)
    return v if math.isfinite(v) else math.inf
