"""benchmarks/weighted_ce_ablation.py: median-frequency class weights (Eigen & Fergus 2015) on a
hand-worked example, and the weighted loss as the weighted mean of the labelled pixels' NLL."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch

from bench.tasks import segmentation

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("weighted_ce_ablation", ROOT / "benchmarks" / "weighted_ce_ablation.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def test_median_frequency_weights_by_hand():
    # image A: three 0s and a 1; image B: a 0, two 2s and a void pixel
    labels = torch.tensor([[[0, 0], [0, 1]], [[0, 2], [2, 255]]])
    w = mod.median_frequency_weights(labels, 3, 255)
    # f_c = pixels of c / labelled pixels of the images holding c:
    # f_0 = 4 / (4 + 3), f_1 = 1 / 4, f_2 = 2 / 3; the median is f_0
    f = torch.tensor([4 / 7, 1 / 4, 2 / 3])
    assert torch.allclose(w, f[0] / f, atol=1e-6)


def test_weighted_loss_is_the_weighted_mean_over_labelled_pixels():
    torch.manual_seed(0)
    task = segmentation(3)
    logits = torch.randn(8, 3)  # 2 images of 2 x 2 pixels as rows
    y = torch.tensor([[[0, 1], [2, 255]], [[1, 1], [0, 2]]])
    w = torch.tensor([0.5, 2.0, 1.5])
    got = mod.WeightedTask(task, w).loss(logits, y)
    nll, total = 0.0, 0.0
    for row, label in zip(logits, y.reshape(-1).tolist()):
        if label == 255:
            continue
        nll += float(w[label]) * -float(torch.log_softmax(row, -1)[label])
        total += float(w[label])
    assert math.isclose(float(got), nll / total, rel_tol=1e-5)
    # unit weights: the task's own (unweighted) likelihood
    assert math.isclose(float(mod.WeightedTask(task, torch.ones(3)).loss(logits, y)), float(task.loss(logits, y)),
                        rel_tol=1e-6)
