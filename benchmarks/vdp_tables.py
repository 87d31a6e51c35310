"""The VDP++ tables of docs/vdp.md, generated from the results store (issue: "VDP++ as its
equations say").

Tables (markdown on stdout), each from ``results/<suite>/records`` of one model:
  main      the controls (the shared SGD MAP network, the deterministic network trained with
            VDP++'s optimiser / rate / cross-entropy, full mean-field VI), the KL-weight sweep
            with its validation NLL (the choice of bench/selection.py marked), and the ablations
            at the chosen KL weight: eq. 11's Gaussian (without and with a floor), bare
            cross-entropy, one sigma per weight, rho at the means' rate; sigma at
            initialisation and after training and whether it converged.

Run from the repository root:
  .venv/bin/python benchmarks/vdp_tables.py --suite mnist_noise --model lenet_300_100 --table main
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from bench.checkpoints import load_torch  # noqa: E402
from bench.selection import choose_on_validation  # noqa: E402
from vi_tables import Runs, cfg_of, ms, paired, render, table_cli  # noqa: E402

from bench.config import method_label  # noqa: E402
from methods import METHODS  # noqa: E402

ABLATIONS = [({"likelihood": "gaussian", "var_floor": 0.0}, "eq. 11 Gaussian, no floor"),
             ({"likelihood": "gaussian", "var_floor": 0.01}, "eq. 11 Gaussian, floor 1e-2 (the old default)"),
             ({"ce_variance_term": False}, "bare cross-entropy (no variance term)"),
             ({"sigma_per": "weight"}, "one sigma per weight"),
             ({"rho_lr": 0.001}, "rho at the means' rate (1e-3)")]
DEFAULTS = {"likelihood": "cross_entropy", "var_floor": 0.0, "ce_variance_term": True, "sigma_per": "unit",
            "rho_lr": 0.01}


def vdp_rows(runs: Runs, h: str) -> pd.DataFrame:
    def extract(d, seed):
        t = d.get("train") or {}
        travel = t.get("rho_adam_travel_ratio")
        if travel is None and d.get("sigma_final"):
            travel = travel_from_checkpoint(runs, h, seed)
        return {"s0": (d.get("sigma_init") or {}).get("median"), "s1": (d.get("sigma_final") or {}).get("median"),
                "rel": t.get("sigma_last_epoch_rel_change"), "snr1": d.get("frac_weights_snr_below_1"),
                "travel": travel, "vauroc": _col(runs.df, h, seed, "ood", "metrics.auroc_vdp_variance")}

    return runs.per_seed_with(h, extract)


def travel_from_checkpoint(runs: Runs, h: str, seed: int):
    """``rho_adam_travel_ratio`` (bench/subnet/sigma_stats.py) of a record written before the
    diagnostic existed, from its fitted checkpoint's rho and its training configuration."""
    import math

    import torch

    from bench.subnet.sigma_stats import adam_travel_ratio
    from bench.training import TrainConfig

    rec = runs.df[(runs.df["config_hash"] == h) & (runs.df["seed"] == seed) & (runs.df["kind"] == "id")].iloc[0]
    cfg = cfg_of("vdp", rec["method_config"])
    from bench.store import ResultsStore

    path = ResultsStore(runs.results).fitted_checkpoint(rec)
    if rec["method"] != "vdp" or cfg.get("rho_optimizer") != "adam" or not path.exists():
        return None  # (a table's mfvi row has no VDP++ rho to measure)
    state = load_torch(path)["method"]
    rho = torch.cat([v.reshape(-1) for k, v in state["net"].items() if k.endswith("_rho")])
    train = TrainConfig.from_dict(rec["train_config"])
    train = train.replace(epochs=int(cfg["epochs"] or train.epochs))
    steps = math.ceil(int(state["meta"]["num_train"]) / train.batch_size)
    return adam_travel_ratio(float(cfg["rho_init"]), rho, float(cfg["rho_lr"]), train, steps)


def _col(df, h, seed, kind, col):
    r = df[(df["config_hash"] == h) & (df["seed"] == seed) & (df["kind"] == kind)]
    return float(r[col].iloc[0]) if not r.empty and col in r and pd.notna(r[col].iloc[0]) else float("nan")


def chosen_kl(runs: Runs):
    try:
        choices = choose_on_validation(runs.all[runs.all["status"] == "ok"], "vdp", ["kl_weight"], model=runs.model)
    except Exception:  # noqa: BLE001 - no sweep
        return None
    for c in choices:
        cfg = cfg_of("vdp", runs.df.loc[runs.df["config_hash"] == c["chosen_config_hash"], "method_config"].iloc[0]
                     if (runs.df["config_hash"] == c["chosen_config_hash"]).any() else {})
        if all(cfg.get(k) == v for k, v in DEFAULTS.items()):
            return c
    return None


def table_main(runs: Runs) -> list[list[str]]:
    header = ["method", "seeds", "val NLL", "ID acc", "ID NLL", "ID ECE", "noise acc", "noise NLL", "OOD AUROC (entropy)",
              "OOD AUROC (variance)", "sigma median: init -> final", "last-epoch Δsigma", "rho travel / Adam bound",
              "|mu| < sigma",
              "Δ noise NLL vs Adam control"]
    rows = []
    ctrl_h = runs.configs("deterministic", optimizer="adam")
    ctrl = vdp_rows(runs, ctrl_h[0][0]) if ctrl_h else None

    def row(label, p, vdp=True):
        sig = "-" if not vdp else f"{p['s0'].iloc[0]:.2g} -> {ms(p['s1'], '{:.3g}')}"
        rows.append([runs.mark(label, p), ",".join(map(str, p["seed"])), ms(p["val_nll"]), ms(p["id_acc"]), ms(p["id_nll"]),
                     ms(p["id_ece"], "{:.3f}"), ms(p["sh_acc"]), ms(p["sh_nll"], "{:.3f}"), ms(p["auroc"], "{:.3f}"),
                     ms(p["vauroc"], "{:.3f}") if vdp else "-", sig,
                     ms(p["rel"], "{:.3f}") if vdp else "-", ms(p["travel"], "{:.2f}") if vdp else "-",
                     ms(p["snr1"], "{:.3f}") if vdp else "-",
                     "-" if ctrl is None or p is ctrl else paired(p, ctrl, "sh_nll", "{:+.3f}")])

    base = runs.configs("deterministic", optimizer=None, lr=None, weight_decay=None, epochs=None)
    if base:
        row("deterministic (shared MAP: SGD 0.05, weight decay 1e-5)", vdp_rows(runs, base[0][0]), vdp=False)
    if ctrl is not None:
        row("deterministic, VDP++'s recipe (Adam 1e-3, no weight decay, cross-entropy)", ctrl, vdp=False)
    for h, cfg in runs.configs("mfvi"):  # labelled as the leaderboard labels it: the options off its defaults
        row(method_label("mfvi", cfg, METHODS.get("mfvi").defaults), vdp_rows(runs, h), vdp=False)
    choice = chosen_kl(runs)
    k_chosen = choice["chosen"]["kl_weight"] if choice else None
    for h, cfg in sorted(runs.configs("vdp", **DEFAULTS), key=lambda t: float(t[1]["kl_weight"])):
        mark = " (chosen on validation)" if k_chosen is not None and float(cfg["kl_weight"]) == float(k_chosen) else ""
        row(f"vdp, kl_weight {cfg['kl_weight']:g}{mark}", vdp_rows(runs, h))
    if k_chosen is not None:
        for over, label in ABLATIONS:
            found = runs.configs("vdp", **{**DEFAULTS, **over, "kl_weight": k_chosen})
            if found:
                row(f"vdp, kl_weight {float(k_chosen):g}: {label}", vdp_rows(runs, found[0][0]))
    return [header] + rows


TABLES = {"main": table_main}


def main(argv=None) -> int:
    runs, _, table = table_cli(argv, __doc__, TABLES, suite="mnist_noise")
    print(render(table(runs)) + runs.notes_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
