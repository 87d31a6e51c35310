"""scripts/tuned_options.py: the `--set` arguments of the configuration `bench tune` chose, which
scripts/vi_runs.sh runs PBN's and mean-field VI's ablations and controls at; a choice that is not
among fits passing their validity checks, or none, is exit 2 (no ablation grid at an unverified
setting)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tuned_options.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def _store(root: Path, choices: dict) -> None:
    path = root / "mnist_rotated" / "tuning" / "quick.json"
    path.parent.mkdir(parents=True)
    for cs in choices.values():
        for c in cs:
            c.setdefault("chosen_config_hash", "0123456789")
    path.write_text(json.dumps({"suite": "mnist_rotated", "profile": "quick",
                                "methods": {m: {"choices": cs} for m, cs in choices.items()}}))


def test_prints_the_chosen_options_and_refuses_an_unverified_or_missing_choice(tmp_path):
    _store(tmp_path, {
        "pbn": [{"model": "lenet_300_100", "chosen": {"beta_start": 0.01, "rho_lr": 0.05}, "chosen_among_valid": True}],
        "mc_dropout": [{"model": "lenet_300_100", "chosen": {"p": 0.1}, "chosen_among_valid": False}],
    })
    ok = _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100")
    assert ok.returncode == 0 and ok.stdout.split() == ["--set", "pbn.beta_start=0.01", "--set", "pbn.rho_lr=0.05"]
    bad = _run(tmp_path, "mnist_rotated", "quick", "mc_dropout", "lenet_300_100")
    assert bad.returncode == 2 and "validity" in bad.stderr and not bad.stdout
    assert _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet5").returncode == 2
    assert _run(tmp_path, "mnist_rotated", "paper", "pbn", "lenet_300_100").returncode == 2


def test_the_kept_tuning_gives_pbn_a_verified_configuration():
    """The kept rotated-MNIST tuning (docs/tuning), which scripts/vi_runs.sh reads, has one."""
    root = Path(__file__).resolve().parents[1] / "docs" / "tuning"
    out = _run(root, "mnist_rotated", "quick", "pbn", "lenet_300_100")
    assert out.returncode == 0 and out.stdout.startswith("--set pbn.")
