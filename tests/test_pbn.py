"""PBN and mean-field VI method plugins, end to end on a tiny synthetic problem."""
from __future__ import annotations

import copy
import json
from functools import partial

import pytest
import torch

from bench.checkpoints import MapCache, load_torch, save_torch
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.models import build_model
from bench.subnet.selection import GradientCriterion, candidate_indices, param_layout
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS, MethodContext
from synthetic import blobs as synthetic

N_TRAIN = 96


@pytest.fixture
def setup(tmp_path):
    task = classification(3)
    x, y = synthetic(N_TRAIN, 0)
    build = partial(build_model, "lenet_300_100", (1, 4, 4), 3)  # has BatchNorm layers
    train = TrainConfig(epochs=2, batch_size=32, lr=0.05, momentum=0.9, weight_decay=1e-5)
    cache = MapCache(tmp_path / "ckpt", {"model": "lenet_300_100", "suite": "test"}, build, task, x, y, train,
                     torch.device("cpu"))
    ctx = MethodContext(task=task, build_model=build, train=train, device=torch.device("cpu"), seed=0,
                        map_cache=cache, num_train=N_TRAIN, work_dir=tmp_path / "work")

    def loader(seed=1):
        return TensorLoader(x, y, 32, shuffle=True, seed=seed)

    return ctx, loader, (x, y)


def n_params(net):
    return sum(p.numel() for p in net.parameters())


def test_pbn_fit_predict_state_round_trip(setup, tmp_path):
    ctx, loader, _ = setup
    torch.manual_seed(0)
    method = METHODS.get("pbn")(ctx, r_bayes=0.01)
    method.fit(loader(), synthetic(20, 5))
    theta = n_params(method.vi.net)
    n_cand = candidate_indices(method.vi.net).numel()
    k = method.num_stochastic_params()
    assert k == round(0.01 * n_cand)
    assert method.num_params() == theta + k
    assert (ctx.work_dir / "pbn.partial").exists() is False  # resumable checkpoint cleaned up

    x_test, _ = synthetic(30, 7)
    pred = method.predict(x_test)
    assert pred.probs.shape == (30, 3) and pred.sample_probs.shape == (5, 30, 3)
    torch.testing.assert_close(pred.probs.sum(1), torch.ones(30))
    assert not torch.allclose(pred.sample_probs[0], pred.sample_probs[1]), "posterior samples must differ"
    # the same posterior draws for every call: reproducible and independent of batching
    halves = torch.cat([method.predict(x_test[:11]).probs, method.predict(x_test[11:]).probs])
    torch.testing.assert_close(halves, pred.probs, rtol=1e-5, atol=1e-6)
    assert torch.equal(method.predict(x_test).probs, pred.probs)

    save_torch({"method": method.state_dict()}, tmp_path / "fitted.pt")
    fresh = METHODS.get("pbn")(ctx, r_bayes=0.01)
    fresh.load_state_dict(load_torch(tmp_path / "fitted.pt")["method"])
    after = fresh.predict(x_test)
    assert torch.equal(after.probs, pred.probs) and torch.equal(after.sample_probs, pred.sample_probs)
    assert fresh.num_stochastic_params() == k and fresh.num_params() == theta + k

    diag = fresh.diagnostics()
    json.dumps(diag)
    assert diag["k"] == k and sum(r["selected"] for r in diag["layer_distribution"]) == k
    assert [r["type"] for r in diag["layer_distribution"]] == ["Linear", "Linear", "Linear"]
    fl = diag["first_layer_sigma"]
    assert fl["param"] == "1.weight" and fl["shape"] == [300, 16]
    assert fl["stochastic"] == diag["layer_distribution"][0]["selected_by_param"]["weight"]
    assert len(fl["values"]) == 300 and fl["max"] > 0
    assert diag["train"]["final_beta"] == pytest.approx(0.01, abs=0.07)
    cost = fresh.extra_cost()
    json.dumps(cost)
    assert cost["variational_params"] == k
    assert cost["param_ratio_vs_deterministic"] == pytest.approx(1 + k / theta)
    assert cost["variational_state_bytes"] == k * (4 + 4)  # float32 rho + int32 index
    assert cost["forward_flops_deterministic"] > 0 and cost["train_flops_paper"] > 0
    assert "upstream_train_time_s" not in cost  # the harness charges the MAP network's time


def test_pbn_starts_from_map_with_gradient_topk(setup):
    ctx, loader, _ = setup
    method = METHODS.get("pbn")(ctx, r_bayes=0.02)
    net, idx, meta = method.build_posterior(loader())
    map_net = ctx.map_cache.get(ctx.seed)
    for (name, p), q in zip(net.named_parameters(), map_net.parameters()):
        assert torch.equal(p, q), f"mu of {name} must start at the MAP value (Algorithm 1 line 9)"
    # independent computation (Algorithm 1 lines 7-8): |dL/dtheta| of every mini-batch by plain
    # backward on the MAP network in eval mode, averaged with batch weights; top-k candidates
    assert torch.equal(idx, _brute_force_topk(map_net, loader(), ctx.task.loss, idx.numel()))
    assert meta["criterion"]["name"] == "gradient" and not meta["criterion"]["squared"]
    # BatchNorm parameters are never in the subnetwork
    bn = [s for s in param_layout(net) if s.module_type.startswith("BatchNorm")]
    assert not any(s.offset <= i < s.end for s in bn for i in idx.tolist())


def _brute_force_topk(net, loader, loss_fn, k, aggregate="per_batch"):
    net = copy.deepcopy(net).eval()
    total, n = None, 0
    for x, y in loader:
        net.zero_grad()
        loss_fn(net(x), y).backward()
        g = torch.cat([p.grad.flatten() for p in net.parameters()]).double() * len(x)
        g = g if aggregate == "full" else g.abs()
        total = g if total is None else total + g
        n += len(x)
    scores = (total / n).abs()
    cand = candidate_indices(net)
    return cand[torch.argsort(scores[cand], descending=True)[:k]].sort().values


def test_pbn_aggregate_full_is_the_full_data_gradient(setup):
    ctx, loader, _ = setup
    method = METHODS.get("pbn")(ctx, r_bayes=0.02, aggregate="full")
    _, idx, meta = method.build_posterior(loader())
    map_net = ctx.map_cache.get(ctx.seed)
    assert meta["criterion"]["aggregate"] == "full"
    assert torch.equal(idx, _brute_force_topk(map_net, loader(), ctx.task.loss, idx.numel(), aggregate="full"))
    per_batch = METHODS.get("pbn")(ctx, r_bayes=0.02).build_posterior(loader())[1]
    assert not torch.equal(idx, per_batch), "|mean gradient| and mean |gradient| select different weights here"
    with pytest.raises(BenchError, match="aggregate"):
        METHODS.get("pbn")(ctx, criterion="random", aggregate="full").build_posterior(loader())


def test_pbn_ablations_random_subnet_and_random_init(setup):
    ctx, loader, _ = setup
    base = METHODS.get("pbn")(ctx, r_bayes=0.02)
    _, idx_grad, _ = base.build_posterior(loader())
    rand = METHODS.get("pbn")(ctx, r_bayes=0.02, criterion="random")
    _, idx_rand, _ = rand.build_posterior(loader())
    assert idx_rand.numel() == idx_grad.numel() and not torch.equal(idx_rand, idx_grad)
    rinit = METHODS.get("pbn")(ctx, r_bayes=0.02, init="random")
    net, idx_ri, meta = rinit.build_posterior(loader())
    assert torch.equal(idx_ri, idx_grad), "random init keeps the gradient-selected subnetwork (Sec. 4.3)"
    map_net = ctx.map_cache.get(ctx.seed)
    assert not torch.equal(next(net.parameters()), next(map_net.parameters()))
    assert meta["init"] == "random"
    per_layer = METHODS.get("pbn")(ctx, n_bayes=40, per_layer=True, squared=True)
    _, idx_pl, meta = per_layer.build_posterior(loader())
    assert idx_pl.numel() == 40 and meta["criterion"]["per_layer"] and meta["criterion"]["squared"]


def test_fine_tuning_only_control_fits_with_no_stochastic_weight(setup):
    """PBN's fine-tuning-only control (n_bayes=0, a CONTROLS entry): the same pipeline trains the
    MAP network further with no stochastic weight; it fits (the sigma stationarity measurement has
    nothing to measure), its predictive is deterministic, it moved away from the MAP network, and
    its VI validity checks are not applicable while the others still decide."""
    from bench.validity import NOT_APPLICABLE, verdict

    ctx, loader, _ = setup
    assert METHODS.get("pbn").CONTROLS["fine-tuning only"] == {"n_bayes": 0}
    method = METHODS.get("pbn")(ctx, n_bayes=0)
    method.fit(loader(), synthetic(20, 5))
    assert method.num_stochastic_params() == 0 and method.meta["sigma_stationarity"] == {}
    x_test, _ = synthetic(30, 7)
    pred = method.predict(x_test)
    torch.testing.assert_close(pred.sample_probs, pred.sample_probs[:1].expand_as(pred.sample_probs))
    map_net = ctx.map_cache.get(ctx.seed)
    assert any(not torch.equal(a, b) for a, b in zip(method.vi.net.parameters(), map_net.parameters()))
    run = {"task": "classification", "diagnostics": method.meta, "method_config": method.config,
           "cost": {"stochastic_params": 0}, "train_config": {"schedule": "cosine"}}
    checks = {c["name"]: c["status"] for c in verdict(run, ("vi_rate_limit", "vi_moved", "vi_stationarity"))["checks"]}
    assert checks == dict.fromkeys(("vi_rate_limit", "vi_moved", "vi_stationarity"), NOT_APPLICABLE)


def test_mfvi_all_weights_stochastic(setup):
    ctx, loader, _ = setup
    torch.manual_seed(0)
    method = METHODS.get("mfvi")(ctx, epochs=1)
    method.fit(loader(), synthetic(20, 5))
    net = method.vi.net
    assert method.num_stochastic_params() == candidate_indices(net).numel()
    assert method.num_params() == n_params(net) + candidate_indices(net).numel()
    bn = [s for s in param_layout(net) if s.module_type.startswith("BatchNorm")]
    sig = method.vi.sigma_flat().detach()
    assert all(float(sig[s.offset:s.end].abs().sum()) == 0 for s in bn)
    x_test, _ = synthetic(12, 7)
    pred = method.predict(x_test)
    assert pred.sample_probs.shape == (5, 12, 3)
    fresh = METHODS.get("mfvi")(ctx, epochs=1)
    fresh.load_state_dict(method.state_dict())
    assert torch.equal(fresh.predict(x_test).probs, pred.probs)
    cost = method.extra_cost()
    assert "upstream_train_time_s" not in cost
    assert cost["param_ratio_vs_deterministic"] == pytest.approx(1 + method.num_stochastic_params() / n_params(net))


def test_bad_options_are_errors(setup):
    ctx, loader, _ = setup
    with pytest.raises(BenchError):
        METHODS.get("pbn")(ctx, r_bayse=0.1)
    with pytest.raises(BenchError):
        METHODS.get("pbn")(ctx, init="zeros").build_posterior(loader())
    with pytest.raises(BenchError):
        METHODS.get("pbn")(ctx, criterion="magnitude", squared=True).build_posterior(loader())
    with pytest.raises(BenchError):
        METHODS.get("mfvi")(ctx, r_bayes=0.1)


def test_the_kl_divisor_counts_observations_inputs_or_the_batch(setup):
    """kl_scale: "dataset" divides the KL by the observations (pixels on segmentation, here 16
    per input), "examples" by the training inputs, "batch" by the batch size."""
    import dataclasses

    ctx, loader, _ = setup
    ctx = dataclasses.replace(ctx, num_train=N_TRAIN * 16)
    for scale, expected in (("dataset", N_TRAIN * 16), ("examples", N_TRAIN), ("batch", 32)):
        torch.manual_seed(0)
        method = METHODS.get("pbn")(ctx, r_bayes=0.01, kl_scale=scale, epochs=1)
        method.fit(loader(), None)
        assert method.meta["train"]["kl_divisor"] == expected, scale
