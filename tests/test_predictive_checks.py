"""A method's predictive is checked before it is scored (issue 38, item 10): a wrong shape (which
broadcasting would score), probabilities outside [0, 1] or rows not summing to 1 (which would be
ranked), a negative variance: the cell is recorded as failed with an error naming the check and
the numbers, for every task kind (classification, segmentation, regression); a correct one passes."""
from __future__ import annotations

import pytest
import torch

from bench.cli import main
from bench.data import EvalSet
from bench.errors import InvalidPredictiveError
from bench.harness import check_predictive, score_segmentation
from bench.predictive import ClassificationPredictive, RegressionPredictive
from bench.store import load_records
from bench.tasks import classification, regression, segmentation
from conftest import small_mnist_run


def _probs(n, k, seed=0):
    return torch.softmax(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)), -1)


def test_a_correct_predictive_of_every_task_passes():
    check_predictive(classification(4), ClassificationPredictive(_probs(6, 4)), 6, "id set")
    samples = torch.stack([_probs(6, 4, s) for s in range(3)])
    check_predictive(classification(4), ClassificationPredictive.from_samples(samples), 6, "id set")
    check_predictive(classification(4), ClassificationPredictive(_probs(6, 4), variance=torch.rand(6)), 6, "id set")
    check_predictive(segmentation(3), ClassificationPredictive(_probs(2 * 4 * 5, 3)), 2, "id set", pixels=(4, 5))
    y = torch.randn(6)
    check_predictive(regression(), RegressionPredictive(torch.randn(6), torch.rand(6)), 6, "id set", targets=y)
    means, variances = torch.randn(5, 6), torch.rand(5, 6)
    check_predictive(regression(), RegressionPredictive.from_samples(means, variances), 6, "id set", targets=y)
    # float32 rounding over many classes stays within the tolerance
    check_predictive(classification(1000), ClassificationPredictive(_probs(50, 1000) * (1 + 1e-5)), 50, "id set")


@pytest.mark.parametrize("task, pred, n, kw, error", [
    (classification(4), ClassificationPredictive(_probs(6, 4) * 5), 6, {},
     "predictive probs rows sum to 5, not 1 (6 of 6 rows"),
    (classification(4), ClassificationPredictive(_probs(5, 4)), 6, {},
     "predictive probs has shape (5, 4), expected (6, 4) (6 examples x 4 classes)"),
    (classification(4), ClassificationPredictive(_probs(6, 3)), 6, {}, "has shape (6, 3), expected (6, 4)"),
    (classification(2), ClassificationPredictive(torch.tensor([[1.5, -0.5], [0.5, 0.5]])), 2, {},
     "predictive probs outside [0, 1] (min -0.5, max 1.5)"),
    (classification(4), ClassificationPredictive(_probs(6, 4), torch.stack([_probs(6, 4)] * 2) * 2), 6, {},
     "predictive sample_probs rows sum to 2, not 1"),
    (classification(4), ClassificationPredictive(_probs(6, 4), torch.stack([_probs(5, 4)] * 2)), 6, {},
     "sample_probs has shape (2, 5, 4), expected (S, 6, 4)"),
    (classification(4), ClassificationPredictive(_probs(6, 4), variance=-torch.rand(6) - 0.1), 6, {},
     "predictive variance has 6 negative value(s)"),
    (segmentation(3), ClassificationPredictive(_probs(2 * 4 * 4, 3)), 2, {"pixels": (4, 5)},
     "probs has shape (32, 3), expected (40, 3) (2 label maps of 4 x 5 = 40 pixels x 3 classes)"),
    (regression(), RegressionPredictive(torch.randn(6, 1), torch.rand(6, 1)), 6, {"targets": torch.randn(6)},
     "predictive mean has shape (6, 1), expected (6,) (the targets')"),
    (regression(), RegressionPredictive(torch.randn(6), torch.rand(6) - 2), 6, {"targets": torch.randn(6)},
     "predictive var has 6 negative value(s)"),
    (regression(), ClassificationPredictive(_probs(6, 2)), 6, {"targets": torch.randn(6)},
     "predictive is a ClassificationPredictive without a mean"),
])
def test_a_wrong_predictive_is_refused_with_the_check_and_the_numbers(task, pred, n, kw, error):
    with pytest.raises(InvalidPredictiveError) as exc:
        check_predictive(task, pred, n, "shift set contrast severity 3.0", **kw)
    assert error in str(exc.value) and str(exc.value).endswith("on the shift set contrast severity 3.0")


def _toy(out):
    return ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "deterministic,mc_dropout", "--set", "train.epochs=30"]


def _only_deterministic_failed(out, error):
    df = load_records(out)
    failed = df[df["status"] == "failed"]
    assert list(failed["method"]) == ["deterministic"], df[["method", "status"]]
    assert failed["error"].str.contains(error, regex=False).all(), failed["error"].tolist()
    assert not (df["method"] == "deterministic").sum() > 1  # no ok record of the wrong predictive
    assert len(df[df["method"] == "mc_dropout"]) > 1 and (df.loc[df["method"] == "mc_dropout", "status"] == "ok").all()


@pytest.mark.parametrize("wrong, error", [
    (lambda p: RegressionPredictive(p.mean.unsqueeze(1), p.var.unsqueeze(1)),
     "InvalidPredictiveError: predictive mean has shape (500, 1), expected (500,) (the targets') on the id set"),
    (lambda p: RegressionPredictive(p.mean, -p.var), "predictive var has 500 negative value(s)"),
])
def test_a_regression_method_with_a_wrong_predictive_is_a_failed_cell(tmp_path, monkeypatch, wrong, error):
    """The toy suite (regression): a (N, 1) mean was scored RMSE 2.50 by broadcasting (2.02 correctly
    shaped); now the cell fails, and the correct method beside it passes."""
    from methods.deterministic import Deterministic

    real = Deterministic.predict
    monkeypatch.setattr(Deterministic, "predict", lambda self, x: wrong(real(self, x)))
    out = tmp_path / "r"
    assert main(_toy(out)) == 0  # one of the two cells failed: the run goes on and exits 0
    _only_deterministic_failed(out, error)


@pytest.mark.parametrize("wrong, error", [
    (lambda p: ClassificationPredictive(p.probs * 5), "predictive probs rows sum to 5, not 1"),
    (lambda p: ClassificationPredictive(p.probs[:, :9]), "predictive probs has shape (100, 9), expected (100, 10)"),
    (lambda p: ClassificationPredictive(p.probs[1:]), "expected (100, 10) (100 examples x 10 classes)"),
])
def test_a_classification_method_with_a_wrong_predictive_is_a_failed_cell(fake_mnist, tmp_path, monkeypatch, wrong,
                                                                          error):
    """Probabilities x 5 scored a shift NLL of 0.70 against MAP's 3.11 and ranked first; now the cell
    fails naming the check, and MC dropout beside it passes."""
    from methods.deterministic import Deterministic

    real = Deterministic.predict
    monkeypatch.setattr(Deterministic, "predict", lambda self, x: wrong(real(self, x)))
    out = tmp_path / "r"
    args = small_mnist_run(fake_mnist, out, "deterministic,mc_dropout", n_train=300, epochs=1)
    assert main(args) == 0
    _only_deterministic_failed(out, error)


class _Fixed:
    """A stand-in fitted method whose predictive has ``rows(batch of images)`` rows."""

    def __init__(self, k, rows, scale=1.0):
        self.k, self.rows, self.scale = k, rows, scale

    def predict(self, x):
        return ClassificationPredictive(_probs(self.rows(x), self.k) * self.scale)


def test_a_segmentation_predictive_of_the_wrong_spatial_shape_is_refused():
    """Segmentation is scored batch by batch: each batch's pixel rows must match its label maps."""
    task = segmentation(3)
    x, y = torch.randn(4, 3, 6, 8), torch.randint(0, 3, (4, 6, 8))
    e = EvalSet("id", "clean", 0.0, x, y)
    metrics, _, _ = score_segmentation(_Fixed(3, lambda xb: len(xb) * 6 * 8), e, task, 2, "cpu")
    assert metrics["n_pixels"] == 4 * 6 * 8
    with pytest.raises(InvalidPredictiveError, match=r"probs has shape \(48, 3\), expected \(96, 3\) "
                                                     r"\(2 label maps of 6 x 8 = 96 pixels x 3 classes\)"):
        score_segmentation(_Fixed(3, lambda xb: len(xb) * 3 * 8), e, task, 2, "cpu")  # half the rows
    with pytest.raises(InvalidPredictiveError, match=r"expected \(96, 3\)"):
        score_segmentation(_Fixed(4, lambda xb: len(xb) * 6 * 8), e, task, 2, "cpu")  # a class too many
    with pytest.raises(InvalidPredictiveError, match=r"predictive probs rows sum to 5, not 1 \(96 of 96 rows"):
        score_segmentation(_Fixed(3, lambda xb: len(xb) * 6 * 8, scale=5.0), e, task, 2, "cpu")  # unnormalised
