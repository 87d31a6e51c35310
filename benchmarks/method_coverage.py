"""Which methods have a row on a suite, and why the others have none: one table per suite.

For every registered method, on a suite and profile, from the kept records (``--results``, several
directories pooled as ``benchmarks/medical_claims.py`` pools them):

* **refused**: the suite's task is not one the method supports; the reason is the one ``python -m
  bench run`` prints when it plans the run (``Method.UNSUPPORTED``), so the table and the CLI cannot
  disagree;
* **row**: records of the configuration the profile runs (at the options a stored ``bench tune``
  chose, where one did), with their seeds and validity (``bench.validity``: a row failing its checks
  is not method evidence, whatever its numbers); a method with a tuning space
  (``bench.tuning.space_of``) that no stored ``bench tune`` chose from ran at its defaults, which
  the status says, with the tune's command: it was not tuned as the others were;
* **not run here yet**: the command that makes the row (and what it costs where a suite sharing the
  network measured it), or why it cannot run here (data that cannot be had).

Other kept configurations of the method (ablations, tuning candidates) are counted beside the row.

Run from the repository root:
  .venv/bin/python benchmarks/method_coverage.py                       # the medical suites, docs/records
  .venv/bin/python benchmarks/method_coverage.py --suite camvid_binary --results results docs/records
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import medical_claims as mc  # noqa: E402  (benchmarks/ is not a package)

DEFAULT_SUITES = ("camvid_multilabel", "camvid_binary", "chestmnist")


def method_line(df, s, profile: str, method: str, tuned: dict, df_ref=None, mixed: str = "") -> list[str]:
    """The cells of one method's line on suite ``s`` (an instance): method, in the default grid, the
    profile's row, its checks, other kept configurations, status. ``mixed``: why the stored tuning's
    choice is no verdict on the method (:func:`bench.tuning.verdict_notes`), or ""."""
    from bench.tuning import space_of
    from bench.validity import OK, marked_label, runs_validity
    from methods import METHODS

    suite = s.name
    cls = METHODS.get(method)
    grid = "yes" if method in s.default_methods else f"no (`--methods {method}`)"
    if s.task.kind not in cls.tasks:
        why = cls.UNSUPPORTED.get(s.task.kind, f"no {s.task.kind} support")
        return [method, grid, "–", "–", "–", f"refused when the run is planned ({s.task.kind}): {why}"]
    row = mc.with_tuned(mc.Row(method, method), {method: tuned})
    want = mc.profile_config(suite, profile, row)
    models = s.profiles[profile]["models"]
    sub = df[(df["suite"] == suite) & (df["profile"] == profile) & (df["method"] == method)
             & (df["status"] == "ok") & df["model"].isin(models) & (df["kind"] == "id")] if not df.empty else df
    if sub.empty:
        hit, others = sub, 0
    else:
        same = sub["method_config"].map(lambda c: mc._norm(method, c) == want).astype(bool)
        hit, others = sub[same], sub[~same]["config_hash"].nunique()
    tuned_note = " (at bench tune's choice)" if row.tuned else ""
    space = space_of(method, s)
    untuned = (f"; at the method's defaults: `bench tune` has not chosen its {', '.join(space)} here "
               f"(`python -m bench tune --suite {suite} --profile {profile} --methods {method}`), so it is not "
               f"tuned as the tuned methods are") if space and not row.tuned else ""
    if hit.empty:
        spec = mc.SUITE_SPECS.get(suite, mc.SuiteSpec(suite, profile))
        spec = mc.SuiteSpec(suite, profile, spec.cost_reference, spec.cost_note, spec.data_note)
        if spec.data_note:
            status = f"not run here: it {spec.data_note}"
        else:
            cost = mc.cost_text(df_ref, spec, [row])
            status = (f"not run here yet{tuned_note}: {mc.command(suite, profile, [row])}"
                      + (f" ({cost})" if cost else ""))
        return [method, grid, "–", "–", str(others) if others else "–", status]
    status, reasons = runs_validity(hit)
    seeds = sorted(int(x) for x in hit["seed"].unique())
    label = marked_label(str(hit["method_label"].iloc[0]), status)
    checks = "pass" if status == OK else (
        ("✗ " if status != "unchecked" else "? ") + "; ".join(dict.fromkeys(r.split(":", 1)[0] for r in reasons)))
    seeds_text = f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
    if status != OK:
        verdict = "a row, not method evidence: it fails its checks (the reasons are on the suite's board)"
    elif len(seeds) < 2:
        verdict = "a row; one seed (a claim needs two or more)"
    else:
        verdict = "a row"
    verdict += untuned + (f"; {mixed}" if mixed and row.tuned else "")
    return [method, grid, f"`{label}`{tuned_note}, {seeds_text}", checks, str(others) if others else "–", verdict]


def table(df, suite: str, profile: str, tuned: dict, df_ref=None, mixed: dict | None = None) -> list[str]:
    from bench.suites import SUITES
    from methods import METHODS

    s = SUITES.get(suite)()
    models = ", ".join(s.profiles[profile]["models"])
    spec = mc.SUITE_SPECS.get(suite)
    note = f" Cost of a missing row: {spec.cost_note}." if spec is not None and spec.cost_note else ""
    lines = [f"**{suite}** ({s.task.kind}), profile {profile}, model {models}: every registered method.{note}", "",
             "| method | in the suite's default grid | the profile's row (kept records) | checks | "
             "other kept configurations | status |",
             "| --- | --- | --- | --- | --- | --- |"]
    order = list(s.default_methods) + [m for m in METHODS.names() if m not in s.default_methods]
    for m in order:
        lines.append("| " + " | ".join(method_line(df, s, profile, m, tuned.get(m, {}), df_ref,
                                                   (mixed or {}).get(m, ""))) + " |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mc.add_results_option(p)
    p.add_argument("--suite", default=",".join(DEFAULT_SUITES),
                   help=f"comma-separated suite names (default: {','.join(DEFAULT_SUITES)})")
    p.add_argument("--profile", default="quick", help="the profile whose rows are listed (default: quick)")
    a = p.parse_args(argv)
    from bench.suites import SUITES

    suites = [s.strip() for s in a.suite.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES.names()]
    if unknown or not suites:
        print(f"method_coverage.py: unknown suite(s) {', '.join(unknown) or '(none given)'}; valid: "
              f"{', '.join(SUITES.names())}", file=sys.stderr)
        return 2
    if mc.missing_results("method_coverage.py", a.results):
        return 2
    no_profile = [s for s in suites if a.profile not in SUITES.get(s).profiles]
    if no_profile:
        print(f"method_coverage.py: suite(s) {', '.join(no_profile)} have no profile {a.profile!r}; "
              f"profiles: {', '.join(SUITES.get(no_profile[0]).profiles)}", file=sys.stderr)
        return 2
    df = mc.load(a.results, suites)
    refs = sorted({sp.cost_reference for s in suites if (sp := mc.SUITE_SPECS.get(s)) and sp.cost_reference})
    df_ref = mc.load(a.results, refs, validity=False) if refs else None
    from bench.tuning import chosen_options, verdict_notes

    choices, mixed = chosen_options(a.results), verdict_notes(a.results, df)
    out = []
    for s in suites:
        out += table(df, s, a.profile, mc.tuned_choices(choices, s, a.profile), df_ref,
                     mc.tuned_choices(mixed, s, a.profile)) + [""]
    out += ["A row is method evidence only where it passes its validity checks (bench.validity, docs/validity.md); "
            "the claims' table reads it only then. The refusals are the reasons `python -m bench run` gives when "
            "it plans the run (the method's `UNSUPPORTED`)."]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
