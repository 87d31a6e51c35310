"""The CUDA checks of the kept device sessions (``docs/records/device/*.json``) as markdown tables.

    .venv/bin/python benchmarks/device_table.py                    # one row per suite: its latest check
    .venv/bin/python benchmarks/device_table.py --table runs       # one row per kept device session

A suite's row is the latest kept session that checked it (sessions that skipped it because it had
passed are not rows). ``later`` says whether the latest session that kept the digests of the code
(bench.device_session.code_files) found that pass on its code or stale (passed on other code, not
checked again in that session). ``agreement`` is the CPU evaluation of the CUDA-fitted state
(bench.device_session.compare_runs): cells compared on every metric (informative networks) and on
the smooth ones only (networks at chance, whose argmax metrics are listed, not compared).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(kept: Path) -> list[dict]:
    out = []
    for p in sorted((kept / "device").glob("*.json")):
        s = json.loads(p.read_text())
        s["_file"] = p.name
        out.append(s)
    return sorted(out, key=lambda s: s.get("started_at", ""))


def _commit(s: dict) -> str:
    return (s.get("git_commit") or "unknown")[:7] + ("+dirty" if (s.get("git_commit") or "").endswith("+dirty") else "")


def _device(s: dict) -> str:
    d = s.get("device") or {}
    return f"{d.get('name', d.get('used', '?'))}, torch {d.get('torch', '?')}"


def later(summaries: list[dict], suite: str, checked_in: dict) -> str:
    """What the latest session that kept code digests says of ``suite``'s check of ``checked_in``."""
    last = next((s for s in reversed(summaries) if (s.get("code") or {}).get("digest")), None)
    if last is None:
        return "not recorded"
    if last is checked_in:
        return "this run"
    sm = ((((last.get("checks") or {}).get("suites") or {}).get(suite) or {}).get("smoke") or {})
    if sm.get("stale"):
        n = sm.get("changed_files")
        return f"stale at {last.get('run_id')}: {'?' if n is None else n} code files changed"
    if sm.get("passed_in"):  # skipped there: passed on that code
        return f"same code at {last.get('run_id')}"
    return f"not checked at {last.get('run_id')}"


def suite_rows(summaries: list[dict]) -> list[str]:
    latest: dict[str, tuple[dict, dict]] = {}
    for s in summaries:
        for suite, e in ((s.get("checks") or {}).get("suites") or {}).items():
            if "skipped" in str((e.get("smoke") or {}).get("note", "")) or (e.get("smoke") or {}).get("status") == "not run":
                continue
            latest[suite] = (s, e)
    lines = ["| suite | smoke on CUDA | CPU evaluation of the CUDA fit | cells: all metrics / smooth only | "
             "largest compared difference | outside tolerance | run | later |",
             "| --- | --- | --- | --- | ---: | --- | --- | --- |"]
    for suite in sorted(latest):
        s, e = latest[suite]
        sm, ag = e.get("smoke") or {}, e.get("agreement") or {}
        failed = [f"{m}: {v.get('why', '')[:80]}" for m, v in (sm.get("methods") or {}).items() if v.get("status") != "ok"]
        smoke = f"{sm.get('status')}: {sum(v.get('status') == 'ok' for v in (sm.get('methods') or {}).values())}" \
                f"/{len(sm.get('methods') or {})} methods" + (f" ({'; '.join(failed)})" if failed else "")
        cells = ag.get("cells") or {}
        full = sum(1 for c in cells.values() if "metrics" in c and not c.get("not_compared"))
        smooth = sum(1 for c in cells.values() if c.get("not_compared"))
        ref = ag.get("reference", "an independent CPU fit")
        worst = max((c.get("max_abs_diff") or 0.0 for c in cells.values()), default=None)
        bad = [f"{k.split('/')[1].split('[')[0]}: " + (", ".join(c.get("outside_tolerance") or []) or c.get("why", ""))
               for k, c in cells.items() if c.get("status") != "ok"]
        lines.append(f"| {suite} | {smoke} | {ag.get('status')} ({ref}) | {full} / {smooth} | "
                     f"{'' if worst is None else f'{worst:.2g}'} | {'; '.join(bad) or 'none'} | "
                     f"{s.get('run_id')} ({_commit(s)}) | {later(summaries, suite, s)} |")
    return lines


def run_rows(summaries: list[dict]) -> list[str]:
    lines = ["| run | device | commit | checks passed | stale checks | perf | grid cells run | MAP networks trained | "
             "grid status |",
             "| --- | --- | --- | --- | --- | --- | ---: | ---: | --- |"]
    for s in summaries:
        c = s.get("checks") or {}
        perf = c.get("perf") or {}
        p = perf.get("status", "")
        if perf.get("rows"):
            p = f"{sum(r.get('ok') is True for r in perf['rows'])}/{len(perf['rows'])} targets met"
        g = s.get("grid") or {}
        items = g.get("cells") or []
        maps = [i for i in items if "/map/" in i.get("cell", "")]  # MAP networks trained as items of their own
        stale = "not recorded" if "stale" not in c else ", ".join(c["stale"]) or "none"
        lines.append(f"| {s.get('run_id')} | {_device(s)} | {_commit(s)} | {c.get('passed')} | {stale} | {p} | "
                     f"{len(items) - len(maps)} | {sum(i.get('status') == 'trained' for i in maps)} | "
                     f"{str(g.get('status', ''))[:90]} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", default=str(ROOT / "docs" / "records"), help="kept records (its device/ folder)")
    ap.add_argument("--table", choices=("suites", "runs"), default="suites")
    a = ap.parse_args(argv)
    summaries = load(Path(a.kept))
    if not summaries:
        print(f"device_table.py: no kept device summary in {Path(a.kept) / 'device'}", file=sys.stderr)
        return 2
    print("\n".join(suite_rows(summaries) if a.table == "suites" else run_rows(summaries)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
