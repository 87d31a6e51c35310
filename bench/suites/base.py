"""What a suite is: data (decoded once), a task, models, shifts and three profiles.

A suite is one module in ``bench/suites/`` with a :class:`Suite` subclass decorated by
``@register_suite``. Profiles: ``smoke`` (seconds, tests), ``quick`` (minutes on 2 CPU
cores, real data, real training), ``paper`` (the papers' hyperparameters, for a GPU).
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar

from bench.data import SuiteData
from bench.errors import BenchError
from bench.options import Constraint, ListOf, Range, check_options
from bench.registry import Registry
from bench.tasks import Task

SUITES: Registry[type["Suite"]] = Registry("suite")
PROFILES = ("smoke", "quick", "paper")
#: every classification method, the default of the classification suites' leaderboards
CLASSIFICATION_METHODS = ("deterministic", "temperature_scaling", "mc_dropout", "deep_ensemble", "pbn", "mfvi",
                          "ssvi", "subnet_laplace", "laplace_last_layer", "laplace_diag", "vdp")


register_suite = SUITES.register_class

#: data options several suites share (a suite adds its own in ``data_constraints``)
COMMON_DATA_CONSTRAINTS: dict[str, Constraint] = {
    "n_train": Range(1, integer=True, optional=True),  # None: the whole training split
    "n_val": Range(1, integer=True),
    "n_test": Range(1, integer=True, optional=True),
    "n_ood": Range(1, integer=True, optional=True),
    "eval_batch_size": Range(1, integer=True),
    "angles": ListOf(Range(-360, 360)),
    "snr_db": ListOf(Range()),
}


class Suite(abc.ABC):
    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    task: ClassVar[Task]
    in_shape: ClassVar[tuple[int, ...]]
    shift_label: ClassVar[str] = "shift severity"  # x axis of the shift plots
    #: the benchmark this suite runs in place of (its data cannot be had here), named in every
    #: report's banner; None: the suite is the benchmark itself
    stands_in_for: ClassVar[str | None] = None
    default_methods: ClassVar[tuple[str, ...]] = ("deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi")
    #: profile -> {"models": [...], "seeds": [...], "train": {...TrainConfig}, "data": {...},
    #:             "methods": {method: {option: value}}, "note": str,
    #:             "model_methods": {model: {method: {option: value}}}}  (optional: options on one model
    #:             of the profile only, e.g. the subnetwork size a paper gives its own network; --set wins)
    profiles: ClassVar[dict[str, dict]] = {}
    #: method -> the suite's own tuning space (``bench tune``), replacing ``bench.tuning.SPACES``'s
    #: where the options that decide a regime lie elsewhere on this task; the same number of
    #: configurations (bench.tuning)
    tuning_spaces: ClassVar[dict[str, dict[str, list]]] = {}
    #: every data option (``--set data.<key>=...``) and its default
    DEFAULT_DATA: ClassVar[dict] = {}
    #: constraints beyond :data:`COMMON_DATA_CONSTRAINTS` and the defaults' types
    data_constraints: ClassVar[dict[str, Constraint]] = {}
    #: data options that only choose or shape the evaluation sets (which shifts, how many test
    #: images, the batch size of evaluation): they are part of a cell's identity (its records) but
    #: not of what is fitted, so changing them re-evaluates the fitted methods and MAP networks
    #: instead of training them again
    EVAL_ONLY_DATA: ClassVar[frozenset[str]] = frozenset({"eval_batch_size"})

    def input_shape(self, data_cfg: dict) -> tuple[int, ...]:
        """The networks' input shape under these data options: :attr:`in_shape`, unless a suite's
        data options resize its inputs (the segmentation suites' ``data.size``)."""
        return tuple(self.in_shape)

    # The networks of a run: a registered name or a model spec (``MODULE:FACTORY``, ``timm:NAME``,
    # bench.model_specs). A suite that brings its own networks (bench.api's in-memory suite)
    # overrides these three.
    def build_model(self, model_name: str, data_cfg: dict, dropout: float = 0.0):
        """A fresh, randomly initialised network ``model_name`` for this suite's inputs under the
        data options ``data_cfg`` and its outputs (``bench.models.build_model``)."""
        from bench.models import build_model

        return build_model(model_name, self.input_shape(data_cfg), self.task.num_outputs, dropout=dropout)

    def model_identity(self, model_name: str, data_cfg: dict) -> dict:
        """Fields ``model_name`` adds to its cells' identity and its MAP networks' cache key: none
        for a registered name, the source hash of a model spec (an edited factory retrains)."""
        from bench.models import model_identity

        return model_identity(model_name, self.input_shape(data_cfg), self.task.num_outputs)

    def check_model(self, model_name: str, data_cfg: dict) -> str:
        """The name records use for ``model_name`` (a spec's canonical name), checked when the run is
        planned: a BenchError naming what is valid when it cannot build this suite's network."""
        from bench.models import check_model

        return check_model(model_name, self.input_shape(data_cfg), self.task)

    def fit_data(self, data_cfg: dict) -> dict:
        """``data_cfg`` without :attr:`EVAL_ONLY_DATA`: the data options a fit depends on."""
        return {k: v for k, v in data_cfg.items() if k not in self.EVAL_ONLY_DATA}

    def data_cfg(self, data_cfg: dict) -> dict:
        """:attr:`DEFAULT_DATA` overridden by ``data_cfg``; an unknown option or an invalid value
        is a BenchError that names the valid ones (checked when the run is planned)."""
        unknown = set(data_cfg) - set(self.DEFAULT_DATA)
        if unknown:
            raise BenchError(f"unknown data option(s) {sorted(unknown)} for suite {self.name}; "
                             f"valid: {sorted(self.DEFAULT_DATA)}")
        check_options(f"suite {self.name} data (data.*)", data_cfg, self.DEFAULT_DATA,
                      {**COMMON_DATA_CONSTRAINTS, **self.data_constraints})
        return {**self.DEFAULT_DATA, **data_cfg}

    def legacy_fingerprint(self, record: dict) -> str:
        """The data fingerprint (:attr:`bench.data.EvalSet.fingerprint`) of a record written before
        records stored one, read from what it does say (e.g. its ``eval_note``); "" by default."""
        return ""

    @classmethod
    def data_banner(cls, records) -> str | None:
        """A line for the report's overview saying whose data ``records`` (the suite's ok records, a
        DataFrame) come from, for a suite over data the user brings (the ``folder`` suite: which
        tree); None for a suite whose data is a fixed benchmark (its description names it)."""
        return None

    @abc.abstractmethod
    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        """Decode the data once and build every evaluation set for this profile."""

    @abc.abstractmethod
    def describe_shifts(self, data_cfg: dict) -> list[str]:
        """Human-readable list of evaluation sets (for ``bench list``)."""
