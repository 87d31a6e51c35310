"""PBN's ``squared=true``: the medical PBN paper's Topk of squared gradients, the squares
accumulated per mini-batch (sum_b B_b g_b^2 / N), on a hand-made case where that ranking differs
from the per-batch |g| (PBN Algorithm 1) and from the squared full-data gradient (which ranks as
|sum_b g_b|)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.data import TensorLoader
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS
from methods.base import MethodContext

# Linear(2 -> 2, no bias) at W = 0: softmax 1/2, 1/2, so dCE/dW[c, j] = (1/2 - 1[y = c]) x_j.
# Two batches of one example, both y = 0: x = (2, 3) and (2, 0). Per weight of row c, the batch
# gradients are +-(1, 1.5) and +-(1, 0):
#   input 0: sum |g| = 2, sum g^2 = 2, |sum g| = 2
#   input 1: sum |g| = 1.5, sum g^2 = 2.25, |sum g| = 1.5
# so the per-batch squares pick input 1's weights, |g| and the full gradient input 0's.
X = torch.tensor([[2.0, 3.0], [2.0, 0.0]])
Y = torch.tensor([0, 0])
INPUT0, INPUT1 = [0, 2], [1, 3]  # flat indices of W[:, 0] and W[:, 1] (row-major)


class _Cache:
    def __init__(self, net):
        self.net = net

    def get(self, seed):
        return self.net


def _select(tmp_path, **opts):
    net = nn.Linear(2, 2, bias=False)
    nn.init.zeros_(net.weight)
    ctx = MethodContext(task=classification(2), build_model=lambda dropout=0.0: nn.Linear(2, 2, bias=False),
                        train=TrainConfig(epochs=1, batch_size=1, lr=0.01), device=torch.device("cpu"), seed=0,
                        map_cache=_Cache(net), num_train=2, work_dir=tmp_path)
    method = METHODS.get("pbn")(ctx, n_bayes=2, **opts)
    _, idx, meta = method.build_posterior(TensorLoader(X, Y, 1, shuffle=False))
    return idx.tolist(), meta


@pytest.mark.parametrize("opts, expected", [({"squared": True}, INPUT1), ({}, INPUT0),
                                            ({"squared": True, "aggregate": "full"}, INPUT0)])
def test_squared_saliency_accumulates_squares_per_batch(tmp_path, opts, expected):
    idx, meta = _select(tmp_path, **opts)
    assert idx == expected
    assert meta["criterion"]["aggregate"] == opts.get("aggregate", "per_batch")


def test_the_scores_are_the_hand_sums(tmp_path):
    from bench.subnet.selection import make_criterion

    net = nn.Linear(2, 2, bias=False)
    nn.init.zeros_(net.weight)
    loss = classification(2).loss
    loader = TensorLoader(X, Y, 1, shuffle=False)
    sq = make_criterion("gradient", 2, squared=True).compute_param_scores(net, loader, loss_fn=loss)
    ab = make_criterion("gradient", 2).compute_param_scores(net, loader, loss_fn=loss)
    # means over the two examples (batch size 1 each)
    assert torch.allclose(sq, torch.tensor([2.0, 2.25, 2.0, 2.25]) / 2)
    assert torch.allclose(ab, torch.tensor([2.0, 1.5, 2.0, 1.5]) / 2)
