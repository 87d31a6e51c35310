"""Learning tasks: the likelihood a network's output is trained with, and how it becomes a predictive."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.predictive import ClassificationPredictive, RegressionPredictive, split_regression_output


@dataclass(frozen=True)
class Task:
    kind: str  # "classification" | "regression" | "segmentation"
    num_outputs: int  # classes, or 2 (mean, raw variance) for regression
    #: segmentation: the label of pixels that count nowhere (no loss, no metric)
    ignore_index: int | None = None

    def loss(self, output: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Negative log-likelihood of the targets under the network output. Segmentation networks
        output one row per pixel (``(B H W, K)``, :class:`bench.models.PixelRows`): the labels
        ``(B, H, W)`` are flattened to match and ignored pixels left out (the mean is over the
        labelled pixels)."""
        if self.kind == "classification":
            return F.cross_entropy(output, y, reduction=reduction)
        if self.kind == "segmentation":
            return F.cross_entropy(output, y.reshape(-1), ignore_index=self.ignore_index, reduction=reduction)
        mean, var = split_regression_output(output)
        return F.gaussian_nll_loss(mean, y, var, full=True, reduction=reduction)

    @property
    def per_class(self) -> bool:
        """Classification of examples or of pixels: a categorical predictive."""
        return self.kind in ("classification", "segmentation")

    def predictive(self, output: torch.Tensor):
        """Predictive of a single deterministic network output."""
        if self.per_class:
            return ClassificationPredictive.from_logits(output)
        return RegressionPredictive.from_output(output)

    def predictive_from_samples(self, outputs: torch.Tensor):
        """Predictive of S stacked outputs (S, N, ...) from sampled networks."""
        if self.per_class:
            return ClassificationPredictive.from_samples(torch.softmax(outputs.float(), dim=-1))
        mean, var = split_regression_output(outputs)
        return RegressionPredictive.from_samples(mean, var)


def classification(num_classes: int) -> Task:
    return Task("classification", num_classes)


def segmentation(num_classes: int, ignore_index: int = 255) -> Task:
    """Semantic segmentation: a class per pixel; networks output one row of logits per pixel."""
    return Task("segmentation", num_classes, ignore_index)


def regression() -> Task:
    return Task("regression", 2)
