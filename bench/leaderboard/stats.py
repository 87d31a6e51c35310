"""Seed statistics of the leaderboard: paired differences, ties, rounding to the seed noise."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: two-sided level of the paired t-test that separates a best row from the runner-up
ALPHA = 0.05


def paired(a: pd.Series, b: pd.Series, nets_a: pd.Series | None = None,
           nets_b: pd.Series | None = None) -> np.ndarray:
    """``a - b`` over the seeds both have a finite value for (``a``, ``b`` indexed by seed); with
    ``nets_a`` / ``nets_b`` (seed -> ``bench.reporting.data.map_network``), only over the seeds on
    which both can stand on the same MAP network (``same_map_network``)."""
    d = (a.astype(float) - b.reindex(a.index).astype(float))
    if nets_a is not None and nets_b is not None:
        from bench.reporting.data import same_map_network

        d = d[[same_map_network(nets_a.get(s), nets_b.get(s)) for s in d.index]]
    d = d.to_numpy()
    return d[np.isfinite(d)]


def nets_of(nets: pd.Series | None, label) -> pd.Series | None:
    """seed -> MAP network of one row of ``nets`` ((label, seed) -> ``map_network``); None without."""
    if nets is None or label not in nets.index.get_level_values(0):
        return None
    return nets.xs(label, level=0)


def paired_p_value(d: np.ndarray) -> float:
    """Two-sided p-value of a paired t-test on the differences ``d`` (H0: mean 0).

    Identical values (every difference 0) give 1; a constant non-zero difference gives 0; fewer
    than two pairs give NaN (the seed noise is unknown)."""
    d = np.asarray(d, dtype=float)
    if len(d) < 2:
        return float("nan")
    if np.all(d == 0):
        return 1.0
    sd = d.std(ddof=1)
    if sd == 0:
        return 0.0
    from scipy.stats import t

    stat = d.mean() / (sd / math.sqrt(len(d)))
    return float(2 * t.sf(abs(stat), df=len(d) - 1))


def rank_marks(per_seed: pd.DataFrame, better: str, score: pd.Series | None = None,
               alpha: float = ALPHA, nets: pd.Series | None = None) -> tuple[set, set]:
    """(best, tied) rows of one column. ``per_seed``: rows = labels, columns = seeds.

    The top row (by ``score``, default the mean over seeds) is *best* only when every other row is worse beyond the
    seed noise: a paired t-test over their common seeds rejects equality at ``alpha``. Otherwise
    the top row and every row it cannot be told apart from are *tied* (fewer than two common
    seeds: cannot be told apart). ``nets``: (label, seed) -> the run's MAP network
    (``bench.reporting.data.run_map_networks``); a seed pairs two rows only where both can stand on
    one (:func:`paired`)."""
    means = per_seed.mean(axis=1, skipna=True) if score is None else score.reindex(per_seed.index)
    means = means[np.isfinite(means.astype(float))]
    if len(means) < 2:
        return set(), set()
    top = top_row(means.astype(float), per_seed.notna().sum(axis=1), better)
    tied = set()
    for row in means.index:
        if row == top:
            continue
        d = paired(per_seed.loc[row], per_seed.loc[top], nets_of(nets, row), nets_of(nets, top))
        worse = len(d) > 0 and (d.mean() < 0 if better == "max" else d.mean() > 0)
        if not (paired_p_value(d) < alpha and worse):  # better than the top on the seeds they share: no best
            tied.add(row)
    return ({top}, set()) if not tied else (set(), tied | {top})


def top_row(score: pd.Series, seeds: pd.Series, better: str):
    """The row with the best ``score``; rows with an equal score (e.g. one configuration stored
    under two config hashes) are decided by the most seeds, then the label's natural order, never
    by the frame's row order."""
    from bench.reporting.data import natural_key

    best = score.max() if better == "max" else score.min()
    equal = [r for r in score.index if np.isclose(score[r], best, rtol=1e-12, atol=0.0)]
    return min(equal, key=lambda r: (-int(seeds.get(r, 0)), natural_key(r)))


def decimals_for(std: float, default_sig: int = 3, value: float | None = None) -> int:
    """Decimals that show ``std`` with two significant digits (the mean is rounded the same);
    without a std (one seed), ``default_sig`` significant digits of ``value``."""
    if std is not None and np.isfinite(std) and std > 0:
        return max(0, 1 - math.floor(math.log10(std)))
    if value is not None and np.isfinite(value) and value != 0:
        return max(0, default_sig - 1 - math.floor(math.log10(abs(value))))
    return default_sig


def format_value(mean: float, std: float | None = None, scale: float = 1.0, integers: bool = False) -> str:
    """``mean ± std`` rounded to what the std supports (``scale`` multiplies both first)."""
    if mean is None or not np.isfinite(mean):
        return "–"
    m = mean * scale
    s = std * scale if std is not None and np.isfinite(std) else None
    if integers and float(m).is_integer() and (s is None or s == 0):
        return f"{int(m):,}"
    d = decimals_for(s if s else None, value=m)
    if m != 0:  # never more than four significant digits of the mean
        d = min(d, max(0, 3 - math.floor(math.log10(abs(m)))))
    if abs(m) >= 1e4 and (s is None or d == 0):
        text = f"{m:,.0f}"
    else:
        text = f"{m:.{d}f}"
    if s is None:
        return text
    return f"{text} ± {s:.{d}f}"
