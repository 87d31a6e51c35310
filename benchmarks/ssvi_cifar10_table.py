"""CIFAR-10-C table for docs/ssvi.md: ssvi per density vs mfvi / deterministic (cifar10c, resnet_small, quick), from the results store.
Run from the repository root: .venv/bin/python benchmarks/ssvi_cifar10_table.py 0,1,2 (seeds)"""
import statistics
import sys

from bench.store import load_records

seeds = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "0").split(",")]
df = load_records("results", "cifar10c")
df = df[(df["status"] == "ok") & df["seed"].isin(seeds) & (df["model"] == "resnet_small") & (df["profile"] == "quick")]
df = df[df["method"].isin(["ssvi", "mfvi", "deterministic"])]


def ms(v, f="{:.4f}"):
    v = list(v)
    return f.format(v[0]) if len(v) == 1 else f"{f.format(statistics.mean(v))} ± {f.format(statistics.stdev(v))}"


rows = []
for (method, chash), g in df.groupby(["method", "config_hash"]):
    idr, sh = g[g["kind"] == "id"], g[g["kind"] == "shift"]
    if idr.empty:
        continue
    cfg = idr.iloc[0]["method_config"]
    dens = float(cfg.get("density", 1.0)) if method == "ssvi" else 1.0
    got = sorted(int(s) for s in idr["seed"])
    per = sh.groupby("seed")
    ncell = per.size().to_dict()
    if any(ncell.get(s, 0) != 95 for s in got):
        got = [s for s in got if ncell.get(s, 0) == 95]  # only seeds with every cell
        idr = idr[idr["seed"].isin(got)]
        sh = sh[sh["seed"].isin(got)]
        per = sh.groupby("seed")
    if not got:
        continue
    sev = sh.groupby(["seed", "severity"])["metrics.accuracy"].mean().groupby("severity").mean()
    rows.append([method, f"{dens:g}", ",".join(map(str, got)), ms(idr["metrics.accuracy"]), ms(idr["metrics.nll"]),
                 ms(idr["metrics.ece"]), ms(per["metrics.accuracy"].mean()), ms(per["metrics.nll"].mean(), "{:.3f}"),
                 ms(per["metrics.ece"].mean(), "{:.3f}"), " / ".join(f"{v:.3f}" for v in sev.values),
                 f"{int(idr['cost.stochastic_params'].iloc[0]):,}", ms(idr["cost.train_time_s"], "{:.0f}")])
rows.sort(key=lambda r: (r[0] != "deterministic", r[0] != "mfvi", float(r[1])))
hdr = ["method", "density", "seeds", "clean acc", "clean NLL", "clean ECE", "corrupted acc", "corrupted NLL",
       "corrupted ECE", "corrupted acc, severity 1 / 2 / 3 / 4 / 5", "stochastic params", "train time (s)"]
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join(" --- " for _ in hdr) + "|")
for r in rows:
    print("| " + " | ".join(str(c) for c in r) + " |")
