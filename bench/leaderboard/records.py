"""The records of one or more results directories, as one frame for the leaderboard.

Records from different runs, machines or commits are pooled. A record stored in two
directories (a copied results folder) counts once: the key is (suite, profile, model,
config hash, seed, evaluation set), and the most recently finished copy wins.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.reporting.data import prepare
from bench.store import load_records

#: one evaluation of one fitted configuration
RECORD_KEY = ["suite", "profile", "model", "config_hash", "method_label", "seed", "kind", "shift", "severity"]


def load_runs(results_dirs) -> pd.DataFrame:
    """Prepared records (``bench.reporting.data.prepare``) of every directory, deduplicated,
    with a ``results_dir`` column. BenchError when a directory is missing or none holds records."""
    frames = []
    for d in results_dirs:
        if not Path(d).is_dir():
            raise BenchError(f"results directory {str(d)!r} does not exist")
        df = load_records(d)
        if not df.empty:
            frames.append(df.assign(results_dir=str(d)))
    if not frames:
        raise BenchError(f"no result records under {', '.join(map(str, results_dirs))} (expected "
                         f"<results>/<suite>/records/.../*.json); run a suite first")
    df = prepare(pd.concat(frames, ignore_index=True))
    key = [c for c in RECORD_KEY if c in df.columns]
    df = df.sort_values("finished_at", na_position="first", kind="stable")
    return df.drop_duplicates(subset=key, keep="last").reset_index(drop=True)


def select_runs(df: pd.DataFrame, suites=None, models=None, profiles=None, methods=None, commits=None,
                include_smoke: bool = False, exclude_labels=None) -> pd.DataFrame:
    """The ok evaluation records that pass the filters (each a list of accepted values, or None
    for all). ``commits`` match by prefix. ``exclude_labels``: configurations left out, by their
    label (``method[option=value,...]``); one that no record carries is a BenchError (a typo would
    otherwise leave it in). Smoke-profile records only with ``include_smoke`` or when ``profiles``
    names smoke. BenchError when nothing is left, naming what there is."""
    ok = df[(df["status"] == "ok") & (df["kind"] != "fit")]
    failed = df[df["status"] == "failed"]
    if ok.empty and not failed.empty:  # not "no records": every cell there failed, and that is what to say
        first = failed.iloc[0]
        raise BenchError(f"nothing to rank: the {len(failed)} record(s) are all failed cells, no evaluation "
                         f"finished (the first: {first['suite']} / {first['model']} / {first['method_label']} seed "
                         f"{first['seed']}: {first.get('error') or 'no error recorded'}); bench report lists each "
                         f"failure, and bench run --force reruns them")
    keep = pd.Series(True, index=ok.index)
    filters = {"suite": suites, "model": models, "profile": profiles, "method": methods}
    for col, values in filters.items():
        if values:
            keep &= ok[col].isin(list(values))
    if exclude_labels:
        unknown = sorted(set(exclude_labels) - set(ok["method_label"]))
        if unknown:
            raise BenchError(f"no records of the configuration(s) to exclude: {', '.join(unknown)} (labels as the "
                             f"tables show them, e.g. {sorted(set(ok['method_label']))[:3]})")
        keep &= ~ok["method_label"].isin(list(exclude_labels))
    if commits:
        commit = ok["git_commit"].astype(str)
        keep &= commit.map(lambda c: any(c.startswith(p) for p in commits))
    if not include_smoke and not (profiles and "smoke" in profiles):
        keep &= ok["profile"] != "smoke"
    out = ok[keep]
    if out.empty:
        have = ", ".join(f"{s} ({p})" for s, p in sorted(set(zip(ok["suite"], ok["profile"])))) or "none"
        raise BenchError(f"no records match the filters (smoke-profile records are left out unless "
                         f"--include-smoke); suites (profiles) with records: {have}")
    return out
