"""The ``chestmnist`` suite and its loader (issue 39, part 2) on ``.npz`` files written here in
MedMNIST's exact layout: the splits, targets and training prevalence against a hand count, the grey
corruption path (full-strength noise in the kept channel, the 28 x 28 padding), the missing and the
malformed files (exit code 2 naming the file and the problem, nothing written), and a smoke run
through the CLI once the methods accept multi-label tasks."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.cli import main
from datasets.errors import DatasetNotFoundError
from datasets.medmnist import CHESTMNIST_LABELS, load_chestmnist

L = len(CHESTMNIST_LABELS)
N = {"train": 48, "val": 16, "test": 16}


def arrays(size: int = 28, seed: int = 0) -> dict[str, np.ndarray]:
    """Six arrays as MedMNIST stores them: uint8 grey images (N, S, S), uint8 multi-hot labels (N, 14);
    label l is learnable: present when the image's row l (mod S) is bright."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in N.items():
        labels = (rng.random((n, L)) < 0.3).astype(np.uint8)
        images = rng.integers(0, 60, (n, size, size)).astype(np.uint8)
        for i in range(n):
            for lab in np.flatnonzero(labels[i]):
                images[i, lab % size] = 220
        out[f"{split}_images"], out[f"{split}_labels"] = images, labels
    return out


def write(root: Path, data: dict, name: str = "chestmnist.npz") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(root / name, **data)
    return root / name


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


# ----------------------------------------------------------------------------------- the loader


def test_loader_reads_the_official_layout(tmp_path):
    data = arrays()
    write(tmp_path, data)
    splits = load_chestmnist(tmp_path)
    for split in N:
        assert splits[split].images.dtype == np.uint8 and splits[split].images.shape == (N[split], 28, 28)
        np.testing.assert_array_equal(splits[split].labels, data[f"{split}_labels"])
    # prevalence by hand: the count of 1s in each column over the rows
    col = [sum(int(r[c]) for r in data["train_labels"]) / N["train"] for c in range(L)]
    np.testing.assert_allclose(splits["train"].prevalence(), col)


def test_loader_reads_the_medmnist_plus_sizes(tmp_path):
    write(tmp_path, arrays(64), "chestmnist_64.npz")
    assert load_chestmnist(tmp_path, 64)["test"].images.shape == (N["test"], 64, 64)
    with pytest.raises(DatasetNotFoundError, match="chestmnist_128.npz"):
        load_chestmnist(tmp_path, 128)


def _drop(d, key):
    return {k: v for k, v in d.items() if k != key}


MALFORMED = {
    "missing array": (lambda d: _drop(d, "val_labels"), "val_labels missing"),
    "label width": (lambda d: {**d, "train_labels": d["train_labels"][:, :13]}, r"train_labels has shape \(48, 13\)"),
    "label value": (lambda d: {**d, "test_labels": np.where(d["test_labels"] == 1, 2, 0).astype(np.uint8)},
                    "values other than 0 and 1: \\[2\\]"),
    "image dtype": (lambda d: {**d, "val_images": d["val_images"].astype(np.float32)}, "val_images has dtype float32"),
    "image size": (lambda d: {**d, "train_images": d["train_images"][:, :27, :27]}, r"expected \(N, 28, 28\)"),
    "length mismatch": (lambda d: {**d, "test_labels": d["test_labels"][:-1]}, "16 images but test_labels 15 rows"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_are_refused_naming_the_problem(tmp_path, case):
    edit, message = MALFORMED[case]
    path = write(tmp_path, edit(arrays()))
    with pytest.raises(DatasetNotFoundError, match=message) as err:
        load_chestmnist(tmp_path)
    assert str(path) in str(err.value) and "malformed" in str(err.value) and "How to obtain it" in str(err.value)


def test_a_pickled_array_is_refused_not_unpickled(tmp_path):
    """An object array (a pickle) inside the .npz: np.load(allow_pickle=False) refuses it; the pickle's
    payload (it would create a file) never runs."""
    data = arrays()
    target = tmp_path / "exploded"
    data["train_labels"] = np.array([_Boom(target)], dtype=object)
    np.savez(tmp_path / "chestmnist.npz", **data)  # savez pickles object arrays
    with pytest.raises(DatasetNotFoundError, match="cannot be read without executing code"):
        load_chestmnist(tmp_path)
    assert not target.exists()


class _Boom:
    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_garbage_is_refused(tmp_path):
    (tmp_path / "chestmnist.npz").write_bytes(b"not a zip at all" * 10)
    with pytest.raises(DatasetNotFoundError, match="not a readable .npz"):
        load_chestmnist(tmp_path)


@pytest.mark.parametrize("what", ["missing", "malformed"])
def test_cli_exits_2_and_writes_nothing(tmp_path, capsys, what):
    root, out = tmp_path / "root", tmp_path / "out"
    root.mkdir()
    if what == "malformed":
        write(root, MALFORMED["label width"][0](arrays()))
    code, text = _run(["run", "--suite", "chestmnist", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--methods", "deterministic", "--quiet"], capsys)
    assert code == 2
    assert str(root / "chestmnist.npz") in text and "train_labels" in text and "medmnist" in text.lower()
    if what == "malformed":
        assert "train_labels has shape (48, 13)" in text
    assert not out.exists() or not any(out.rglob("*"))
    assert sorted(p.name for p in root.iterdir()) == ([] if what == "missing" else ["chestmnist.npz"])


# ------------------------------------------------------------------------------------ the suite


def test_suite_targets_prevalence_and_cells(tmp_path):
    from bench.suites import SUITES

    data = arrays()
    write(tmp_path, data)
    suite = SUITES.get("chestmnist")()
    cfg = {"corruptions": ["gaussian_noise", "contrast"], "severities": [1, 3], "n_per_cell": 10}
    d = suite.load(tmp_path, cfg)
    assert suite.task.kind == "multilabel" and suite.task.num_outputs == 14
    assert d.train_y.dtype == torch.float32 and d.train_y.shape == (48, 14)
    np.testing.assert_array_equal(d.train_y.numpy(), data["train_labels"])
    np.testing.assert_array_equal(d.val_y.numpy(), data["val_labels"])
    assert d.train_x.shape == (48, 1, 28, 28)
    # MedMNIST's normalisation by hand: pixel 0 -> -1, 255 -> 1
    np.testing.assert_allclose(d.train_x[0, 0].numpy(), data["train_images"][0] / 127.5 - 1, atol=1e-6)
    hand = [sum(int(r[c]) for r in data["train_labels"]) / 48 for c in range(14)]
    np.testing.assert_allclose(d.extras["label_prevalence"], hand)
    assert json.loads(d.extras["artifacts"]["data.json"])["label_prevalence"] == pytest.approx(hand)
    kinds = [(e.kind, e.shift, e.severity, e.n) for e in d.eval_sets]
    assert kinds == [("id", "clean", 0.0, 16)] + [("shift", c, float(s), 10) for c in ("gaussian_noise", "contrast")
                                                   for s in (1, 3)]
    assert suite.input_shape({"size": 64, "channels": 3}) == (3, 64, 64)


def test_grey_noise_keeps_its_full_strength_and_the_size():
    """gaussian_noise at severity 1 of CIFAR-10-C (Hendrycks & Dietterich's make_cifar_c.py: c = 0.04 of
    the [0, 1] range): the kept channel's noise must have that std (the mean of three independent
    channels would have 0.04 / sqrt(3)); 28 x 28 in, 28 x 28 out."""
    from bench.suites.chestmnist import grey_corrupt
    from datasets.corruptions import PARAMS

    sigma = 0.04
    assert PARAMS["cifar10c"]["gaussian_noise"][0] == pytest.approx(sigma)
    x = np.full((20, 28, 28), 128, np.uint8)
    out = grey_corrupt(x, "gaussian_noise", 1, seed=0, release="cifar10c")
    assert out.shape == (20, 28, 28) and out.dtype == np.uint8
    std = (out.astype(np.float64) - 128).std() / 255
    assert std == pytest.approx(sigma, rel=0.05)


def test_grey_contrast_against_the_formula_at_64():
    """ImageNet-C's contrast, x' = (x - mean) c + mean per image, by hand on a 64 x 64 grey image
    (no padding at 64): within one grey level (the generator's truncation to uint8)."""
    from bench.suites.chestmnist import grey_corrupt
    from datasets.corruptions import PARAMS

    rng = np.random.default_rng(1)
    x = rng.integers(40, 200, (3, 64, 64)).astype(np.uint8)
    c = PARAMS["tiny_imagenet_c"]["contrast"][2]
    f = x / 255.0
    m = f.mean(axis=(1, 2), keepdims=True)
    hand = np.clip((f - m) * c + m, 0, 1) * 255
    out = grey_corrupt(x, "contrast", 3, seed=0, release="tiny_imagenet_c").astype(np.float64)
    assert np.abs(out - hand).max() <= 1.0


def _methods_take_multilabel() -> bool:
    from bench.tasks import multilabel  # noqa: F401 - the task itself
    from methods import METHODS

    return "multilabel" in METHODS.get("deterministic").tasks


def test_smoke_run_through_the_cli(tmp_path, capsys):
    if not _methods_take_multilabel():
        pytest.skip("the methods do not accept multilabel tasks yet (methods.*.tasks)")
    root, out = tmp_path / "root", tmp_path / "out"
    write(root, arrays())
    code, text = _run(["run", "--suite", "chestmnist", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--methods", "deterministic", "--quiet"], capsys)
    assert code == 0, text
    recs = [json.loads(p.read_text()) for p in out.glob("chestmnist/records/**/*.json")]
    evals = sorted((r["kind"], r["shift"], r.get("severity")) for r in recs if r.get("kind") in ("id", "shift"))
    assert evals == sorted([("id", "clean", 0.0)] + [("shift", c, float(s)) for c in ("gaussian_noise", "contrast")
                                                     for s in (1, 3)])
    rec = next(r for r in recs if r.get("kind") == "id")
    assert rec["task"] == "multilabel" and rec["num_labels"] == 14
    assert rec["reference"]["prevalence"] == pytest.approx(arrays()["train_labels"].mean(0))


@pytest.mark.parametrize("profile", ["quick", "paper"])
def test_vi_methods_take_the_papers_static_kl_weight_for_classification(profile):
    """Sec. 3.1: 'a static weight for the KL term of 0.01 for classification' (annealed 0.2 -> 0.01
    only for segmentation), for the partial and the fully Bayesian network alike."""
    from bench.config import resolve_plan
    from bench.suites import SUITES
    from methods import METHODS
    plan = resolve_plan(SUITES.get("chestmnist")(), profile, ["pbn", "mfvi"], {}, method_registry=METHODS)
    for name in ("pbn", "mfvi"):
        (cfg,) = plan.methods[name]
        assert cfg["beta_start"] == cfg["beta_end"] == 0.01, (name, cfg)
    assert plan.methods["pbn"][0]["r_bayes"] == 0.01
