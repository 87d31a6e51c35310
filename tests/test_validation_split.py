"""bench.validation_split: the MAP network's validation NLL against its clean test NLL, and which rows
stand at options chosen on a validation split unlike the test split."""
import pandas as pd
import pytest

from bench.tuning import board_split_note, chooses_on_validation, split_shift_notes
from bench.validation_split import RATIO_LIMIT, validation_shifts


def records(val_nll: dict, test_nll: dict, methods=("deterministic", "pbn", "temperature_scaling", "deep_ensemble"),
            suite="cifar10c", ref=None):
    """One clean test and one validation record per method and seed; only the MAP rows' NLLs differ."""
    rows = []
    for method in methods:
        for seed in val_nll:
            base = {"suite": suite, "profile": "quick", "model": "m", "method": method, "method_label": method,
                    "config_hash": f"h-{method}", "seed": seed, "status": "ok"}
            mine = method == "deterministic"
            rows.append({**base, "kind": "val", "metrics.nll": val_nll[seed] if mine else 9.0,
                         "reference.nll": ref[0] if ref else float("nan")})
            rows.append({**base, "kind": "id", "metrics.nll": test_nll[seed] if mine else 1.0,
                         "reference.nll": ref[1] if ref else float("nan")})
            rows.append({**base, "kind": "shift", "metrics.nll": 50.0})   # a corrupted cell: not the clean test
    return pd.DataFrame(rows)


def test_the_ratio_is_the_map_rows_mean_validation_over_mean_clean_test_nll():
    df = records({0: 1.0, 1: 2.0}, {0: 2.0, 1: 2.0}, ref=(6.8, 4.2))
    (key,) = validation_shifts(df)
    s = validation_shifts(df)[key]
    assert key == ("cifar10c", "quick", "m", "") and s.seeds == (0, 1)
    assert s.val_nll == pytest.approx(1.5) and s.test_nll == pytest.approx(2.0) and s.ratio == pytest.approx(0.75)
    assert s.shifted and s.reference == (6.8, 4.2)
    assert "0.75 x its clean test NLL: 1.5 vs 2, seeds 0, 1; the reference predictor, which sees no image: 6.8 vs 4.2" \
        in s.text()


@pytest.mark.parametrize("ratio, shifted", [(1.0, False), (RATIO_LIMIT * 0.99, False), (1 / RATIO_LIMIT * 1.01, False),
                                            (RATIO_LIMIT * 1.01, True), (1 / RATIO_LIMIT * 0.99, True)])
def test_splits_differ_only_outside_the_band(ratio, shifted):
    df = records({0: ratio, 1: ratio}, {0: 1.0, 1: 1.0})
    assert validation_shifts(df)[("cifar10c", "quick", "m", "")].shifted is shifted
    assert bool(split_shift_notes(df)) is shifted
    assert bool(board_split_note(df, "cifar10c", "quick", "m")) is shifted


def test_only_methods_that_choose_on_validation_are_named():
    """PBN (a bench tune space) and temperature scaling (its temperature on validation) are named; the
    MAP network and the ensemble, which choose nothing there, are not."""
    assert chooses_on_validation("pbn", "cifar10c") and chooses_on_validation("temperature_scaling", "cifar10c")
    assert not chooses_on_validation("deterministic", "cifar10c") and not chooses_on_validation("deep_ensemble", "cifar10c")
    df = records({0: 3.0, 1: 3.0}, {0: 2.0, 1: 2.0})
    notes = split_shift_notes(df)
    assert sorted(k[3] for k in notes) == ["pbn", "temperature_scaling"]
    assert "a test-like validation split is the remedy" in notes[("cifar10c", "quick", "m", "pbn")]
    (note,) = board_split_note(df, "cifar10c", "quick", "m")
    assert note.startswith("pbn, temperature_scaling: the suite's validation split is unlike its test split")
    assert board_split_note(df, "cifar10c", "quick", "other") == []


def test_no_map_validation_records_no_measurement():
    """Records without a MAP row's validation NLL (older records, a suite without MAP) say nothing."""
    df = records({0: 3.0}, {0: 2.0})
    assert validation_shifts(df[df["kind"] != "val"]) == {}
    assert validation_shifts(df[df["method"] != "deterministic"]) == {}
    assert split_shift_notes(pd.DataFrame()) == {}


def test_the_board_says_it():
    """bench leaderboard's board of records whose MAP validation NLL is 1.5 x its test NLL carries the note."""
    from bench.leaderboard.board import build_boards
    from bench.reporting.data import prepare

    df = records({0: 3.0, 1: 3.0}, {0: 2.0, 1: 2.0})
    df = df.assign(shift=df["kind"].map({"val": "val", "id": "clean", "shift": "fog"}),
                   severity=df["kind"].map({"val": 0, "id": 0, "shift": 3}), task="classification")
    (board,) = build_boards(prepare(df))
    assert any(n.startswith("pbn, temperature_scaling: the suite's validation split is unlike") for n in board.notes)
    (board,) = build_boards(prepare(df.assign(**{"metrics.nll": df["metrics.nll"].where(df["kind"] != "val", 2.0)})))
    assert not any("validation split" in n for n in board.notes)


def test_a_run_that_tunes_on_other_images_is_measured_apart():
    """MAP rows of the suite's own split (x1.5) and of a run that tuned on other images
    (data.val_sequences, x1.0) are two measurements, not one pooled; only the rows on the unlike
    split are named."""
    own = records({0: 3.0, 1: 3.0}, {0: 2.0, 1: 2.0}, methods=("deterministic", "pbn"))
    other = records({0: 2.0, 1: 2.0}, {0: 2.0, 1: 2.0}, methods=("deterministic", "temperature_scaling"))
    own["data_config"] = [{"size": [1, 1]}] * len(own)
    other["data_config"] = [{"val_sequences": ["0006R0"]}] * len(other)
    df = pd.concat([own, other], ignore_index=True)
    shifts = validation_shifts(df)
    assert sorted(shifts) == [("cifar10c", "quick", "m", ""), ("cifar10c", "quick", "m", "0006R0")]
    assert shifts[("cifar10c", "quick", "m", "")].ratio == pytest.approx(1.5)
    assert shifts[("cifar10c", "quick", "m", "0006R0")].ratio == pytest.approx(1.0)
    assert list(split_shift_notes(df)) == [("cifar10c", "quick", "m", "pbn")]
    (note,) = board_split_note(df, "cifar10c", "quick", "m")
    assert note.startswith("pbn: the suite's validation split is unlike")
    other["data_config"] = [{"val_sequences": ["0006R0"]}] * len(other)
    other.loc[(other["method"] == "deterministic") & (other["kind"] == "val"), "metrics.nll"] = 4.0
    (note,) = board_split_note(other, "cifar10c", "quick", "m")
    assert note.startswith("temperature_scaling: the validation split data.val_sequences=0006R0 is unlike")
