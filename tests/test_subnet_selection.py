"""Subnetwork selection criteria (bench.subnet.selection)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.data import TensorLoader
from bench.errors import BenchError
from bench.subnet.selection import (CRITERIA, GradientCriterion, allocate_per_layer, candidate_indices,
                                    indices_to_masks, layer_distribution, make_criterion, masks_to_indices,
                                    param_layout, resolve_subnet_size)


def tiny_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
    # non-trivial running statistics, so eval-mode BN is not the identity
    net.train()
    with torch.no_grad():
        net(torch.randn(64, 5) * 2 + 1)
    return net.eval()


def tiny_loader(n: int = 40, batch: int = 16, seed: int = 0) -> TensorLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return TensorLoader(x, y, batch, shuffle=False)


def n_params(net):
    return sum(p.numel() for p in net.parameters())


def bn_range(net):
    s = [s for s in param_layout(net) if s.module_type == "BatchNorm1d"]
    return set(range(s[0].offset, s[-1].end))


@pytest.mark.parametrize("name", ["gradient", "magnitude", "random"])
@pytest.mark.parametrize("per_layer", [False, True])
@pytest.mark.parametrize("size", [0.1, 7, 1.0])
def test_mask_size_unique_in_range_candidates_only(name, per_layer, size):
    net = tiny_net()
    n_cand = candidate_indices(net).numel()
    crit = make_criterion(name, size, per_layer=per_layer)
    idx = crit.select(net, tiny_loader())
    k = resolve_subnet_size(size, n_cand)
    assert idx.dtype == torch.long and idx.numel() == k
    assert torch.unique(idx).numel() == k
    assert bool((idx[1:] > idx[:-1]).all())  # sorted
    assert 0 <= int(idx.min()) and int(idx.max()) < n_params(net)
    assert not (set(idx.tolist()) & bn_range(net)), "BatchNorm parameters must never be selected"
    assert set(idx.tolist()) <= set(candidate_indices(net).tolist())


def brute_force_scores(net, loader, squared=False):
    """|dL/dtheta| per batch, weighted by batch size, via plain backward (per parameter)."""
    total = torch.zeros(n_params(net), dtype=torch.float64)
    n = 0
    for x, y in loader:
        net.zero_grad()
        F.cross_entropy(net(x), y).backward()
        g = torch.cat([p.grad.flatten() for p in net.parameters()]).double()
        total += len(x) * (g.square() if squared else g.abs())
        n += len(x)
    net.zero_grad(set_to_none=True)
    return total / n


@pytest.mark.parametrize("squared", [False, True])
def test_gradient_topk_matches_brute_force(squared):
    net = tiny_net()
    loader = tiny_loader()
    k = 9
    idx = GradientCriterion(k, squared=squared).select(net, loader)
    scores = brute_force_scores(net, loader, squared)
    cand = candidate_indices(net)
    order = cand[torch.argsort(scores[cand], descending=True)]
    assert set(idx.tolist()) == set(order[:k].tolist())
    # the k-th and (k+1)-th scores are separated (no tie decides the answer)
    assert scores[order[k - 1]] > scores[order[k]]


def test_gradient_criterion_leaves_model_untouched():
    net = tiny_net()
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    GradientCriterion(0.2).select(net, tiny_loader())
    assert net.training, "training mode must be restored"
    assert all(p.grad is None for p in net.parameters())
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed"


def test_gradient_n_batches_uses_only_first_batches():
    net = tiny_net()
    loader = tiny_loader(n=48, batch=16)
    first = TensorLoader(loader.x[:16], loader.y[:16], 16, shuffle=False)
    a = GradientCriterion(10, n_batches=1).select(net, loader)
    b = GradientCriterion(10).select(net, first)
    assert torch.equal(a, b)


def test_per_layer_counts_and_within_layer_topk():
    net = tiny_net()
    loader = tiny_loader()
    k = 20
    crit = GradientCriterion(k, per_layer=True)
    idx = crit.select(net, loader)
    rows = layer_distribution(net, idx)
    sizes = [r["numel"] for r in rows]
    assert [r["layer"] for r in rows] == ["0", "3", "5"]
    assert [r["selected"] for r in rows] == allocate_per_layer(k, sizes)
    scores = brute_force_scores(net, loader)
    chosen = set(idx.tolist())
    for s_layer in ("0", "3", "5"):
        slots = [s for s in param_layout(net) if s.module_name == s_layer]
        layer = torch.cat([torch.arange(s.offset, s.end) for s in slots])
        c = len(chosen & set(layer.tolist()))
        top = layer[torch.argsort(scores[layer], descending=True)[:c]]
        assert chosen & set(layer.tolist()) == set(top.tolist())


def test_allocate_per_layer_sums_and_is_proportional():
    assert allocate_per_layer(10, [50, 30, 20]) == [5, 3, 2]
    counts = allocate_per_layer(7, [100, 10, 1])
    assert sum(counts) == 7 and counts[0] >= counts[1] >= counts[2]
    assert allocate_per_layer(111, [100, 10, 1]) == [100, 10, 1]


def test_magnitude_picks_largest_abs_values():
    net = tiny_net()
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    cand = candidate_indices(net)
    idx = make_criterion("magnitude", 5).select(net)
    expected = cand[torch.argsort(flat[cand].abs(), descending=True)[:5]]
    assert set(idx.tolist()) == set(expected.tolist())


def test_random_is_seeded():
    net = tiny_net()
    a = make_criterion("random", 0.3, seed=1).select(net)
    b = make_criterion("random", 0.3, seed=1).select(net)
    c = make_criterion("random", 0.3, seed=2).select(net)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_masks_round_trip_and_shapes():
    net = tiny_net()
    idx = make_criterion("random", 0.25, seed=0).select(net)
    masks = indices_to_masks(net, idx)
    assert set(masks) == {n for n, _ in net.named_parameters()}
    for name, p in net.named_parameters():
        assert masks[name].shape == p.shape and masks[name].dtype == torch.bool
    assert sum(int(m.sum()) for m in masks.values()) == idx.numel()
    assert torch.equal(masks_to_indices(net, masks), idx)
    # a mask on one parameter only
    w = torch.zeros(8, 5, dtype=torch.bool)
    w[2, 3] = True
    assert masks_to_indices(net, {"0.weight": w}).tolist() == [2 * 5 + 3]
    with pytest.raises(BenchError):
        masks_to_indices(net, {"nope": w})
    with pytest.raises(BenchError):
        indices_to_masks(net, torch.tensor([1, 1]))


def test_layer_distribution_counts():
    net = tiny_net()
    off = {s.name: s.offset for s in param_layout(net)}
    idx = torch.tensor([0, 1, off["0.bias"], off["5.weight"]])  # two in "0".weight, one "0".bias, one "5".weight
    rows = layer_distribution(net, idx)
    by = {r["layer"]: r for r in rows}
    assert by["0"]["selected"] == 3 and by["0"]["selected_by_param"] == {"weight": 2, "bias": 1}
    assert by["3"]["selected"] == 0 and by["5"]["selected"] == 1
    assert sum(r["selected"] for r in rows) == idx.numel()
    assert abs(sum(r["fraction_of_subnet"] for r in rows) - 1.0) < 1e-9
    assert by["0"]["fraction_of_layer"] == pytest.approx(3 / 48)
    assert [r["depth"] for r in rows] == [0, 1, 2]
    assert "1" not in by  # BatchNorm: no candidates, nothing selected


def test_resolve_subnet_size():
    assert resolve_subnet_size(0.01, 1000) == 10
    assert resolve_subnet_size(1.0, 1000) == 1000
    assert resolve_subnet_size(1e-6, 1000) == 1  # a positive fraction selects at least one
    assert resolve_subnet_size(25, 1000) == 25
    assert resolve_subnet_size(25.0, 1000) == 25
    for bad in (0.0, -0.1, 1001, True, "0.1"):
        with pytest.raises(BenchError):
            resolve_subnet_size(bad, 1000)


def test_registry_and_option_checking():
    assert {"gradient", "magnitude", "random"} <= set(CRITERIA.names())
    with pytest.raises(BenchError):
        make_criterion("magnitude", 0.1, squared=True)
    with pytest.raises(BenchError):
        make_criterion("nope", 0.1)
    with pytest.raises(BenchError):
        make_criterion("gradient", 0.1).select(tiny_net())  # needs data
