"""Is a fitted variational posterior's sigma where its ELBO wants it? Measured after the fit.

Scale every sigma by a common factor c. At a stationary point of the objective in sigma the
derivative ``d objective / d log c`` at c = 1 is zero; it is the sum over the stochastic weights
of ``d objective / d log sigma_i``. It splits into the likelihood's part (positive when the data
want less noise) and the KL's part (negative while sigma is below the prior's scale). The
*residual* ``(L + K) / (|L| + |K|)`` is 0 at rest, -1 when only the KL acts on sigma (the
likelihood does not care: sigma is far below where the data would hold it), +1 when only the
likelihood does. :mod:`bench.validity` reads it (check ``vi_stationarity``).

Measured on ``batches`` training batches (default :data:`BATCHES`) with the KL weight at its end
value, the network in the fit's (training) mode; buffers (batch-norm running statistics) and the
random state are restored afterwards, so the fitted method is unchanged.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


#: training batches the fitted sigma's stationarity is measured on (the standard error of the
#: residual fell from about 0.3 to 0.1 from 8 to 32 batches on rotated MNIST)
BATCHES = 32


def softplus_dlog(rho: torch.Tensor) -> torch.Tensor:
    """d log sigma / d rho for sigma = softplus(rho): sigmoid(rho) / softplus(rho)."""
    return torch.sigmoid(rho) / torch.nn.functional.softplus(rho)


def _flat(grads, rhos, dlog) -> torch.Tensor:
    """d objective / d log sigma of every stochastic entry, one flat float64 vector."""
    parts = [(torch.zeros_like(r) if g is None else g / dlog(r.detach())).detach().reshape(-1).double().cpu()
             for g, r in zip(grads, rhos)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def sigma_stationarity(model: nn.Module, rhos: list[torch.Tensor], likelihood: Callable, kl_term: Callable,
                       loader, *, batches: int = BATCHES, seed: int = 0,
                       dlog: Callable[[torch.Tensor], torch.Tensor] = softplus_dlog,
                       weight_tolerance: float = 0.3) -> dict:
    """``{"residual", "residual_se", "likelihood_part", "kl_part", "batches", "weights": {...}}``.

    ``likelihood(model, x, y)``: the objective's data term per observation on a batch (a scalar
    tensor); ``kl_term(model)``: its KL term as it enters the same objective (beta KL / divisor);
    ``rhos``: the tensors that parametrise the sigmas, ``dlog(rho)`` their d log sigma / d rho.
    ``likelihood_part`` / ``kl_part``: the mean over batches of each part of d objective / d log c
    (every sigma scaled by c: the sum over the entries).

    ``weights``: the same split per stochastic entry, since an optimiser with per-parameter steps
    (Adam) moves each sigma by its own gradient, and a few entries of high curvature can dominate
    the sum while most others are still pulled by the KL alone. An entry is *not stationary* when
    its mean gradient g_i (likelihood + KL) is both beyond twice its standard error over the batches
    and more than ``weight_tolerance`` of |likelihood part| + |KL part|; ``not_stationary`` is the
    fraction of such entries, ``kl_pulls_up`` / ``likelihood_pulls_down`` split it by the sign
    (g_i < 0: the KL wants a larger sigma; > 0: the likelihood wants a smaller one).
    """
    if not sum(r.numel() for r in rhos):  # no stochastic weight (e.g. PBN's fine-tuning-only control)
        return {}
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    was_training = model.training
    per_batch = []
    total = total_sq = None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.train()
            kl = kl_term(model)
            k_vec = _flat(torch.autograd.grad(kl, rhos, allow_unused=True), rhos, dlog)
            k_part = float(k_vec.sum())
            for i, (x, y) in enumerate(loader):
                if i == batches:
                    break
                l_vec = _flat(torch.autograd.grad(likelihood(model, x, y), rhos, allow_unused=True), rhos, dlog)
                per_batch.append(float(l_vec.sum()))
                total = l_vec.clone() if total is None else total + l_vec
                total_sq = l_vec.square() if total_sq is None else total_sq + l_vec.square()
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        model.train(was_training)
    if not per_batch:
        return {}
    n = len(per_batch)
    l_part = sum(per_batch) / n
    scale = abs(l_part) + abs(k_part)
    if scale == 0:
        return {"residual": 0.0, "residual_se": 0.0, "likelihood_part": 0.0, "kl_part": 0.0, "batches": n}
    resid = [(v + k_part) / scale for v in per_batch]
    mean = sum(resid) / n
    se = math.sqrt(sum((r - mean) ** 2 for r in resid) / (n - 1) / n) if n > 1 else None
    out = {"residual": mean, "residual_se": se, "likelihood_part": l_part, "kl_part": k_part, "batches": n}
    if n > 1 and total is not None and total.numel():
        m = total / n
        se_i = ((total_sq / n - m.square()).clamp_min(0) * n / (n - 1) / n).sqrt()
        g = m + k_vec
        moving = (g.abs() > 2 * se_i) & (g.abs() > weight_tolerance * (m.abs() + k_vec.abs()))
        out["weights"] = {"n": int(g.numel()), "not_stationary": float(moving.double().mean()),
                          "kl_pulls_up": float((moving & (g < 0)).double().mean()),
                          "likelihood_pulls_down": float((moving & (g > 0)).double().mean()),
                          "tolerance": weight_tolerance}
    return out
