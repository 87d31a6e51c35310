"""The contract every method plugin follows (scikit-learn/laplace-torch style).

A method is constructed from a :class:`MethodContext` (what the suite and profile give it)
and its own hyperparameters, then::

    method.fit(train_loader, (val_x, val_y))   # returns self
    method.predict(x)                          # -> ClassificationPredictive | RegressionPredictive
    method.state_dict() / method.load_state_dict(state)   # save / load a fitted method
    method.num_params(), method.num_stochastic_params(), method.extra_cost()

``predict`` is called by the harness under ``torch.no_grad()`` with ``x`` on ``ctx.device``
and must be batch-size independent. Adding a method = one new module in ``methods/`` that
subclasses :class:`Method` and decorates it with ``@register_method``.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from bench.checkpoints import MapCache
from bench.errors import BenchError
from bench.options import Constraint, check_options
from bench.registry import Registry
from bench.tasks import Task
from bench.training import TrainConfig

METHODS: Registry[type["Method"]] = Registry("method")


register_method = METHODS.register_class


@dataclass
class MethodContext:
    task: Task
    build_model: Callable[..., nn.Module]  # build_model(dropout=0.0) -> fresh nn.Module (CPU)
    train: TrainConfig  # the profile's training budget
    device: torch.device
    seed: int
    map_cache: MapCache | None = None  # trained deterministic networks, shared across methods
    num_train: int = 0
    work_dir: Path | None = None  # scratch space for resumable training checkpoints
    progress: bool = False
    extras: dict = field(default_factory=dict)

    def resume_path(self, tag: str) -> Path | None:
        return None if self.work_dir is None else self.work_dir / f"{tag}.partial"

    def split_head(self, model: nn.Module, x: torch.Tensor, check: bool = True):
        """``model`` split at its head: a :class:`bench.network.HeadSplit` (unpacks as ``features,
        head``; ``.head_name``, ``.how``), checked to reproduce ``model(x)`` on the probe batch ``x``
        (a few inputs on the model's device). The network declares its head (``bench_split_head()``
        or ``bench_head``), else it is the last ``nn.Linear`` called; a BenchError names the module
        when the split does not reproduce the output (:mod:`bench.network`)."""
        from bench.network import split_head

        return split_head(model, x, check=check)


class Method(abc.ABC):
    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    #: hyperparameters and their defaults; profiles and ``--set method.key=value`` override them
    defaults: ClassVar[dict[str, Any]] = {}
    #: tasks the method supports (checked when a run is planned; shown by ``bench list``)
    tasks: ClassVar[tuple[str, ...]] = ("classification", "regression")
    #: value constraints of options (:mod:`bench.options`); options without one are checked
    #: against the type of their default
    constraints: ClassVar[dict[str, Constraint]] = {}

    @classmethod
    def check_config(cls, config: dict) -> None:
        """Unknown options and invalid values: one BenchError naming them and what is valid."""
        unknown = set(config) - set(cls.defaults)
        if unknown:
            raise BenchError(f"unknown option(s) {sorted(unknown)} for method {cls.name!r}; "
                             f"valid: {sorted(cls.defaults) or 'none'}")
        check_options(f"method {cls.name!r}", config, cls.defaults, cls.constraints)

    def __init__(self, ctx: MethodContext, **config):
        self.check_config(config)
        if ctx.task.kind not in self.tasks:
            raise BenchError(f"method {self.name!r} does not support {ctx.task.kind} tasks")
        self.ctx = ctx
        self.config = {**self.defaults, **config}

    # -- the contract ------------------------------------------------------
    @abc.abstractmethod
    def fit(self, train, val: tuple[torch.Tensor, torch.Tensor]) -> "Method":
        """Fit on a :class:`bench.data.TensorLoader`; ``val`` is the held-out validation split."""

    @abc.abstractmethod
    def predict(self, x: torch.Tensor):
        """Predictive distribution for a batch ``x`` (already on ``ctx.device``)."""

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to rebuild the fitted method with :meth:`load_state_dict`."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict) -> None: ...

    @abc.abstractmethod
    def modules(self) -> list[nn.Module]:
        """The networks the method holds (for parameter counts and device moves)."""

    #: options that, when a method declares them and they are not None, override the profile's
    #: training configuration (e.g. ``--set pbn.lr=0.005``)
    TRAIN_OVERRIDES: ClassVar[dict[str, type]] = {"epochs": int, "lr": float, "weight_decay": float, "optimizer": str}
    #: per-profile option defaults of the method itself, e.g. ``{"smoke": {"samples": 4}}`` (a
    #: suite profile's ``methods`` entry overrides them, ``--set`` overrides both)
    profile_defaults: ClassVar[dict[str, dict[str, Any]]] = {}
    #: options that only change prediction (e.g. the number of Monte Carlo samples): a sweep over
    #: them reuses one fit (the fit's identity and seed take them at their defaults)
    PREDICT_OPTIONS: ClassVar[tuple[str, ...]] = ()
    #: options added after records were made, with the value that reproduces the earlier behaviour:
    #: at that value an option is left out of the cell's identity (bench.harness.cell_identity), so
    #: adding it keeps every earlier record and checkpoint of the method valid
    LATER_OPTIONS: ClassVar[dict[str, Any]] = {}
    #: options among TRAIN_OVERRIDES whose default replaces the profile's budget on purpose, with
    #: the reason (e.g. the paper's own optimiser); ``bench list`` shows them
    OWN_BUDGET: ClassVar[dict[str, str]] = {}
    #: what a fit starts from: "map" (the seed's MAP network, fine-tuned or wrapped), "maps"
    #: (several independently trained MAP networks) or "scratch" (its own training from a random
    #: initialisation). On a suite whose MAP network is a pretrained one (e.g. ImageNet's ResNet-50)
    #: only "map" methods can run; :meth:`starts_from` refines it per configuration. Not declared
    #: (None): inferred, "map" when the class's source uses ``map_cache``, else "scratch"
    #: (:func:`bench.plugins.inferred_starts_from`; ``bench run`` warns that it was inferred).
    STARTS_FROM: ClassVar[str | None] = None
    #: the checks (:mod:`bench.validity`) whose verdict says whether a fit of this method is method
    #: evidence (converged, in a setting that can test it); ``bench list`` shows them
    VALIDITY_CHECKS: ClassVar[tuple[str, ...]] = ("informative",)
    #: task kind -> why the method does not support it (shown by ``bench list`` and the report)
    UNSUPPORTED: ClassVar[dict[str, str]] = {}
    #: the controls that separate what the method's mechanism does from what its set-up does: name ->
    #: the option values that switch the mechanism off (e.g. a random subnetwork of the same size,
    #: the same pipeline with no stochastic weight). A control is the chosen configuration with these
    #: values set; ``bench leaderboard --chosen-only --with-controls`` ranks it beside the choice and
    #: ``bench list`` shows them (:func:`bench.tuning.control_rows`)
    CONTROLS: ClassVar[dict[str, dict[str, Any]]] = {}
    #: model name -> the epochs the method's paper trains it for on that network: a run whose own
    #: training phase (``diagnostics.train.epochs``) is shorter is unverified until a phase trial in the
    #: records shows the longer phase gains nothing (:func:`bench.validity.phase_budget`)
    PAPER_EPOCHS: ClassVar[dict[str, int]] = {}

    @classmethod
    def check_network(cls, build_model: Callable[..., nn.Module], x: torch.Tensor, task: Task, config: dict) -> None:
        """Called when a run is planned, for every user network (a model spec or ``bench.evaluate``'s
        network; not the registered ones): raise a BenchError saying why this method cannot run on
        the network ``build_model(dropout=...)`` builds (a fresh CPU copy per call) -- naming the
        module -- so that its cells on this network are skipped, with that reason, before anything
        is trained (the other cells run). ``x``: a probe batch of the suite's inputs. Default: any
        network. A failure at fit time is still a failed cell."""

    @classmethod
    def starts_from(cls, config: dict) -> str:
        if cls.STARTS_FROM is None:
            from bench.plugins import inferred_starts_from

            return inferred_starts_from(cls)
        return cls.STARTS_FROM

    @classmethod
    def map_seeds(cls, config: dict, seed: int) -> list[int]:
        """The seeds of the shared MAP networks (``ctx.map_cache.get``) a fit of ``config`` at
        ``seed`` uses: ``[seed]`` when it starts from "map", none from "scratch". A distributed run
        trains them first, as tasks the cell depends on; a "maps" method says which seeds."""
        return [seed] if cls.starts_from(config) == "map" else []

    @classmethod
    def train_overrides(cls, config: dict) -> dict:
        """The training-budget fields that ``config`` sets (TRAIN_OVERRIDES options not None)."""
        return {k: cast(config[k]) for k, cast in cls.TRAIN_OVERRIDES.items() if config.get(k) is not None}

    def train_config(self):
        """The profile's :class:`bench.training.TrainConfig` with this method's overrides."""
        return self.ctx.train.replace(**self.train_overrides(self.config))

    # -- cost --------------------------------------------------------------
    def num_params(self) -> int:
        """Stored parameters (deterministic + variational), as the papers count them."""
        return sum(p.numel() for m in self.modules() for p in m.parameters())

    def num_stochastic_params(self) -> int:
        return 0

    def extra_cost(self) -> dict:
        return {}

    def diagnostics(self) -> dict:
        """Method-specific facts worth storing with the results (JSON-able)."""
        return {}
