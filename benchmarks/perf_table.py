"""The speed table of README.md, rendered from what ``python -m bench perf --save PATH`` stored.

Every row is a ratio measured side by side in one process (``bench/perf.py``); the table says
on which machine, with how many threads and repeats, and at which commit each row ran.

Run from the repository root:
  OMP_NUM_THREADS=1 .venv/bin/python -m bench perf --repeats 7 --save docs/records/perf/cpu.json
  .venv/bin/python benchmarks/perf_table.py --file docs/records/perf/cpu.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODEL_NAMES = {"lenet_300_100": "LeNet-300-100", "lenet5": "LeNet-5"}


def conditions(r: dict) -> str:
    """What the machine did while the row's case ran (bench.perf records it since 2026-12-03): empty
    when it ran alone; named when it waited for a core, ran beside other work or was stopped (the
    limits of bench.measurement, as the leaderboard's), and when the row does not say."""
    from bench.measurement import beside_other_work, loaded_machine, stopped_too_long, waited_too_long

    if "case_run_delay_fraction" not in r and "case_paused_fraction" not in r:
        return "; load not recorded"
    out = []
    paused, delay, load = r.get("case_paused_fraction"), r.get("case_run_delay_fraction"), r.get("host_load_1m")
    if stopped_too_long(paused):
        out.append(f"**stopped {paused:.0%} of the time**")
    if waited_too_long(delay):
        out.append(f"**waited {delay:.0%} of the time for a core**")
    if r.get("case_other_cores") is not None:  # since the other processes' work is measured, the load
        # average (which counts the case's own processes, and the last case's) is not the test
        if beside_other_work(r["case_other_cores"]):
            out.append(f"**other processes kept {r['case_other_cores']:.2f} cores busy**")
    elif loaded_machine(load, float(r.get("threads") or 1)):
        out.append(f"**load average {load:.1f}**")
    return "; " + ", ".join(out) + " (beside other work: not a clean ratio)" if out else ""


def render(rows: list[dict], cases: list[str] | None = None, exclude: list[str] | None = None) -> str:
    rows = [r for r in rows if (not cases or r["case"] in cases) and r["case"] not in (exclude or [])]
    out = ["| model | measure | ratio | target | met | detail | measured on |", "| --- | --- | ---: | --- | --- | --- | --- |"]
    for r in rows:
        ratio = "-" if r["ratio"] != r["ratio"] else f"{r['ratio']:.3f}"  # NaN: a peer not installed
        target = "-" if r["op"] == "skip" else f"{r['op']} {r['target']}"
        # "skip": a peer not installed (no ratio), or a reference row without a target
        met = ("skipped" if ratio == "-" else "-") if r["op"] == "skip" else ("yes" if r["ok"] else "**no**")
        where = (f"{r['device']}, {r['threads']} thread(s), median of {r['repeats']}, {r['at'][:10]} "
                 f"({r['git_commit'][:7]}){conditions(r)}")
        out.append(f"| {MODEL_NAMES.get(r['model'], r['model'])} | {r['measure']} | {ratio} | {target} | {met} | "
                   f"{r['detail']} | {where} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", default="docs/records/perf/cpu.json")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: every stored row)")
    p.add_argument("--exclude-cases", default=None, help="comma-separated case names to leave out")
    a = p.parse_args(argv)
    path = Path(a.file)
    if not path.exists():
        print(f"no stored perf rows at {path}: run `python -m bench perf --save {path}` first", file=sys.stderr)
        return 2
    print(render(json.loads(path.read_text())["rows"], a.cases.split(",") if a.cases else None,
                 a.exclude_cases.split(",") if a.exclude_cases else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
