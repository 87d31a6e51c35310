"""Temperature scaling (Guo et al. 2017): the MAP network's logits divided by one temperature,
chosen by minimising the validation NLL. The NLL is the task's: on segmentation over the labelled
pixels of the validation label maps (the ignore label left out), on multilabel the binary
cross-entropy summed over the labels (one temperature for every label's logit)."""
from __future__ import annotations

import torch

from bench.options import Range
from methods.base import Method, register_method


@register_method("temperature_scaling")
class TemperatureScaling(Method):
    description = "MAP network with its logits divided by a temperature fitted on the validation split"
    tasks = ("classification", "segmentation", "multilabel")  # checked when a run is planned; shown by `bench list`
    STARTS_FROM = "map"  # it wraps the seed's MAP network, so it runs on pretrained-MAP suites too
    VALIDITY_CHECKS = ("informative", "map_converged")  # bench.validity: a row needs a converged MAP network
    # every option and its default (--set temperature_scaling.lbfgs_lr=...); an option named like a
    # training-budget field (epochs, lr, optimizer, weight_decay) would replace the profile's budget
    defaults = {"max_iter": 100, "lbfgs_lr": 0.05}
    constraints = {"max_iter": Range(1, integer=True), "lbfgs_lr": Range(0, lo_open=True)}  # else: the default's type

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)  # checks option names and values, sets self.ctx and self.config
        self.model = ctx.build_model(dropout=0.0).to(ctx.device)
        self.log_t = torch.zeros((), device=ctx.device)

    def fit(self, train, val):
        # the cached MAP network of this seed (trained now if no method has asked for it yet);
        # the harness charges its training time to this method's cost
        self.model = self.ctx.map_cache.get(self.ctx.seed)
        x_val, y_val = val  # on the CPU: move what you use
        chunk = 8 if self.ctx.task.kind == "segmentation" else 1000  # images of a UNet's activations
        with torch.no_grad():  # segmentation: one row of logits per pixel, as the task's loss takes them
            logits = torch.cat([self.model(x_val[i:i + chunk].to(self.ctx.device))
                                for i in range(0, len(x_val), chunk)])
        y_val = y_val.to(self.ctx.device)
        log_t = torch.zeros((), device=self.ctx.device, requires_grad=True)
        # with a line search: plain L-BFGS steps can overshoot and run away (seen on pixel logits:
        # T -> 0.001 with the NLL 100x its start; tests/test_segmentation_suite.py)
        opt = torch.optim.LBFGS([log_t], lr=float(self.config["lbfgs_lr"]), max_iter=int(self.config["max_iter"]),
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = self.ctx.task.loss(logits / log_t.exp(), y_val)  # the task's likelihood
            loss.backward()
            return loss

        opt.step(closure)
        self.log_t = log_t.detach()
        return self

    @torch.no_grad()
    def predict(self, x):  # x: a batch on ctx.device; the answer must not depend on the batch size
        return self.ctx.task.predictive(self.model(x) / self.log_t.exp())

    def state_dict(self):  # everything predict needs: tensors and plain Python data only
        return {"model": self.model.state_dict(), "log_t": self.log_t}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.eval()
        self.log_t = state["log_t"].to(self.ctx.device)

    def modules(self):  # the networks held: parameter counts and memory
        return [self.model]

    def diagnostics(self):  # stored with the in-distribution record: the proof the fit did something
        return {"temperature": float(self.log_t.exp())}
