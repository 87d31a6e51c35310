"""Your model, your data: the benchmark's methods on a network and data defined here (bench.evaluate).

    .venv/bin/python examples/your_model.py                 # about 3 minutes on 2 shared CPU cores
    .venv/bin/python examples/your_model.py --out results/example --methods deterministic,pbn
    .venv/bin/python examples/your_model.py --epochs 4      # the mechanics only: every row ? or ✗

The data is synthetic and needs no files: 12 x 12 grey images of four classes (a bright bar whose
row encodes the class), a validation and a test set, the test set under additive noise at three
severities (a shift family), and pure-noise images as the out-of-distribution set. The network
is an ordinary PyTorch module with layers the benchmark's own suites never use (GroupNorm, a
depthwise convolution, GELU, LayerNorm). Running it again resumes: finished cells are skipped.
The records land under ``<out>/example/``, the report in ``<out>/reports/example/index.html``.
docs/your_model.md is the whole contract.

The training budget is one that makes every row of the default methods method evidence
(bench/validity.py; the script prints each row's verdict, and why a row is not evidence): 12 epochs
of Adam at 0.01 under a cosine schedule. The validation NLL is then at rest over the last fifth of
the epochs (``map_converged``: at 4 epochs it cannot be told, 5 are the minimum; at a constant rate
it can still wobble by more than 2 %), and the network ends slightly overconfident on the validation
set, so last-layer Laplace chooses its prior precision inside the grid (a network that is not
overconfident, as at lr 0.005, makes the validation data prefer the posterior collapsed onto MAP:
``laplace_prior_grid`` fails). Fewer ``--epochs`` run faster and mark the rows ``?`` or ``✗``.
Not every method can pass at an example's budget: ``--methods deterministic,pbn`` (4 more minutes)
marks PBN's rows ``✗``, printed with the reasons: after its 120 VI steps the variances are still
travelling at Adam's step limit (``vi_rate_limit``) and the KL alone pulls on them
(``vi_stationarity``); they need many times the steps, a suite's budget, not an example's.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from torch.utils.data import TensorDataset

import bench


class SmallConvNet(nn.Module):
    """Conv stem, GroupNorm, a depthwise 3x3 convolution, GELU, pooling to 4 row bands, LayerNorm, linear head."""

    def __init__(self, in_shape, num_classes, width: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(in_shape[0], width, 3, padding=1)
        self.norm = nn.GroupNorm(2, width)
        self.depthwise = nn.Conv2d(width, width, 3, padding=1, groups=width)
        self.pointwise = nn.Conv2d(width, width, 1)
        self.act = nn.GELU()
        self.pool = nn.AdaptiveAvgPool2d((4, 1))  # keeps where along the rows a feature is
        self.head_norm = nn.LayerNorm(4 * width)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        h = self.act(self.norm(self.stem(x)))
        h = self.act(self.pointwise(self.depthwise(h)))
        return self.head(self.head_norm(self.pool(h).flatten(1)))


def bars(n: int, seed: int, classes: int = 4, size: int = 12):
    """``(x, y)``: images whose faint bar (rows 3k, 3k+1) encodes the class k, on N(0, 1) noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, size, size, generator=g)
    rows = torch.arange(size)
    bar = ((rows[None, :] >= 3 * y[:, None]) & (rows[None, :] < 3 * y[:, None] + 2)).float()
    return x + 0.6 * bar[:, None, :, None], y


def with_noise(xy, std: float, seed: int):
    """The same images with additive Gaussian noise of standard deviation ``std``: a shift."""
    x, y = xy
    return x + std * torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)), y


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/example", help="results directory (default: results/example)")
    p.add_argument("--methods", default="deterministic,temperature_scaling,deep_ensemble,laplace_last_layer",
                   help="comma-separated methods (python -m bench list)")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds (default: 0,1)")
    p.add_argument("--epochs", type=int, default=12,
                   help="MAP training epochs (default: 12; below 5 no row can pass map_converged)")
    a = p.parse_args(argv)

    train, val, test = bars(600, 0), bars(300, 1), bars(300, 2)
    result = bench.evaluate(
        model=SmallConvNet,  # a factory: called SmallConvNet(in_shape=(1, 12, 12), num_classes=4)
        train=TensorDataset(*train), val=TensorDataset(*val), test={"clean": test},
        shifts={"noise": {s: with_noise(test, s, seed=10 + s) for s in (1, 2, 3)}},
        ood={"pure_noise": torch.randn(200, 1, 12, 12, generator=torch.Generator().manual_seed(3))},
        methods=a.methods.split(","), seeds=[int(s) for s in a.seeds.split(",")], out=a.out, name="example",
        # a cosine schedule brings the validation NLL to rest (bench.validity.map_converged)
        train_config={"epochs": a.epochs, "batch_size": 64, "optimizer": "adam", "lr": 0.01, "schedule": "cosine"},
        method_options={"deep_ensemble": {"members": 3}})
    s = result.summary
    print(f"{s.fitted} fitted, {s.skipped} skipped (finished earlier), {len(s.failed)} failed; "
          f"{len(result.records)} records under {result.out / result.suite}")
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print("\nNLL, mean over seeds (lower is better):")
        print(result.table("nll").round(3))
        if "metrics.auroc" in result.metrics:
            ood = result.metrics[result.metrics["kind"] == "ood"]
            print("\nOOD AUROC (pure noise vs the clean test set):")
            print(ood.groupby("method_label")["metrics.auroc"].mean().round(3))
    print_validity(result)
    for page in result.report:
        print(f"report: {page}")
    return result


def print_validity(result):
    """Each row's validity verdict (bench/validity.py) on the clean test set, and why a row that is
    not ``ok`` is no method evidence (the report marks it ``✗`` for fail, ``?`` for unverified)."""
    clean = result.metrics[result.metrics["kind"] == "id"]
    print("\nValidity (ok: the row is method evidence; fail / unverified: it measures the set-up):")
    print(clean.groupby("method_label")["validity"].agg(lambda v: ", ".join(f"{s} x{list(v).count(s)}"
                                                                          for s in sorted(set(v)))).to_string())
    for path in result.records:
        rec = json.loads(Path(path).read_text())
        verdict = rec.get("validity") or {}
        if rec.get("kind") == "id" and verdict.get("status") != "ok":
            for reason in verdict.get("reasons") or ["no verdict in the record"]:
                print(f"  {rec.get('method_label')} seed {rec.get('seed')}: {reason}")


if __name__ == "__main__":
    main()
