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
from bench.registry import Registry
from bench.tasks import Task

SUITES: Registry[type["Suite"]] = Registry("suite")
PROFILES = ("smoke", "quick", "paper")
#: every classification method, the default of the classification suites' leaderboards
CLASSIFICATION_METHODS = ("deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi",
                          "ssvi", "subnet_laplace", "laplace_last_layer", "laplace_diag", "vdp")


register_suite = SUITES.register_class


class Suite(abc.ABC):
    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    task: ClassVar[Task]
    in_shape: ClassVar[tuple[int, ...]]
    shift_label: ClassVar[str] = "shift severity"  # x axis of the shift plots
    default_methods: ClassVar[tuple[str, ...]] = ("deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi")
    #: profile -> {"models": [...], "seeds": [...], "train": {...TrainConfig}, "data": {...},
    #:             "methods": {method: {option: value}}, "note": str}
    profiles: ClassVar[dict[str, dict]] = {}

    def checked_data_cfg(self, data_cfg: dict, defaults: dict) -> dict:
        """``defaults`` overridden by ``data_cfg``; an option not in ``defaults`` is a BenchError
        that names the valid ones (for suites whose ``data_cfg`` is strict)."""
        cfg = {**defaults, **data_cfg}
        unknown = set(cfg) - set(defaults)
        if unknown:
            raise BenchError(f"unknown data option(s) {sorted(unknown)} for suite {self.name}; valid: {sorted(defaults)}")
        return cfg

    @abc.abstractmethod
    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        """Decode the data once and build every evaluation set for this profile."""

    @abc.abstractmethod
    def describe_shifts(self, data_cfg: dict) -> list[str]:
        """Human-readable list of evaluation sets (for ``bench list``)."""
