"""Corruption errors (Hendrycks & Dietterich 2019, Sec. 4): CE, mCE and relative mCE.

For a classifier f, corruption c and severity s, E^f_{s,c} is the top-1 error on that cell and
E^f_clean the clean error. The corruption error normalises by AlexNet's errors:

    CE^f_c = (sum_s E^f_{s,c}) / (sum_s E^AlexNet_{s,c}),
    relative CE^f_c = (sum_s (E^f_{s,c} - E^f_clean)) / (sum_s (E^AlexNet_{s,c} - E^AlexNet_clean)),

and mCE / relative mCE average them over the 15 standard corruptions. AlexNet's errors are the
published ones, averaged over the five severities (so the sums need all five severities of a
corruption; a corruption with fewer is left out, and the table says how many entered).
Without a reference network (Tiny-ImageNet-C) the unnormalised mean error is reported
instead, as the authors' own evaluation script prints it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: AlexNet's top-1 error per ImageNet-C corruption, averaged over severities 1-5 (the published
#: reference of Hendrycks & Dietterich 2019; the values of hendrycks/robustness)
ALEXNET_ERR = {
    "gaussian_noise": 0.886428, "shot_noise": 0.894468, "impulse_noise": 0.922640,
    "defocus_blur": 0.819880, "glass_blur": 0.826268, "motion_blur": 0.785948, "zoom_blur": 0.798360,
    "snow": 0.866816, "frost": 0.826572, "fog": 0.819324, "brightness": 0.564592,
    "contrast": 0.853204, "elastic_transform": 0.646056, "pixelate": 0.717840, "jpeg_compression": 0.606500,
}
ALEXNET_CLEAN_ERR = 0.4345
SEVERITIES = (1.0, 2.0, 3.0, 4.0, 5.0)


def corruption_errors(clean_error: float, cell_errors: dict[str, dict[float, float]],
                      reference: str | None = "alexnet") -> dict[str, float]:
    """Per corruption ``ce.<c>`` (and ``rce.<c>``) and the means ``mce`` / ``relative_mce`` for
    one network (one seed). ``cell_errors[c][severity]`` = top-1 error. With ``reference=None``:
    ``ce.<c>`` = the unnormalised mean error over severities and ``mce`` their mean (all
    corruptions), ``relative_mce`` the mean of (mean error - clean error)."""
    out: dict[str, float] = {}
    ces, rces = [], []
    for c, by_sev in cell_errors.items():
        if not all(s in by_sev for s in SEVERITIES):
            continue
        mean_err = float(np.mean([by_sev[s] for s in SEVERITIES]))
        if reference == "alexnet":
            if c not in ALEXNET_ERR:
                continue  # the extra corruptions have no published AlexNet reference
            ce = mean_err / ALEXNET_ERR[c]
            rce = (mean_err - clean_error) / (ALEXNET_ERR[c] - ALEXNET_CLEAN_ERR)
        else:
            ce, rce = mean_err, mean_err - clean_error
        out[f"ce.{c}"], out[f"rce.{c}"] = ce, rce
        ces.append(ce)
        rces.append(rce)
    out["n_corruptions"] = float(len(ces))
    out["mce"] = float(np.mean(ces)) if ces else float("nan")
    out["relative_mce"] = float(np.mean(rces)) if rces else float("nan")
    return out


def corruption_error_frame(df: pd.DataFrame, reference: str | None = "alexnet") -> pd.DataFrame:
    """Per (label, seed) the :func:`corruption_errors` of the records of one suite and model
    (``kind`` id / shift, ``metrics.accuracy``), indexed like :func:`bench.reporting.data.per_seed_mean`."""
    rows, index = [], []
    ok = df[(df["status"] == "ok") & df["kind"].isin(["id", "shift"]) & df["metrics.accuracy"].notna()] \
        if "metrics.accuracy" in df.columns else df.iloc[0:0]
    for (label, seed), g in ok.groupby(["label", "seed"], sort=False):
        clean = g[g["kind"] == "id"]
        if clean.empty:
            continue
        cells: dict[str, dict[float, float]] = {}
        for _, r in g[g["kind"] == "shift"].iterrows():
            cells.setdefault(r["shift"], {})[float(r["severity"])] = 1.0 - float(r["metrics.accuracy"])
        rows.append(corruption_errors(1.0 - float(clean["metrics.accuracy"].mean()), cells, reference))
        index.append((label, seed))
    if not rows:
        return pd.DataFrame(index=pd.MultiIndex.from_arrays([[], []], names=["label", "seed"]))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["label", "seed"]))
