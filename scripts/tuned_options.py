"""Print the `--set` arguments of the configuration `bench tune` chose for one method, for the run
scripts whose ablations and controls run at it (scripts/vi_runs.sh):

    .venv/bin/python scripts/tuned_options.py TUNING_RESULTS SUITE PROFILE METHOD MODEL [--set KEY=VALUE ...]

e.g. `scripts/tuned_options.py docs/tuning mnist_rotated quick pbn lenet_300_100` prints
`--set pbn.beta_start=0.01 --set pbn.rho_lr=0.05`. METHOD may name the tune of another objective as
`bench tune` stores it (``"ssvi[epochs=60]"``): its fixed options are printed before its choice
(`--set ssvi.epochs=60 --set ssvi.prior_scale=0.005 --set ssvi.rho_lr=0.05`). Reads `<TUNING_RESULTS>/<SUITE>/tuning/<PROFILE>.json`
(bench/tuning.py), or the kept archive's copy of it. Exit 2 when the method has no choice there, or
when its choice is not among fits that pass their validity checks (not a setting to run ablations at),
or when it was made at another training budget than the profile's now (a choice at 10 epochs is not
one at 15). ``--set`` gives the options the run will train with, as `bench run` takes them: the
budget is compared with the profile's under them (a choice tuned with `--set train.epochs=30` is one
for a run with the same `--set`)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    sets = argv[5:]
    if len(argv) < 5 or len(sets) % 2 or any(flag != "--set" for flag in sets[::2]):
        print(__doc__, file=sys.stderr)
        return 2
    results, suite, profile, method, model = argv[:5]
    sets = sets[1::2]
    from bench.tuning import budget_difference, stored_choice, tuning_path

    path = tuning_path(results, suite, profile)
    if not path.is_file():
        print(f"tuned_options: no tuning stored at {path} (python -m bench tune --suite {suite} --profile {profile} "
              f"--out {results})", file=sys.stderr)
        return 2
    choice = stored_choice(results, suite, profile, method, model)
    if choice is None:
        print(f"tuned_options: {path} has no choice for {method} on {model}", file=sys.stderr)
        return 2
    if not choice.get("chosen_among_valid", True):
        print(f"tuned_options: the choice for {method} on {model} in {path} is not among fits that pass their "
              "validity checks", file=sys.stderr)
        return 2
    differs = budget_difference(results, suite, profile, method, sets)
    if differs:
        print(f"tuned_options: the choice for {method} on {model} in {path} was made at another training budget: "
              f"{differs}; rerun python -m bench tune --suite {suite} --profile {profile}"
              + "".join(f" --set {s}" for s in sets), file=sys.stderr)
        return 2
    from bench.tuning import entry_method, stored_entry

    entry = stored_entry(results, suite, profile, method)  # METHOD may name another objective: ssvi[epochs=60]
    name, fixed = entry_method(method, entry), dict(entry.get("fixed") or {})
    print(" ".join(f"--set {name}.{k}={v}" for k, v in {**fixed, **choice["chosen"]}.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
