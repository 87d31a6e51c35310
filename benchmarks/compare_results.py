"""Are two results directories the same numbers? Pairs the ok records of A and B by
(suite, model, method, config hash, seed, kind, shift, severity) and prints, per suite, the
largest absolute difference of every metric; exit 1 when a pair differs by more than --tol or a
record has no partner.

    python benchmarks/compare_results.py results_a results_b [--tol 0]

Used to check that a change of the data path (e.g. streaming the evaluation sets) leaves every
number as it was.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path


def load(root: Path) -> dict:
    out = {}
    for f in Path(root).glob("*/records/*/*/seed*/*.json"):
        r = json.loads(f.read_text())
        if r.get("status") != "ok":
            continue
        key = (r["suite"], r["model"], r["method"], r["config_hash"], r["seed"], r["kind"], r["shift"], r["severity"])
        out[key] = r.get("metrics") or {}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--tol", type=float, default=0.0)
    p.add_argument("--subset", action="store_true", help="A is a rerun of some of B's cells: only A's records need partners")
    args = p.parse_args(argv)
    a, b = load(Path(args.a)), load(Path(args.b))
    only = sorted(set(a) - set(b)) if args.subset else sorted(set(a) ^ set(b))
    worst: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key in sorted(set(a) & set(b)):
        for m in set(a[key]) | set(b[key]):
            x, y = a[key].get(m), b[key].get(m)
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                d = 0.0 if x == y else math.inf
            elif math.isnan(x) and math.isnan(y):
                d = 0.0
            else:
                d = abs(x - y)
            worst[key[0]][m] = max(worst[key[0]][m], d)
    bad = False
    for suite, ms in sorted(worst.items()):
        n = sum(1 for k in set(a) & set(b) if k[0] == suite)
        top = max(ms.values()) if ms else 0.0
        bad |= top > args.tol
        print(f"{suite}: {n} record pairs, largest metric difference {top:.3g}"
              + ("" if top <= args.tol else "  <-- " + ", ".join(f"{m} {d:.3g}" for m, d in sorted(ms.items()) if d > args.tol)))
    for key in only[:20]:
        print("no partner:", key)
    return 1 if bad or only else 0


if __name__ == "__main__":
    sys.exit(main())
