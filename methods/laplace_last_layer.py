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

    @staticmethod
    def last_layer(model, x, split_head) -> tuple[str, str, str | None]:
        """The head's name, how it was found and, when laplace-torch would pick another module
        (it takes the last leaf module called), the name to give it as ``last_layer_name`` (else
        None). BenchError naming the module when the head is not an ``nn.Linear`` on ``(N, D)``
        rows (laplace-torch's last-layer Laplace needs both) or does not reproduce the output."""
        from bench.network import DECLARE, call_order

        split = split_head(model, x)
        what = f"{type(model).__name__}: the head {split.head_name!r} ({type(split.head).__name__}; {split.how})"
        if not isinstance(split.head, torch.nn.Linear):
            raise BenchError(f"{what} is not an nn.Linear: laplace-torch's last-layer Laplace needs a Linear head; "
                             f"{DECLARE}")
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                phi = split.features(x)
        finally:
            model.train(was)
        if phi.dim() != 2:
            raise BenchError(f"{what} reads inputs of shape {tuple(phi.shape)}: the last-layer Laplace needs one row of "
                             f"features per output row, (N, D) (pool or flatten before the head)")
        leaves = [n for n, m in call_order(model, x) if not list(m.children())]
        auto = leaves[-1] if leaves else None
        return split.head_name, split.how, (None if auto == split.head_name else split.head_name)

    @classmethod
    def check_network(cls, build_model, x, task, config):
        from bench.network import split_head

        cls.last_layer(build_model(dropout=0.0), x, split_head)

    def before_fit(self, model, train):
        x = train.x[:4].to(self.ctx.device) if hasattr(train, "x") else next(iter(train))[0][:4]
        name, how, explicit = self.last_layer(model, x, self.ctx.split_head)
        if explicit is not None:  # laplace-torch would take another module: name the head (kept for a reload)
            self.meta["last_layer_name"] = explicit
            self.meta["head"] = f"{name} ({how})"

    def laplace_kwargs(self):
        name = self.meta.get("last_layer_name")
        return {} if name is None else {"last_layer_name": name}

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

            return last_layer_kron_variance(self.la, x, self.posterior_precision())
        return super().glm_moments(x)

    def posterior_precision(self):
        """laplace-torch's ``posterior_precision``, computed once per posterior and prior precision:
        its Kronecker product with the Hessian's factor reads that factor on the host, a CUDA
        synchronisation in every predict batch otherwise (found by the device's cuda tests)."""
        la = self.la
        key = (la, la.H, la.prior_precision)
        cached = getattr(self, "_precision_cache", None)
        if cached is None or any(a is not b for a, b in zip(cached[0], key)) or cached[1] != key[2]._version:
            self._precision_cache = cached = (key, key[2]._version, la.posterior_precision)
        return cached[2]

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
        return [(lambda f_mu=f_mu, phi=phi: probit_probs(f_mu, last_layer_kron_variance_of_features(
                     self.la, phi, K, self.posterior_precision())).float(),
                 y) for f_mu, phi, y in cached]

    def num_stochastic_params(self):
        return 0 if self.la is None else int(self.la.n_params)

    def extra_cost(self):
        out = super().extra_cost()
        if self.la is not None:
            out["posterior_state_bytes"] = int(sum(f.numel() for fs in self.la.H_facs.kfacs for f in fs)) * 4
        return out
