"""How long a run grid takes, from the times stored in its records (no timing by hand).

For every cell of ``python -m bench run --suite S --profile P`` (the suite's default methods at
the profile's options, each model's own where the profile gives some, its models and seeds) it
adds the fit time, the prediction time of every evaluation set (per-example time x examples) and,
once per (model, seed), the training time of the MAP network the methods share. Cells without
records are listed as not measured. The time a record says its process was stopped
(``cost.*_paused_fraction``, bench.measurement) is left out; the rest was taken with whatever else
ran on the machine: an upper bound for an idle one.

Run from the repository root:
  .venv/bin/python benchmarks/grid_time.py --suite mnist_rotated --profile quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.store import load_records  # noqa: E402
from bench.suites import SUITES  # noqa: E402
from methods import METHODS  # noqa: E402
from vi_tables import cfg_of  # noqa: E402


def _ran(df, part: str):
    """1 - the share of ``part``'s time (fit, predict, upstream) the records say the process was
    stopped; 1 where they do not say."""
    col = f"cost.{part}_paused_fraction"
    if col not in df.columns:
        return pd.Series(1.0, index=df.index)
    return 1.0 - df[col].astype(float).fillna(0.0)


def grid_time(results: str, suite_name: str, profile: str) -> tuple[list[list[str]], float, list[str]]:
    from bench.config import resolve_plan

    suite = SUITES.get(suite_name)()
    # the cells bench run plans: each model's own options where the profile gives some (model_methods)
    plan = resolve_plan(suite, profile, list(suite.default_methods), {}, method_registry=METHODS)
    df = load_records(results, suite_name)
    if not df.empty:
        df = df[(df["status"] == "ok") & (df["profile"] == profile)]
    rows, total, missing = [], 0.0, []
    upstream: dict[str, dict[tuple[str, int], float]] = {}
    for model in plan.models:
        for method, configs in plan.methods.items():
            want = next((c for c in configs if plan.runs(model, method, c)), None)
            if want is None:  # refused on this network when planned
                continue
            g = df[(df["model"] == model) & (df["method"] == method)] if not df.empty else df
            if not g.empty:
                g = g[g["method_config"].map(lambda c, m=method: cfg_of(m, c) == want).astype(bool)]
            secs = []
            for seed in plan.seeds:
                s = g[g["seed"] == seed] if not g.empty else g
                idr = s[s["kind"] == "id"] if not s.empty else s
                if idr.empty:
                    missing.append(f"{model} {method} seed {seed}")
                    continue
                secs.append(float(idr["cost.fit_time_s"].iloc[0]) * _ran(idr, "fit").iloc[0]
                            + float((s["cost.predict_time_per_example_s"] * s["n"] * _ran(s, "predict")).sum()))
                up = idr["cost.train_time_s"].iloc[0] - idr["cost.fit_time_s"].iloc[0]
                upstream.setdefault(method, {})[(model, seed)] = float(up) * _ran(idr, "upstream").iloc[0]
            if secs:
                rows.append([model, method, str(len(secs)), f"{sum(secs) / 60:.1f}"])
                total += sum(secs)
    # the MAP networks, each once: the deep ensemble's members include the other methods' MAP
    # network of every seed (members seed x M + m, m = 0 .. M-1: seed s's own for s < M)
    maps = upstream.get("deep_ensemble") or upstream.get("deterministic") or {}
    total += sum(maps.values())
    return rows, total, missing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results")
    p.add_argument("--suite", default="mnist_rotated")
    p.add_argument("--profile", default="quick")
    a = p.parse_args(argv)
    rows, total, missing = grid_time(a.results, a.suite, a.profile)
    print("| model | method | seeds measured | fit + evaluation (min) |\n| --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nTotal, with each MAP network's training counted once: {total / 3600:.1f} h"
          + (f"; not measured: {len(missing)} cell(s) ({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''})"
             if missing else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
