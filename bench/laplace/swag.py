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
Given a ``resume_path`` (the subnetwork methods pass their fit's work folder), a run stopped part
way (a device call's deadline, a killed job) continues where its last checkpoint stands.
"""
from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from bench.data import TensorLoader
from bench.training import CheckpointSchedule, TrainingClock, restore_training_state, save_training_state


def fit_diagonal_swag(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable, *,
                      n_snapshots: int = 256, snapshot_every: int | None = None, lr: float = 0.01,
                      momentum: float = 0.9, weight_decay: float = 3e-4, batch_size: int = 128,
                      min_var: float = 1e-30, seed: int = 0, device: torch.device | str | None = None,
                      batches=None, resume_path: str | os.PathLike | None = None) -> tuple[torch.Tensor, dict]:
    """Diagonal SWAG variances of every entry of ``parameters_to_vector(model.parameters())``.

    ``model`` is not modified (a copy is trained, in train mode). ``snapshot_every`` is the
    number of SGD steps between snapshots (None: one epoch, as the authors). ``batches`` (an
    iterable factory ``batches(epoch) -> iterable of (x, y)``) replaces the seeded shuffling,
    e.g. to feed the exact batches of a reference implementation. Returns ``(variances,
    info)``; ``info`` holds the steps, epochs, snapshots and the time taken (``fit_time_s``, the
    whole run's, earlier processes' epochs included; ``resumed_s`` that earlier part).

    With ``resume_path`` the run is resumable as :func:`bench.training.train_model` is: after an
    epoch, at most once every :func:`~bench.training.checkpoint_interval` seconds, the network,
    optimiser, data order, torch's random state and the running moments are checkpointed there
    (atomically); a later call with the same arguments continues from that epoch and returns the
    variances of the uninterrupted run. A checkpoint of other settings or another starting network
    is set aside and the run starts over; the file is removed when the run ends.
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
    # on a GPU the data is copied there once, not batch by batch from the host (the same batches)
    loader = TensorLoader(x, y, int(batch_size), shuffle=True, seed=int(seed), device=device)
    mean = sq_mean = None
    n, step, epoch = 0, 0, 0
    resume_path = Path(resume_path) if resume_path else None
    identity = state = None
    if resume_path is not None:  # what a checkpoint must have been written by: these settings, from this network
        identity = {"n_snapshots": int(n_snapshots), "snapshot_every": every, "lr": float(lr),
                    "momentum": float(momentum), "weight_decay": float(weight_decay), "batch_size": int(batch_size),
                    "seed": int(seed), "n_examples": len(x), "start": _digest(parameters_to_vector(params))}
        state = restore_training_state(resume_path, net, opt, loader, identity=identity)
    if state is not None:
        mean, sq_mean = state["mean"].to(device), state["sq_mean"].to(device)
        n, step, epoch = int(state["n"]), int(state["step"]), int(state["epoch"])
    clock = TrainingClock(state)  # the seconds a resumed checkpoint holds count (and go to the fit's time)
    checkpoints = CheckpointSchedule() if resume_path is not None else None

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
        if checkpoints is not None and n < n_snapshots and checkpoints.due():
            save_training_state(resume_path, net, opt, loader, epoch=epoch, step=step, n=n, mean=mean,
                                sq_mean=sq_mean, identity=identity, train_seconds=clock.seconds(),
                                train_usage=clock.usage())
    if resume_path is not None and resume_path.exists():
        resume_path.unlink()
    var = torch.clamp(sq_mean - mean ** 2, min_var)
    info = {"n_snapshots": n, "snapshot_every_steps": every if every is not None else steps_per_epoch,
            "snapshot_unit": "steps" if every is not None else "epoch", "steps": step,
            "epochs": step / steps_per_epoch if steps_per_epoch else epoch, "lr": lr, "momentum": momentum,
            "weight_decay": weight_decay, "batch_size": int(batch_size), "fit_time_s": clock.seconds(),
            "resumed_s": clock.earlier}
    return var.cpu(), info


def _digest(w: torch.Tensor) -> str:
    """SHA-256 of a weight vector's bytes: which network a SWAG checkpoint started from."""
    return hashlib.sha256(w.detach().float().cpu().numpy().tobytes()).hexdigest()
