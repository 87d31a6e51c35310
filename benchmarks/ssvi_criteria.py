"""SSVI tables from the stored records: density sweep vs mfvi, removal-criteria ablation, and the
IoU between the sets removed by each pair of criteria at the same drop step (SSVI paper,
Appendix D.2, Tables 4-7 and Fig. 5).

Reads ``results/<suite>/records/<model>/{ssvi,mfvi}-*/seed*/*.json`` (written by
``python -m bench run ... --methods ssvi``); the IoUs come from the ``history`` that every
SSVI run stores in its diagnostics (at each drop step the removal set of every criterion is
computed on the same posterior, the run's own criterion drives the training).

    .venv/bin/python benchmarks/ssvi_criteria.py --results results --out docs/ssvi_tables.md
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reporting.tables import mean_std_text  # noqa: E402
from bench.subnet.ssvi import CRITERIA, CRITERION_LABELS  # noqa: E402
from methods.mfvi import MFVI  # noqa: E402
from methods.ssvi import SSVI  # noqa: E402


def load_runs(results: str, suite: str, model: str, profile: str) -> list[dict]:
    """One dict per (method dir, seed): config, diagnostics, cost and the summary metrics."""
    runs = []
    for seed_dir in sorted(glob.glob(os.path.join(results, suite, "records", model, "*", "seed*"))):
        recs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(seed_dir, "*.json")))]
        recs = [r for r in recs if r.get("profile") == profile and r.get("status", "ok") == "ok"]
        if not recs or recs[0]["method"] not in ("ssvi", "mfvi"):
            continue
        idr = [r for r in recs if r["kind"] == "id"]
        shift = [r for r in recs if r["kind"] == "shift" and r["severity"]]
        ood = [r for r in recs if r["kind"] == "ood"]
        if not idr or not shift:
            continue
        mean = lambda key: statistics.fmean(r["metrics"][key] for r in shift)  # noqa: E731
        runs.append({
            "method": recs[0]["method"], "config": recs[0]["method_config"], "seed": recs[0]["seed"],
            "diagnostics": idr[0].get("diagnostics") or {}, "cost": idr[0].get("cost") or {},
            "id_acc": idr[0]["metrics"]["accuracy"], "id_nll": idr[0]["metrics"]["nll"],
            "id_ece": idr[0]["metrics"]["ece"], "rot_acc": mean("accuracy"), "rot_nll": mean("nll"),
            "rot_ece": mean("ece"), "auroc": ood[0]["metrics"]["auroc"] if ood else float("nan"),
        })
    return runs


def _lab(c: str) -> str:
    """A criterion's label for a markdown cell (its |...| must not split the cell)."""
    return CRITERION_LABELS[c].replace("|", "\\|")


def _is_default(cfg: dict, defaults: dict, free: tuple[str, ...]) -> bool:
    return all(cfg.get(k) == v for k, v in defaults.items() if k not in free)


def _ms(vals: list[float], fmt: str) -> str:
    return mean_std_text(vals, "{:" + fmt + "}")


def density_table(runs: list[dict]) -> str:
    rows = []
    mf = [r for r in runs if r["method"] == "mfvi" and _is_default(r["config"], MFVI.defaults, ())]
    groups: dict = {}
    for r in runs:
        if r["method"] == "ssvi" and _is_default(r["config"], SSVI.defaults, ("density",)):
            groups.setdefault(float(r["config"]["density"]), []).append(r)
    out = ["| method | density | seeds | ID acc | ID NLL | ID ECE | rotation acc | rotation NLL | rotation ECE | "
           "OOD AUROC | stochastic params | variational state (B) | train FLOPs vs dense VI | fit time (s) |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, density, g in ([("mfvi", 1.0, mf)] if mf else []) + [("ssvi", d, groups[d]) for d in sorted(groups)]:
        g = sorted(g, key=lambda r: r["seed"])
        c = g[0]["cost"]
        flops = c.get("train_flops_ratio_vs_dense_vi")
        rows.append(f"| {name} | {density:g} | {','.join(str(r['seed']) for r in g)} | "
                    f"{_ms([r['id_acc'] for r in g], '.4f')} | {_ms([r['id_nll'] for r in g], '.4f')} | "
                    f"{_ms([r['id_ece'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                    f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                    f"{_ms([r['auroc'] for r in g], '.3f')} | {c.get('variational_params', c.get('stochastic_params', 0)):,} | "
                    f"{c.get('variational_state_bytes', 0):,} | {'1' if flops is None else format(flops, '.3f')} | "
                    f"{_ms([r['cost'].get('fit_time_s', float('nan')) for r in g], '.0f')} |")
    return "\n".join(out + rows)


def criteria_table(runs: list[dict], density: float) -> str:
    out = ["| removal criterion | seeds | ID acc | ID NLL | rotation acc | rotation NLL | rotation ECE | OOD AUROC |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in CRITERIA:
        g = [r for r in runs if r["method"] == "ssvi" and r["config"]["criterion"] == c
             and float(r["config"]["density"]) == density and _is_default(r["config"], SSVI.defaults, ("criterion", "density"))]
        g = sorted(g, key=lambda r: r["seed"])
        if not g:
            continue
        out.append(f"| {_lab(c)}{' (default)' if c == SSVI.defaults['criterion'] else ''} | "
                   f"{','.join(str(r['seed']) for r in g)} | {_ms([r['id_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['id_nll'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                   f"{_ms([r['auroc'] for r in g], '.3f')} |")
    return "\n".join(out)


def variants_table(runs: list[dict]) -> str:
    """Every other SSVI configuration (options away from the defaults besides density / criterion)."""
    out = ["| variant (`--set <method>.…`) | seeds | ID acc | ID NLL | rotation acc | rotation NLL | rotation ECE | OOD AUROC | mean sigma |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    groups: dict = {}
    for r in runs:
        defaults = SSVI.defaults if r["method"] == "ssvi" else MFVI.defaults
        if _is_default(r["config"], defaults, ("density", "criterion") if r["method"] == "ssvi" else ()):
            continue
        diff = ", ".join(f"{k}={v}" for k, v in sorted(r["config"].items()) if v != defaults.get(k))
        groups.setdefault(f"{r['method']}: {diff}", []).append(r)
    for diff, g in sorted(groups.items()):
        g = sorted(g, key=lambda r: r["seed"])
        sig = [r["diagnostics"].get("sigma", {}).get("mean", float("nan")) for r in g]
        out.append(f"| {diff} | {','.join(str(r['seed']) for r in g)} | {_ms([r['id_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['id_nll'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                   f"{_ms([r['auroc'] for r in g], '.3f')} | {_ms(sig, '.4f')} |")
    return "\n".join(out)


def iou_matrix(iou: dict) -> str:
    names = list(CRITERIA)
    out = ["| | " + " | ".join(_lab(n) for n in names) + " |", "| --- |" + " ---: |" * len(names)]
    for a in names:
        cells = []
        for b in names:
            v = 1.0 if a == b else iou.get(f"{a}|{b}", iou.get(f"{b}|{a}"))
            cells.append("" if v is None else f"{v:.4f}")
        out.append(f"| {_lab(a)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def iou_section(runs: list[dict], density: float) -> str:
    base = [r for r in runs if r["method"] == "ssvi" and r["seed"] == 0 and float(r["config"]["density"]) == density
            and _is_default(r["config"], SSVI.defaults, ("density",))]
    if not base:
        return "(no default SSVI run at this density)"
    hist = [h for h in base[0]["diagnostics"].get("history", []) if h.get("iou")]
    if not hist:
        return "(no drop steps recorded)"
    parts = []
    paper5 = [a for a in CRITERIA if a != "snr_exp"]
    lines = ["| drop step | progress | replaced fraction | entries dropped | mean IoU of the 10 pairs of the paper's 5 criteria |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for h in hist:
        vals = [h["iou"][f"{a}|{b}"] for i, a in enumerate(paper5) for b in paper5[i + 1:]]
        lines.append(f"| {h['step']} | {h['progress']:.3f} | {h['fraction']:.4f} | {h['dropped']:,} | {statistics.fmean(vals):.4f} |")
    parts.append("\n".join(lines))
    for label, h in (("first drop step", hist[0]), ("middle drop step", hist[len(hist) // 2]), ("last drop step", hist[-1])):
        parts.append(f"IoU of the removal sets, {label} (step {h['step']}, progress {h['progress']:.2f}):\n\n"
                     + iou_matrix(h["iou"]))
    mean_all = {k: statistics.fmean(h["iou"][k] for h in hist) for k in hist[0]["iou"]}
    parts.append("IoU averaged over all drop steps:\n\n" + iou_matrix(mean_all))
    counts = base[0]["diagnostics"].get("history", [])
    lines = ["| step | " + " | ".join(f"layer {n} active" for n in counts[0]["active"]) + " | layer new entries |",
             "| ---: |" + " ---: |" * (len(counts[0]["active"]) + 1)]
    for h in counts:
        new = h.get("new")
        lines.append(f"| {h['step']} | " + " | ".join(f"{v:,}" for v in h["active"].values())
                     + f" | {'' if new is None else ', '.join(f'{v:,}' for v in new.values())} |")
    parts.append("Active weight entries per layer at the start and after every drop-and-grow step (seed 0):\n\n"
                 + "\n".join(lines))
    return "\n\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default="results")
    ap.add_argument("--suite", default="mnist_rotated")
    ap.add_argument("--model", default="lenet_300_100")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--density", type=float, default=0.1)
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    runs = load_runs(args.results, args.suite, args.model, args.profile)
    text = "\n\n".join([
        f"# SSVI tables: {args.suite}, {args.model}, profile {args.profile}",
        "## Density sweep: SSVI against its own dense model (density 1) and mfvi (equal epochs)", density_table(runs),
        f"## Removal criteria at density {args.density:g}", criteria_table(runs, args.density),
        "## Other variants (density 0.1 unless listed)", variants_table(runs),
        f"## IoU between the removal sets of the criteria (default run, density {args.density:g}, seed 0)",
        iou_section(runs, args.density)]) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
