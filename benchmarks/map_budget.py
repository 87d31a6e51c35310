"""Is a training budget enough for the networks a suite trains? One row per trained network of the
records (the MAP network of a seed, MC dropout's, a deep ensemble's members): its epochs, the
best validation NLL before the last fifth of them and in it, the curve's noise an epoch over its
last half and the limit the check allows the gain (2 %, or the noise of a difference of two epochs
on a noisier curve), and ``map_converged``'s verdict (bench.validity); beside them the
validation NLL after the last epoch, that of the network every method of the seed is built on
(whether a longer budget gives a better network is read there). The column "vs the epoch the fifth
begins" is the measure the check used before it compared with the best so far, kept to show which
networks that measure failed on noise.

    python benchmarks/map_budget.py --results docs/ablations --suite mnist_rotated --model lenet_300_100

A network appears once however many records stand on it (the same validation curve); the same seed
trained on two machines gives two curves, hence two rows (the date tells them apart).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.budget import training_data  # noqa: E402
from bench.store import load_records  # noqa: E402
from bench.validity import CHECKS, PLATEAU_TAIL  # noqa: E402

OWN_NETWORK = ("mc_dropout", "deep_ensemble")  # methods that train their own networks


def networks(df, model: str, methods) -> list[dict]:
    """The distinct trained networks of ``df``'s clean-test records of ``model``."""
    rows, seen = [], set()
    df = df[(df["kind"] == "id") & (df["model"] == model)]
    for _, r in df.sort_values(["finished_at"]).iterrows():
        logs = (r["diagnostics"] or {}).get("map_training") if isinstance(r["diagnostics"], dict) else None
        if logs is None:
            continue
        own = r["method"] in OWN_NETWORK
        if methods and (r["method"] if own else "MAP") not in methods:
            continue
        who = r["method_label"] if own else "MAP"
        for i, log in enumerate([logs] if isinstance(logs, dict) else logs):
            curve = tuple((log or {}).get("val_nll") or ())
            if not curve or any(v is None for v in curve) or (who, curve) in seen:
                continue
            seen.add((who, curve))
            res = CHECKS.get("map_converged").fn({"diagnostics": {"map_training": log}})
            num = res.numbers  # the check's own best-before / best-in-the-tail values
            if not num:  # too few epochs for the check: nothing to show
                continue
            t0 = max(1, int(round(len(curve) * (1 - PLATEAU_TAIL))))  # where the tail begins, as the check cuts it
            data = training_data(r.get("suite"), r.get("data_config"))  # the data options that shape the network
            n_train = data.pop("n_train", None)
            rows.append({"network": who + (f" member {i}" if isinstance(logs, list) and len(logs) > 1 else ""),
                         "train": "all" if n_train is None else f"{int(n_train):,}", "data": data,
                         "epochs": len(curve),
                         "seed": int(r["seed"]), "date": str(r["finished_at"])[:10],
                         "cpu": (log or {}).get("cpu") or "–",  # where it was trained (older logs lack it)
                         "before": num["val_nll_best_before_tail"], "tail": num["val_nll_tail_best"],
                         "gain": num["tail_improvement"], "last": curve[-1],
                         "noise": num.get("val_nll_noise"), "limit": num["improvement_limit"],
                         "gain_at_start": (curve[t0 - 1] - num["val_nll_tail_best"]) / curve[t0 - 1],
                         "status": res.status})
    return sorted(rows, key=lambda x: (x["network"], x["train"], repr(sorted(x["data"].items())), x["epochs"],
                                       x["seed"], x["date"]))


def markdown(rows: list[dict]) -> str:
    out = ["| network | training images (and the training data options that differ between rows) | epochs | seed | "
           "fitted | CPU | best val NLL before the last fifth | best in it | improvement on the best before | "
           "vs the epoch the fifth begins (earlier measure) | "
           "noise an epoch (last half) | limit | map_converged | val NLL after the last epoch |",
           "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    keys = {k for r in rows for k in r["data"]}
    varying = sorted(k for k in keys if len({repr(r["data"].get(k)) for r in rows}) > 1)  # another recipe's
    for r in rows:
        noise = "–" if r["noise"] is None else f"{r['noise']:.1%}"  # too few epochs to estimate: the 2 % limit
        # an option a row leaves unset reads as the suite's default (e.g. CamVid's published validation split)
        train = ", ".join([r["train"]] + [f"{k}={'default' if r['data'].get(k) is None else r['data'][k]}"
                                          for k in varying])
        out.append(f"| {r['network']} | {train} | {r['epochs']} | {r['seed']} | {r['date']} | {r['cpu']} "
                   f"| {r['before']:.4f} | {r['tail']:.4f} | {r['gain']:+.1%} | {r['gain_at_start']:+.1%} "
                   f"| {noise} | {r['limit']:.1%} | {r['status']} | {r['last']:.4f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", action="append", required=True, help="results folder(s) (repeatable)")
    ap.add_argument("--suite", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--networks", default="", help="comma-separated: MAP, mc_dropout, deep_ensemble (default: all)")
    ap.add_argument("--min-epochs", type=int, default=5, help="leave out shorter trainings (default 5: the check's minimum)")
    a = ap.parse_args(argv)
    import pandas as pd

    df = pd.concat([load_records(r, a.suite) for r in a.results], ignore_index=True)
    if df.empty:
        print(f"no records of {a.suite} under {', '.join(a.results)}", file=sys.stderr)
        return 2
    rows = [r for r in networks(df, a.model, [m for m in a.networks.split(",") if m]) if r["epochs"] >= a.min_epochs]
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
