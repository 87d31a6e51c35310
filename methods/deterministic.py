"""Deterministic network trained by maximum likelihood with weight decay (the MAP baseline)."""
from __future__ import annotations

import torch

from methods.base import Method, register_method


@register_method("deterministic")
class Deterministic(Method):
    description = "MAP point estimate (SGD with weight decay); the network other methods start from"
    defaults = {}

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.model = ctx.build_model(dropout=0.0).to(ctx.device)

    def fit(self, train, val):
        # Trained through the shared MAP cache so PBN, Laplace and ensembles reuse it.
        self.model = self.ctx.map_cache.get(self.ctx.seed)
        return self

    @torch.no_grad()
    def predict(self, x):
        return self.ctx.task.predictive(self.model(x))

    def state_dict(self):
        return {"model": self.model.state_dict()}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.eval()

    def extra_cost(self):
        return {"upstream_train_time_s": self.ctx.map_cache.upstream_time([self.ctx.seed])}

    def modules(self):
        return [self.model]
