"""Your model, your data: the benchmark's methods on a network and data defined here (bench.evaluate).

    .venv/bin/python examples/your_model.py                 # under a minute on 2 CPU cores
    .venv/bin/python examples/your_model.py --out results/example --methods deterministic,pbn

The data is synthetic and needs no files: 12 x 12 grey images of four classes (a bright bar whose
row encodes the class), a validation and a test set, the test set under additive noise at three
severities (a shift family), and pure-noise images as the out-of-distribution set. The network
is an ordinary PyTorch module with layers the benchmark's own suites never use (GroupNorm, a
depthwise convolution, GELU, LayerNorm). Running it again resumes: finished cells are skipped.
The records land under ``<out>/example/``, the report in ``<out>/reports/example/index.html``.
docs/your_model.md is the whole contract.
"""
from __future__ import annotations

import argparse

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
    p.add_argument("--epochs", type=int, default=4)
    a = p.parse_args(argv)

    train, val, test = bars(600, 0), bars(300, 1), bars(300, 2)
    result = bench.evaluate(
        model=SmallConvNet,  # a factory: called SmallConvNet(in_shape=(1, 12, 12), num_classes=4)
        train=TensorDataset(*train), val=TensorDataset(*val), test={"clean": test},
        shifts={"noise": {s: with_noise(test, s, seed=10 + s) for s in (1, 2, 3)}},
        ood={"pure_noise": torch.randn(200, 1, 12, 12, generator=torch.Generator().manual_seed(3))},
        methods=a.methods.split(","), seeds=[int(s) for s in a.seeds.split(",")], out=a.out, name="example",
        train_config={"epochs": a.epochs, "batch_size": 64, "optimizer": "adam", "lr": 0.005},
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
    for page in result.report:
        print(f"report: {page}")
    return result


if __name__ == "__main__":
    main()
