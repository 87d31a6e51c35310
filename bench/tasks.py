"""Learning tasks: the likelihood a network's output is trained with, and how it becomes a predictive."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.predictive import ClassificationPredictive, RegressionPredictive, split_regression_output


@dataclass(frozen=True)
class Task:
    kind: str  # "classification" | "regression"
    num_outputs: int  # classes, or 2 (mean, raw variance) for regression

    def loss(self, output: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Negative log-likelihood of the targets under the network output."""
        if self.kind == "classification":
            return F.cross_entropy(output, y, reduction=reduction)
        mean, var = split_regression_output(output)
        return F.gaussian_nll_loss(mean, y, var, full=True, reduction=reduction)

    def predictive(self, output: torch.Tensor):
        """Predictive of a single deterministic network output."""
        if self.kind == "classification":
            return ClassificationPredictive.from_logits(output)
        return RegressionPredictive.from_output(output)

    def predictive_from_samples(self, outputs: torch.Tensor):
        """Predictive of S stacked outputs (S, N, ...) from sampled networks."""
        if self.kind == "classification":
            return ClassificationPredictive.from_samples(torch.softmax(outputs.float(), dim=-1))
        mean, var = split_regression_output(outputs)
        return RegressionPredictive.from_samples(mean, var)


def classification(num_classes: int) -> Task:
    return Task("classification", num_classes)


def regression() -> Task:
    return Task("regression", 2)
