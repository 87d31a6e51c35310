"""Toy regression y = x^3 + eps, eps ~ N(0, 3^2) (Hernandez-Lobato & Adams 2015; PBN paper Sec. 4.1).

Training inputs are drawn uniformly from [-4, 4]; the in-distribution test set from the
same interval and the shifted ("extrapolation") set from [-6, -4) U (4, 6]. Needs no data
files, so the whole pipeline runs anywhere in seconds. Targets are divided by
``TARGET_SCALE`` for training (a fixed constant, so the reported numbers are in these
scaled units); the band plot is drawn in the original units.
"""
from __future__ import annotations

from pathlib import Path

import torch

from bench.data import EvalSet, SuiteData
from bench.suites.base import Suite, register_suite
from bench.tasks import regression

NOISE_STD = 3.0
TARGET_SCALE = 10.0


def sample_xy(n: int, low: float, high: float, gen: torch.Generator, outside: float | None = None):
    if outside is None:
        x = torch.rand(n, generator=gen) * (high - low) + low
    else:  # uniform on [low, -outside) U (outside, high]
        u = torch.rand(n, generator=gen) * 2 * (high - outside)
        x = torch.where(u < high - outside, -high + u, outside + (u - (high - outside)))
    y = x.pow(3) + NOISE_STD * torch.randn(n, generator=gen)
    return x.unsqueeze(1), y / TARGET_SCALE


@register_suite("toy")
class Toy(Suite):
    description = "1-D regression y = x^3 + N(0, 9); train on [-4, 4], extrapolate to [-6, 6] (PBN Sec. 4.1)"
    task = regression()
    in_shape = (1,)
    shift_label = "extrapolation (0 = inside [-4, 4], 1 = outside)"
    _train = {"epochs": 2000, "batch_size": 20, "optimizer": "adam", "lr": 0.01, "momentum": 0.0,
              "weight_decay": 0.0}
    profiles = {
        "smoke": {"models": ["mlp_100"], "seeds": [0], "train": {**_train, "epochs": 300},
                  "data": {"n_train": 20, "n_test": 500}, "methods": {"deep_ensemble": {"members": 3}},
                  "note": "smoke profile: 300 steps"},
        "quick": {"models": ["mlp_100"], "seeds": [0, 1, 2], "train": _train,
                  "data": {"n_train": 20, "n_test": 10_000}, "methods": {}, "note": ""},
        "paper": {"models": ["mlp_100"], "seeds": [0, 1, 2, 3, 4], "train": _train,
                  "data": {"n_train": 20, "n_test": 10_000}, "methods": {}, "note": ""},
    }

    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test"}
    DEFAULT_DATA = {"n_train": 20, "n_test": 1000}

    def describe_shifts(self, data_cfg):
        return ["x in [-4, 4] (in-distribution)", "x in [-6, -4) U (4, 6] (extrapolation)"]

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        gen = torch.Generator().manual_seed(12345)
        cfg = self.data_cfg(data_cfg)
        n_train, n_test = int(cfg["n_train"]), int(cfg["n_test"])
        tr_x, tr_y = sample_xy(n_train, -4, 4, gen)
        va_x, va_y = sample_xy(max(n_train // 2, 10), -4, 4, gen)
        id_x, id_y = sample_xy(n_test, -4, 4, gen)
        ex_x, ex_y = sample_xy(n_test, -6, 6, gen, outside=4.0)
        grid = torch.linspace(-6, 6, 241).unsqueeze(1)
        eval_sets = [EvalSet("id", "extrapolation", 0.0, id_x, id_y), EvalSet("shift", "extrapolation", 1.0, ex_x, ex_y)]
        extras = {"band_x": grid, "band_truth": grid.squeeze(1).pow(3) / TARGET_SCALE,
                  "band_scale": TARGET_SCALE, "train_x": tr_x.squeeze(1), "train_y": tr_y}
        return SuiteData(tr_x, tr_y, va_x, va_y, eval_sets, extras=extras)
