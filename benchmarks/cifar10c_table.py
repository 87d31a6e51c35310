"""The corruption-suite tables of the README and docs/ssvi.md (CIFAR-10-C, Tiny-ImageNet-C,
ImageNet-C), from the results store: clean and corrupted (mean over every corruption x severity
cell) accuracy / NLL / Brier / ECE, corrupted accuracy per severity, for suites with a corruption-
error reference the mean corruption error (``bench.mce``: AlexNet-normalised mCE for ImageNet-C,
the unnormalised mean error for Tiny-ImageNet-C), stochastic parameters and train time, mean ± std
over seeds. Only seeds with every cell count. One row per (method, config).

Run from the repository root:
  .venv/bin/python benchmarks/cifar10c_table.py --seeds 0,1,2                       # every method
  .venv/bin/python benchmarks/cifar10c_table.py --seeds 0 --methods deterministic,mfvi,ssvi
  .venv/bin/python benchmarks/cifar10c_table.py --suite tinyimagenetc --seeds 0,1,2
"""
import argparse
import math

from bench.reporting.tables import mean_std_text as mean_std
from bench.store import load_records
from bench.validity import OK, attach_validity, marked_label, num_classes_of, runs_validity

ORDER = ["deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi", "ssvi", "subnet_laplace",
         "laplace_last_layer", "laplace_diag", "vdp"]
HEADER = ["method", "seeds", "clean acc", "clean NLL", "clean ECE", "corrupted acc", "corrupted NLL",
          "corrupted Brier", "corrupted ECE", "corrupted acc, severity 1 / 2 / 3 / 4 / 5", "stochastic params",
          "train time (s)"]


def label(method: str, cfg: dict) -> str:
    if method == "ssvi":
        return f"ssvi (density {float(cfg.get('density', 0.1)):g})"
    if method == "subnet_laplace":
        from methods.subnet_laplace import SubnetLaplace
        size = cfg.get("n_subnet") or cfg.get("subnet_fraction") or SubnetLaplace.DEFAULT_SUBNET
        return f"subnet_laplace ({cfg.get('criterion')}, s {size})"
    if method == "vdp":  # the key hyperparameter, swept and chosen on validation (docs/vdp.md)
        return f"vdp (kl_weight {float(cfg.get('kl_weight', 1.0)):g})"
    return method


def mce_reference(suite: str):
    from bench.suites import SUITES

    ref = getattr(SUITES.get(suite), "mce_reference", None)
    return None if ref is None else (None if ref == "none" else ref), ref is not None


def seed_mce(idr, sh, reference) -> float:
    """The mean corruption error of one seed (bench.mce)."""
    from bench.mce import corruption_errors

    cells: dict = {}
    for _, r in sh.iterrows():
        cells.setdefault(r["shift"], {})[float(r["severity"])] = 1.0 - float(r["metrics.accuracy"])
    return corruption_errors(1.0 - float(idr["metrics.accuracy"].mean()), cells, reference)["mce"]


def rows(results: str, seeds: list[int], methods: list[str] | None, model: str, profile: str, suite: str = "cifar10c"):
    """(table rows, one note per row that is not method evidence: its label and reasons)."""
    df = attach_validity(load_records(results, suite))
    df = df[(df["status"] == "ok") & df["seed"].isin(seeds) & (df["model"] == model) & (df["profile"] == profile)]
    if methods:
        df = df[df["method"].isin(methods)]
    # every (corruption, severity) cell any seed of the profile has: a seed counts when it has them all
    n_cells = len(df[df["kind"] == "shift"][["shift", "severity"]].drop_duplicates())
    reference, with_mce = mce_reference(suite)
    out, notes = [], []
    for (method, _), g in df.groupby(["method", "config_hash"]):
        idr, sh = g[g["kind"] == "id"], g[g["kind"] == "shift"]
        complete = [s for s, n in sh.groupby("seed").size().items() if n == n_cells and s in set(idr["seed"])]
        if not complete:
            continue
        idr, sh = idr[idr["seed"].isin(complete)], sh[sh["seed"].isin(complete)]
        per = sh.groupby("seed")
        sev = sh.groupby(["seed", "severity"])["metrics.accuracy"].mean().groupby("severity").mean()
        status, reasons = runs_validity(idr)
        name = marked_label(label(method, idr.iloc[0]["method_config"]), status)
        if status != OK:
            notes.append(f"{name}: " + "; ".join(reasons))
        out.append((method, [
            name, ",".join(str(int(s)) for s in sorted(complete)),
            mean_std(idr["metrics.accuracy"]), mean_std(idr["metrics.nll"]), mean_std(idr["metrics.ece"]),
            mean_std(per["metrics.accuracy"].mean()), mean_std(per["metrics.nll"].mean(), "{:.3f}"),
            mean_std(per["metrics.brier"].mean(), "{:.3f}"), mean_std(per["metrics.ece"].mean(), "{:.3f}"),
            " / ".join(f"{v:.3f}" for v in sev.values)]
            + ([mean_std([seed_mce(idr[idr["seed"] == s_], sh[sh["seed"] == s_], reference) for s_ in complete],
                         "{:.3f}")] if with_mce else [])
            + [f"{int(idr['cost.stochastic_params'].iloc[0]):,}", mean_std(idr["cost.train_time_s"], "{:.0f}")]))
    out.sort(key=lambda r: (ORDER.index(r[0]) if r[0] in ORDER else len(ORDER), r[1][0]))
    return [r for _, r in out], notes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--methods", default=None, help="comma-separated; default: all")
    p.add_argument("--model", default="resnet_small")
    p.add_argument("--profile", default="quick")
    p.add_argument("--suite", default="cifar10c")
    a = p.parse_args(argv)
    table, notes = rows(a.results, [int(s) for s in a.seeds.split(",")], a.methods.split(",") if a.methods else None,
                 a.model, a.profile, a.suite)
    reference, with_mce = mce_reference(a.suite)
    header = HEADER[:-2] + (["mCE (AlexNet = 1)" if reference else "mean corruption error"] if with_mce else []) + HEADER[-2:]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for r in table:
        print("| " + " | ".join(r) + " |")
    k = num_classes_of(a.suite)
    if k:  # what a uniform predictor scores, whatever the data: accuracy 1/K, NLL ln K, Brier 1 - 1/K
        acc, nll, brier = f"{1 / k:.4f}", f"{math.log(k):.3f}", f"{1 - 1 / k:.3f}"
        ref = [f"uniform predictor (1/{k} each; reference)", "–", acc, nll, "–", acc, nll, brier, "–", "–"]
        print("| " + " | ".join(ref + ["–"] * (len(header) - len(ref))) + " |")
    if notes:
        print("\n✗: fails its validity checks, ?: could not be checked (bench.validity): not method evidence.\n")
        for n in notes:
            print(f"- {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
