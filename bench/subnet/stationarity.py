"""Is a fitted variational posterior's sigma where its ELBO wants it? Measured after the fit.

Scale every sigma by a common factor c. At a stationary point of the objective in sigma the
derivative ``d objective / d log c`` at c = 1 is zero; it is the sum over the stochastic weights
of ``d objective / d log sigma_i``. It splits into the likelihood's part (positive when the data
want less noise) and the KL's part (negative while sigma is below the prior's scale). The
*residual* ``(L + K) / (|L| + |K|)`` is 0 at rest, -1 when only the KL acts on sigma (the
likelihood does not care: sigma is far below where the data would hold it), +1 when only the
likelihood does. :mod:`bench.validity` reads it (check ``vi_stationarity``).

Measured on ``batches`` training batches with the KL weight at its end value, the network in the
fit's (training) mode; buffers (batch-norm running statistics) and the random state are restored
afterwards, so the fitted method is unchanged.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


def softplus_dlog(rho: torch.Tensor) -> torch.Tensor:
    """d log sigma / d rho for sigma = softplus(rho): sigmoid(rho) / softplus(rho)."""
    return torch.sigmoid(rho) / torch.nn.functional.softplus(rho)


def sigma_stationarity(model: nn.Module, rhos: list[torch.Tensor], likelihood: Callable, kl_term: Callable,
                       loader, *, batches: int = 8, seed: int = 0,
                       dlog: Callable[[torch.Tensor], torch.Tensor] = softplus_dlog) -> dict:
    """``{"residual", "residual_se", "likelihood_part", "kl_part", "batches"}``.

    ``likelihood(model, x, y)``: the objective's data term per observation on a batch (a scalar
    tensor); ``kl_term(model)``: its KL term as it enters the same objective (beta KL / divisor);
    ``rhos``: the tensors that parametrise the sigmas, ``dlog(rho)`` their d log sigma / d rho.
    ``likelihood_part`` / ``kl_part``: the mean over batches of each part of d objective / d log c.
    """
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    was_training = model.training
    per_batch = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.train()
            kl = kl_term(model)
            g_kl = torch.autograd.grad(kl, rhos, allow_unused=True)
            k_part = sum(float((g / dlog(r.detach())).sum()) for g, r in zip(g_kl, rhos) if g is not None)
            for i, (x, y) in enumerate(loader):
                if i == batches:
                    break
                g_nll = torch.autograd.grad(likelihood(model, x, y), rhos, allow_unused=True)
                per_batch.append(sum(float((g / dlog(r.detach())).sum()) for g, r in zip(g_nll, rhos)
                                     if g is not None))
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        model.train(was_training)
    if not per_batch:
        return {}
    l_part = sum(per_batch) / len(per_batch)
    scale = abs(l_part) + abs(k_part)
    if scale == 0:
        return {"residual": 0.0, "residual_se": 0.0, "likelihood_part": 0.0, "kl_part": 0.0, "batches": len(per_batch)}
    resid = [(v + k_part) / scale for v in per_batch]
    mean = sum(resid) / len(resid)
    se = (math.sqrt(sum((r - mean) ** 2 for r in resid) / (len(resid) - 1) / len(resid))
          if len(resid) > 1 else None)
    return {"residual": mean, "residual_se": se, "likelihood_part": l_part, "kl_part": k_part,
            "batches": len(per_batch)}
