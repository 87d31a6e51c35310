"""Learning tasks: the likelihood a network's output is trained with, and how it becomes a predictive."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.predictive import (ClassificationPredictive, MultilabelPredictive, RegressionPredictive,
                               split_regression_output)


@dataclass(frozen=True)
class Task:
    kind: str  # "classification" | "regression" | "segmentation" | "multilabel"
    num_outputs: int  # classes, labels (multilabel), or 2 (mean, raw variance) for regression
    #: segmentation: the label of pixels that count nowhere (no loss, no metric)
    ignore_index: int | None = None

    def loss(self, output: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Negative log-likelihood of the targets under the network output. Segmentation networks
        output one row per pixel (``(B H W, K)``, :class:`bench.models.PixelRows`): the labels
        ``(B, H, W)`` are flattened to match and ignored pixels left out (the mean is over the
        labelled pixels). Multilabel: binary cross-entropy with logits against (N, L) 0/1 targets,
        summed over the L labels of an example (its NLL under independent Bernoullis), so that the
        mean over examples is per example as for classification and an ELBO's KL / N stays right."""
        if self.kind == "multilabel":
            per_example = F.binary_cross_entropy_with_logits(output, y.to(output.dtype), reduction="none").sum(-1)
            if reduction == "none":
                return per_example
            return per_example.sum() if reduction == "sum" else per_example.mean()
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
        if self.kind == "multilabel":
            return MultilabelPredictive.from_logits(output)
        if self.per_class:
            return ClassificationPredictive.from_logits(output)
        return RegressionPredictive.from_output(output)

    def predictive_from_samples(self, outputs: torch.Tensor):
        """Predictive of S stacked outputs (S, N, ...) from sampled networks."""
        if self.kind == "multilabel":  # the mean of the sigmoids, label by label
            return MultilabelPredictive.from_samples(torch.sigmoid(outputs.float()))
        if self.per_class:
            return ClassificationPredictive.from_samples(torch.softmax(outputs.float(), dim=-1))
        mean, var = split_regression_output(outputs)
        return RegressionPredictive.from_samples(mean, var)


def classification(num_classes: int) -> Task:
    return Task("classification", num_classes)


def segmentation(num_classes: int, ignore_index: int = 255) -> Task:
    """Semantic segmentation: a class per pixel; networks output one row of logits per pixel."""
    return Task("segmentation", num_classes, ignore_index)


def multilabel(num_labels: int) -> Task:
    """Multi-label classification (e.g. ChestMNIST's 14 findings): L independent yes/no labels per
    example, targets (N, L) float 0/1, one logit per label and a sigmoid (not a softmax) each."""
    return Task("multilabel", int(num_labels))


def regression() -> Task:
    return Task("regression", 2)
