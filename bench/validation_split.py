"""Whether a suite's validation split is like its test split: the guard on every option chosen on it.

Every option this benchmark chooses, it chooses on the validation split: ``bench tune``'s choices
(:mod:`bench.tuning`) and, inside their fits, the temperature and the Laplace prior precision
(:data:`bench.tuning.TUNED_INSIDE`). Such a choice serves the test only where the two splits come
from one distribution. One network's NLL on two held-out sets drawn alike differs by sampling noise
only: on the kept records the MAP network's validation NLL is within 13 % of its clean test NLL on
CIFAR-10-C, Tiny-ImageNet-C and rotated MNIST (validation carved from the training images). CamVid's
official validation split is one stretch of one drive: cars are 1.8 % of its labelled pixels against
4.1 % of the test's and 6.1 % of the training's, fences and bicyclists are in every validation image
(in about a quarter and a tenth of the others), and the MAP network's validation NLL is half its
test NLL on the binary suite and one and a half times it on the multi-label one. Options chosen
there are chosen for another distribution than the test's (a validation split that rewards
confidence drives a KL weight down decade after decade), so a row at them compares the methods at
options the test may not reward: a measurement of the split, not a verdict on the method.

:func:`validation_shifts` measures it per (suite, profile, model, validation split: the suite's own,
or the one a run chose with ``data.val_sequences``) from the MAP rows' validation and clean test NLLs; :func:`split_shift_notes` names the methods whose rows stand at options chosen on
such a split (the claims and the coverage table give no verdict on them, through
:func:`bench.tuning.verdict_notes`); :func:`board_split_note` is the boards' note.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: the MAP network's validation NLL over its clean test NLL beyond which (or below whose inverse) the
#: splits are taken to differ: held-out sets drawn alike gave 0.97-1.13 on the kept records (rotated
#: MNIST's validation, the training images' tail, sits highest), CamVid's official split 0.53-1.56
RATIO_LIMIT = 1.2


@dataclass(frozen=True)
class SplitShift:
    """The MAP network's validation and clean test NLL on one (suite, profile, model, validation split)."""

    val_nll: float
    test_nll: float
    seeds: tuple
    networks: int                    # MAP configurations measured (their seeds pooled)
    reference: tuple | None = None   # the data-only reference predictor's (val, test) NLL, where recorded

    @property
    def ratio(self) -> float:
        return self.val_nll / self.test_nll

    @property
    def shifted(self) -> bool:
        return not (1 / RATIO_LIMIT <= self.ratio <= RATIO_LIMIT)

    def text(self) -> str:
        seeds = ", ".join(map(str, self.seeds))
        ref = (f"; the reference predictor, which sees no image: {self.reference[0]:.3g} vs {self.reference[1]:.3g}"
               if self.reference else "")
        nets = f", {self.networks} MAP configurations" if self.networks > 1 else ""
        return (f"the MAP network's validation NLL is {self.ratio:.2f} x its clean test NLL: {self.val_nll:.3g} vs "
                f"{self.test_nll:.3g}, seeds {seeds}{nets}{ref}; held-out sets drawn alike stay within "
                f"x{RATIO_LIMIT:g}")


def validation_shifts(df: pd.DataFrame) -> dict[tuple[str, str, str, str], SplitShift]:
    """``(suite, profile, model, split) -> SplitShift`` for every group of records with MAP rows (method
    ``deterministic`` at the profile's recipe: ``method_label`` ``deterministic`` where recorded) that
    have both a validation and a clean test NLL on some seed; the means over those (configuration,
    seed) pairs. ``split``: :func:`split_keys` ("" for the suite's own validation split). Only ok
    records count."""
    need = {"suite", "profile", "model", "method", "kind", "seed", "metrics.nll"}
    if df is None or df.empty or not need <= set(df.columns):
        return {}
    m = df[(df["method"] == "deterministic") & (df.get("status", "ok") == "ok")]
    if "method_label" in m.columns:
        m = m[m["method_label"].fillna("deterministic") == "deterministic"]
    m = m[m["kind"].isin(["val", "id"])]
    cfg = m["config_hash"] if "config_hash" in m.columns else pd.Series("", index=m.index)
    m = m.assign(_cfg=cfg.fillna(""), _split=split_keys(m))
    out = {}
    for (suite, profile, model, split), g in m.groupby(["suite", "profile", "model", "_split"], sort=True):
        per = g.groupby(["_cfg", "seed", "kind"])["metrics.nll"].mean().unstack("kind")
        if not {"val", "id"} <= set(per.columns):
            continue
        per = per.dropna(subset=["val", "id"])
        per = per[np.isfinite(per["val"]) & np.isfinite(per["id"]) & (per["id"] > 0)]
        if per.empty:
            continue
        ref = None
        if "reference.nll" in g.columns:
            r = g.groupby("kind")["reference.nll"].mean()
            if np.isfinite(r.get("val", np.nan)) and np.isfinite(r.get("id", np.nan)):
                ref = (float(r["val"]), float(r["id"]))
        seeds = tuple(sorted({int(s) for s in per.index.get_level_values("seed")}))
        out[(str(suite), str(profile), str(model), str(split))] = SplitShift(
            float(per["val"].mean()), float(per["id"].mean()), seeds,
            per.index.get_level_values("_cfg").nunique(), ref)
    return out


def val_split_of(data) -> tuple:
    """The validation split a run's data options (a record's ``data_config``, a plan's or profile's
    ``data``) chose away from the suite's own: its ``data.val_sequences``; ``()`` for the suite's own."""
    return tuple(data.get("val_sequences") or ()) if isinstance(data, dict) else ()


def split_keys(df: pd.DataFrame) -> pd.Series:
    """Per record, :func:`val_split_of` its ``data_config`` as text ("" for the suite's own): a run
    that tunes on other images measures another split."""
    if "data_config" not in df.columns:
        return pd.Series("", index=df.index)
    return df["data_config"].map(lambda c: ",".join(map(str, val_split_of(c))))


def why_text(shift: SplitShift, split: str = "") -> str:
    """Why options chosen on an unlike split are no verdict (the notes' common text)."""
    which = f"the validation split data.val_sequences={split}" if split else "the suite's validation split"
    return (f"{which} is unlike its test split ({shift.text()}): the options chosen on it are chosen for another "
            "distribution than the test's")


def split_table(df: pd.DataFrame) -> str:
    """Markdown: per (suite, profile, model) with MAP rows, the MAP network's validation and clean test
    NLL, their ratio, the reference predictor's where recorded, and whether the splits differ."""
    lines = ["| suite | profile | model | validation split | MAP seeds | validation NLL | clean test NLL | ratio | "
             "reference predictor (validation vs test NLL) | splits |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    for (suite, profile, model, split), s in validation_shifts(df).items():
        ref = f"{s.reference[0]:.3g} vs {s.reference[1]:.3g}" if s.reference else "–"
        verdict = f"**unlike** (outside x{RATIO_LIMIT:g})" if s.shifted else f"alike (within x{RATIO_LIMIT:g})"
        which = f"data.val_sequences={split}" if split else "the suite's own"
        lines.append(f"| {suite} | {profile} | {model} | {which} | "
                     f"{', '.join(map(str, s.seeds))} | {s.val_nll:.3g} | "
                     f"{s.test_nll:.3g} | {s.ratio:.2f} | {ref} | {verdict} |")
    return "\n".join(lines)
