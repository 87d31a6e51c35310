"""The SSVI capacity experiment: is the sparse model's accuracy gap to its own dense model a
convergence gap (it closes as the budget grows) or a capacity gap (it stays or grows, and a wider
network narrows it)?

Reads the ``ssvi`` records of ``scripts/ssvi_capacity_runs.sh`` (cifar10c, quick profile, a fixed
10,000-image training subset, SSVI at 10 % and at density 1 with the same estimator, prior,
initialisation and optimisers, 12 / 36 / 72 epochs, seeds 0-2, ``resnet_small`` and its twice-as-wide
``resnet_small_x2``, sigma by Adam and by the official code's SGD with momentum) from a results folder
or a kept archive (``docs/ablations``). One row per network, sigma optimiser and budget: the
validation and clean-test accuracy of the dense and the sparse model (mean ± std over the seeds both
have) and the per-seed paired gap (sparse - dense). A row whose runs fail their validity checks is
marked (bench.validity), the reasons listed under the table.

    .venv/bin/python benchmarks/ssvi_capacity.py --results docs/ablations
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reporting.tables import mean_std_text  # noqa: E402

N_TRAIN = 10_000  # the subset every run of the experiment trains on (scripts/ssvi_capacity_runs.sh)
SPARSE, DENSE = 0.1, 1.0


def load_cells(results: str, suite: str = "cifar10c", profile: str = "quick", n_train: int = N_TRAIN) -> dict:
    """``{(model, rho_optimizer, epochs, density): {seed: run}}`` with each run's validation and clean
    test accuracy and NLL and its validity verdict, from the ssvi records trained on ``n_train``
    examples (other options at SSVI's defaults, as the script runs them)."""
    from bench.store import load_records
    from bench.validity import attach_validity
    from methods.ssvi import SSVI

    df = load_records(results, suite)
    if df.empty:
        return {}
    df = df[(df["method"] == "ssvi") & (df["profile"] == profile) & (df["status"] == "ok")]
    df = df[[isinstance(d, dict) and d.get("n_train") == n_train for d in df["data_config"]]]
    if df.empty:
        return {}
    df = attach_validity(df)
    free = ("density", "epochs", "rho_optimizer")
    cells: dict = {}
    for (model, _h, seed), g in df.groupby(["model", "config_hash", "seed"], sort=True):
        cfg = g["method_config"].iloc[0] or {}
        if any(cfg.get(k) != v for k, v in SSVI.defaults.items() if k not in free and k in cfg):
            continue
        ids, val = g[g["kind"] == "id"], g[g["kind"] == "val"]
        if ids.empty or val.empty:
            continue
        i = ids.iloc[0]
        epochs = cfg.get("epochs") or i["train_config"]["epochs"]  # None: the profile's epochs
        key = (model, str(cfg.get("rho_optimizer")), int(epochs), float(cfg.get("density")))
        cells.setdefault(key, {})[int(seed)] = {
            "test_acc": float(i["metrics.accuracy"]), "test_nll": float(i["metrics.nll"]),
            "val_acc": float(val.iloc[0]["metrics.accuracy"]), "val_nll": float(val.iloc[0]["metrics.nll"]),
            "validity": i["validity"] if isinstance(i["validity"], dict) else {}, "seed": int(seed)}
    return cells


def _signed(values: list[float]) -> str:
    """``+m ± s`` (the sign on the mean only)."""
    import statistics

    return f"{values[0]:+.4f}" if len(values) == 1 else f"{statistics.mean(values):+.4f} ± {statistics.stdev(values):.4f}"


def _verdict(runs: list[dict]) -> tuple[str, str]:
    """(" ✗" / " ?" / "", the failing checks with their seeds) of ``runs``: bench.validity's
    :func:`runs_validity` and :func:`marked_label`, as every board marks a row."""
    import pandas as pd

    from bench.validity import marked_label, runs_validity

    status, texts = runs_validity(pd.DataFrame({"seed": [r["seed"] for r in runs], "validity": [r["validity"] for r in runs],
                                                "validity.status": [r["validity"].get("status") for r in runs]}))
    return marked_label("", status), "; ".join(texts) or "no reason recorded"


def capacity_table(cells: dict) -> str:
    """The markdown table (rows: network, sigma optimiser, budget) with the validity notes under it."""
    head = ["| network | sigma optimiser | epochs | seeds | dense val acc | 10 % val acc | dense test acc | "
            "10 % test acc | test gap (10 % - dense, paired) | val gap (paired) |",
            "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    rows, notes = [], []
    for model, opt, epochs in sorted({k[:3] for k in cells}):
        dense, sparse = cells.get((model, opt, epochs, DENSE), {}), cells.get((model, opt, epochs, SPARSE), {})
        seeds = sorted(set(dense) & set(sparse))
        if not seeds:
            continue
        d, s = [dense[k] for k in seeds], [sparse[k] for k in seeds]
        ms = lambda rs, key: mean_std_text([r[key] for r in rs], "{:.4f}")  # noqa: E731
        gap = lambda key: _signed([sparse[k][key] - dense[k][key] for k in seeds])  # noqa: E731
        (md, why_d), (ms_, why_s) = _verdict(d), _verdict(s)
        for label, mark, why in (("dense", md, why_d), ("10 %", ms_, why_s)):
            if mark:
                notes.append(f"- {model}, {opt}, {epochs} epochs, {label}{mark}: {why}")
        rows.append(f"| {model} | {opt} | {epochs} | {','.join(map(str, seeds))} | {ms(d, 'val_acc')}{md} | "
                    f"{ms(s, 'val_acc')}{ms_} | {ms(d, 'test_acc')}{md} | {ms(s, 'test_acc')}{ms_} | "
                    f"{gap('test_acc')} | {gap('val_acc')} |")
    if not rows:
        return "_No records of the capacity experiment yet: `bash scripts/ssvi_capacity_runs.sh`._"
    text = "\n".join(head + rows)
    if notes:
        text += ("\n\n_✗: fails its validity checks, ?: could not be checked (bench.validity): not evidence on "
                 "SSVI's uncertainty; the reasons say whether its accuracy can still answer the capacity "
                 "question (a near-chance fit cannot)._\n\n" + "\n".join(notes))
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="results", help="a results folder or a kept archive (docs/ablations)")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--n-train", type=int, default=N_TRAIN)
    args = ap.parse_args(argv)
    print(capacity_table(load_cells(args.results, profile=args.profile, n_train=args.n_train)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
