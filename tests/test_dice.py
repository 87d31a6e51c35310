"""Dice in bench.segmentation_metrics: a hand-worked 4 x 4 mask, scikit-learn's F1 on the
flattened valid pixels (= global Dice), the per-image mean with its empty-empty rule, per-class
Dice for K > 2, and the harness putting it into a segmentation record."""
from __future__ import annotations

import pytest
import torch
from sklearn.metrics import f1_score

from bench.segmentation_metrics import SegmentationScores


def _probs(pred: torch.Tensor, k: int = 2) -> torch.Tensor:
    """Rows of probabilities whose arg-max is ``pred`` (0.7 on it)."""
    p = torch.full((pred.numel(), k), 0.3 / (k - 1))
    p[torch.arange(pred.numel()), pred.reshape(-1)] = 0.7
    return p


def test_dice_of_a_hand_worked_4x4_mask():
    # labels: a 2 x 3 foreground block (6 px), one void pixel inside the image
    y = torch.tensor([[0, 1, 1, 1],
                      [0, 1, 1, 1],
                      [0, 0, 0, 255],
                      [0, 0, 0, 0]])
    # prediction: 2 x 2 block overlapping 4 foreground pixels, plus 2 false positives (one on void)
    p = torch.tensor([[0, 0, 1, 1],
                      [0, 0, 1, 1],
                      [1, 0, 0, 1],
                      [0, 0, 0, 0]])
    sc = SegmentationScores(2)
    sc.update(_probs(p), y.reshape(-1), images=1)
    r = sc.result()
    # TP 4, FP 1 (the (2,0) pixel; (2,3) is void), FN 2: Dice = 8 / (8 + 1 + 2)
    assert r["dice"] == pytest.approx(8 / 11)
    assert r["dice_per_image"] == pytest.approx(8 / 11)
    # background: TP 8, FP 2, FN 1 -> 16 / 19
    assert r["dice_per_class"] == pytest.approx([16 / 19, 8 / 11])
    assert r["mean_dice"] == pytest.approx((16 / 19 + 8 / 11) / 2)
    assert r["dice_empty_images"] == 0


def test_global_dice_is_sklearn_f1_and_per_image_is_the_mean_with_empty_images_scoring_1():
    g = torch.Generator().manual_seed(0)
    n_img, hw = 6, 50
    y = (torch.rand(n_img, hw, generator=g) < 0.3).long()
    y[torch.rand(n_img, hw, generator=g) < 0.1] = 255
    probs = torch.softmax(torch.randn(n_img * hw, 2, generator=g) + 0.8 * (y.reshape(-1, 1) == torch.tensor([0, 1])),
                          -1)
    # image 4: no foreground in labels nor in prediction (empty-empty); image 5: no label foreground
    y[4][y[4] == 1] = 0
    y[5][y[5] == 1] = 0
    probs.view(n_img, hw, 2)[4] = torch.tensor([0.9, 0.1])
    sc = SegmentationScores(2)
    for a in (0, 2, 4):  # batches of two images
        sc.update(probs[a * hw:(a + 2) * hw], y[a:a + 2].reshape(-1), images=2)
    r = sc.result()
    flat, pred = y.reshape(-1), probs.argmax(-1)
    valid = flat != 255
    assert r["dice"] == pytest.approx(f1_score(flat[valid].numpy(), pred[valid].numpy(), pos_label=1))
    per = []
    for i in range(n_img):
        yi, pi = y[i], pred.view(n_img, hw)[i]
        vi = yi != 255
        if not bool(((yi == 1) & vi).any()) and not bool(((pi == 1) & vi).any()):
            per.append(1.0)
        else:
            per.append(f1_score(yi[vi].numpy(), pi[vi].numpy(), pos_label=1, zero_division=0.0))
    assert r["dice_empty_images"] == 1
    assert r["dice_per_image"] == pytest.approx(sum(per) / n_img)


def test_per_class_dice_for_more_classes_is_sklearn_f1_per_class():
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, 4, (400,), generator=g)
    y[:30] = 255
    y[y == 3] = 2  # class 3 never in the labels ...
    probs = torch.softmax(torch.randn(400, 4, generator=g) + torch.tensor([0.0, 0.0, 0.0, -50.0]), -1)
    probs[:5] = torch.tensor([0.0, 0.0, 0.0, 1.0])  # ... but predicted on void pixels only: union empty
    sc = SegmentationScores(4)
    sc.update(probs, y, images=4)
    r = sc.result()
    v = y != 255
    ref = f1_score(y[v].numpy(), probs.argmax(-1)[v].numpy(), labels=[0, 1, 2], average=None)
    assert r["dice_per_class"][:3] == pytest.approx(list(ref)) and r["dice_per_class"][3] is None
    assert r["mean_dice"] == pytest.approx(float(ref.mean()))
    assert r["dice"] is None and r["dice_per_image"] is None


def test_the_harness_records_dice_of_a_binary_segmentation_set():
    from bench.data import EvalSet
    from bench.harness import score_segmentation
    from bench.tasks import segmentation

    class Fixed:
        def __init__(self, probs):
            self.probs = probs

        def predict(self, x):
            from bench.predictive import ClassificationPredictive

            return ClassificationPredictive(self.probs[: x.shape[0] * 16])

    y = torch.zeros(2, 4, 4, dtype=torch.long)
    y[0, :2, :2] = 1  # image 0: 4 foreground pixels, predicted exactly; image 1: none, none predicted
    pred = y.reshape(-1)
    e = EvalSet("id", "clean", 0.0, torch.zeros(2, 3, 4, 4), y)
    metrics, _, _ = score_segmentation(Fixed(_probs(pred)), e, segmentation(2), 2, "cpu")
    assert metrics["dice"] == 1.0 and metrics["dice_per_image"] == 1.0 and metrics["dice_empty_images"] == 1
