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

import torch

from bench.errors import BenchError
from bench.laplace.diag_glm import diag_glm_moments, unsupported_modules
from bench.laplace.predictive import nll, probit_probs
from methods._laplace_base import LaplaceMethod
from bench.subnet.selection import DIAG_BACKENDS, fit_diag_laplace
from methods.base import register_method


@register_method("laplace_diag")
class LaplaceDiag(LaplaceMethod):
    description = "diagonal GGN Laplace over all weights of the MAP network (laplace-torch), prior tuned on validation"
    subset_of_weights = "all"
    hessian_structure = "diag"
    # segmentation: one label draw per pixel and image for the sampled GGN diagonal
    defaults = {**LaplaceMethod.common_defaults, "ggn_samples": 1}
    constraints = {**LaplaceMethod.common_constraints, **LaplaceMethod.SAMPLED_GGN_CONSTRAINTS}

    JVP_SAMPLER = True
    tasks = ("classification", "segmentation")  # segmentation: pixels as observations, sampled-label GGN

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        if self.config["backend"] not in DIAG_BACKENDS + ("sampled",):
            raise BenchError(f"laplace_diag: backend must be one of {', '.join(DIAG_BACKENDS + ('sampled',))}")

    def fit_laplace(self, model, loader, backend):
        if backend == "sampled":  # segmentation: the sampled-label GGN diagonal, pixels as observations
            self.meta["backend_reason"] = ("segmentation: BackPACK / ASDL take one row per input example; the GGN "
                                           "diagonal from labels drawn per pixel (bench/laplace/sampled_ggn.py)")
            return super().fit_laplace(model, loader, backend)
        la, info = fit_diag_laplace(model, loader, likelihood="classification", backend=self.config["backend"],
                                    prior_precision=float(self.config["prior_precision"]))
        la.n_outputs = int(model(next(iter(loader))[0][:1].to(la._device)).shape[-1])
        la.model.output_size = la.n_outputs
        self.meta["backend"] = info["backend"]
        self.meta["backend_reason"] = ("requested" if self.config["backend"] != "auto" else
                                       f"auto: first of BackPACK, ASDL that fits ({info})")
        return la

    def backend_name(self, model):
        return self.segmentation_backend() or self.config["backend"]

    def val_nll_many_function(self, chunks):
        """Every grid point's validation NLL in one pass over the validation split: the
        Jacobian pieces of :func:`diag_glm_moments` are shared by all prior precisions (one
        variance vector per tau); the glm probit predictive only, else per point."""
        c = self.config
        if c["pred_type"] != "glm" or c["link_approx"] != "probit" or unsupported_modules(self.model):
            return None
        n = sum(len(y) for _, y in chunks)
        dev = self.ctx.device
        try:  # a layer the layer-wise moments cannot take (found only in a forward): per point
            if chunks:
                diag_glm_moments(self.model, chunks[0][0][:1].to(dev), self.la.posterior_variance.detach())
        except NotImplementedError:
            return None

        def many(taus):
            variances = []
            for tau in taus:
                self.la.prior_precision = float(tau)
                variances.append(self.la.posterior_variance.detach().clone())
            V = torch.stack(variances)
            totals = [0.0] * len(taus)
            with torch.no_grad():
                for x, y in chunks:
                    f_mu, f_var = diag_glm_moments(self.model, x.to(dev), V)
                    for t in range(len(taus)):
                        totals[t] += float(nll(probit_probs(f_mu, f_var[t]).float(), y.to(dev))) * len(y)
            return [tot / n for tot in totals]

        return many

    def glm_moments(self, x):
        if unsupported_modules(self.model):
            return super().glm_moments(x)
        try:
            return diag_glm_moments(self.model, x, self.la.posterior_variance.detach())
        except NotImplementedError:  # e.g. a Linear on (batch, tokens, features): laplace-torch's Jacobians
            return super().glm_moments(x)

    def num_stochastic_params(self):
        return 0 if self.la is None else int(self.la.n_params)

    def extra_cost(self):
        out = super().extra_cost()
        if self.la is not None:
            out["posterior_state_bytes"] = int(self.la.n_params) * 4
        return out
