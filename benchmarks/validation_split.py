"""Whether each suite's validation split is like its test split, from the MAP rows of the kept records
(``bench.validation_split``; docs/validity.md, "The validation split against the test split").

    .venv/bin/python benchmarks/validation_split.py --results docs/records --results docs/tuning
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.errors import BenchError  # noqa: E402
from bench.leaderboard import load_runs  # noqa: E402
from bench.validation_split import split_table  # noqa: E402


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", action="append", required=True, help="a results directory (repeatable)")
    a = ap.parse_args(argv)
    try:
        print(split_table(load_runs(a.results)))
    except BenchError as exc:
        print(f"validation_split.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
