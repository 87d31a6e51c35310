"""The CIFAR-10-C quick-profile table of the README and docs/ssvi.md, from the results store:
clean and corrupted (mean over the 95 corruption x severity cells) accuracy / NLL / Brier / ECE,
corrupted accuracy per severity, stochastic parameters and train time, mean ± std over seeds.
Only seeds with every cell count. One row per (method, config).

Run from the repository root:
  .venv/bin/python benchmarks/cifar10c_table.py --seeds 0,1,2                       # every method
  .venv/bin/python benchmarks/cifar10c_table.py --seeds 0 --methods deterministic,mfvi,ssvi
"""
import argparse
import statistics

from bench.store import load_records

N_CELLS = 95  # 19 corruptions x 5 severities
ORDER = ["deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi", "ssvi", "subnet_laplace",
         "laplace_last_layer", "laplace_diag", "vdp"]
HEADER = ["method", "seeds", "clean acc", "clean NLL", "clean ECE", "corrupted acc", "corrupted NLL",
          "corrupted Brier", "corrupted ECE", "corrupted acc, severity 1 / 2 / 3 / 4 / 5", "stochastic params",
          "train time (s)"]


def mean_std(values, fmt="{:.4f}"):
    v = list(values)
    return fmt.format(v[0]) if len(v) == 1 else f"{fmt.format(statistics.mean(v))} ± {fmt.format(statistics.stdev(v))}"


def label(method: str, cfg: dict) -> str:
    if method == "ssvi":
        return f"ssvi (density {float(cfg.get('density', 0.1)):g})"
    if method == "subnet_laplace":
        from methods.subnet_laplace import SubnetLaplace
        size = cfg.get("n_subnet") or cfg.get("subnet_fraction") or SubnetLaplace.DEFAULT_SUBNET
        return f"subnet_laplace ({cfg.get('criterion')}, s {size})"
    return method


def rows(results: str, seeds: list[int], methods: list[str] | None, model: str, profile: str):
    df = load_records(results, "cifar10c")
    df = df[(df["status"] == "ok") & df["seed"].isin(seeds) & (df["model"] == model) & (df["profile"] == profile)]
    if methods:
        df = df[df["method"].isin(methods)]
    out = []
    for (method, _), g in df.groupby(["method", "config_hash"]):
        idr, sh = g[g["kind"] == "id"], g[g["kind"] == "shift"]
        complete = [s for s, n in sh.groupby("seed").size().items() if n == N_CELLS and s in set(idr["seed"])]
        if not complete:
            continue
        idr, sh = idr[idr["seed"].isin(complete)], sh[sh["seed"].isin(complete)]
        per = sh.groupby("seed")
        sev = sh.groupby(["seed", "severity"])["metrics.accuracy"].mean().groupby("severity").mean()
        out.append((method, [
            label(method, idr.iloc[0]["method_config"]), ",".join(str(int(s)) for s in sorted(complete)),
            mean_std(idr["metrics.accuracy"]), mean_std(idr["metrics.nll"]), mean_std(idr["metrics.ece"]),
            mean_std(per["metrics.accuracy"].mean()), mean_std(per["metrics.nll"].mean(), "{:.3f}"),
            mean_std(per["metrics.brier"].mean(), "{:.3f}"), mean_std(per["metrics.ece"].mean(), "{:.3f}"),
            " / ".join(f"{v:.3f}" for v in sev.values), f"{int(idr['cost.stochastic_params'].iloc[0]):,}",
            mean_std(idr["cost.train_time_s"], "{:.0f}")]))
    out.sort(key=lambda r: (ORDER.index(r[0]) if r[0] in ORDER else len(ORDER), r[1][0]))
    return [r for _, r in out]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--methods", default=None, help="comma-separated; default: all")
    p.add_argument("--model", default="resnet_small")
    p.add_argument("--profile", default="quick")
    a = p.parse_args(argv)
    table = rows(a.results, [int(s) for s in a.seeds.split(",")], a.methods.split(",") if a.methods else None,
                 a.model, a.profile)
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "|".join(" --- " for _ in HEADER) + "|")
    for r in table:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
