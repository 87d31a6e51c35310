"""The VDP++ training objective: negative ELBO (eq. 10) = expected NLL (eq. 11) + KL (eq. 12).

Per example and averaged over a mini-batch::

    loss = NLL(y | mu_y, sigma_y^2) + kl_weight * KL[q || p] / N_train

``kl_weight`` is the balance the paper (Sec. 5) found decisive: too large and the network
compresses itself at the cost of accuracy, too small and it becomes deterministic.

Likelihoods:

* ``"gaussian"`` (eq. 11): the one-hot target under ``N(mu_y, diag(sigma_y^2))``, with
  ``mu_y, sigma_y^2`` the softmax output moments (eq. 8-9). Eq. 11 is written with
  ``sum_k log sigma_k^2``; the Gaussian log-density has ``1/2 sum_k log sigma_k^2``, which we
  use (the full density, ``l/2 log 2 pi`` included). Because the moment propagation replaces
  the Monte Carlo average, M = 1. A floor ``var_floor`` is added to the variance: the softmax
  variance of a confident output goes to 0 and the density would be unbounded.
* ``"cross_entropy"`` (Sec. 5, the paper's variant for ImageNet): categorical cross-entropy of
  the logit means, plus the second-order (delta-method) expectation of it under the logit
  variance, ``E[CE(z)] ~ CE(mu) + 1/2 sum_k p_k (1 - p_k) sigma_z,k^2`` (the diagonal of the
  softmax cross-entropy Hessian ``diag(p) - p p^T``). The paper does not give the formula; the
  correction keeps the data term dependent on the variances (without it the variances would be
  set by the KL alone). ``ce_variance_term=False`` gives the bare cross-entropy.

Multi-label outputs (``multilabel=True``; one logit per label, the labels independent Bernoullis,
as the task's own loss): the same two likelihoods label by label, summed over the labels of an
example. ``"gaussian"``: the 0/1 label vector under ``N(mu_y, diag(sigma_y^2))`` with the sigmoid
output moments (:func:`~bench.vdp.layers.sigmoid_moments`). ``"cross_entropy"``: the binary
cross-entropy of the logit means plus its second-order expectation, ``1/2 p_l (1 - p_l)
sigma_z,l^2`` per label (the BCE's second derivative in the logit is ``p (1 - p)``, whatever the
label).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bench.errors import BenchError
from bench.vdp.layers import sigmoid_moments, softmax_moments

LIKELIHOODS = ("gaussian", "cross_entropy")


def gaussian_nll(p: torch.Tensor, var: torch.Tensor, y: torch.Tensor, var_floor: float) -> torch.Tensor:
    """Per-example ``-log N(onehot(y) | p, diag(var + floor))`` (eq. 11), shape (N,)."""
    onehot = F.one_hot(y.long(), p.shape[-1]).to(p.dtype)
    v = var + var_floor
    return 0.5 * (math.log(2 * math.pi) + torch.log(v) + (onehot - p).square() / v).sum(-1)


def expected_cross_entropy(mu: torch.Tensor, var: torch.Tensor, y: torch.Tensor,
                           variance_term: bool = True) -> torch.Tensor:
    """Per-example cross-entropy of the logit means (+ the delta-method variance term), (N,)."""
    ce = F.cross_entropy(mu, y, reduction="none")
    if not variance_term:
        return ce
    p = torch.softmax(mu, -1)
    return ce + 0.5 * (p * (1 - p) * var).sum(-1)


def multilabel_nll(mu: torch.Tensor, var: torch.Tensor, y: torch.Tensor, likelihood: str = "gaussian", *,
                   var_floor: float = 1e-3, ce_variance_term: bool = True) -> torch.Tensor:
    """Per-example negative log-likelihood of (N, L) 0/1 labels given the (N, L) logit moments,
    summed over the labels, shape (N,)."""
    y = y.to(mu.dtype)
    if likelihood == "gaussian":
        p, v = sigmoid_moments(mu, var)
        v = v + var_floor
        return 0.5 * (math.log(2 * math.pi) + torch.log(v) + (y - p).square() / v).sum(-1)
    if likelihood == "cross_entropy":
        bce = F.binary_cross_entropy_with_logits(mu, y, reduction="none")
        if ce_variance_term:
            bce = bce + 0.5 * torch.sigmoid(mu) * torch.sigmoid(-mu) * var
        return bce.sum(-1)
    raise BenchError(f"vdp: likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")


def data_nll(mu: torch.Tensor, var: torch.Tensor, y: torch.Tensor, likelihood: str = "gaussian", *,
             var_floor: float = 1e-3, ce_variance_term: bool = True, multilabel: bool = False) -> torch.Tensor:
    """Per-example negative log-likelihood of the labels given the logit moments, shape (N,):
    classes (a softmax) or, with ``multilabel``, independent labels (sigmoids)."""
    if multilabel:
        return multilabel_nll(mu, var, y, likelihood, var_floor=var_floor, ce_variance_term=ce_variance_term)
    if likelihood == "gaussian":
        p, v = softmax_moments(mu, var)
        return gaussian_nll(p, v, y, var_floor)
    if likelihood == "cross_entropy":
        return expected_cross_entropy(mu, var, y, ce_variance_term)
    raise BenchError(f"vdp: likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")


def vdp_loss(num_train: int, *, kl_weight: float, likelihood: str = "gaussian", prior_scale: float = 1.0,
             var_floor: float = 1e-3, ce_variance_term: bool = True, log: dict | None = None,
             ignore_index: int | None = None, multilabel: bool = False):
    """``loss_fn(model, x, y, fraction_done)`` for :func:`bench.training.train_model`.

    Segmentation (``ignore_index`` set): the network's rows are pixels, ``y`` label maps are
    flattened to match and the ignored pixels left out of the mean, as the task's own loss does (by
    a mask, not a selection, which would wait for the GPU at every step; a batch of ignored pixels only
    has a data term of 0);
    ``num_train`` is then the number of training pixels. Multi-label (``multilabel``): ``y`` is (N, L)
    0/1 and the data term is :func:`multilabel_nll`."""
    if num_train <= 0:
        raise BenchError("the ELBO needs the number of training examples (num_train)")
    if likelihood not in LIKELIHOODS:
        raise BenchError(f"vdp: likelihood must be one of {LIKELIHOODS}, got {likelihood!r}")

    def fn(model, x, y, _fraction_done):
        mu, var = model(x)
        if ignore_index is not None:  # masked, not selected: a selection's size is read on the host
            y = y.reshape(-1)
            keep = y != ignore_index
            y = y.masked_fill(~keep, 0)
        each = data_nll(mu, var, y, likelihood, var_floor=var_floor, ce_variance_term=ce_variance_term,
                        multilabel=multilabel)
        nll = each.mean() if ignore_index is None else each.masked_fill(~keep, 0).sum() / keep.sum().clamp_min(1)
        kl = model.kl(prior_scale)
        loss = nll + float(kl_weight) * kl / num_train
        if log is not None:  # tensors: the caller reads them when it needs them, not at every step
            log["nll"], log["kl"] = nll.detach(), kl.detach()
        return loss

    return fn
