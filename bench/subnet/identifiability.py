"""Weights the training data cannot identify: zero gradient in training mode.

A weight whose mini-batch gradient is zero on every training batch in training mode has no
likelihood term of its own: nothing in the data moves it, and its "posterior variance" under any
estimator is its prior (diagonal Laplace: 1 / (h + tau) with h ~ 0 in exact arithmetic) or
whatever SGD noise leaks in. Variance-based criteria rank such weights first and so pick the
weights least able to carry predictive uncertainty. On the benchmark's networks this happens
because batch norm cancels a constant input: MNIST pixels that are never inked enter
LeNet-300-100's first layer as the constant -0.42 (normalised 0), and in training mode the
batch-norm layer after it subtracts the batch mean, so ``dL/dW[i, j] = c * sum_n dL/dz_ni = 0``;
the biases of every layer followed by batch norm vanish the same way. In eval mode (the mode a
Laplace approximation is fitted in) batch norm is a fixed affine map, so these weights show a
small, non-zero curvature and escape an ``h == 0`` guard.

:func:`non_identifiable` measures, in training mode on a copy of the network (batch-norm
running statistics untouched), the mean squared mini-batch gradient of every weight over the
training data, and flags the candidates whose value is at most ``rtol`` times the median over
candidates. Floating-point residues of an exact cancellation sit ~10 orders of magnitude below
that median; a pixel inked in 0.5 % of the images sits ~2-3 orders below it.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
from torch import nn


def train_mode_grad_second_moment(model: nn.Module, batches, loss_fn: Callable, *,
                                  device: torch.device | str | None = None) -> tuple[torch.Tensor, int]:
    """Mean over ``batches`` of the squared mini-batch gradient of ``loss_fn`` w.r.t. every
    entry of ``parameters_to_vector(model.parameters())``, in training mode on a copy of
    ``model``. Returns ``(second_moment, n_batches)``."""
    net = copy.deepcopy(model)
    device = torch.device(device) if device is not None else next(net.parameters()).device
    net.to(device).train()
    params = list(net.parameters())
    for p in params:
        p.requires_grad_(True)
    acc = None
    n = 0
    for xb, yb in batches:
        xb, yb = xb.to(device), yb.to(device)
        grads = torch.autograd.grad(loss_fn(net(xb), yb), params, allow_unused=True)
        g = torch.cat([(gi if gi is not None else torch.zeros_like(p)).reshape(-1) for gi, p in zip(grads, params)])
        acc = g.detach() ** 2 if acc is None else acc + g.detach() ** 2
        n += 1
    if acc is None:
        raise ValueError("train_mode_grad_second_moment needs at least one batch")
    return (acc / n).cpu(), n


def non_identifiable(model: nn.Module, batches, loss_fn: Callable, candidates: torch.Tensor, *,
                     rtol: float = 1e-8, device=None) -> tuple[torch.Tensor, dict]:
    """Boolean mask over the flat parameter vector: True for candidate weights whose training-mode
    mean squared gradient is <= ``rtol`` x the candidates' median. ``info`` holds the count, the
    threshold and the median."""
    g2, n_batches = train_mode_grad_second_moment(model, batches, loss_fn, device=device)
    mask = torch.zeros_like(g2, dtype=torch.bool)
    cand = torch.as_tensor(candidates, dtype=torch.long)
    if cand.numel() == 0:
        return mask, {"n_non_identifiable": 0, "n_batches": n_batches, "rtol": rtol}
    med = float(g2[cand].median())
    thr = rtol * med
    mask[cand] = g2[cand] <= thr
    return mask, {"n_non_identifiable": int(mask.sum()), "n_candidates": int(cand.numel()), "rtol": rtol,
                  "threshold": thr, "grad_sq_median": med, "n_batches": n_batches}
