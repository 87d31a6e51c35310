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
"""
from __future__ import annotations

import torch

_CLASS = None


def _float64_class():
    global _CLASS
    if _CLASS is None:
        from laplace.subnetlaplace import FullSubnetLaplace
        from laplace.utils import invsqrt_precision

        class Float64FullSubnetLaplace(FullSubnetLaplace):
            """laplace-torch's ``FullSubnetLaplace`` with its GGN, precision, scale and covariance in
            float64 (module docstring); its outputs in the network's dtype."""

            def _init_H(self) -> None:
                self.H = torch.zeros(self.n_params_subnet, self.n_params_subnet, device=self._device,
                                     dtype=torch.float64)

            def _compute_scale(self) -> None:
                self._posterior_scale = invsqrt_precision(self.posterior_precision.to(torch.float64))

            def functional_variance(self, Js: torch.Tensor) -> torch.Tensor:
                J = Js.to(torch.float64)
                return torch.einsum("ncp,pq,nkq->nck", J, self.posterior_covariance, J).to(Js.dtype)

            def functional_covariance(self, Js: torch.Tensor) -> torch.Tensor:
                J = Js.reshape(-1, Js.shape[-1]).to(torch.float64)
                return (J @ self.posterior_covariance @ J.T).to(Js.dtype)

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
