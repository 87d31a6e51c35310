"""Print the value of one swept option chosen on the validation split (bench.selection), for the
run scripts whose later runs use it (scripts/vi_runs.sh, scripts/vdp_runs.sh):

    .venv/bin/python scripts/chosen_on_validation.py RESULTS SUITE METHOD OPTION MODEL MIN_CANDIDATES

The choice is that of the first group of configurations (same other options) with at least
MIN_CANDIDATES swept values: the sweep, not a later run at one value. Exit 2 when there is none."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    results, suite, method, option, model, least = argv
    from bench.selection import choose_on_validation
    from bench.store import load_records

    df = load_records(results, suite)
    df = df[df["status"] == "ok"]
    for choice in choose_on_validation(df, method, [option], model=model):
        if len(choice["candidates"]) >= int(least):
            print(choice["chosen"][option])
            return 0
    print(f"no sweep of {method}.{option} with {least} or more values on {model} under {results}/{suite}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
