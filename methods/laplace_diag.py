"""Diagonal Laplace over all weights (laplace-torch), the subnetwork-Laplace paper's
"diagonal Laplace over all 11M weights" baseline (Experiment 2) and the approximation behind the
``wasserstein_diag_laplace`` criterion.

The curvature is the same diagonal GGN that criterion fits
(:func:`bench.subnet.selection.fit_diag_laplace`, BackPACK then ASDL; cached per MAP network
within a process); the prior precision and the predictive are those of every Laplace variant
(:class:`methods._laplace_base.LaplaceMethod`: validation-NLL grid search; linearised predictive
with the probit approximation). The linearised predictive's functional variance
``J diag(v) J^T`` is computed layer by layer without the per-example Jacobian of every weight
(:mod:`bench.laplace.diag_glm`; laplace-torch's needs B x K x P floats, ~4.7 s per 200 test
images on LeNet-300-100); networks with other parameterised layers fall back to laplace-torch.
``pred_type=nn`` samples networks instead.
"""
from __future__ import annotations

from bench.errors import BenchError
from bench.laplace.diag_glm import diag_glm_moments, unsupported_modules
from methods._laplace_base import LaplaceMethod
from bench.subnet.selection import DIAG_BACKENDS, fit_diag_laplace
from methods.base import register_method


@register_method("laplace_diag")
class LaplaceDiag(LaplaceMethod):
    description = "diagonal GGN Laplace over all weights of the MAP network (laplace-torch), prior tuned on validation"
    subset_of_weights = "all"
    hessian_structure = "diag"
    defaults = {**LaplaceMethod.common_defaults}

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        if self.config["backend"] not in DIAG_BACKENDS:
            raise BenchError(f"laplace_diag: backend must be one of {', '.join(DIAG_BACKENDS)}")

    def fit_laplace(self, model, loader, backend):
        la, info = fit_diag_laplace(model, loader, likelihood="classification", backend=self.config["backend"],
                                    prior_precision=float(self.config["prior_precision"]))
        la.n_outputs = int(model(next(iter(loader))[0][:1].to(la._device)).shape[-1])
        la.model.output_size = la.n_outputs
        self.meta["backend"] = info["backend"]
        self.meta["backend_reason"] = ("requested" if self.config["backend"] != "auto" else
                                       f"auto: first of BackPACK, ASDL that fits ({info})")
        return la

    def backend_name(self, model):
        return self.config["backend"]

    def glm_moments(self, x):
        if unsupported_modules(self.model):
            return super().glm_moments(x)
        return diag_glm_moments(self.model, x, self.la.posterior_variance.detach())

    def num_stochastic_params(self):
        return 0 if self.la is None else int(self.la.n_params)

    def extra_cost(self):
        out = super().extra_cost()
        if self.la is not None:
            out["posterior_state_bytes"] = int(self.la.n_params) * 4
        return out
