"""The Laplace family's predictive on multi-label networks (task kind ``multilabel``): L
independent Bernoullis, one sigmoid per logit, instead of one softmax over the outputs.

The linearised (GLM) predictive gives each label's logit the Gaussian ``N(f_mu_l, var_l)``,
``var_l`` the l-th diagonal entry of ``J Sigma J^T``; a label's predictive probability
``E[sigmoid(f_l)]`` depends on that marginal only. :func:`probit_sigmoid_probs` is MacKay's probit
approximation of it, :func:`glm_mc_sigmoid_probs` its Monte Carlo estimate (logits drawn jointly
from ``N(f_mu, J Sigma J^T)``, as for the softmax), and :func:`multilabel_nll` the validation loss
of the prior-precision search: the binary cross-entropy summed over labels, mean over examples
(the NLL of :mod:`bench.multilabel_metrics`). The GGN is :mod:`bench.laplace.subnet_jacobians`'
``BernoulliSubnetJacobianGGN``.
"""
from __future__ import annotations

import math

import torch

#: probabilities are clamped here before their log (as bench.multilabel_metrics.nll)
EPS = 1e-12


def _diagonal(f_var: torch.Tensor) -> torch.Tensor:
    return f_var if f_var.dim() == 2 else f_var.diagonal(dim1=-2, dim2=-1)


def probit_sigmoid_probs(f_mu: torch.Tensor, f_var: torch.Tensor) -> torch.Tensor:
    """``sigmoid(f_mu / sqrt(1 + pi/8 var))`` per label (MacKay 1992), ``var`` the diagonal of
    ``f_var``: the (B, L, L) covariance of the logits or its (B, L) diagonal."""
    return torch.sigmoid(f_mu / torch.sqrt(1.0 + math.pi / 8 * _diagonal(f_var)))


def glm_mc_sigmoid_logits(f_mu: torch.Tensor, f_var: torch.Tensor, n_samples: int,
                          generator: torch.Generator) -> torch.Tensor:
    """``(S, B, L)`` logits drawn from ``N(f_mu, f_var)`` as bench.laplace.predictive.glm_mc_probs
    draws them (one L x S standard-normal draw shared across the batch, the symmetric square
    root of ``f_var``): predictions do not depend on the batching. A (B, L) ``f_var`` is a
    diagonal covariance."""
    if f_var.dim() == 2:
        f_var = torch.diag_embed(f_var)
    lam, vec = torch.linalg.eigh(f_var)
    scale = vec * lam.clamp_min(0.0).sqrt().unsqueeze(-2)
    eps = torch.randn(f_mu.shape[-1], n_samples, generator=generator, device=f_mu.device, dtype=f_mu.dtype)
    return (f_mu.unsqueeze(-1) + scale @ eps).permute(2, 0, 1)


def glm_mc_sigmoid_probs(f_mu: torch.Tensor, f_var: torch.Tensor, n_samples: int,
                         generator: torch.Generator) -> torch.Tensor:
    """``(S, B, L)`` sigmoids of :func:`glm_mc_sigmoid_logits`; their mean over S is the Monte
    Carlo estimate of each label's ``E[sigmoid(f_l)]``."""
    return torch.sigmoid(glm_mc_sigmoid_logits(f_mu, f_var, n_samples, generator))


def multilabel_nll(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean over examples of the binary cross-entropy of 0/1 targets ``y`` (B, L) under the
    per-label probabilities ``probs``, summed over the labels (probabilities clamped at 1e-12 on
    both sides); +inf when it is not finite, so that the grid search never picks such a point."""
    p, y = probs.double(), y.to(probs.device).double()
    ll = y * torch.log(p.clamp_min(EPS)) + (1 - y) * torch.log((1 - p).clamp_min(EPS))
    loss = -ll.sum(-1).mean()
    return loss if bool(torch.isfinite(loss)) else torch.full_like(loss, float("inf"))
