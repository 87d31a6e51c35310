"""Predictive helpers shared by the Laplace family: the probit approximation and Monte Carlo of
the linearised (GLM) predictive, and the validation loss of the prior-precision search."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def nll(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of labels under predictive probabilities; +inf when the
    predictive is not finite (e.g. sampled networks overflowing at a tiny prior precision), so
    that the grid search never picks such a point (numpy's argmin would return a NaN's index)."""
    loss = F.nll_loss(probs.clamp_min(1e-12).log(), y.to(probs.device))
    return loss if bool(torch.isfinite(loss)) else torch.full_like(loss, float("inf"))


def probit_probs(f_mu: torch.Tensor, f_var: torch.Tensor) -> torch.Tensor:
    """laplace-torch's probit approximation of the linearised predictive:
    ``softmax(f_mu / sqrt(1 + pi/8 diag(f_var)))`` (MacKay 1992); ``f_var`` is the (B, K, K)
    covariance or its (B, K) diagonal."""
    return torch.softmax(probit_kappa(f_var) * f_mu, dim=-1)


def probit_kappa(f_var: torch.Tensor) -> torch.Tensor:
    """MacKay's scaling ``1 / sqrt(1 + pi/8 var)`` of each logit, ``var`` the diagonal of the
    (B, K, K) covariance ``f_var`` or ``f_var`` itself when it is that (B, K) diagonal."""
    var = f_var if f_var.dim() == 2 else f_var.diagonal(dim1=-2, dim2=-1)
    return 1 / torch.sqrt(1.0 + math.pi / 8 * var)


def glm_mc_probs(f_mu: torch.Tensor, f_var: torch.Tensor, n_samples: int, generator: torch.Generator) -> torch.Tensor:
    """``(S, B, K)`` softmax of logits sampled from ``N(f_mu, f_var)``: one K x S standard-normal
    draw shared across the batch (as laplace-torch's ``normal_samples``), with the symmetric
    square root of ``f_var`` (a Cholesky factor fails where ``f_var`` is singular, e.g. when a
    subnet's Jacobian at x has rank < K), so predictions do not depend on the batching."""
    return torch.softmax(glm_mc_logits(f_mu, f_var, n_samples, generator), dim=-1)


def glm_mc_logits(f_mu: torch.Tensor, f_var: torch.Tensor, n_samples: int, generator: torch.Generator,
                  normals: torch.Tensor | None = None) -> torch.Tensor:
    """The ``(S, B, K)`` logits :func:`glm_mc_probs` draws from ``N(f_mu, f_var)``; a (B, K)
    ``f_var`` is a diagonal covariance. ``normals``: the (K, S) standard normals, when the caller
    keeps them (else drawn from ``generator``)."""
    if f_var.dim() == 2:
        f_var = torch.diag_embed(f_var)
    lam, vec = torch.linalg.eigh(f_var)
    scale = vec * lam.clamp_min(0.0).sqrt().unsqueeze(-2)
    # drawn on the generator's device (a CPU generator: the same draws on every device), then moved
    eps = normals if normals is not None else torch.randn(f_mu.shape[-1], n_samples, generator=generator,
                                                          device=generator.device, dtype=f_mu.dtype)
    return (f_mu.unsqueeze(-1) + scale @ eps.to(f_mu.device)).permute(2, 0, 1)
