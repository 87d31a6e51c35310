"""Failures that stuck or vanished (issue 38, item 11), each on a tiny fixture in the real layout:
(a) labels outside the task's classes stop the run at load (exit 2, naming the file and the values)
instead of failing every cell; (b) a failure recorded on other data is retried once the data is
fixed, not skipped until --force; (c) a run whose every cell failed exits 1 and says so, one with
some failed cells still exits 0; (d) an SVHN file that is there but unreadable is an error naming
it (exit 2), while an absent one still leaves the OOD set out with a note."""
from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.cli import main
from bench.errors import BenchError
from bench.store import load_records
from conftest import make_fake_mnist
from datasets.errors import DatasetNotFoundError


def _mnist(root, out, *extra, methods="deterministic"):
    return ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--quiet", "--no-report", "--data-root",
            str(root), "--out", str(out), "--methods", methods, "--set", "data.n_val=100", "--set", "data.n_train=300",
            "--set", "data.n_test=100", "--set", "data.n_ood=100", "--set", "train.epochs=1", *extra]


def _set_label(path: Path, index: int, value: int) -> None:
    from datasets.mnist import read_idx, write_idx

    y = read_idx(path).copy()
    y[index] = value
    write_idx(path, y)


# ------------------------------------------------------------------------------ (a) labels


def test_an_mnist_label_outside_the_classes_is_exit_2_naming_the_file_and_the_values(fake_mnist, tmp_path, capsys):
    """A label 12 in 10-class MNIST gave exit 0 with every cell failed (IndexError in every fit)."""
    labels = fake_mnist / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    _set_label(labels, 5, 12)
    _set_label(labels, 7, 200)
    out = tmp_path / "r"
    assert main(_mnist(fake_mnist, out, methods="deterministic,mc_dropout")) == 2
    err = capsys.readouterr().err
    assert f"malformed ({labels}: 2 of 600 labels outside 0..9: values 12, 200)" in err, err
    assert not list(out.rglob("records/**/*.json"))  # no cell ran
    test_labels = fake_mnist / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    _set_label(labels, 5, 1)
    _set_label(labels, 7, 2)
    _set_label(test_labels, 0, 10)  # the test split too
    assert main(_mnist(fake_mnist, out)) == 2
    assert f"{test_labels}: 1 of 200 labels outside 0..9: values 10" in capsys.readouterr().err


def test_a_cifar10_label_outside_the_classes_names_its_batch_file(tmp_path):
    from datasets.cifar10 import load_cifar10, write_cifar_batch

    d = tmp_path / "cifar-10-batches-py"
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        write_cifar_batch(d / name, rng.integers(0, 255, (4, 3, 32, 32)), [0, 1, 2, 3])
    write_cifar_batch(d / "test_batch", rng.integers(0, 255, (4, 3, 32, 32)), [0, 10, 2, -1])
    assert load_cifar10(tmp_path, "train")[1].tolist() == [0, 1, 2, 3] * 5
    with pytest.raises(DatasetNotFoundError) as exc:
        load_cifar10(tmp_path, "test")
    assert f"{d / 'test_batch'}: 2 of 4 labels outside 0..9: values -1, 10" in str(exc.value)


def test_a_camvid_label_map_outside_the_classes_stops_the_load_naming_the_file(tmp_path):
    """Segmentation: 0..10 are classes, 11 (void) is read as the ignore label; 12 is an error, found at
    load in any split (the test maps are otherwise read only when a cell is evaluated)."""
    from PIL import Image

    from bench.suites import SUITES
    from test_segmentation_suite import make_fake_camvid

    make_fake_camvid(tmp_path, n=(2, 1, 2), size=(36, 48))
    bad = sorted((tmp_path / "CamVid" / "testannot").glob("*.png"))[1]
    lab = np.asarray(Image.open(bad)).copy()
    lab[3, 4] = 12
    Image.fromarray(lab).save(bad)
    cfg = {"corruptions": ["contrast"], "severities": [1], "size": [36, 48]}
    with pytest.raises(BenchError, match=rf"camvid: malformed label map \({bad}: CamVid label values outside 0-11: "
                                         rf"\[12\]"):
        SUITES.get("camvid")().load(tmp_path, cfg, download=False)
    assert not (tmp_path / "CamVid-C").exists()  # stopped before generating anything


def test_the_harness_refuses_labels_outside_the_classes_of_any_suite():
    """The harness's check of labels held in memory, for a suite whose loader does not check."""
    from bench.data import EvalSet, SuiteData
    from bench.harness import check_labels
    from bench.tasks import classification, segmentation

    def data(train_y, test_y):
        x = torch.zeros(len(train_y), 1)
        return SuiteData(x, train_y, x[:1], train_y[:1], [EvalSet("shift", "noise", 2.0, x[:len(test_y)], test_y)])

    suite = types.SimpleNamespace(name="stub", task=classification(3))
    check_labels(suite, data(torch.tensor([0, 1, 2]), torch.tensor([2, 1])))
    with pytest.raises(BenchError, match=r"stub: shift set noise severity 2 labels: 1 of 2 labels outside 0..2: "
                                         r"values 3"):
        check_labels(suite, data(torch.tensor([0, 1, 2]), torch.tensor([3, 1])))
    with pytest.raises(BenchError, match="stub: training labels: 2 of 3 labels outside 0..2: values -1, 255"):
        check_labels(suite, data(torch.tensor([0, -1, 255]), torch.tensor([2, 1])))
    seg = types.SimpleNamespace(name="seg", task=segmentation(3))  # the ignore label 255 is allowed
    check_labels(seg, data(torch.tensor([[0, 255], [2, 1], [1, 1]]), torch.tensor([[255, 1]])))
    with pytest.raises(BenchError, match=r"outside 0..2 \(or 255, ignored\): values 254"):
        check_labels(seg, data(torch.tensor([[0, 254], [2, 1], [1, 1]]), torch.tensor([[255, 1]])))


# ---------------------------------------------------------------------- (b) failures and data


def test_a_failure_recorded_on_other_data_is_retried_and_on_the_same_data_skipped(tmp_path, monkeypatch, capsys):
    from methods.deterministic import Deterministic

    root = make_fake_mnist(tmp_path / "data")
    out = tmp_path / "r"
    fit = Deterministic.fit

    def failing(self, train, val):
        raise FloatingPointError("the data was bad")

    monkeypatch.setattr(Deterministic, "fit", failing)
    assert main(_mnist(root, out)) == 1
    failed = load_records(out)
    assert list(failed["status"]) == ["failed"] and failed["data_hash"].notna().all()
    monkeypatch.setattr(Deterministic, "fit", fit)
    # the same data: kept as failed until --force (as before)
    assert main(_mnist(root, out)) == 0
    assert list(load_records(out)["status"]) == ["failed"]
    # the data fixed (here: other training images and labels): retried without --force
    make_fake_mnist(tmp_path / "data", seed=1)
    assert main([a for a in _mnist(root, out) if a != "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "recorded as failed on other data" in err and "retried" in err and "0 failed" in err
    df = load_records(out)
    assert (df["status"] == "ok").all() and len(df) > 1


def test_a_map_network_failure_recorded_on_other_data_is_retried(tmp_path):
    """A diverged MAP network is recorded once for all its dependants; the record holds the data's
    hash, and a cache on other data (the NaN in the inputs fixed) trains the network again."""
    from bench.checkpoints import MapCache
    from bench.errors import DivergedError
    from bench.models import build_model
    from bench.tasks import regression
    from bench.training import TrainConfig

    x, y = torch.randn(40, 1), torch.randn(40)
    bad = x.clone()
    bad[3] = float("nan")

    def cache(train_x):
        def build(dropout=0.0):
            return build_model("mlp_100", (1,), 2, dropout=dropout)

        return MapCache(tmp_path, {"model": "mlp_100"}, build, regression(), train_x, y,
                        TrainConfig(epochs=2, batch_size=20, lr=0.01), torch.device("cpu"))

    with pytest.raises(DivergedError, match="non-finite"):
        cache(bad).get(0)
    record = json.loads(cache(bad).failure_path(0).read_text())
    assert record["data_hash"] == cache(bad).data_hash() != cache(x).data_hash()
    with pytest.raises(DivergedError, match="failed to train earlier"):  # the same data: not retrained
        cache(bad).get(0)
    fixed = cache(x)
    fixed.get(0)  # other data: trained again
    assert fixed.trained_now == [0] and not fixed.failure_path(0).exists()


# ------------------------------------------------------------------------ (c) exit codes


def test_a_run_whose_every_cell_failed_exits_1_and_says_so(tmp_path, monkeypatch, capsys):
    from methods.deterministic import Deterministic

    def failing(self, train, val):
        raise FloatingPointError("boom")

    monkeypatch.setattr(Deterministic, "fit", failing)
    args = ["run", "--suite", "toy", "--profile", "smoke", "--no-report", "--set", "train.epochs=30"]
    assert main(args + ["--out", str(tmp_path / "a"), "--methods", "deterministic"]) == 1
    assert "0 fitted, 0 loaded, 0 skipped, 1 failed, 1 records written; every cell failed (exit code 1)" \
        in capsys.readouterr().err
    assert main(args + ["--quiet", "--out", str(tmp_path / "b"), "--methods", "deterministic"]) == 1
    assert "every cell failed (exit code 1); the first: mlp_100 deterministic seed 0: FloatingPointError: boom" \
        in capsys.readouterr().err
    # some cells failed, not all: exit 0, as before
    assert main(args + ["--out", str(tmp_path / "c"), "--methods", "deterministic,mc_dropout"]) == 0
    err = capsys.readouterr().err
    assert "1 failed, " in err and "every cell failed" not in err


# ------------------------------------------------------------------------------- (d) SVHN


@pytest.mark.parametrize("damage", ["truncated", "not a mat file", "wrong arrays"])
def test_an_unreadable_svhn_file_is_exit_2_naming_it_while_an_absent_one_is_left_out(tmp_path, monkeypatch, capsys,
                                                                                  damage):
    import scipy.io

    from bench.suites import SUITES
    from test_cifar10c_suite import make_fake_cifar, make_fake_cifar10c

    _, _, te_x, te_y = make_fake_cifar(tmp_path)
    make_fake_cifar10c(tmp_path, te_x, te_y, names=("contrast",))
    cfg = {"n_val": 100, "corruptions": ["contrast"], "n_ood": 30}
    mat = tmp_path / "SVHN" / "test_32x32.mat"
    mat.parent.mkdir()
    X = np.random.default_rng(1).integers(0, 256, (32, 32, 3, 40)).astype(np.uint8)
    scipy.io.savemat(str(mat), {"X": X, "y": np.ones((40, 1), np.uint8)})
    if damage == "truncated":
        mat.write_bytes(mat.read_bytes()[:300])
    elif damage == "not a mat file":
        mat.write_text("<html>404 Not Found</html>")
    else:
        scipy.io.savemat(str(mat), {"X": X[:, :, :2], "y": np.ones((40, 1), np.uint8)})
    with pytest.raises(BenchError) as exc:
        SUITES.get("cifar10c")().load(tmp_path, cfg, download=False)
    assert str(mat) in str(exc.value) and "malformed (" in str(exc.value) and "not found" not in str(exc.value)
    # through the command line: exit 2 before anything runs
    out = tmp_path / "r"
    assert main(["run", "--suite", "cifar10c", "--profile", "smoke", "--quiet", "--no-report", "--data-root",
                 str(tmp_path), "--out", str(out), "--methods", "deterministic",
                 "--set", "data.corruptions=contrast"]) == 2
    err = capsys.readouterr().err
    assert str(mat) in err and "malformed (" in err
    assert not list(out.rglob("records/**/*.json"))
    # absent (as before): no OOD set, and a note that says so
    mat.unlink()
    data = SUITES.get("cifar10c")().load(tmp_path, cfg, download=False)
    assert not any(e.kind == "ood" for e in data.eval_sets)
    assert "no OOD set: SVHN test (test_32x32.mat) not found" in data.eval_sets[0].note
