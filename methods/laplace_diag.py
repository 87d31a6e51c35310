"""Diagonal Laplace over all weights (laplace-torch), the subnetwork-Laplace paper's
"diagonal Laplace over all 11M weights" baseline (Experiment 2) and the approximation its
Wasserstein criterion uses for selection (Q3).

The curvature is the same diagonal GGN the ``largest_variance_diag_laplace`` criterion fits
(:func:`bench.subnet.selection.fit_diag_laplace`, BackPACK then ASDL; cached per MAP network
within a process), the prior precision is tuned on the validation NLL (grid search), and the
default predictive samples the network (``pred_type="nn"``, 30 samples): the linearised
predictive needs per-example Jacobians of all P weights (B x K x P floats, ~4.7 s per 200
test images on LeNet-300-100), too slow for the 140k-image evaluation on 2 CPU cores. Set
``pred_type=glm`` (with a small ``predict_batch_size``) to use it anyway.
"""
from __future__ import annotations

from bench.subnet.selection import DIAG_BACKENDS, fit_diag_laplace
from bench.errors import BenchError
from methods.base import register_method
from methods.subnet_laplace import LaplaceMethod


@register_method("laplace_diag")
class LaplaceDiag(LaplaceMethod):
    description = "diagonal GGN Laplace over all weights of the MAP network (laplace-torch), prior tuned on validation"
    subset_of_weights = "all"
    hessian_structure = "diag"
    defaults = {**LaplaceMethod.common_defaults, "pred_type": "nn", "link_approx": "mc", "n_samples": 30}

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

    def load_state_dict(self, state):
        super().load_state_dict(state)

    def num_stochastic_params(self):
        return 0 if self.la is None else int(self.la.n_params)

    def extra_cost(self):
        out = super().extra_cost()
        if self.la is not None:
            out["posterior_state_bytes"] = int(self.la.n_params) * 4
        return out
