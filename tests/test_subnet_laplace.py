"""Subnetwork Laplace through laplace-torch (methods/subnet_laplace.py) and the Laplace-based
subnet criteria of bench.subnet.selection. Tiny networks: every test runs in seconds."""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from torch import nn

from bench.data import TensorLoader
from bench.errors import BenchError
from bench.subnet.selection import (DegenerateSubnetError, candidate_indices, make_criterion, param_layout,
                                    resolve_subnet_size, subnet_digest)
from bench.tasks import classification
from bench.training import TrainConfig
from methods.base import MethodContext

warnings.filterwarnings("ignore")

pytest.importorskip("laplace")

from methods.laplace_diag import LaplaceDiag  # noqa: E402
from methods.laplace_last_layer import LaplaceLastLayer  # noqa: E402
from bench.laplace.memory import MemoryGuardError, check_memory, estimate_memory  # noqa: E402
from bench.laplace.subnet_jacobians import subnet_jacobian_backend  # noqa: E402
from methods.subnet_laplace import SubnetLaplace  # noqa: E402

D_IN, N_CLASSES = 5, 3


def bn_net(seed: int = 0) -> nn.Module:
    """Linear-BN-ReLU-Linear-ReLU-Linear with non-trivial BN statistics (eval mode)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(D_IN, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU(),
                        nn.Linear(6, N_CLASSES))
    net.train()
    with torch.no_grad():
        net(torch.randn(64, D_IN) * 2 + 1)
    return net.eval()


def plain_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, 6), nn.Tanh(), nn.Linear(6, N_CLASSES)).eval()


def data(n: int = 48, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_IN, generator=g)
    y = torch.randint(0, N_CLASSES, (n,), generator=g)
    return x, y


def loader(n: int = 48, seed: int = 0, batch: int = 16) -> TensorLoader:
    x, y = data(n, seed)
    return TensorLoader(x, y, batch, shuffle=False)


class StubCache:
    """What the methods use of bench.checkpoints.MapCache."""

    def __init__(self, net):
        self.net = net

    def get(self, seed):
        return copy.deepcopy(self.net).eval()

    def upstream_time(self, seeds):
        return 0.0


def ctx_for(net_fn, seed: int = 0) -> MethodContext:
    net = net_fn()
    return MethodContext(task=classification(N_CLASSES), build_model=lambda dropout=0.0: net_fn(),
                         train=TrainConfig(epochs=1), device=torch.device("cpu"), seed=seed,
                         map_cache=StubCache(net), num_train=48)


def bn_indices(net):
    return {i for s in param_layout(net) if s.module_type.startswith("BatchNorm") for i in range(s.offset, s.end)}


def diag_ggn_brute_force(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """sum_n diag(J_n^T (diag(p_n) - p_n p_n^T) J_n), per-example Jacobians by autograd."""
    params = list(net.parameters())
    h = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    for xn in x:
        f = net(xn[None])[0]
        p = torch.softmax(f, -1).double()
        lam = torch.diag(p) - torch.outer(p, p)
        J = torch.stack([torch.cat([g.flatten() for g in torch.autograd.grad(f[k], params, retain_graph=True)])
                         for k in range(len(f))]).double()
        h += torch.einsum("cp,ck,kp->p", J, lam, J)
    return h


# -- criteria -------------------------------------------------------------------------------
LAPLACE_CRITERIA = {"largest_variance_diag_laplace": {}, "largest_variance_swag": {"n_snapshots": 3}}


@pytest.mark.parametrize("name", ["largest_variance_diag_laplace", "largest_variance_swag", "random",
                                  "magnitude", "gradient"])
@pytest.mark.parametrize("size", [7, 0.2])
def test_every_criterion_gives_unique_in_range_non_bn_mask_of_the_size(name, size):
    net = bn_net()
    opts = LAPLACE_CRITERIA.get(name, {})
    idx = make_criterion(name, size, **opts).select(net, loader())
    n_params = sum(p.numel() for p in net.parameters())
    k = resolve_subnet_size(size, candidate_indices(net).numel())
    assert idx.dtype == torch.long and idx.numel() == k == torch.unique(idx).numel()
    assert 0 <= int(idx.min()) and int(idx.max()) < n_params
    assert not set(idx.tolist()) & bn_indices(net), "BatchNorm parameters must never be selected"


@pytest.mark.parametrize("backend", ["backpack", "asdl"])
def test_largest_variance_picks_top_variance_of_an_independent_diag_laplace(backend):
    net, tau, k = bn_net(), 2.0, 9
    x, y = data()
    crit = make_criterion("largest_variance_diag_laplace", k, backend=backend, prior_precision=tau)
    idx = crit.select(net, TensorLoader(x, y, 16, shuffle=False))
    h = diag_ggn_brute_force(net, x)
    var = 1.0 / (h + tau)  # diagonal Laplace: posterior variance = 1 / (GGN diagonal + prior precision)
    cand = candidate_indices(net)
    cand = cand[h[cand] > 1e-12 * h.max()]  # the degenerate-subnet guard's candidates
    expected = cand[torch.topk(var[cand], k).indices].sort().values
    assert idx.tolist() == expected.tolist()
    assert crit.info["backend"] == backend


def dead_unit_net() -> nn.Module:
    """Hidden unit 0 never fires on the data: its in- and out-weights have zero curvature."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, 4), nn.ReLU(), nn.Linear(4, N_CLASSES)).eval()
    with torch.no_grad():
        net[0].weight[0] = 50.0  # the largest magnitudes of the network ...
        net[0].bias[0] = -1000.0  # ... and dead on every input
    return net


def dead_indices(net):
    lay = {s.name: s for s in param_layout(net)}
    w0, b0, w2 = lay["0.weight"], lay["0.bias"], lay["2.weight"]
    dead = set(range(w0.offset, w0.offset + D_IN)) | {b0.offset}
    dead |= {w2.offset + c * 4 for c in range(N_CLASSES)}  # weights out of unit 0
    return dead


def test_degenerate_guard_excludes_zero_curvature_weights_and_raises_when_too_few():
    net = dead_unit_net()
    n_cand = candidate_indices(net).numel()
    dead = dead_indices(net)
    crit = make_criterion("largest_variance_diag_laplace", n_cand - len(dead))
    idx = crit.select(net, loader())
    assert not set(idx.tolist()) & dead  # prior variance = the largest, yet never picked
    assert crit.info["n_zero_curvature_candidates"] == len(dead)
    with pytest.raises(DegenerateSubnetError, match="zero curvature"):
        make_criterion("largest_variance_diag_laplace", n_cand - len(dead) + 1).select(net, loader())


def test_subnet_laplace_refuses_a_subnet_the_data_never_touches():
    # magnitude picks exactly the dead unit's weights: the Laplace would be a point estimate
    ctx = ctx_for(dead_unit_net)
    method = SubnetLaplace(ctx, criterion="magnitude", n_subnet=D_IN + 1, prior_precision_method="none")
    with pytest.raises(DegenerateSubnetError, match="zero curvature"):
        method.fit(loader(), data(24, 1))


# -- the subnet-only Jacobian backend ---------------------------------------------------------
# the batched (rows x columns) product, the pairwise path; the outputs' gradients kept for all 4
# outputs at once, or 3 then 1 (the hooked outputs of 5 images: 5 x (48 + 48 + 6 + 4) = 530 floats each);
# the batched product a row at a time (product_floats 1: every layer's rows one by one)
@pytest.mark.parametrize("pairs_factor, chunk_floats, product_floats",
                         [(64, 2**24, 2**24), (0, 2**24, 2**24), (64, 1590, 2**24), (0, 530, 2**24), (64, 2**24, 1)])
def test_subnet_jacobians_match_backpack_on_a_conv_net(pairs_factor, chunk_floats, product_floats, monkeypatch):
    from laplace.curvature import BackPackGGN

    import bench.laplace.subnet_jacobians as sj

    monkeypatch.setattr(sj, "DENSE_PAIRS_FACTOR", pairs_factor)
    monkeypatch.setattr(sj, "OUTPUT_CHUNK_FLOATS", chunk_floats)
    monkeypatch.setattr(sj, "DENSE_PRODUCT_FLOATS", product_floats)
    assert sj.output_chunk(4, 530) == {2**24: 4, 1590: 3, 530: 1}[chunk_floats]
    torch.manual_seed(0)
    # a strided convolution, then a dilated grouped one (its columns read its group's channels)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, stride=2), nn.Conv2d(3, 3, 3, padding=2, dilation=2, groups=3),
                        nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 6), nn.ReLU(),
                        nn.Linear(6, 4)).eval()
    x = torch.randn(5, 1, 8, 8)
    n_params = sum(p.numel() for p in net.parameters())
    bn = set(range(60, 66))  # BatchNorm2d weight + bias
    grouped = {31, 35, 40, 47, 52, 58}  # the grouped convolution's weights (30..56) and a bias
    idx = torch.tensor(sorted((set(torch.randperm(n_params)[:60].tolist()) | grouped) - bn))
    idx = idx[torch.randperm(len(idx))]  # any order: columns follow the given indices
    ours = subnet_jacobian_backend()(copy.deepcopy(net), "classification", subnetwork_indices=idx)
    ref_net = copy.deepcopy(net)
    ref_net.output_size = 4
    ref = BackPackGGN(ref_net, "classification", subnetwork_indices=idx)
    (j1, f1), (j2, f2) = ours.jacobians(x), ref.jacobians(x)
    assert j1.shape == j2.shape == (5, 4, len(idx))
    torch.testing.assert_close(j1, j2, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(f1, f2)
    assert subnet_jacobian_backend().unsupported(net, torch.arange(60, 63))  # BatchNorm: not served


def test_subnet_of_all_weights_matches_laplace_torch_full_laplace():
    from laplace import Laplace
    from laplace.curvature import BackPackGGN
    from torch.utils.data import DataLoader, TensorDataset

    ctx = ctx_for(plain_net)
    method = SubnetLaplace(ctx, criterion="magnitude", subnet_fraction=1.0, prior_precision_method="none",
                           prior_precision=0.7)
    x, y = data()
    method.fit(TensorLoader(x, y, 16, shuffle=False), data(24, 1))
    n_params = sum(p.numel() for p in plain_net().parameters())
    assert method.num_stochastic_params() == n_params and method.meta["backend"] == "subnet"
    full = Laplace(plain_net(), "classification", subset_of_weights="all", hessian_structure="full",
                   backend=BackPackGGN, prior_precision=0.7)
    full.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    torch.testing.assert_close(method.la.H.float(), full.H, atol=1e-5, rtol=1e-4)  # ours: float64 (precision.py)
    xt = torch.randn(20, D_IN) * 2
    with torch.no_grad():
        ours = method.predict(xt).probs
    ref = full(xt, pred_type="glm", link_approx="probit")
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    assert (ours - torch.softmax(plain_net()(xt), -1)).abs().max() > 1e-3  # not the MAP prediction


# -- memory guard -------------------------------------------------------------------------------
MEM = dict(n_params=267_410, n_outputs=10, batch_size=128, predict_batch=1000, activations=1_600)


def test_the_default_memory_limit_is_a_quarter_of_the_host_and_most_of_a_gpu(monkeypatch):
    """A quarter of the host's available memory (shared with other jobs); on a GPU 80 % of what the
    driver has free plus what torch's caching allocator holds unused (faked here: no GPU)."""
    import psutil

    from bench.laplace.memory import default_memory_limit

    class VM:
        available = 8 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM)
    assert default_memory_limit("cpu") == 2 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (60 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 12 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 2 * 2**30)
    assert default_memory_limit("cuda:0") == int(0.8 * 70 * 2**30)
    assert default_memory_limit("cuda:0", fraction=0.5) == 35 * 2**30


def test_memory_guard_refuses_oversized_and_names_a_size_that_fits():
    limit = 2**30  # 1 GiB
    with pytest.raises(MemoryGuardError) as err:
        check_memory(limit=limit, what="test", backend="subnet", s=50_000, **MEM)
    msg = str(err.value)
    # GGN, Cholesky factor and scale (3 s^2 float64 entries) and the scale's blocks of 2^28 bytes of
    # columns (671 of them), three alive: (3 * 50,000^2 + 3 * 50,000 * 671) * 8 bytes
    assert "exceeds the limit 1.00 GB" in msg and "covariance 56.63 GB" in msg
    s_ok = int(msg.split("n_subnet=")[1].split(")")[0])
    assert estimate_memory(backend="subnet", s=s_ok, **MEM)["total"] <= limit
    assert estimate_memory(backend="subnet", s=s_ok + 1, **MEM)["total"] > limit
    assert check_memory(limit=limit, what="test", backend="subnet", s=1000, **MEM)["total"] <= limit
    # a laplace-torch backend slices full Jacobians: B x P per output, here ~0.4 GB at s = 100 (the
    # subnet backend's bound on its batched product, 64 B K s floats, is most of its ~56 MB)
    full = estimate_memory(backend="backpack", s=100, **MEM)
    assert full["jacobian_fit"] > 5 * estimate_memory(backend="subnet", s=100, **MEM)["jacobian_fit"]


def test_the_jvp_sampled_predictive_is_estimated_without_a_jacobian():
    """glm_sampler=jvp forms no Jacobian: its predict term is one pass of JVPs' activations
    (bench.laplace.jvp_glm.samples_per_pass samples) plus the logit draws, whatever s and the
    backend. Tiny-ImageNet-C's setting (resnet_small at 64 x 64:
    82,568 activation floats per image, K = 200, s = 1,000, chunks of 1,000) was refused at a
    4.9 GB limit for a Jacobian it never builds (then 6 B K s floats = 4.8 GB); benchmarks/
    laplace_memory.py --jvp measures the JVP predictive at 0.6 GB there."""
    tiny = dict(n_params=220_000, n_outputs=200, batch_size=16, predict_batch=1000, activations=82_568)
    jac = estimate_memory(backend="subnet", s=1000, **tiny)
    assert jac["jacobian_predict"] == (8 * 1000 * 200 * 1000 + 1000 * 5 * 82_568 + 2**24) * 4  # > 4.9 GB
    for backend in ("subnet", "backpack", "asdl"):
        for s in (100, 1000):
            jvp = estimate_memory(backend=backend, s=s, glm_sampler="jvp", n_samples=20, **tiny)
            # 2^28 // (1,000 x 82,568) = 3 samples share a pass: the primal's activations, their tangents
            # and offsets, and the logit draws
            assert jvp["jacobian_predict"] == ((2 + 3) * 1000 * 82_568 + 3 * 220_000 + 21 * 1000 * 200) * 4  # 1.6 GB
    # CamVid's (unet_small at 120 x 160: 7,795,200 activation floats per image, chunks of 4, 10 samples):
    # 2^28 // (4 x 7,795,200) = 8 samples share a pass, their tangents held together
    camvid = dict(n_params=450_651, n_outputs=11, batch_size=16, predict_batch=4, activations=7_795_200)
    jvp = estimate_memory(backend="sampled", s=1000, glm_sampler="jvp", n_samples=10, **camvid)
    assert jvp["jacobian_predict"] == ((2 + 8) * 4 * 7_795_200 + 8 * 450_651 + 11 * 4 * 11) * 4
    limit = int(4.9 * 2**30)
    with pytest.raises(MemoryGuardError):
        check_memory(limit=limit, what="t", backend="subnet", s=1000, **tiny)
    check_memory(limit=limit, what="t", backend="subnet", s=1000, glm_sampler="jvp", n_samples=20, **tiny)


def test_the_subnet_backend_fit_is_estimated_with_its_chunk_of_output_gradients():
    """The subnet backend keeps the gradients at its hooked layer outputs for a chunk of the K
    outputs (at most OUTPUT_CHUNK_FLOATS floats, at least one output's), and stacks them per
    layer: 2 x that chunk beside 8 B K s (the Jacobian, its products and its float64 copy) and 3 B x activations
    (the graph). At Tiny-ImageNet-C's fit (batches of 128, K = 200, 82,568 activation floats per
    image) all K at once is 2.1 G floats (benchmarks/laplace_memory.py --fit-cases: 5.1 GB
    measured before the chunking, 0.44 GB after); a 10-class LeNet keeps all K, a few MB."""
    from bench.laplace.subnet_jacobians import OUTPUT_CHUNK_FLOATS

    tiny = dict(n_params=168_888, n_outputs=200, batch_size=128, predict_batch=1000, activations=82_568)
    est = estimate_memory(backend="subnet", s=1000, **tiny)
    assert OUTPUT_CHUNK_FLOATS == 2**24
    # the batched (rows x columns) product: 64 B K s floats at most, in chunks of 2^24
    assert est["jacobian_fit"] == (8 * 128 * 200 * 1000 + 128 * 3 * 82_568 + 2 * 2**24 + 2**24) * 4
    small = dict(MEM, batch_size=64)  # K = 10, 1,600 activations: 10 x 64 x 1,600 floats < the chunk
    assert estimate_memory(backend="subnet", s=20, **small)["jacobian_fit"] == \
        (8 * 64 * 10 * 20 + 64 * 3 * 1_600 + 2 * 10 * 64 * 1_600 + 64 * 64 * 10 * 20) * 4
    huge = dict(tiny, activations=2**20)  # one output's gradients exceed the chunk: one at a time
    assert estimate_memory(backend="subnet", s=1000, **huge)["jacobian_fit"] == \
        (8 * 128 * 200 * 1000 + 3 * 128 * 2**20 + 2 * 128 * 2**20 + 2**24) * 4


def test_subnet_laplace_tells_the_guard_how_it_predicts(monkeypatch):
    import methods.subnet_laplace as sl

    seen = []
    real = sl.check_memory
    monkeypatch.setattr(sl, "check_memory", lambda **kw: seen.append(kw) or real(**kw))
    SubnetLaplace(ctx_for(bn_net), n_subnet=20, link_approx="mc", glm_sampler="jvp", n_samples=7,
                  prior_precision_method="none").fit(loader(), data(24, 1))
    assert seen and all(kw["glm_sampler"] == "jvp" and kw["n_samples"] == 7 for kw in seen)


def test_subnet_laplace_memory_guard_stops_before_selecting():
    ctx = ctx_for(bn_net)
    small = SubnetLaplace(ctx, n_subnet=20, memory_limit_gb=1.0, prior_precision_method="none").fit(loader(), data(24, 1))
    assert small.num_stochastic_params() == 20
    limit_gb = 3 / 2**10  # 3 MB: the whole network (123 candidates) does not fit
    big = SubnetLaplace(ctx, subnet_fraction=1.0, memory_limit_gb=limit_gb, prior_precision_method="none")
    with pytest.raises(MemoryGuardError, match=r"exceeds the limit 3.00 MB .* fits \(n_subnet=\d+\)") as err:
        big.fit(loader(), data(24, 1))
    assert big.indices is None  # refused before the (slow) selection
    s_ok = int(str(err.value).split("fits (n_subnet=")[1].split(")")[0])
    assert 0 < s_ok < 123
    SubnetLaplace(ctx, n_subnet=s_ok, memory_limit_gb=limit_gb, prior_precision_method="none").fit(loader(), data(24, 1))


# -- fit / save / load ---------------------------------------------------------------------------
CASES = [
    (SubnetLaplace, bn_net, {"n_subnet": 25, "grid_size": 5}),
    (SubnetLaplace, bn_net, {"n_subnet": 25, "pred_type": "nn", "n_samples": 7, "prior_precision_method": "marglik"}),
    (SubnetLaplace, bn_net, {"n_subnet": 25, "link_approx": "mc", "n_samples": 7, "grid_size": 3}),
    (SubnetLaplace, bn_net, {"n_subnet": 25, "criterion": "random", "backend": "backpack", "grid_size": 3}),
    (SubnetLaplace, bn_net, {"n_subnet": 25, "criterion": "gradient", "backend": "asdl", "grid_size": 3}),
    (LaplaceDiag, bn_net, {"grid_size": 5, "n_samples": 5}),
    (LaplaceLastLayer, bn_net, {}),
]


@pytest.mark.parametrize("cls,net_fn,cfg", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_state_dict_round_trip_gives_identical_predictions(cls, net_fn, cfg):
    ctx = ctx_for(net_fn)
    method = cls(ctx, **cfg).fit(loader(), data(24, 1))
    xt = torch.randn(30, D_IN)
    with torch.no_grad():
        before = method.predict(xt)
        again = method.predict(xt[:13])  # batch-size independent (fixed sampling seeds)
    torch.testing.assert_close(again.probs, before.probs[:13], atol=1e-5, rtol=1e-5)
    state = method.state_dict()
    fresh = cls(ctx, **cfg)
    fresh.load_state_dict(copy.deepcopy(state))
    with torch.no_grad():
        after = fresh.predict(xt)
    torch.testing.assert_close(after.probs, before.probs, atol=1e-6, rtol=1e-6)
    assert torch.allclose(before.probs.sum(-1), torch.ones(30), atol=1e-5)
    assert fresh.num_stochastic_params() == method.num_stochastic_params() > 0
    if cls is SubnetLaplace:
        assert fresh.indices.tolist() == method.indices.tolist()
        cost = method.extra_cost()
        s = method.num_stochastic_params()
        assert cost["covariance_bytes"] == s * s * 8 and cost["select_time_s"] >= 0
        assert method.diagnostics()["backend"] == cfg.get("backend", "subnet")


def test_bad_options_are_clear_errors():
    ctx = ctx_for(bn_net)
    with pytest.raises(BenchError, match="unknown option"):
        SubnetLaplace(ctx, n_bayes=3)
    with pytest.raises(BenchError, match="backend"):
        SubnetLaplace(ctx, backend="jax")
    with pytest.raises(BenchError, match="not both"):
        SubnetLaplace(ctx, n_subnet=3, subnet_fraction=0.1).fit(loader(), data(24, 1))
    assert math.isfinite(estimate_memory(backend="asdl", s=10, **MEM)["total"])


@pytest.mark.parametrize("name", ["wasserstein", "wasserstein_diag_laplace", "largest_variance_diag_laplace",
                                  "magnitude", "gradient"])
def test_pbn_and_subnet_laplace_select_the_same_subnet_at_equal_size(name):
    """The criterion x inference-scheme table compares one mask under two schemes: PBN draws the
    variance criteria's randomness (SWAG's SGD, identifiability batches) from the same seed."""
    from methods.pbn import PBN

    ctx = ctx_for(bn_net)
    train = loader(n=600)  # several SGD batches per SWAG epoch: its seed matters
    pbn = PBN(ctx, criterion=name, n_bayes=11)
    _, pbn_idx, meta = pbn.build_posterior(train)
    sl = SubnetLaplace(ctx, criterion=name, n_subnet=11)
    sl.before_fit(sl.map_network(), train)
    assert pbn_idx.tolist() == sl.indices.tolist()
    assert meta["subnet_digest"] == sl.meta["subnet_digest"] == subnet_digest(torch.flip(sl.indices, [0]))


def test_prior_precision_method_none_from_the_command_line_keeps_the_given_prior():
    ctx = ctx_for(bn_net)
    m = SubnetLaplace(ctx, n_subnet=10, prior_precision_method=None, prior_precision=0.5).fit(loader(), data(24, 1))
    assert m.meta["prior_precision"] == [0.5]


def test_subnet_backend_on_batchnorm_weights_is_a_clear_error_and_auto_falls_back():
    ctx = ctx_for(bn_net)
    m = SubnetLaplace(ctx, n_subnet=5, backend="subnet", prior_precision_method="none")
    m.indices = torch.tensor([48, 49, 50])  # BatchNorm1d weight entries
    with pytest.raises(BenchError, match="Linear / Conv2d"):
        m.choose_backend(m.map_network(), data(2)[0])
    m2 = SubnetLaplace(ctx, n_subnet=5, prior_precision_method="none")
    m2.indices = torch.tensor([48, 49, 50])
    assert m2.choose_backend(m2.map_network(), data(2)[0])[0] == "backpack"


def test_grid_search_loss_is_infinite_for_a_non_finite_predictive():
    """numpy's argmin returns the index of a NaN: a NaN validation NLL must count as +inf."""
    import math

    from bench.laplace.predictive import nll as _nll

    y = torch.tensor([0, 1])
    good = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    assert _nll(good, y).item() == pytest.approx(-(math.log(0.75) + math.log(0.5)) / 2)
    assert _nll(torch.full((2, 2), float("nan")), y).item() == float("inf")


@pytest.mark.parametrize("sampler", ["jvp", "moments"])
def test_predictive_spread_is_laplace_torchs_logit_variance(sampler):
    """The logit variance the fit reports (bench.validity's laplace_predictive_variance) against
    laplace-torch's own GLM covariance of a full Laplace over every weight (the diagonal's mean),
    and the MAP logits' spread recomputed here; the jvp sampler's Monte Carlo within its error."""
    from laplace import Laplace
    from laplace.curvature import BackPackGGN
    from torch.utils.data import DataLoader, TensorDataset

    ctx = ctx_for(plain_net)
    method = SubnetLaplace(ctx, criterion="magnitude", subnet_fraction=1.0, prior_precision_method="none",
                           prior_precision=0.7, glm_sampler=sampler, n_samples=4000,
                           link_approx="mc" if sampler == "jvp" else "probit")
    x, y = data()
    xv, yv = data(24, 1)
    method.fit(TensorLoader(x, y, 16, shuffle=False), (xv, yv))
    full = Laplace(plain_net(), "classification", subset_of_weights="all", hessian_structure="full",
                   backend=BackPackGGN, prior_precision=0.7)
    full.fit(DataLoader(TensorDataset(x, y), batch_size=16))
    _, f_var = full._glm_predictive_distribution(xv)
    want = float(torch.diagonal(f_var, dim1=-2, dim2=-1).mean())
    got = method.meta["predictive_spread"]
    assert got["logit_variance"] == pytest.approx(want, rel=0.1 if sampler == "jvp" else 1e-4)
    with torch.no_grad():
        assert got["map_logit_spread"] == pytest.approx(float(plain_net()(xv).double().var(dim=1).mean()), rel=1e-6)
    assert got["ratio"] == pytest.approx(got["logit_variance"] / got["map_logit_spread"])


def test_the_subnetwork_indices_reach_laplace_torch_as_a_cpu_long_tensor_on_any_device():
    """laplace-torch's SubnetLaplace accepts only ``isinstance(idx, torch.LongTensor)``: a CUDA
    tensor is not one (the first CUDA run failed every subnet Laplace cell). ``meta`` stands in for
    the GPU here: indices moved to the method's device would be a meta tensor and fail too."""
    from laplace import Laplace

    method = SubnetLaplace(ctx_for(plain_net))
    method.indices = torch.tensor([3, 1, 7])
    method.ctx.device = torch.device("meta")
    idx = method.laplace_kwargs()["subnetwork_indices"]
    assert isinstance(idx, torch.LongTensor) and idx.tolist() == [3, 1, 7]
    Laplace(plain_net(), "classification", subset_of_weights="subnetwork", hessian_structure="full",
            subnetwork_indices=idx)  # laplace-torch's own check passes


FRESH_PROCESS_FIT = """
import sys, warnings
warnings.simplefilter("error", FutureWarning)  # before anything is imported: a FutureWarning fails the fit
import torch
from torch import nn
from bench.data import TensorLoader
from bench.tasks import classification
from bench.training import TrainConfig
from methods.base import MethodContext
from methods.subnet_laplace import SubnetLaplace

assert "laplace" not in sys.modules, "laplace-torch is imported lazily: by the fit below"

class Cache:
    def get(self, seed):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3)).eval()
    def upstream_time(self, seeds):
        return 0.0

g = torch.Generator().manual_seed(0)
x, y = torch.randn(48, 5, generator=g), torch.randint(0, 3, (48,), generator=g)
ctx = MethodContext(task=classification(3), build_model=lambda dropout=0.0: Cache().get(0), train=TrainConfig(epochs=1),
                    device=torch.device("cpu"), seed=0, map_cache=Cache(), num_train=48)
m = SubnetLaplace(ctx, n_subnet=10, **dict(a.split("=") for a in sys.argv[1:])).fit(
    TensorLoader(x, y, 16, shuffle=False), (x[:24], y[:24]))
assert "laplace" in sys.modules and m.num_stochastic_params() == 10
"""


@pytest.mark.slow  # a fresh Python process imports torch and laplace-torch: about 10 s each
@pytest.mark.parametrize("options", [[], ["criterion=wasserstein_diag_laplace", "backend=asdl"]],
                         ids=["defaults", "diag_laplace_criterion-asdl"])
def test_a_subnet_laplace_fit_raises_no_future_warning_in_a_fresh_process(options):
    """Importing laplace-torch (at a fit's first use of it) imports ASDL and linear_operator, whose
    ``@torch.jit.script`` functions each warn "`torch.jit.script` is deprecated" (FutureWarning)
    under torch 2.14: bench.laplace.import_laplace ignores exactly that warning around the import.
    A fresh process, since the import happens once (this process has imported laplace-torch)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS_FIT, *options], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_activation_count_takes_every_row_of_a_layer_that_sees_several_rows_per_example():
    """A 1x1 conv on a 1 x 4 x 5 image, its pixels as rows (PixelRows) and a Linear on each row:
    one example keeps 20 input floats, 2 x 20 conv outputs, 20 rows of 2 and 20 rows of 3 (hand count:
    20 + 40 + 40 + 60 = 160); counting the first row of each output gives 20 + 40 + 2 + 3."""
    from bench.laplace.memory import activation_numel
    from bench.models import PixelRows

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), PixelRows(), torch.nn.Linear(2, 3))
    assert activation_numel(net, torch.zeros(2, 1, 4, 5)) == 160


def test_the_guard_counts_the_layer_inputs_the_subnet_backend_gathers():
    """The subnet backend keeps, per batch, the layer inputs' entries its weights multiply (one
    column of positions per distinct input column a layer's subnet weights read): hand-counted on a
    Conv2d(2, 3, 3, padding 1) over 5 x 6 and a Linear(90, 4), and added to the subnet backend's Jacobian
    terms per example of each batch; before the subnet is chosen, a bound of it. Without it the guard
    read low (camvid_multilabel's UNet, 2026-12-02: peak 2.6 GB beside an estimate of 2.52 GB)."""
    from bench.laplace.subnet_jacobians import gathered_floats, positions_per_weight

    net = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Flatten(), nn.Linear(90, 4))
    # conv weight (3, 2, 3, 3) at 0..53, its bias 54..56, the Linear's weight (4, 90) from 57, bias from 417
    idx = torch.tensor([0, 18,          # w[0, 0, 0, 0], w[1, 0, 0, 0]: one column (c 0, tap 0, 0)
                        53,             # w[2, 1, 2, 2]: another (c 1, tap 2, 2)
                        55,             # a bias reads no input
                        57 + 7, 57 + 3 * 90 + 7, 57 + 90 + 9,  # Linear columns 7, 7, 9: two
                        418])
    x1 = torch.randn(2, 2, 5, 6)
    assert gathered_floats(net, idx, x1) == 2 * 5 * 6 + 2 * 1
    # before the subnet is chosen the guard bounds it by s x the widest layer's positions (5 x 6 here)
    assert positions_per_weight(net, x1) == 30 and gathered_floats(net, idx, x1) <= len(idx) * 30
    assert estimate_memory(backend="subnet", s=8, positions_per_weight=30, **dict(MEM, n_outputs=4))[
        "jacobian_fit"] == estimate_memory(backend="subnet", s=8, gathered=8 * 30, **dict(MEM, n_outputs=4))["jacobian_fit"]
    base = dict(MEM, n_outputs=4)
    with_cols = estimate_memory(backend="subnet", s=8, gathered=62, **base)
    without = estimate_memory(backend="subnet", s=8, **base)
    assert with_cols["jacobian_fit"] - without["jacobian_fit"] == 128 * 62 * 4
    assert with_cols["jacobian_predict"] - without["jacobian_predict"] == 1000 * 62 * 4
    assert estimate_memory(backend="backpack", s=8, gathered=62, **base) == estimate_memory(backend="backpack", s=8, **base)
