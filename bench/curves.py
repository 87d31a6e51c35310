"""The noise of a validation curve, and the gain it takes to be more than that noise.

Shared by ``map_converged`` (:mod:`bench.validity`: is one network's curve at rest?) and the budget
trials (:mod:`bench.budget`: does a longer budget give a better network?): a gain on a curve's
validation NLL counts only beyond :func:`gain_limit`, 2 %, or on a noisier curve NOISE_Z standard
deviations of the difference of two epochs' values. Pure Python.
"""
from __future__ import annotations

import math
import statistics

#: a gain of at most 2 % is at rest on any curve ...
PLATEAU_MAX_IMPROVEMENT = 0.02
#: ... or, where the curve is noisier, at most NOISE_Z standard deviations of the difference of two
#: epochs' values, its noise estimated from the second differences over the last half of the epochs
#: (at least NOISE_MIN_EPOCHS of them: a shorter stretch keeps the 2 % limit alone). One standard
#: deviation, not two: on CamVid's 12-epoch curves two let pass networks that longer budgets improved
#: (docs/validity.md, the budget trials)
NOISE_WINDOW = 0.5
NOISE_MIN_EPOCHS = 6
NOISE_Z = 1.0


def finite(v) -> float | None:
    """``v`` as a float, or None where it is not a finite number."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def curve_noise(curve) -> float | None:
    """The epoch-to-epoch noise of a validation curve (a standard deviation, in the curve's units),
    estimated from its last half (``NOISE_WINDOW``): the median absolute second difference
    ``v[e+1] - 2 v[e] + v[e-1]`` over 0.6745 sqrt(6). For independent noise of standard deviation s
    around a trend that is straight over three epochs, each second difference has standard deviation
    sqrt(6) s, and 0.6745 is the median of |N(0, 1)|; the median keeps one spike from setting it, and
    what curvature the trend still has there adds to it. None for a stretch of fewer than
    ``NOISE_MIN_EPOCHS`` epochs (too few to tell noise from the trend's bend)."""
    vals = [finite(v) for v in (curve if curve is not None else [])]
    if any(v is None for v in vals):
        return None
    window = vals[len(vals) - math.ceil(len(vals) * NOISE_WINDOW):]
    if len(window) < NOISE_MIN_EPOCHS:
        return None
    d2 = [abs(window[i + 1] - 2 * window[i] + window[i - 1]) for i in range(1, len(window) - 1)]
    return statistics.median(d2) / (0.6745 * math.sqrt(6))


def gain_limit(rel_noise: float | None) -> float:
    """The relative gain a curve with relative noise ``rel_noise`` an epoch must exceed to be more than
    its noise: 2 %, or NOISE_Z sqrt(2) times the noise where that is larger (None: 2 %)."""
    if rel_noise is None:
        return PLATEAU_MAX_IMPROVEMENT
    return max(PLATEAU_MAX_IMPROVEMENT, NOISE_Z * math.sqrt(2) * rel_noise)
