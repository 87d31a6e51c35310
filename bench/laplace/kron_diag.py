"""The diagonal of the linearised predictive's covariance for a last-layer KFAC Laplace, without
Jacobians.

laplace-torch computes ``J Sigma J^T`` for ``KronLLLaplace`` from the explicit last-layer
Jacobian ``J`` of shape ``(B, K, K * D)`` (its fast path for this case is disabled upstream):
``B * K^2 * D`` floats, 2 * 10^9 per ImageNet example (K = 1,000 classes, D = 2,048 features of a
ResNet-50), which makes the last-layer Laplace unusable there. The probit predictive needs only the
diagonal, and for the last layer it has a closed form. With the posterior precision of the weight
block ``(Q1 Λ1 Q1^T) ⊗ (Q2 Λ2 Q2^T) + δ`` (factor 1: outputs x outputs, factor 2: inputs x inputs,
laplace-torch's ``KronDecomposed``) the Jacobian of logit k is ``e_k φ^T`` (φ: the features), so

    Var f_k = Σ_ij Q1[k, i]^2 (Q2[:, j] · φ)^2 / (λ1_i λ2_j + δ)      (undamped)
            = Σ_ij Q1[k, i]^2 (Q2[:, j] · φ)^2 / ((λ1_i + √δ)(λ2_j + √δ))   (damped)

plus, for the bias block ``Q Λ Q^T + δ``, ``Σ_i Q[k, i]^2 / (λ_i + δ)``: O(K^2 + K D) per example
instead of O(K^2 D). Exactly laplace-torch's values (checked against its Jacobian path in
tests/test_laplace_machinery.py).
"""
from __future__ import annotations

import torch


def last_layer_kron_variance(la, x: torch.Tensor, precision=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f_mu, f_var)`` with ``f_var`` = the ``(B, K)`` diagonal of the linearised predictive's
    covariance of a laplace-torch ``KronLLLaplace`` at ``x`` (``precision``: its posterior
    precision, ``la.posterior_precision`` by default; laplace-torch 0.3 drops ``damping`` when it
    adds the prior, so the damped form only applies to a precision that keeps it)."""
    with torch.no_grad():
        f_mu, phi = la.model.forward_with_features(x)
    return f_mu, last_layer_kron_variance_of_features(la, phi, f_mu.shape[-1], precision)


def last_layer_kron_variance_of_features(la, phi: torch.Tensor, num_outputs: int, precision=None) -> torch.Tensor:
    """The ``(B, K)`` variances of :func:`last_layer_kron_variance` from the last layer's input
    features ``phi`` (which do not depend on the prior precision: a prior search computes them once)."""
    with torch.no_grad():
        P = la.posterior_precision if precision is None else precision
        B, K = phi.shape[0], int(num_outputs)
        f_var = phi.new_zeros(B, K)
        blocks = list(zip(P.eigenvalues, P.eigenvectors, P.deltas))
        for ls, Qs, delta in blocks:
            if len(ls) == 2:  # the weight (K x D): Kronecker factors (outputs, inputs)
                (l1, l2), (Q1, Q2) = ls, Qs
                if getattr(P, "damping", False):
                    inv = 1.0 / torch.outer(l1 + delta.sqrt(), l2 + delta.sqrt())
                else:
                    inv = 1.0 / (torch.outer(l1, l2) + delta)
                a = (phi.to(Q2.dtype) @ Q2) ** 2  # (B, D): the features in factor 2's eigenbasis
                f_var += ((a @ inv.T) @ (Q1 ** 2).T).to(f_var.dtype)  # (B, K)
            else:  # the bias (K): one factor
                (lam,), (Q,) = ls, Qs
                f_var += ((Q ** 2) @ (1.0 / (lam + delta))).to(f_var.dtype).unsqueeze(0)
    return f_var
