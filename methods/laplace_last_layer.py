"""Last-layer KFAC Laplace (laplace-torch's default approximation, Daxberger et al. 2021,
"Laplace Redux"): Kronecker-factored GGN of the last Linear layer, with the prior precision and
the predictive of every Laplace variant (validation-NLL grid search, linearised predictive with
the probit approximation; laplace-torch's own default, the marginal likelihood, is
``prior_precision_method=marglik``). A natural comparison for the subnetwork Laplace: a structured, fixed
"subnetwork" (the last layer) instead of a selected one.
"""
from __future__ import annotations

import torch

from bench.errors import BenchError
from methods.base import register_method
from methods._laplace_base import LaplaceMethod

LL_BACKENDS = ("auto", "backpack", "asdl", "curvlinops")


@register_method("laplace_last_layer")
class LaplaceLastLayer(LaplaceMethod):
    description = "last-layer KFAC Laplace of the MAP network (laplace-torch), prior tuned on validation"
    tasks = ("classification", "segmentation")  # segmentation: the 1x1 classifier, pixels as observations
    subset_of_weights = "last_layer"
    hessian_structure = "kron"
    defaults = {**LaplaceMethod.common_defaults}

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        if self.config["backend"] not in LL_BACKENDS:
            raise BenchError(f"laplace_last_layer: backend must be one of {', '.join(LL_BACKENDS)}")

    def backend_name(self, model):
        # KFAC of one 100 x 10 layer is cheap with every backend; BackPACK's KFLR is the
        # exact-GGN Kronecker factorisation (measured in docs/subnet_laplace.md)
        b = self.config["backend"]
        self.meta["backend_reason"] = "requested" if b != "auto" else "auto: BackPACK (exact GGN KFAC, cheapest measured)"
        return "backpack" if b == "auto" else b

    def glm_moments(self, x):
        """The probit predictive needs only the diagonal of ``J Sigma J^T``: computed in closed
        form from the Kronecker factors (:mod:`bench.laplace.kron_diag`; laplace-torch builds the
        (B, K, K x D) Jacobian, 2 x 10^9 floats per ImageNet example)."""
        if self.config["link_approx"] == "probit":
            from bench.laplace.kron_diag import last_layer_kron_variance

            return last_layer_kron_variance(self.la, x)
        return super().glm_moments(x)

    #: the prior search keeps the validation features (N_val x D floats) up to this size
    FEATURE_CACHE_BYTES = 1 << 30

    def val_predictors(self, chunks):
        """The probit predictive with the validation features and MAP logits computed once: per
        prior precision only the closed-form variances change."""
        if self.config["link_approx"] != "probit":
            return super().val_predictors(chunks)
        from bench.laplace.kron_diag import last_layer_kron_variance_of_features
        from bench.laplace.predictive import probit_probs

        dev, cached, size = self.ctx.device, [], 0
        with torch.no_grad():
            for x, y in chunks:
                f_mu, phi = self.la.model.forward_with_features(x.to(dev))
                size += (phi.numel() + f_mu.numel()) * phi.element_size()
                if size > self.FEATURE_CACHE_BYTES:
                    return super().val_predictors(chunks)
                cached.append((f_mu, phi, y))
        K = self.ctx.task.num_outputs
        return [(lambda f_mu=f_mu, phi=phi: probit_probs(f_mu, last_layer_kron_variance_of_features(self.la, phi, K)).float(),
                 y) for f_mu, phi, y in cached]

    def num_stochastic_params(self):
        return 0 if self.la is None else int(self.la.n_params)

    def extra_cost(self):
        out = super().extra_cost()
        if self.la is not None:
            out["posterior_state_bytes"] = int(sum(f.numel() for fs in self.la.H_facs.kfacs for f in fs)) * 4
        return out
