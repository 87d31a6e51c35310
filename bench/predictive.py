"""What a method's ``predict`` returns.

Classification: mean class probabilities ``probs`` (N, K) and, for sampling methods, the
per-sample probabilities ``sample_probs`` (S, N, K) whose mean is ``probs``. Methods that
propagate moments (VDP++) may add ``variance`` (N,): the propagated output variance of the
predicted class, reported as the ``vdp_variance`` metric.
Regression: a Gaussian (mixture) summarised by ``mean`` and ``var`` (N,), with the
per-sample means and variances when the method samples.
Multi-label: per-label probabilities ``probs`` (N, L) of independent Bernoullis (the mean of the
sampled sigmoids) and, for sampling methods, ``sample_probs`` (S, N, L).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ClassificationPredictive:
    probs: torch.Tensor
    sample_probs: torch.Tensor | None = None
    variance: torch.Tensor | None = None  # (N,) output variance of the predicted class (VDP++)

    @classmethod
    def from_samples(cls, sample_probs: torch.Tensor) -> "ClassificationPredictive":
        return cls(probs=sample_probs.mean(0), sample_probs=sample_probs)

    @classmethod
    def from_logits(cls, logits: torch.Tensor) -> "ClassificationPredictive":
        return cls(probs=torch.softmax(logits.float(), dim=-1))

    @classmethod
    def cat(cls, parts: list["ClassificationPredictive"]) -> "ClassificationPredictive":
        probs = torch.cat([p.probs for p in parts])
        sample_probs = variance = None
        if all(p.sample_probs is not None for p in parts):
            sample_probs = torch.cat([p.sample_probs for p in parts], dim=1)
        if all(p.variance is not None for p in parts):
            variance = torch.cat([p.variance for p in parts])
        return cls(probs, sample_probs, variance)

    def to(self, device) -> "ClassificationPredictive":
        f = lambda t: None if t is None else t.to(device)  # noqa: E731
        return ClassificationPredictive(self.probs.to(device), f(self.sample_probs), f(self.variance))


@dataclass
class RegressionPredictive:
    mean: torch.Tensor
    var: torch.Tensor
    sample_means: torch.Tensor | None = None
    sample_vars: torch.Tensor | None = None

    @classmethod
    def from_samples(cls, means: torch.Tensor, variances: torch.Tensor) -> "RegressionPredictive":
        """Moment-match the equal-weight Gaussian mixture of S samples (S, N)."""
        mean = means.mean(0)
        var = (variances + means.pow(2)).mean(0) - mean.pow(2)
        return cls(mean, var.clamp_min(1e-12), means, variances)

    @classmethod
    def from_output(cls, out: torch.Tensor) -> "RegressionPredictive":
        mean, var = split_regression_output(out)
        return cls(mean, var)

    @classmethod
    def cat(cls, parts: list["RegressionPredictive"]) -> "RegressionPredictive":
        mean = torch.cat([p.mean for p in parts])
        var = torch.cat([p.var for p in parts])
        if all(p.sample_means is not None for p in parts):
            return cls(mean, var, torch.cat([p.sample_means for p in parts], 1),
                       torch.cat([p.sample_vars for p in parts], 1))
        return cls(mean, var)

    def to(self, device) -> "RegressionPredictive":
        f = lambda t: None if t is None else t.to(device)  # noqa: E731
        return RegressionPredictive(f(self.mean), f(self.var), f(self.sample_means), f(self.sample_vars))


def split_regression_output(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression network outputs (mean, raw variance) per example; variance = softplus + floor."""
    mean, raw = out[..., 0], out[..., 1]
    return mean, torch.nn.functional.softplus(raw) + 1e-6


def concat(parts):
    return type(parts[0]).cat(parts)


@dataclass
class MultilabelPredictive:
    """Multi-label: ``probs`` (N, L), each entry the predictive probability that label l is present
    (the mean over posterior samples of the sigmoids), and the per-sample ``sample_probs`` (S, N, L)
    for sampling methods. The labels are independent Bernoullis given the weights; their rows do not
    sum to 1."""

    probs: torch.Tensor
    sample_probs: torch.Tensor | None = None

    @classmethod
    def from_samples(cls, sample_probs: torch.Tensor) -> "MultilabelPredictive":
        return cls(probs=sample_probs.mean(0), sample_probs=sample_probs)

    @classmethod
    def from_logits(cls, logits: torch.Tensor) -> "MultilabelPredictive":
        return cls(probs=torch.sigmoid(logits.float()))

    @classmethod
    def cat(cls, parts: list["MultilabelPredictive"]) -> "MultilabelPredictive":
        sample_probs = None
        if all(p.sample_probs is not None for p in parts):
            sample_probs = torch.cat([p.sample_probs for p in parts], dim=1)
        return cls(torch.cat([p.probs for p in parts]), sample_probs)

    def to(self, device) -> "MultilabelPredictive":
        s = None if self.sample_probs is None else self.sample_probs.to(device)
        return MultilabelPredictive(self.probs.to(device), s)
