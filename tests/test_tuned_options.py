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


def _script(*args):
    """The script as the run scripts call it, in a process of its own."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def _run(*args):
    """The script's ``main`` in this process (what it prints and returns, as :func:`_script` gives them)."""
    import contextlib
    import importlib.util
    import io
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("tuned_options_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(list(map(str, args)))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _store(root: Path, choices: dict, **entry) -> None:
    path = root / "mnist_rotated" / "tuning" / "quick.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for cs in choices.values():
        for c in cs:
            c.setdefault("chosen_config_hash", "0123456789")
    path.write_text(json.dumps({"suite": "mnist_rotated", "profile": "quick",
                                "methods": {m: {"choices": cs, **entry} for m, cs in choices.items()}}))


def test_prints_the_chosen_options_and_refuses_an_unverified_or_missing_choice(tmp_path):
    _store(tmp_path, {
        "pbn": [{"model": "lenet_300_100", "chosen": {"beta_start": 0.01, "rho_lr": 0.05}, "chosen_among_valid": True}],
        "mc_dropout": [{"model": "lenet_300_100", "chosen": {"p": 0.1}, "chosen_among_valid": False}],
    })
    ok = _script(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100")  # as the run scripts call it
    assert ok.returncode == 0 and ok.stdout.split() == _run(tmp_path, "mnist_rotated", "quick", "pbn",
                                                             "lenet_300_100").stdout.split()
    assert ok.returncode == 0 and ok.stdout.split() == ["--set", "pbn.beta_start=0.01", "--set", "pbn.rho_lr=0.05"]
    bad = _run(tmp_path, "mnist_rotated", "quick", "mc_dropout", "lenet_300_100")
    assert bad.returncode == 2 and "validity" in bad.stderr and not bad.stdout
    assert _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet5").returncode == 2
    assert _run(tmp_path, "mnist_rotated", "paper", "pbn", "lenet_300_100").returncode == 2


def test_a_choice_made_at_another_training_budget_is_refused(tmp_path):
    """A choice made at 10 epochs is not one for a profile that trains 15 (the quick profile's budget):
    from the budget `bench tune` stores with each entry, or, for entries of earlier code, from the
    training options their sweeps set."""
    from bench.suites import SUITES

    epochs = SUITES.get("mnist_rotated").profiles["quick"]["train"]["epochs"]
    pbn = {"pbn": [{"model": "lenet_300_100", "chosen": {"beta_start": 0.01, "rho_lr": 0.05}}]}
    for entry in ({"sets": [f"train.epochs={epochs - 5}", "models=lenet_300_100"]},
                  {"train": {"epochs": epochs - 5}, "sets": []}):
        _store(tmp_path, pbn, **entry)
        out = _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100")
        assert out.returncode == 2 and f"epochs {epochs - 5} (the profile now: {epochs})" in out.stderr and not out.stdout
    for entry in ({"sets": [f"train.epochs={epochs}"]}, {"train": {"epochs": epochs}}, {}):
        _store(tmp_path, pbn, **entry)
        assert _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100").returncode == 0
    # a choice tuned with --set train.epochs=E is one for a run with the same --set, not without it
    _store(tmp_path, pbn, train={"epochs": epochs + 5})
    assert _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100").returncode == 2
    ok = _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100", "--set", f"train.epochs={epochs + 5}")
    assert ok.returncode == 0 and ok.stdout.split() == ["--set", "pbn.beta_start=0.01", "--set", "pbn.rho_lr=0.05"]
    off = _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100", "--set", f"train.epochs={epochs + 1}")
    assert off.returncode == 2 and f"--set train.epochs={epochs + 1}" in off.stderr
    assert _run(tmp_path, "mnist_rotated", "quick", "pbn", "lenet_300_100", "train.epochs=3").returncode == 2


def test_the_kept_tuning_gives_pbn_a_verified_configuration_at_the_profiles_budget():
    """The kept rotated-MNIST tuning (docs/tuning), which scripts/vi_runs.sh reads, ran at the quick
    profile's budget and has one; the 10-epoch tuning kept beside it is refused at that budget."""
    root = Path(__file__).resolve().parents[1] / "docs"
    out = _run(root / "tuning", "mnist_rotated", "quick", "pbn", "lenet_300_100")
    assert out.returncode == 0 and out.stdout.startswith("--set pbn."), out.stderr
    old = _run(root / "tuning-10-epochs", "mnist_rotated", "quick", "pbn", "lenet_300_100")
    assert old.returncode == 2 and "epochs 10 (the profile now: 15)" in old.stderr


def test_the_tune_of_another_objective_prints_its_fixed_options_before_its_choice(tmp_path):
    """``ssvi[epochs=60]`` (a tune with ``--set ssvi.epochs=60``) gives the options a run at that
    objective needs: the fixed epochs and the choice, so an ablation grid there never trains at the
    profile's epochs with the 60-epoch choice."""
    path = tmp_path / "mnist_rotated" / "tuning" / "quick.json"
    path.parent.mkdir(parents=True)
    choice = {"model": "lenet_300_100", "chosen": {"prior_scale": 0.005, "rho_lr": 0.05}, "chosen_among_valid": True,
              "chosen_config_hash": "0123456789"}
    path.write_text(json.dumps({"suite": "mnist_rotated", "profile": "quick", "methods": {
        "ssvi[epochs=60]": {"method": "ssvi", "fixed": {"epochs": 60}, "choices": [choice]}}}))
    out = _script(tmp_path, "mnist_rotated", "quick", "ssvi[epochs=60]", "lenet_300_100")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["--set", "ssvi.epochs=60", "--set", "ssvi.prior_scale=0.005", "--set", "ssvi.rho_lr=0.05"]
    assert _run(tmp_path, "mnist_rotated", "quick", "ssvi", "lenet_300_100").returncode == 2  # the profile's: none
    kept = _run(Path(__file__).resolve().parents[1] / "docs" / "tuning", "mnist_rotated", "quick", "ssvi[epochs=60]",
                "lenet_300_100")
    assert kept.returncode == 0 and kept.stdout.split()[:2] == ["--set", "ssvi.epochs=60"], kept.stderr


def test_the_camvid_rerun_script_runs_seeds_at_the_kept_rerun_tunes_choice():
    """scripts/camvid_rerun.sh runs seeds 1-2 of a tuned method at the choice of the rerun's kept tune
    (docs/records-rerun): its --set words (split and budget) are those the tune ran with, so
    tuned_options gives VDP++'s choice under them, and refuses it at the profile's own budget."""
    import re
    import shlex

    root = Path(__file__).resolve().parents[1]
    line = next(x for x in (root / "scripts" / "camvid_rerun.sh").read_text().splitlines() if x.startswith("S=("))
    sets = shlex.split(re.fullmatch(r"S=\((.*)\)", line).group(1))
    assert sets[::2] == ["--set"] * (len(sets) // 2)
    out = _run(root / "docs" / "records-rerun", "camvid", "quick", "vdp", "unet_small", *sets)
    assert out.returncode == 0 and out.stdout.split()[0::2] == ["--set"] and "vdp.kl_weight=" in out.stdout, out.stderr
    assert _run(root / "docs" / "records-rerun", "camvid", "quick", "vdp", "unet_small").returncode == 2
