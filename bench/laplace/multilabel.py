"""The Laplace family's predictive on multi-label networks (task kind ``multilabel``): L
independent Bernoullis, one sigmoid per logit, instead of one softmax over the outputs.

The linearised (GLM) predictive gives each label's logit the Gaussian ``N(f_mu_l, var_l)``,
``var_l`` the l-th diagonal entry of ``J Sigma J^T``; a label's predictive probability
``E[sigmoid(f_l)]`` depends on that marginal only. :func:`probit_sigmoid_probs` is MacKay's probit
approximation of it (its Monte Carlo estimate: the sigmoids of the logits
:func:`bench.laplace.predictive.glm_mc_logits` draws jointly from ``N(f_mu, J Sigma J^T)``, as for
the softmax), and :func:`multilabel_nll` the validation loss
of the prior-precision search: the binary cross-entropy summed over labels, mean over examples
(the NLL of :mod:`bench.multilabel_metrics`). The GGN is :mod:`bench.laplace.subnet_jacobians`'
``BernoulliSubnetJacobianGGN``.
"""
from __future__ import annotations

import math

import torch

from bench.laplace.predictive import probit_kappa
from bench.multilabel_metrics import nll as _bce_summed_over_labels


def probit_sigmoid_probs(f_mu: torch.Tensor, f_var: torch.Tensor) -> torch.Tensor:
    """``sigmoid(f_mu / sqrt(1 + pi/8 var))`` per label (MacKay 1992), ``var`` the diagonal of
    ``f_var``: the (B, L, L) covariance of the logits or its (B, L) diagonal."""
    return torch.sigmoid(probit_kappa(f_var) * f_mu)


def multilabel_nll(probs: torch.Tensor, y: torch.Tensor) -> float:
    """The multi-label NLL of :mod:`bench.multilabel_metrics` (binary cross-entropy summed over the
    labels, mean over examples); +inf when it is not finite, so that the grid search never picks
    such a point."""
    loss = _bce_summed_over_labels(probs, y.to(probs.device))
    return loss if math.isfinite(loss) else math.inf
