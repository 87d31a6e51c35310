"""Deterministic network trained by maximum likelihood with weight decay (the MAP baseline).

By default the network is the shared MAP network of the profile (``ctx.map_cache``: PBN, the
Laplace methods and the ensembles start from it). Setting any of ``optimizer``, ``lr``,
``weight_decay`` or ``epochs`` trains a network of its own with those settings instead, from a
fresh seeded initialisation: the like-for-like control of a method trained with another recipe
(e.g. ``deterministic[optimizer=adam,lr=0.001,weight_decay=0]`` beside VDP++, which trains its
means with Adam at 1e-3 and no weight decay).
"""
from __future__ import annotations


import torch

from bench.seeding import derive_seed
from bench.options import OneOf, Range
from bench.training import OPTIMIZERS, nll_loss, train_model, training_curve, validation_curve
from methods.base import Method, register_method


@register_method("deterministic")
class Deterministic(Method):
    description = "MAP point estimate (SGD with weight decay); the network other methods start from"
    tasks = ("classification", "regression", "segmentation", "multilabel")  # segmentation: pixels as examples
    defaults = {"optimizer": None, "lr": None, "weight_decay": None, "epochs": None}  # None: the profile's (MAP cache)
    constraints = {"optimizer": OneOf(*OPTIMIZERS, optional=True), "lr": Range(0, lo_open=True, optional=True),
                   "weight_decay": Range(0, optional=True), "epochs": Range(1, integer=True, optional=True)}

    STARTS_FROM = "map"
    VALIDITY_CHECKS = ("informative", "map_converged")

    @classmethod
    def starts_from(cls, config):
        """Its own training recipe (an optimiser / lr / epochs option) trains from scratch."""
        return "scratch" if any(config.get(k) is not None for k in cls.TRAIN_OVERRIDES) else "map"

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.model = ctx.build_model(dropout=0.0).to(ctx.device)
        self.meta: dict = {}

    @property
    def own_recipe(self) -> bool:
        return any(self.config.get(k) is not None for k in self.TRAIN_OVERRIDES)

    def fit(self, train, val):
        if not self.own_recipe:
            # Trained through the shared MAP cache so PBN, Laplace and ensembles reuse it.
            self.model = self.ctx.map_cache.get(self.ctx.seed)
            # its loss and validation NLL per epoch: the evidence that the training converged
            self.meta = {"map_training": self.ctx.map_cache.training_log(self.ctx.seed)}
            return self
        cfg = self.train_config()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.name, "init", self.ctx.seed))
            self.model = self.ctx.build_model(dropout=0.0).to(self.ctx.device)
        log = train_model(self.model, train, cfg, nll_loss(self.ctx.task), desc=self.name, progress=self.ctx.progress,
                          resume_path=self.ctx.resume_path(self.name),
                          epoch_stats=validation_curve(self.model, self.ctx.task, val, cfg.batch_size))
        self.meta = {"train": {"optimizer": cfg.optimizer, "lr": cfg.lr, "weight_decay": cfg.weight_decay,
                               "epochs": cfg.epochs, "schedule": cfg.schedule,
                               "epoch_loss": [float(v) for v in log.get("epoch_loss", [])]},
                     "train_time_s": log["train_seconds"],
                     "map_training": training_curve(log)}
        self.model.eval()
        return self

    @torch.no_grad()
    def predict(self, x):
        return self.ctx.task.predictive(self.model(x))

    def state_dict(self):
        return {"model": self.model.state_dict(), "meta": dict(self.meta)}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.eval()
        self.meta = dict(state.get("meta") or {})

    def extra_cost(self):
        if self.own_recipe:
            return {"train_time_s": self.meta.get("train_time_s")}
        return {}

    def diagnostics(self):
        return dict(self.meta)

    def modules(self):
        return [self.model]
