"""SSVI tables from the stored records: density sweep vs mfvi, removal-criteria ablation, and the
IoU between the sets removed by each pair of criteria at the same drop step (SSVI paper,
Appendix D.2, Tables 4-7 and Fig. 5).

Reads the ``ssvi`` / ``mfvi`` records under ``--results`` (a results folder or a kept archive such as
``docs/ablations``; written by ``python -m bench run ... --methods ssvi``); the IoUs come from the ``history`` that every
SSVI run stores in its diagnostics (at each drop step the removal set of every criterion is
computed on the same posterior, the run's own criterion drives the training).

    .venv/bin/python benchmarks/ssvi_criteria.py --results docs/ablations --epochs 15 --tuning docs/tuning

(docs/ssvi_tables_lenet_300_100.md is this output between table markers: benchmarks/refresh_tables.py
regenerates and checks it.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.reporting.tables import mean_std_text  # noqa: E402
from bench.subnet.ssvi import CRITERIA, CRITERION_LABELS  # noqa: E402
from methods.mfvi import MFVI  # noqa: E402
from methods.ssvi import SSVI  # noqa: E402


def load_runs(results: str, suite: str, model: str, profile: str, epochs: int | None = None) -> list[dict]:
    """One dict per (configuration, seed) of ``ssvi`` / ``mfvi``: config, diagnostics, cost and the
    summary metrics, from the records under ``results`` in either layout (a results folder, or a kept
    archive such as ``docs/ablations``: :func:`bench.store.load_records`). A seed enters only with its
    clean-test record and every shift set the suite has; with ``epochs``, only runs of that training
    budget (a kept archive holds the grid of more than one)."""
    import pandas as pd

    from bench.store import load_records
    from bench.validity import attach_validity

    df = load_records(results, suite)
    if df.empty:
        return []
    df = attach_validity(df)
    df = df[(df["profile"] == profile) & (df["model"] == model) & (df["status"] == "ok")
            & df["method"].isin(["ssvi", "mfvi"])]
    if epochs is not None:
        df = df[[isinstance(t, dict) and t.get("epochs") == epochs for t in df["train_config"]]]
    n_shift = len(df[df["kind"] == "shift"][["shift", "severity"]].drop_duplicates())
    cost_cols = [c for c in df.columns if c.startswith("cost.")]
    runs = []
    for (method, _h, seed), g in df.groupby(["method", "config_hash", "seed"], sort=True):
        idr, ood = g[g["kind"] == "id"], g[g["kind"] == "ood"]
        shift = g[(g["kind"] == "shift") & g["severity"].astype(bool)]
        if idr.empty or shift.empty or len(shift[["shift", "severity"]].drop_duplicates()) < n_shift:
            continue
        i = idr.iloc[0]
        runs.append({
            "method": method, "config": i["method_config"] or {}, "seed": int(seed),
            "diagnostics": i["diagnostics"] if isinstance(i["diagnostics"], dict) else {},
            "cost": {c[5:]: (int(i[c]) if float(i[c]).is_integer() else i[c]) for c in cost_cols
                     if isinstance(i[c], (int, float)) and pd.notna(i[c])},
            "validity": i["validity"] if isinstance(i["validity"], dict) else {},
            "id_acc": i["metrics.accuracy"], "id_nll": i["metrics.nll"], "id_ece": i["metrics.ece"],
            "rot_acc": float(shift["metrics.accuracy"].mean()), "rot_nll": float(shift["metrics.nll"].mean()),
            "rot_ece": float(shift["metrics.ece"].mean()),
            "auroc": float(ood["metrics.auroc"].iloc[0]) if not ood.empty else float("nan"),
        })
    return runs


def _lab(c: str) -> str:
    """A criterion's label for a markdown cell (its |...| must not split the cell)."""
    return CRITERION_LABELS[c].replace("|", "\\|")


def _marked(label: str, g: list[dict], notes: list[str]) -> str:
    """``label`` with ✗ (or ?) when a seed of the group fails its validity checks (bench.validity), the
    reasons (:func:`bench.validity.runs_validity`) appended to ``notes`` (printed under the table)."""
    import pandas as pd

    from bench.validity import marked_label, runs_validity

    status, texts = runs_validity(pd.DataFrame({"seed": [r["seed"] for r in g], "validity": [r["validity"] for r in g],
                                                "validity.status": [r["validity"].get("status") for r in g]}))
    out = marked_label(label, status)
    if out != label:
        notes.append(f"- {out}: " + ("; ".join(texts) or "no reason recorded"))
    return out


def _with_notes(table: list[str], notes: list[str]) -> str:
    if not notes:
        return "\n".join(table)
    return "\n".join(table + ["", "_✗: fails its validity checks (bench.validity): not method evidence._", ""] + notes)


def default_bases() -> dict:
    """The options a row is "at" without ``--tuning``: the plugins' defaults (with it, the configuration
    `bench tune` chose among fits that pass their checks, :func:`tuned_bases`, as benchmarks/vi_tables.py's
    rows)."""
    return {"ssvi": dict(SSVI.defaults), "mfvi": dict(MFVI.defaults)}


def tuned_bases(tuning: str, suite: str, profile: str, model: str, objective: dict | None = None) -> dict:
    """``{method: defaults updated with the stored choice}`` for the tables' objective (the profile's, or
    ``objective``'s: ``{"ssvi": {"epochs": 60}}``, its fixed options and its tune's choice), the options
    another stored objective holds fixed at the profile's values (:func:`bench.tuning.objective_options`);
    a method without a choice made among valid fits keeps its defaults."""
    from bench.tuning import objective_options

    objective = objective or {}
    return {method: {**cls.defaults, **objective_options(tuning, suite, profile, method, model, objective.get(method))}
            for method, cls in (("ssvi", SSVI), ("mfvi", MFVI))}


def of_objective(runs: list[dict], objective: dict, others: dict) -> list[dict]:
    """The runs a table of one objective holds: with ``objective`` (``{"ssvi": {"epochs": 60}}``) only the
    named methods' runs at its fixed options; without, every run but those at the fixed options of another
    stored objective (``others``: ``{method: [fixed, ...]}``), which its own tables show."""
    def at(r, fixed):
        return all(r["config"].get(k) == v for k, v in fixed.items())

    if objective:
        return [r for r in runs if r["method"] in objective and at(r, objective[r["method"]])]
    return [r for r in runs if not any(at(r, f) for f in others.get(r["method"], []))]


def _is_default(cfg: dict, defaults: dict, free: tuple[str, ...]) -> bool:
    return all(cfg.get(k) == v for k, v in defaults.items() if k not in free)


def _ms(vals: list[float], fmt: str) -> str:
    return mean_std_text(vals, "{:" + fmt + "}")


def density_table(runs: list[dict], bases: dict) -> str:
    rows, notes = [], []
    mf = [r for r in runs if r["method"] == "mfvi" and _is_default(r["config"], bases["mfvi"], ())]
    groups: dict = {}
    for r in runs:
        if r["method"] == "ssvi" and _is_default(r["config"], bases["ssvi"], ("density",)):
            groups.setdefault(float(r["config"]["density"]), []).append(r)
    out = ["| method | density | seeds | ID acc | ID NLL | ID ECE | rotation acc | rotation NLL | rotation ECE | "
           "OOD AUROC | stochastic params | variational state (B) | train FLOPs vs dense VI | fit time (s) |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, density, g in ([("mfvi", 1.0, mf)] if mf else []) + [("ssvi", d, groups[d]) for d in sorted(groups)]:
        g = sorted(g, key=lambda r: r["seed"])
        c = g[0]["cost"]
        flops = c.get("train_flops_ratio_vs_dense_vi")
        rows.append(f"| {_marked(name, g, notes)} | {density:g} | {','.join(str(r['seed']) for r in g)} | "
                    f"{_ms([r['id_acc'] for r in g], '.4f')} | {_ms([r['id_nll'] for r in g], '.4f')} | "
                    f"{_ms([r['id_ece'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                    f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                    f"{_ms([r['auroc'] for r in g], '.3f')} | {c.get('variational_params', c.get('stochastic_params', 0)):,} | "
                    f"{c.get('variational_state_bytes', 0):,} | {'1' if flops is None else format(flops, '.3f')} | "
                    f"{_ms([r['cost'].get('fit_time_s', float('nan')) for r in g], '.0f')} |")
    return _with_notes(out + rows, notes)


def criteria_table(runs: list[dict], density: float, bases: dict) -> str:
    out = ["| removal criterion | seeds | ID acc | ID NLL | rotation acc | rotation NLL | rotation ECE | OOD AUROC |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes: list[str] = []
    for c in CRITERIA:
        g = [r for r in runs if r["method"] == "ssvi" and r["config"]["criterion"] == c
             and float(r["config"]["density"]) == density and _is_default(r["config"], bases["ssvi"], ("criterion", "density"))]
        g = sorted(g, key=lambda r: r["seed"])
        if not g:
            continue
        out.append(f"| {_marked(_lab(c) + (' (default)' if c == SSVI.defaults['criterion'] else ''), g, notes)} | "
                   f"{','.join(str(r['seed']) for r in g)} | {_ms([r['id_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['id_nll'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                   f"{_ms([r['auroc'] for r in g], '.3f')} |")
    return _with_notes(out, notes)


def variants_table(runs: list[dict], bases: dict) -> str:
    """Every other SSVI configuration (options away from the defaults besides density / criterion)."""
    out = ["| variant (`--set <method>.…`) | seeds | ID acc | ID NLL | rotation acc | rotation NLL | rotation ECE | OOD AUROC | mean sigma |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    groups: dict = {}
    notes: list[str] = []
    for r in runs:
        defaults = bases["ssvi"] if r["method"] == "ssvi" else bases["mfvi"]
        if _is_default(r["config"], defaults, ("density", "criterion") if r["method"] == "ssvi" else ()):
            continue
        diff = ", ".join(f"{k}={v}" for k, v in sorted(r["config"].items()) if v != defaults.get(k))
        groups.setdefault(f"{r['method']}: {diff}", []).append(r)
    for diff, g in sorted(groups.items()):
        g = sorted(g, key=lambda r: r["seed"])
        sig = [r["diagnostics"].get("sigma", {}).get("mean", float("nan")) for r in g]
        out.append(f"| {_marked(diff, g, notes)} | {','.join(str(r['seed']) for r in g)} | {_ms([r['id_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['id_nll'] for r in g], '.4f')} | {_ms([r['rot_acc'] for r in g], '.4f')} | "
                   f"{_ms([r['rot_nll'] for r in g], '.3f')} | {_ms([r['rot_ece'] for r in g], '.3f')} | "
                   f"{_ms([r['auroc'] for r in g], '.3f')} | {_ms(sig, '.4f')} |")
    return _with_notes(out, notes)


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


def iou_section(runs: list[dict], density: float, bases: dict) -> str:
    base = [r for r in runs if r["method"] == "ssvi" and r["seed"] == 0 and float(r["config"]["density"]) == density
            and _is_default(r["config"], bases["ssvi"], ("density",))]
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
    ap.add_argument("--epochs", type=int, default=None, help="only runs of this training budget")
    ap.add_argument("--tuning", default=None, metavar="DIR",
                    help="rows at the configuration `bench tune` chose (DIR/<suite>/tuning/<profile>.json), not the defaults")
    ap.add_argument("--objective", action="append", default=None, metavar="METHOD.OPTION=VALUE",
                    help="with --tuning: rows at a stored tune of another objective "
                         "(`bench tune --set ssvi.epochs=60`): its fixed options and its choice, the other methods' "
                         "runs left out")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)
    from bench.errors import BenchError
    from bench.tuning import entry_key, parse_objective, stored_objectives

    if args.objective and not args.tuning:
        ap.error("--objective reads the stored tunes: give --tuning DIR")
    try:
        objective = parse_objective(args.objective, args.tuning, args.suite, args.profile) if args.tuning else {}
    except BenchError as e:
        ap.error(str(e))
    bases, others = default_bases(), {}
    if args.tuning:
        bases = tuned_bases(args.tuning, args.suite, args.profile, args.model, objective)
        others = {m: stored_objectives(args.tuning, args.suite, args.profile, m) for m in ("ssvi", "mfvi")}
    runs = of_objective(load_runs(args.results, args.suite, args.model, args.profile, args.epochs), objective, others)
    budget = f", {args.epochs} epochs" if args.epochs is not None else ""
    if objective:  # the profile's epochs; the method's own options, e.g. its epochs, are the objective's
        budget = f" ({args.epochs} epochs)" if args.epochs is not None else ""
        budget += "".join(f", {m.upper()} at the objective {entry_key(m, f)}" for m, f in sorted(objective.items()))
    text = "\n\n".join([
        f"# SSVI tables: {args.suite}, {args.model}, profile {args.profile}{budget}",
        "## Density sweep: SSVI against its own dense model (density 1)"
        + ("" if objective else " and mfvi (equal epochs)"),
        density_table(runs, bases),
        f"## Removal criteria at density {args.density:g}", criteria_table(runs, args.density, bases),
        "## Other variants (density 0.1 unless listed)", variants_table(runs, bases),
        f"## IoU between the removal sets of the criteria (default run, density {args.density:g}, seed 0)",
        iou_section(runs, args.density, bases)]) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
