"""Monte Carlo dropout (Gal & Ghahramani 2016): dropout kept active at test time, S samples.

The network is built with ``ctx.build_model(dropout=p)`` (the registered networks put an
``nn.Dropout`` after every hidden activation). On any other network: its own dropout layers are set
to ``p``; a network without any gets one ``nn.Dropout(p)`` inserted before its head
(:func:`bench.network.insert_dropout_before`, the head by ``ctx.split_head``), said in the record's
diagnostics (``dropout_inserted``); a network whose head cannot be found is refused when the run is
planned."""
from __future__ import annotations

import torch
from torch import nn

from bench.errors import BenchError
from bench.network import PROBE_EXAMPLES, dropout_modules, insert_dropout_before
from bench.options import Range
from bench.seeding import derive_seed, seed_everything
from bench.training import nll_loss, train_model, training_curve, validation_curve
from methods.base import Method, register_method


#: the dropout layer types MC dropout samples (nn.Dropout, Dropout1d/2d/3d, alpha dropout)
DROPOUT = nn.modules.dropout._DropoutNd


def split_at_first(model: nn.Module, kind: type) -> tuple[nn.Module, nn.Module]:
    """(prefix, rest) of an nn.Sequential at the first child that is or contains a module of
    type ``kind`` (a residual block holding a dropout layer starts the stochastic rest)."""
    if not isinstance(model, nn.Sequential):
        return nn.Identity(), model
    for i, m in enumerate(model):
        if any(isinstance(sub, kind) for sub in m.modules()):
            return model[:i], model[i:]
    return model, nn.Sequential()


def dropout_(h: torch.Tensor, p: float) -> torch.Tensor:
    """In-place inverted dropout: the same distribution as ``F.dropout(h, p, training=True)``,
    about 1.5x faster on a CPU (uniform draws + masked fill instead of bernoulli_ + mul)."""
    return h.masked_fill_(torch.rand_like(h) < p, 0.0).mul_(1.0 / (1.0 - p))


def stochastic_forward(prefix: nn.Module, rest: nn.Module, x: torch.Tensor, samples: int) -> torch.Tensor:
    """Outputs (S, N, ...) with the deterministic prefix computed once and the rest on S copies."""
    h = prefix(x)
    hs = h.unsqueeze(0).expand(samples, *h.shape).reshape(samples * h.shape[0], *h.shape[1:])
    if isinstance(rest, nn.Sequential):
        for module in rest:
            if isinstance(module, nn.Dropout) and module.training and 0.0 < module.p < 1.0:
                hs = dropout_(hs if hs.is_contiguous() else hs.contiguous(), module.p)
            else:
                hs = module(hs)
        out = hs
    else:
        out = rest(hs)
    # (S N, ...) -> (S, N, ...); N rows per sample: examples, or B H W pixels of a segmentation network
    return out.reshape(samples, out.shape[0] // samples, *out.shape[1:])


@register_method("mc_dropout")
class MCDropout(Method):
    description = ("dropout after every hidden layer, kept on at test time; S Monte Carlo samples (a network "
                   "without dropout layers gets one before its head)")
    tasks = ("classification", "regression", "segmentation", "multilabel")  # segmentation: pixels as examples
    defaults = {"p": 0.1, "samples": 20}
    constraints = {"p": Range(0, 1, hi_open=True), "samples": Range(1, integer=True)}
    PREDICT_OPTIONS = ("samples",)
    VALIDITY_CHECKS = ("informative", "map_converged")

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.model = ctx.build_model(dropout=float(self.config["p"])).to(ctx.device)
        self.meta: dict = {}
        self._set_p()

    def _set_p(self) -> int:
        """The network's own dropout layers at rate p (a no-op on the registered networks, built at p)."""
        drops = dropout_modules(self.model)
        for _, m in drops:
            m.p = float(self.config["p"])
        return len(drops)

    @classmethod
    def check_network(cls, build_model, x, task, config):
        """A network without dropout layers needs a head to insert one before (p > 0)."""
        p = float(config["p"])
        net = build_model(dropout=p)
        if p > 0 and not dropout_modules(net):
            from bench.network import split_head

            try:
                insert_dropout_before(net, split_head(net, x).head_name, p)
            except BenchError as exc:
                raise BenchError(f"the network has no dropout layer and MC dropout inserts one before its head, "
                                 f"which it cannot find: {exc}") from None

    def _insert_dropout(self, x) -> None:
        """No dropout layer in the network (and p > 0): one before its head (``ctx.split_head``)."""
        if self._set_p() or float(self.config["p"]) <= 0:
            return
        split = self.ctx.split_head(self.model, x)
        where = insert_dropout_before(self.model, split.head_name, float(self.config["p"]))
        self.meta["dropout_inserted"] = f"before head {split.head_name} ({type(split.head).__name__}; {split.how})"
        self.meta["dropout_head"] = split.head_name
        self.meta["dropout_module"] = where

    def fit(self, train, val):
        self.meta = {}
        self._insert_dropout(train.x[:PROBE_EXAMPLES].to(self.ctx.device))
        seed_everything(derive_seed("mc_dropout", self.ctx.seed))
        # the validation NLL per epoch (of the network with dropout off, eval mode): the evidence that
        # the training converged (bench.validity)
        log = train_model(self.model, train, self.ctx.train, nll_loss(self.ctx.task), desc="mc_dropout",
                          progress=self.ctx.progress, resume_path=self.ctx.resume_path("mc_dropout"),
                          epoch_stats=validation_curve(self.model, self.ctx.task, val, self.ctx.train.batch_size))
        self.meta["map_training"] = training_curve(log)
        self._eval_mode()
        return self

    def _eval_mode(self):
        self.model.eval()  # batch norm uses its running statistics...
        for m in self.model.modules():
            if isinstance(m, DROPOUT):
                m.train()  # ...while dropout keeps sampling masks

    @torch.no_grad()
    def predict(self, x):
        prefix, rest = split_at_first(self.model, DROPOUT)
        return self.ctx.task.predictive_from_samples(stochastic_forward(prefix, rest, x, int(self.config["samples"])))

    def state_dict(self):
        return {"model": self.model.state_dict(), "meta": dict(self.meta)}

    def load_state_dict(self, state):
        self.meta = dict(state.get("meta") or {})
        head = self.meta.get("dropout_head")
        if head is not None and not dropout_modules(self.model):  # the fit inserted it: the same structure
            insert_dropout_before(self.model, head, float(self.config["p"]))
        self.model.load_state_dict(state["model"])
        self._eval_mode()

    def diagnostics(self):
        return dict(self.meta)

    def modules(self):
        return [self.model]

    def num_stochastic_params(self):
        # dropout randomises whole units: count the weights that read a dropped activation
        head = self.meta.get("dropout_head")
        if head is not None:  # one dropout layer, before the head: the head's weights
            rest = self.model.get_submodule(head)
        else:
            prefix, rest = split_at_first(self.model, DROPOUT)
        return sum(p.numel() for m in rest.modules() if isinstance(m, (nn.Linear, nn.Conv2d)) for p in m.parameters(recurse=False) if p.dim() > 1)
