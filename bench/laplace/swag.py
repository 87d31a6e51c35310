"""Diagonal SWAG (Maddox et al. 2019): the marginal variance of each weight along an SGD
trajectory at a constant learning rate, started from the MAP weights.

The subnetwork-Laplace authors estimate the marginal variances of their Wasserstein criterion
with diagonal SWAG (their code; laplace-torch's ``LargestVarianceSWAGSubnetMask`` wraps the
same estimator as ``laplace.utils.swag.fit_diagonal_swag_var``): SGD with momentum 0.9 and
weight decay 3e-4, ``Var[w] = E[w^2] - E[w]^2`` over the snapshots, clamped at 1e-30. The
authors' snapshot count is not given in the paper; laplace-torch's port defaults to 40 snapshots
at lr 1e-2, one per epoch. This project's default (``subnet_laplace.swag_n_snapshots``) is 256,
one per epoch: its own choice, not the authors'.

:func:`fit_diagonal_swag` is the same algorithm with two differences that do not change the
estimator: batches come from :class:`bench.data.TensorLoader` (a seeded permutation per epoch;
a ``DataLoader`` over a ``TensorDataset`` collates example by example, ~10x slower on MNIST), and
the snapshot interval can be given in optimiser steps (``snapshot_every``) instead of epochs.
With ``snapshot_every=None`` (one epoch) it reproduces ``fit_diagonal_swag_var`` exactly on the
same batches (tests/test_laplace_machinery.py). A shorter interval is a cheaper estimate of the
same stationary spread (docs/subnet_laplace.md measures how much the selected subnet changes).
"""
from __future__ import annotations

import copy
import time
from typing import Callable

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from bench.data import TensorLoader


def fit_diagonal_swag(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable, *,
                      n_snapshots: int = 256, snapshot_every: int | None = None, lr: float = 0.01,
                      momentum: float = 0.9, weight_decay: float = 3e-4, batch_size: int = 128,
                      min_var: float = 1e-30, seed: int = 0, device: torch.device | str | None = None,
                      batches=None) -> tuple[torch.Tensor, dict]:
    """Diagonal SWAG variances of every entry of ``parameters_to_vector(model.parameters())``.

    ``model`` is not modified (a copy is trained, in train mode). ``snapshot_every`` is the
    number of SGD steps between snapshots (None: one epoch, as the authors). ``batches`` (an
    iterable factory ``batches(epoch) -> iterable of (x, y)``) replaces the seeded shuffling,
    e.g. to feed the exact batches of a reference implementation. Returns ``(variances,
    info)``; ``info`` holds the steps, epochs, snapshots and the time taken.
    """
    net = copy.deepcopy(model)
    device = torch.device(device) if device is not None else next(net.parameters()).device
    net.to(device).train()
    for p in net.parameters():
        p.requires_grad_(True)
    params = [p for p in net.parameters()]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    steps_per_epoch = -(-len(x) // int(batch_size)) if batches is None else None
    every = snapshot_every
    loader = TensorLoader(x, y, int(batch_size), shuffle=True, seed=int(seed))
    mean = sq_mean = None
    n, step, epoch = 0, 0, 0
    t0 = time.perf_counter()

    def snapshot():
        nonlocal mean, sq_mean, n
        w = parameters_to_vector(params).detach()
        if mean is None:
            mean, sq_mean = torch.zeros_like(w), torch.zeros_like(w)
        old, new = n / (n + 1), 1 / (n + 1)
        mean = mean * old + w * new
        sq_mean = sq_mean * old + w ** 2 * new
        n += 1

    while n < n_snapshots:
        it = batches(epoch) if batches is not None else loader
        for xb, yb in it:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad(set_to_none=True)
            loss_fn(net(xb), yb).backward()
            opt.step()
            step += 1
            if every is not None and step % int(every) == 0:
                snapshot()
                if n >= n_snapshots:
                    break
        epoch += 1
        if every is None:
            snapshot()
    var = torch.clamp(sq_mean - mean ** 2, min_var)
    info = {"n_snapshots": n, "snapshot_every_steps": every if every is not None else steps_per_epoch,
            "snapshot_unit": "steps" if every is not None else "epoch", "steps": step,
            "epochs": step / steps_per_epoch if steps_per_epoch else epoch, "lr": lr, "momentum": momentum,
            "weight_decay": weight_decay, "batch_size": int(batch_size), "fit_time_s": time.perf_counter() - t0}
    return var.cpu(), info
