"""Every method on a user's own ``nn.Module`` (issue 37, "Your model, your data"): a network with
GroupNorm, LayerNorm, GELU, a depthwise convolution and its own forward, built by a factory that
does not take ``dropout``. Each method either fits and predicts on it, or refuses it when the run
is planned, naming the module (bench.network, Method.check_network). Also: the head contract
(``ctx.split_head``), MC dropout's inserted dropout layer, VDP++'s refusal and group norm, the
eligible parameters of the subnetwork methods, and the layer-wise machinery that serves these
layers (grouped convolutions, group / layer norm)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.checkpoints import MapCache
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.network import ELIGIBLE_LAYERS, probe_batch, split_head
from bench.seeding import seed_everything
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS
from synthetic import bar_classes
from methods.base import MethodContext

IN_SHAPE, K = (1, 8, 8), 3
BUILTIN = sorted(n for n in METHODS.names() if METHODS.get(n).__module__.startswith("methods."))
#: the methods that refuse UserNet, and what their message must name
REFUSED = {"vdp": ["UserNet", "the network itself", "GroupNorm"]}
#: small budgets: every method fits in seconds
TINY = {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4},
        "subnet_laplace": {"n_subnet": 40, "swag_n_snapshots": 4, "grid_size": 3},
        "laplace_diag": {"grid_size": 3}, "laplace_last_layer": {"grid_size": 3},
        "pbn": {"r_bayes": 0.2}, "vdp": {"epochs": 1}}


# ------------------------------------------------------------------------------ the user's networks


class UserNet(nn.Module):
    """A network the suites never use: GroupNorm, a depthwise convolution with a residual sum, GELU,
    LayerNorm, written with its own forward (not an nn.Sequential)."""

    def __init__(self, in_shape=IN_SHAPE, num_classes=K):
        super().__init__()
        self.stem = nn.Conv2d(in_shape[0], 8, 3, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)  # depthwise
        self.act = nn.GELU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, num_classes)

    def body(self, x):
        h = self.act(self.gn(self.stem(x)))
        h = h + self.act(self.dw(h))
        return self.ln(self.pool(h).flatten(1))

    def forward(self, x):
        return self.fc(self.body(x))


def user_net(in_shape, num_outputs):
    """A factory without ``dropout`` (as ``--set models=MODULE:FACTORY`` calls it)."""
    return UserNet(in_shape, num_outputs)


def seq_user_net(in_shape, num_outputs):
    """The same layers as an nn.Sequential (VDP++ converts this one)."""
    return nn.Sequential(nn.Conv2d(in_shape[0], 8, 3, padding=1), nn.GroupNorm(2, 8), nn.GELU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.LayerNorm(8), nn.Linear(8, num_outputs))


class Doubled(UserNet):
    """Does something after its last Linear: no head reproduces its output."""

    def forward(self, x):
        return self.fc(self.body(x)) * 2


def doubled_net(in_shape, num_outputs):
    return Doubled(in_shape, num_outputs)


class AuxHead(UserNet):
    """Calls a second Linear after its head (an auxiliary output it keeps): the inferred head (the
    last Linear called) is the wrong one, so the network declares its own."""

    bench_head = "fc"

    def __init__(self, *a):
        super().__init__(*a)
        self.aux = nn.Linear(8, 2)

    def forward(self, x):
        h = self.body(x)
        out = self.fc(h)
        self.aux_out = self.aux(h).detach()
        return out


class AuxSplit(AuxHead):
    bench_head = None

    def bench_split_head(self):
        return self.body, self.fc


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):  # (B, 8) -> two tokens of 8 -> (B, 8)
        t = torch.stack([x, -x], dim=1)
        return self.attn(t, t, t)[0].mean(1)


# ------------------------------------------------------------------------------ helpers


def data(n=64, seed=0):
    return bar_classes(n, seed, K, IN_SHAPE)


def context(root, factory=user_net, seed=0) -> MethodContext:
    task = classification(K)
    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05)
    x, y = data()

    def build(dropout=0.0):  # the factory never sees dropout (bench.model_specs' rule)
        return factory(IN_SHAPE, K)

    cache = MapCache(root / "map", {"model": factory.__name__}, build, task, x, y, cfg, torch.device("cpu"))
    return MethodContext(task=task, build_model=build, train=cfg, device=torch.device("cpu"), seed=seed,
                         map_cache=cache, num_train=len(x), work_dir=root / "work")


@pytest.fixture(scope="module")
def shared_ctx(tmp_path_factory):
    """One context (one MAP cache: the MAP network trained once) for the methods' tests."""
    return context(tmp_path_factory.mktemp("user"))


def fit(name, ctx, **config):
    seed_everything(0)
    m = METHODS.get(name)(ctx, **{**TINY.get(name, {}), **config})
    x, y = data()
    m.fit(TensorLoader(x, y, 32, shuffle=True, seed=0), data(32, seed=1))
    return m


def probs(m, x, seed=123):
    seed_everything(seed)
    with torch.no_grad():
        return m.predict(x).probs


def plan_check(name, factory, **config):
    cls = METHODS.get(name)
    build = lambda dropout=0.0: factory(IN_SHAPE, K)  # noqa: E731
    cls.check_network(build, probe_batch(IN_SHAPE), classification(K), {**cls.defaults, **config})


# ------------------------------------------------------------------------------ every method


@pytest.mark.parametrize("name", BUILTIN)
def test_every_method_fits_a_user_network_or_refuses_it_at_plan_time(name, shared_ctx):
    if name in REFUSED:
        with pytest.raises(BenchError) as err:
            plan_check(name, user_net)
        for word in REFUSED[name]:
            assert word in str(err.value), (word, str(err.value))
        with pytest.raises(BenchError):  # and at fit time: a failed cell, not a crash
            fit(name, shared_ctx)
        return
    plan_check(name, user_net)  # accepted when the run is planned
    m = fit(name, shared_ctx)
    x, _ = data(20, seed=2)
    p = probs(m, x)
    assert p.shape == (20, K) and torch.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    assert torch.allclose(p.sum(-1), torch.ones(20), atol=1e-4)
    if name != "mc_dropout":  # dropout masks are drawn per example (test_method_contract's rule)
        assert torch.allclose(torch.cat([probs(m, x[:7]), probs(m, x[7:])]), p, atol=1e-5), "batch-size dependent"


def test_a_plan_skips_incompatible_pairs_before_training(tmp_path):
    """`bench run --set models=MODULE:FACTORY` with methods that cannot run on it: each refused pair
    is left out of the plan at plan time, with the module named in its reason, and the other methods
    stay (tests/test_refused_pairs.py: the run, exit 0); exit 2 (a BenchError listing every refused
    pair) only when no method can run."""
    from bench.config import resolve_plan
    from bench.suites import SUITES

    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "smoke", ["deterministic", "vdp", "laplace_last_layer", "mc_dropout"],
                        {"models": ["test_arbitrary_models:doubled_net"]}, method_registry=METHODS)
    assert list(plan.methods) == ["deterministic"]
    why = {r["method"]: r["reason"] for r in plan.refused}
    assert set(why) == {"vdp", "laplace_last_layer", "mc_dropout"}
    assert {r["model"] for r in plan.refused} == {"test_arbitrary_models.doubled_net"}
    assert "Doubled" in why["vdp"] and "'fc'" in why["laplace_last_layer"] and "'fc'" in why["mc_dropout"]
    with pytest.raises(BenchError) as err:
        resolve_plan(suite, "smoke", ["vdp", "laplace_last_layer", "mc_dropout"],
                     {"models": ["test_arbitrary_models:doubled_net"]}, method_registry=METHODS)
    msg = str(err.value)
    assert "vdp on test_arbitrary_models.doubled_net" in msg and "Doubled" in msg
    assert "laplace_last_layer" in msg and "mc_dropout" in msg and "'fc'" in msg
    plan = resolve_plan(suite, "smoke", ["laplace_last_layer", "mc_dropout", "pbn"],
                        {"models": ["test_arbitrary_models:user_net"]}, method_registry=METHODS)
    assert plan.models == ["test_arbitrary_models.user_net"] and plan.refused == []


# ------------------------------------------------------------------------------ the head contract


def test_split_head_of_a_sequential_and_of_a_custom_forward():
    x = probe_batch(IN_SHAPE)
    seq = seq_user_net(IN_SHAPE, K)
    features, head = split = split_head(seq, x)
    assert head is seq[-1] and split.head_name == "8" and isinstance(features, nn.Sequential)
    net = UserNet().eval()
    split = split_head(net, x)
    assert split.head is net.fc and split.head_name == "fc" and "inferred" in split.how
    with torch.no_grad():
        assert torch.allclose(split.head(split.features(x)), net(x), atol=1e-6)
        assert torch.allclose(split.features(x), net.body(x), atol=1e-6)


def test_a_forward_that_changes_the_heads_output_is_refused():
    with pytest.raises(BenchError, match=r"(?s)Doubled: the head 'fc' \(Linear.*does not reproduce.*bench_split_head"):
        split_head(Doubled(), probe_batch(IN_SHAPE))
    with pytest.raises(BenchError, match="'aux'.*does not reproduce"):  # the last Linear called is the aux one
        split_head(type("NoDecl", (AuxHead,), {"bench_head": None})(), probe_batch(IN_SHAPE))
    with pytest.raises(BenchError, match="no nn.Linear runs"):
        split_head(nn.Sequential(nn.Conv2d(1, 3, 8), nn.Flatten()), probe_batch(IN_SHAPE))


@pytest.mark.parametrize("cls", [AuxHead, AuxSplit])
def test_a_declared_split_is_honoured(cls):
    net = cls().eval()
    split = split_head(net, probe_batch(IN_SHAPE))
    assert split.head is net.fc and split.head_name == "fc" and "declared" in split.how


def test_laplace_last_layer_uses_the_declared_head(tmp_path):
    """laplace-torch would take the last leaf module called (``aux``): it is given the head."""
    ctx = context(tmp_path, factory=lambda s, k: AuxHead(s, k))
    m = fit("laplace_last_layer", ctx)
    assert m.meta["last_layer_name"] == "fc" and m.la.model.last_layer is m.la.model.model.fc
    x, _ = data(10, seed=2)
    fresh = METHODS.get("laplace_last_layer")(ctx, **TINY["laplace_last_layer"])
    fresh.load_state_dict(m.state_dict())
    assert torch.equal(probs(fresh, x), probs(m, x))


# ------------------------------------------------------------------------------ MC dropout


def test_mc_dropout_inserts_a_dropout_layer_before_the_head(shared_ctx):
    from methods.mc_dropout import split_at_first, stochastic_forward

    m = fit("mc_dropout", shared_ctx)
    assert m.meta["dropout_inserted"].startswith("before head fc (Linear")
    assert "dropout_inserted" in m.diagnostics()
    assert isinstance(m.model.fc, nn.Sequential) and isinstance(m.model.fc.dropout, nn.Dropout)
    assert m.model.fc.dropout.p == m.config["p"] and m.model.fc.dropout.training
    x, _ = data(6, seed=3)
    with torch.no_grad():
        outs = stochastic_forward(*split_at_first(m.model, nn.Dropout), x, 16)
    assert outs.shape == (16, 6, K) and float(outs.std(0).max()) > 1e-4, "the samples do not vary"
    assert m.num_stochastic_params() == m.model.fc.head.weight.numel()
    fresh = METHODS.get("mc_dropout")(shared_ctx, **TINY["mc_dropout"])
    fresh.load_state_dict(m.state_dict())  # rebuilds the inserted layer, then loads
    assert torch.equal(probs(fresh, x), probs(m, x))


def test_mc_dropout_in_a_sequential_keeps_the_other_layers_names(tmp_path):
    from bench.network import INSERTED_DROPOUT, insert_dropout_before

    seq = seq_user_net(IN_SHAPE, K)
    keys = list(seq.state_dict())
    where = insert_dropout_before(seq, "8", 0.3)
    assert where == INSERTED_DROPOUT and list(seq.state_dict()) == keys
    assert isinstance(seq[-2], nn.Dropout) and seq[-1] is seq._modules["8"]


def test_mc_dropout_sets_the_rate_of_a_networks_own_dropout_layers(tmp_path):
    net = lambda s, k: nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, k))  # noqa: E731
    m = METHODS.get("mc_dropout")(context(tmp_path, factory=net), p=0.2)
    assert [d.p for d in m.model.modules() if isinstance(d, nn.Dropout)] == [0.2]


# ------------------------------------------------------------------------------ VDP++


def test_vdp_names_the_first_unsupported_module_and_lists_what_it_supports():
    from bench.vdp import to_vdp

    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Sequential(nn.GELU(), Attention()), nn.Linear(8, K))
    with pytest.raises(BenchError) as err:
        to_vdp(net)
    msg = str(err.value)
    assert "no conversion for Attention, module '2.1'" in msg and "attn (MultiheadAttention)" in msg
    assert "Supported:" in msg and "GroupNorm" in msg and "Conv2d" in msg


def test_vdp_fits_the_sequential_user_network(tmp_path):
    """GroupNorm (its moment rule), a depthwise convolution, GELU, LayerNorm: converted, fitted."""
    plan_check("vdp", seq_user_net)
    m = fit("vdp", context(tmp_path, factory=seq_user_net))
    p = probs(m, data(10, seed=2)[0])
    assert torch.allclose(p.sum(-1), torch.ones(10), atol=1e-4)


def test_vdp_group_norm_is_layer_norm_for_one_group():
    from bench.vdp.layers import VDPGroupNorm, VDPLayerNorm

    mu, var = torch.randn(3, 4, 5, 5), torch.rand(3, 4, 5, 5)
    a = VDPGroupNorm(nn.GroupNorm(1, 4))(mu, var)
    b = VDPLayerNorm(nn.LayerNorm([4, 5, 5]))(mu, var)
    torch.testing.assert_close(a, b)


# ------------------------------------------------------------------------------ eligible parameters


def test_the_eligible_parameters_are_linear_and_conv_weights_called_as_modules():
    from bench.subnet.selection import param_layout

    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.LayerNorm(8), Attention(), nn.Linear(8, K))
    cand = {s.name for s in param_layout(net) if s.candidate}
    assert cand == {"1.weight", "1.bias", "4.weight", "4.bias"}  # not LayerNorm, not the attention's
    cand = {s.module_type for s in param_layout(UserNet()) if s.candidate}
    assert cand == {"Conv2d", "Linear"} and all(issubclass(getattr(nn, t), ELIGIBLE_LAYERS) for t in cand)
    plan_check("ssvi", lambda s, k: net)  # SSVI replaces the eligible layers: the attention keeps its own


def test_a_layer_whose_weights_are_read_without_calling_it_is_refused():
    class Tied(UserNet):
        def forward(self, x):
            return nn.functional.linear(self.body(x), self.fc.weight)

    for name in ("pbn", "mfvi", "ssvi", "subnet_laplace"):
        with pytest.raises(BenchError, match=r"fc \(Linear\) of Tied never run"):
            plan_check(name, lambda s, k: Tied(s, k))


def test_diag_glm_moments_on_group_norm_layer_norm_and_depthwise_convolutions():
    """The layer-wise linearised variance equals J diag(v) J^T from autograd's Jacobian."""
    from torch.func import functional_call, jacrev

    from bench.laplace.diag_glm import diag_glm_moments, unsupported_modules

    net = UserNet().eval()
    assert unsupported_modules(net) == []
    x = probe_batch(IN_SHAPE, 3)
    params = dict(net.named_parameters())
    v = torch.rand(sum(p.numel() for p in params.values()))
    f_mu, f_var = diag_glm_moments(net, x, v)
    J = jacrev(lambda ps: functional_call(net, ps, (x,)))(params)
    J = torch.cat([J[n].reshape(3, K, -1) for n in params], dim=-1)
    torch.testing.assert_close(f_var, torch.einsum("bkp,p,bjp->bkj", J, v, J), rtol=1e-4, atol=1e-6)


def test_subnet_jacobians_of_a_depthwise_convolution():
    from torch.func import functional_call, jacrev

    from bench.laplace.subnet_jacobians import subnet_jacobian_backend

    net = UserNet().eval()
    params = dict(net.named_parameters())
    offset = 0
    for n, p in params.items():
        if n == "dw.weight":
            idx = torch.arange(offset, offset + p.numel())
        offset += p.numel()
    backend = subnet_jacobian_backend()
    assert backend.unsupported(net, idx) == []
    x = probe_batch(IN_SHAPE, 3)
    J, _ = backend(net, "classification", subnetwork_indices=idx).jacobians(x)
    full = jacrev(lambda ps: functional_call(net, ps, (x,)))(params)
    full = torch.cat([full[n].reshape(3, K, -1) for n in params], dim=-1)[:, :, idx]
    torch.testing.assert_close(J, full, rtol=1e-4, atol=1e-6)


def test_deep_ensemble_falls_back_to_a_loop_when_vmap_cannot_batch_the_network(shared_ctx):
    """On a GPU the members run vectorised (torch.vmap); a forward vmap refuses runs member by member."""
    class Itemised(UserNet):
        def forward(self, x):
            return self.fc(self.body(x)) + 0 * float(self.fc.weight.sum())  # data-dependent: vmap refuses

    m = METHODS.get("deep_ensemble")(shared_ctx, members=2)
    m.members = [Itemised().eval(), Itemised().eval()]
    x, _ = data(5, seed=4)
    out = m.member_outputs(x, vectorised=True)
    assert m._no_vmap and torch.allclose(out, m.member_outputs(x, vectorised=False))
