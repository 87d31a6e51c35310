"""Which weights of a MAP network the training data cannot identify (bench/subnet/identifiability.py):
the distribution of the training-mode mean squared mini-batch gradient, relative to its median
over the candidate weights, next to what batch norm's cancellation of constant inputs predicts.

    .venv/bin/python benchmarks/identifiability.py --suite mnist_rotated --model lenet_300_100 --seed 0

Reads the cached MAP network of the quick profile (``results/<suite>/checkpoints/map``) and the
suite's training split from the data root; prints a markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.checkpoints import load_torch  # noqa: E402
from bench.data import TensorLoader  # noqa: E402
from bench.models import build_model  # noqa: E402
from bench.subnet.identifiability import train_mode_grad_second_moment  # noqa: E402
from bench.subnet.selection import candidate_indices, param_layout  # noqa: E402
from bench.suites import SUITES  # noqa: E402


def map_network(results: Path, suite, model: str, seed: int):
    paths = sorted((results / suite.name / "checkpoints" / "map" / model).glob(f"*/seed{seed}.pt"))
    if not paths:
        raise SystemExit(f"no cached MAP network for {model} seed {seed} under {results}/{suite.name}: run the quick "
                         f"profile's deterministic method first")
    net = build_model(model, suite.in_shape, suite.task.num_outputs)
    net.load_state_dict(load_torch(paths[0])["model"])
    return net.eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results")
    p.add_argument("--data-root", default="data")
    p.add_argument("--suite", default="mnist_rotated")
    p.add_argument("--model", default="lenet_300_100")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=256)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    suite = SUITES.get(a.suite)()
    data = suite.load(Path(a.data_root), suite.data_cfg({}), False)
    x, y = data.train_x, data.train_y
    net = map_network(Path(a.results), suite, a.model, a.seed)
    g2, _ = train_mode_grad_second_moment(net, TensorLoader(x, y, a.batch_size, shuffle=True, seed=0),
                                          F.cross_entropy)
    cand = candidate_indices(net)
    rel = (g2[cand] / g2[cand].median()).double().numpy()
    lg = np.log10(np.maximum(rel, 1e-300))
    edges = [-np.inf, -14, -13, -12, -11, -10, -9, -8, -7, -6, -4, -2, 0, np.inf]
    counts, _ = np.histogram(lg, bins=edges)
    # what batch-norm cancellation predicts: first-layer weights on inputs constant over the
    # training set, and the bias of every layer followed by batch norm
    flat = x.reshape(len(x), -1)
    constant = int((flat.std(0) == 0).sum())
    lay = [s for s in param_layout(net) if s.candidate]
    first = lay[0]
    n_units_first = first.shape[0]
    pre_bn_biases = sum(s.numel for s, nxt in zip(lay, lay[1:] + [None]) if s.name.endswith("bias") and nxt is not None)
    print(f"Training-mode mean squared mini-batch gradient of the {len(cand):,} candidate weights of `{a.model}` "
          f"(MAP network, seed {a.seed}; {len(x):,} training images, batches of {a.batch_size}), relative to its median. "
          f"Batch-norm cancellation predicts {constant} constant input(s) x {n_units_first} first-layer units + "
          f"{pre_bn_biases} biases before batch norm = {constant * n_units_first + pre_bn_biases:,} weights with an "
          f"exactly zero gradient (float residue).\n")
    print("| log10 (mean squared gradient / median) | weights |")
    print("| --- | ---: |")
    for lo, hi, c in zip(edges[:-1], edges[1:], counts):
        lo_s = "-inf" if lo == -np.inf else f"{lo:g}"
        hi_s = "inf" if hi == np.inf else f"{hi:g}"
        print(f"| [{lo_s}, {hi_s}) | {int(c):,} |")
    print(f"| excluded at the default threshold (<= 1e-8 x median) | {int((rel <= 1e-8).sum()):,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
