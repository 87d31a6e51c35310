"""The full-covariance subnetwork posterior in float64.

laplace-torch keeps a Laplace posterior in the network's dtype. A subnetwork's posterior precision
``H + tau I`` spans the GGN's whole range: on camvid_multilabel's pooled UNet (1,000 subnet weights,
2026-12-05) the GGN's largest eigenvalue is about 2e4 and its smallest are zero up to rounding, which in
float32 left eigenvalues near -1e-4. At the small prior precisions the validation search asks for
(tau = 1e-4), ``H + tau I`` has a condition number past float32's reach: its Cholesky factor failed in
float32 and not in float64, so the search saw those grid points as infeasible and stopped at the edge
of the rest (``bench.validity``'s ``laplace_prior_grid``) -- a limit of the arithmetic, not a choice of
the data. Near that edge the float32 covariance, where it formed, carried the rounding of those
eigenvalues.

:func:`float64_posterior` makes a full-covariance subnetwork Laplace (laplace-torch's
``FullSubnetLaplace``) accumulate its GGN, factor its precision and form its covariance in float64;
what leaves it (functional variances and covariances, posterior samples) is returned in the network's
dtype, so the predictive code is unchanged. The subnetwork backends here
(:mod:`bench.laplace.subnet_jacobians`, :mod:`bench.laplace.sampled_ggn`) form each batch's GGN in
float64 from the float32 Jacobians, so the sum is positive semi-definite to float64 rounding.
laplace-torch's own backends (BackPACK, ASDL, Curvlinops) still hand over float32 batches, summed here
in float64. The s x s terms cost 8 bytes an entry (:mod:`bench.laplace.memory` counts them so).

The posterior holds two s x s matrices, the GGN ``H`` and the lower-triangular scale ``L``
(``L L^T = (H + tau I)^-1``, laplace-torch's and torch's ``_precision_to_scale_tril``), and needs a
third only while it forms ``L`` (:func:`lower_scale`). laplace-torch's own path holds up to six at once
(the precision, its flipped copy, the Cholesky factor and its flip, an identity, the scale) and forms
the covariance ``L L^T`` (another s x s and an s^3 product) at every functional variance, every batch
of every prediction; here the variance is ``(J L)(J L)^T`` and the log-determinant of the precision is
read off ``L``'s diagonal. At the subnetwork-Laplace paper's 42,000 weights an s x s matrix is 14.1 GB
(benchmarks/laplace_memory.py ``--posterior`` measures the peak of both paths).
"""
from __future__ import annotations

import torch

_CLASS = None
#: the scale is formed a block of columns at a time: a sixteenth of them, and at most this many bytes
#: of them (the third s x s is the Cholesky factor; a block's right-hand side, solution and reversed
#: copy add three blocks)
SCALE_BLOCKS = 16
SCALE_BLOCK_BYTES = 1 << 28


def scale_block_columns(s: int, element_size: int = 8) -> int:
    """How many columns of the scale :func:`lower_scale` solves at a time."""
    return max(1, min(-(-s // SCALE_BLOCKS), SCALE_BLOCK_BYTES // max(1, s * element_size)))


def lower_scale(H: torch.Tensor, h_factor: float, prior_diag: torch.Tensor) -> torch.Tensor:
    """The lower-triangular ``L`` with ``L L^T = P^-1``, ``P = h_factor H + diag(prior_diag)``, in
    ``H``'s dtype: the matrix torch's ``_precision_to_scale_tril`` (laplace-torch's
    ``invsqrt_precision``) returns, with at most three s x s matrices alive (``H``, the Cholesky
    factor, ``L`` in the factored matrix's storage) instead of six. With ``F`` the order-reversing
    permutation and ``F P F = C C^T`` (Cholesky), ``L = F C^-T F``, solved a block of columns at a
    time (``C^T`` is a view of ``C``: no copy, no identity matrix). Raises
    ``torch.linalg.LinAlgError`` where ``P`` is not positive definite, as torch's does."""
    s = H.shape[-1]
    A = torch.flip(H, (0, 1)).mul_(h_factor)  # F P F
    A.diagonal().add_(torch.flip(prior_diag.to(H.dtype), (0,)))
    C = torch.linalg.cholesky(A)
    L = A.zero_()  # its storage, whatever the allocator would do with a freed one
    k = scale_block_columns(s, C.element_size())
    for c0 in range(0, s, k):
        c1 = min(s, c0 + k)
        cols = torch.arange(c1 - c0, device=C.device)
        E = torch.zeros(s, c1 - c0, dtype=C.dtype, device=C.device)
        E[s - 1 - c0 - cols, cols] = 1.0  # F times columns c0:c1 of the identity
        Y = torch.linalg.solve_triangular(C.T, E, upper=True)  # C^-T F e_c: zero below row s - 1 - c0
        del E
        L[c0:, c0:c1] = torch.flip(Y[:s - c0], (0,))
        del Y
    return L


def _float64_class():
    global _CLASS
    if _CLASS is None:
        from laplace.subnetlaplace import FullSubnetLaplace

        class Float64FullSubnetLaplace(FullSubnetLaplace):
            """laplace-torch's ``FullSubnetLaplace`` with its GGN, precision, scale and covariance in
            float64 (module docstring); its outputs in the network's dtype."""

            def _init_H(self) -> None:
                self.H = torch.zeros(self.n_params_subnet, self.n_params_subnet, device=self._device,
                                     dtype=torch.float64)

            def _compute_scale(self) -> None:
                self._check_H_init()
                self._posterior_scale = lower_scale(self.H.to(torch.float64), self._H_factor,
                                                    self.prior_precision_diag)

            @property
            def log_det_posterior_precision(self) -> torch.Tensor:
                # log det P = -2 sum log diag L (L L^T = P^-1, L triangular): no s x s LU factor
                return -2.0 * torch.log(torch.diagonal(self.posterior_scale)).sum()

            def functional_variance(self, Js: torch.Tensor) -> torch.Tensor:
                JL = Js.to(torch.float64) @ self.posterior_scale  # J Sigma J^T = (J L)(J L)^T
                return (JL @ JL.transpose(-1, -2)).to(Js.dtype)

            def functional_covariance(self, Js: torch.Tensor) -> torch.Tensor:
                JL = Js.reshape(-1, Js.shape[-1]).to(torch.float64) @ self.posterior_scale
                return (JL @ JL.T).to(Js.dtype)

            def sample(self, n_samples: int = 100, generator: torch.Generator | None = None) -> torch.Tensor:
                # the standard normals as laplace-torch draws them (the network's dtype: the same stream)
                eps = torch.randn(n_samples, self.n_params_subnet, device=self._device, dtype=self._dtype,
                                  generator=generator)
                offsets = (eps.to(torch.float64) @ self.posterior_scale.T).to(self._dtype)
                return self.assemble_full_samples(self.mean_subnet[None, ...] + offsets)

        _CLASS = Float64FullSubnetLaplace
    return _CLASS


def float64_posterior(la):
    """``la`` itself, made a float64 posterior in place when it is laplace-torch's full-covariance
    subnetwork Laplace (any other structure is returned as it is). Call it before ``fit`` or
    ``load_state_dict``; a GGN it already holds is converted (a checkpoint of older code: float32)."""
    from laplace.subnetlaplace import FullSubnetLaplace

    if not isinstance(la, FullSubnetLaplace):
        return la
    la.__class__ = _float64_class()
    if isinstance(getattr(la, "H", None), torch.Tensor):
        la.H = la.H.to(torch.float64)
    la._posterior_scale = None
    return la
