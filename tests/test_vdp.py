"""VDP++ (bench/vdp, methods/vdp.py, the mnist_noise suite): fast and deterministic.

Moment checks compare every layer's propagated mean and variance with a Monte Carlo estimate
(weights drawn from N(mu, sigma^2), inputs from N(mean, var), all independent, as the paper
assumes). Linear, Conv2d, average pooling, eval-mode batch norm and the residual sum of
independent branches are linear in their random inputs, so their moments are exact and must
match within sampling error (5 standard errors). Element-wise non-linearities, max pooling,
softmax and layer norm use first-order approximations (eq. 4-5, co-pooling, eq. 8-9, eq. 14)
that are accurate when the variances are small: those tests use standard deviations of
~0.01 on the scale of the non-linearity (ReLU inputs and max-pool candidates at least 10
standard deviations from a kink or tie), where the approximation error is far below the
sampling error.
"""
from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.checkpoints import load_torch, save_torch
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.metrics import classification_metrics, ood_metrics
from bench.models import build_model
from bench.predictive import ClassificationPredictive, concat
from bench.tasks import classification
from bench.training import TrainConfig
from bench.vdp import (Residual, VDPActivation, VDPAvgPool2d, VDPBatchNorm, VDPConv2d, VDPDropout, VDPFlatten,
                       VDPLayerNorm, VDPLinear, VDPMaxPool2d, VDPNetwork, VDPResidual, VDPSequential, softmax_moments,
                       to_vdp, vdp_loss)
from bench.vdp.layers import softmax_jacobian_sq
from methods import METHODS, MethodContext
from synthetic import blobs as synthetic

ROOT = Path(__file__).resolve().parent.parent
S = 20_000  # Monte Carlo samples
Z = 5.0  # tolerance in standard errors


def gen(seed):
    return torch.Generator().manual_seed(seed)


def assert_moments(samples: torch.Tensor, mu: torch.Tensor, var: torch.Tensor, rel_extra: float = 0.0):
    """``samples`` (S, ...) against the propagated (mu, var), within Z standard errors
    (plus ``rel_extra`` relative slack for an approximation's own error)."""
    samples = samples.double()
    n = samples.shape[0]
    m_hat, v_hat = samples.mean(0), samples.var(0)
    mu, var = mu.double(), var.double()
    se_mean = (v_hat / n).sqrt()
    assert ((m_hat - mu).abs() <= Z * se_mean + 1e-9 + rel_extra * mu.abs()).all(), \
        f"mean: max |diff| / se = {((m_hat - mu).abs() / (se_mean + 1e-30)).max():.2f}"
    se_var = v_hat * math.sqrt(2.0 / (n - 1))  # Gaussian-ish sample variance error
    assert ((v_hat - var).abs() <= Z * se_var + 1e-12 + rel_extra * var).all(), \
        f"var: max |diff| / se = {((v_hat - var).abs() / (se_var + 1e-30)).max():.2f}"


def sample_inputs(mean, var, g):
    return mean + var.sqrt() * torch.randn((S, *mean.shape), generator=g, dtype=torch.float64)


def weight_draws(layer, g):
    """(S, *shape) draws of a VDP layer's weight and bias."""
    sw = F.softplus(layer.weight_rho).double()
    sb = F.softplus(layer.bias_rho).double()
    W = layer.weight.double() + sw * torch.randn((S, *layer.weight.shape), generator=g, dtype=torch.float64)
    b = layer.bias.double() + sb * torch.randn((S, *layer.bias.shape), generator=g, dtype=torch.float64)
    return W, b


def random_rho(layer, lo=-3.0, hi=-1.0, seed=0):
    with torch.no_grad():
        for rho in (layer.weight_rho, layer.bias_rho):
            rho.copy_(lo + (hi - lo) * torch.rand(rho.shape, generator=gen(seed)))
            seed += 1
    return layer


# -- exact (linear) layers ------------------------------------------------------------------------
def test_linear_moments_match_monte_carlo():
    torch.manual_seed(0)
    layer = random_rho(VDPLinear(5, 3).double())
    mean = torch.randn(4, 5, generator=gen(1), dtype=torch.float64)
    var = 0.5 * torch.rand(4, 5, generator=gen(2), dtype=torch.float64)
    W, b = weight_draws(layer, gen(3))
    x = sample_inputs(mean, var, gen(4))  # (S, 4, 5)
    out = torch.einsum("sni,soi->sno", x, W) + b[:, None, :]
    with torch.no_grad():
        mu, v = layer(mean, var)  # eq. 6-7
        assert_moments(out, mu, v)
        # deterministic input (eq. 2-3): var = x^2 sigma_w^2 + sigma_b^2
        mu0, v0 = layer(mean, None)
    out0 = torch.einsum("ni,soi->sno", mean, W) + b[:, None, :]
    assert_moments(out0, mu0, v0)
    torch.testing.assert_close(v0, mean.square() @ F.softplus(layer.weight_rho).square().T
                               + F.softplus(layer.bias_rho).square())


def test_conv2d_moments_match_monte_carlo():
    torch.manual_seed(0)
    layer = random_rho(VDPConv2d(nn.Conv2d(2, 3, 3, padding=1, stride=2)).double())
    mean = torch.randn(2, 2, 5, 5, generator=gen(1), dtype=torch.float64)
    var = 0.3 * torch.rand(2, 2, 5, 5, generator=gen(2), dtype=torch.float64)
    W, b = weight_draws(layer, gen(3))
    x = sample_inputs(mean, var, gen(4))  # (S, 2, 2, 5, 5)
    # convolution as a product over patches, sample s with its own weights
    patches = F.pad(x, (1, 1, 1, 1)).unfold(3, 3, 2).unfold(4, 3, 2)  # (S, N, C, H', W', 3, 3) view
    out = torch.einsum("snchwkl,sockl->snohw", patches, W) + b[:, None, :, None, None]
    with torch.no_grad():
        mu, v = layer(mean, var)
    assert mu.shape == (2, 3, 3, 3)
    assert_moments(out, mu, v)


def test_avg_pools_are_exact():
    mean = torch.randn(2, 3, 5, 5, generator=gen(0), dtype=torch.float64)
    var = torch.rand(2, 3, 5, 5, generator=gen(1), dtype=torch.float64)
    x = sample_inputs(mean, var, gen(2)).reshape(S * 2, 3, 5, 5)
    for pool in (nn.AvgPool2d(2), nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
                 nn.AvgPool2d(3, stride=2, padding=1), nn.AvgPool2d(2, ceil_mode=True),
                 nn.AdaptiveAvgPool2d((3, 2)), nn.AdaptiveAvgPool2d(1)):
        mu, v = VDPAvgPool2d(pool)(mean, var)
        out = pool(x).reshape(S, *mu.shape)
        assert_moments(out, mu, v)


def test_batch_norm_eval_is_exact_and_train_uses_mean_statistics():
    bn = nn.BatchNorm2d(3).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.5, -2.0, 1.5]))
        bn.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
        bn.running_mean.copy_(torch.tensor([0.3, -0.1, 0.0]))
        bn.running_var.copy_(torch.tensor([2.0, 0.5, 1.2]))
    layer = VDPBatchNorm(bn).eval()
    mean = torch.randn(2, 3, 4, 4, generator=gen(0), dtype=torch.float64)
    var = torch.rand(2, 3, 4, 4, generator=gen(1), dtype=torch.float64)
    x = sample_inputs(mean, var, gen(2)).reshape(S * 2, 3, 4, 4)
    mu, v = layer(mean, var)
    assert_moments(bn(x).reshape(S, 2, 3, 4, 4), mu, v)
    layer.train()
    mu_t, v_t = layer(mean, var)
    batch_var = mean.var(dim=(0, 2, 3), unbiased=False)
    torch.testing.assert_close(v_t, var * (bn.weight.square() / (batch_var + bn.eps)).view(1, 3, 1, 1))
    bn.eval()
    assert not torch.allclose(mu_t, bn(mean))  # training mode normalised with the batch statistics


def test_residual_of_independent_branches_is_exact():
    torch.manual_seed(0)
    body = VDPSequential(random_rho(VDPLinear(4, 3).double(), seed=0))
    short = VDPSequential(random_rho(VDPLinear(4, 3).double(), seed=5))
    block = VDPResidual(body, short)
    x = torch.randn(2, 4, generator=gen(1), dtype=torch.float64)
    W1, b1 = weight_draws(body[0], gen(2))
    W2, b2 = weight_draws(short[0], gen(3))
    out = torch.einsum("ni,soi->sno", x, W1) + b1[:, None] + torch.einsum("ni,soi->sno", x, W2) + b2[:, None]
    with torch.no_grad():
        mu, v = block(x, None)
    assert_moments(out, mu, v)


# -- first-order (small-variance) layers -----------------------------------------------------------
@pytest.mark.parametrize("act", [nn.ReLU(), nn.Tanh(), nn.Sigmoid(), nn.GELU(), nn.LeakyReLU(0.1), nn.ELU()])
def test_activation_first_order_matches_monte_carlo_for_small_variance(act):
    grads = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}
    from bench.vdp.layers import ELEMENTWISE

    layer = VDPActivation(act, ELEMENTWISE[type(act)])
    mean = torch.linspace(-2, 2, 24, dtype=torch.float64).view(2, 12)
    mean = torch.where(mean.abs() < 0.15, torch.full_like(mean, 0.5), mean)  # >= 10 std from ReLU's kink
    var = torch.full_like(mean, 1e-4)  # std 0.01
    x = sample_inputs(mean, var, gen(0))
    mu, v = layer(mean, var)  # eq. 4-5
    torch.testing.assert_close(mu, act(mean))
    # first-order Taylor error: mean bias f''/2 var ~ 1e-4, relative variance error ~ var
    assert_moments(act(x), mu, v, rel_extra=2e-3)
    assert type(act).__name__ in {c.__name__ for c in ELEMENTWISE} or grads


def test_max_pool_copools_the_variance_of_the_arg_max():
    g = gen(0)
    # distinct means 0.1 apart in every window, std 0.005: the arg-max never changes
    mean = (torch.randperm(2 * 3 * 16, generator=g).double() * 0.1).view(2, 3, 4, 4)
    var = torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64) * 2.5e-5
    pool = nn.MaxPool2d(2)
    mu, v = VDPMaxPool2d(pool)(mean, var)
    x = sample_inputs(mean, var, gen(1)).reshape(S * 2, 3, 4, 4)
    assert_moments(pool(x).reshape(S, 2, 3, 2, 2), mu, v)
    # exactly the variance at the position of the maximum mean
    idx = F.max_pool2d(mean, 2, return_indices=True)[1]
    torch.testing.assert_close(v, var.flatten(2).gather(2, idx.flatten(2)).view_as(v))


def test_layer_norm_first_order_for_wide_layers():
    torch.manual_seed(0)
    n = 512
    ln = nn.LayerNorm(n).double()
    with torch.no_grad():
        ln.weight.copy_(1 + 0.5 * torch.randn(n, generator=gen(3)))
    mean = torch.randn(1, n, generator=gen(0), dtype=torch.float64)
    var = torch.full((1, n), 1e-4, dtype=torch.float64)
    with torch.no_grad():
        mu, v = VDPLayerNorm(ln)(mean, var)
        x = sample_inputs(mean, var, gen(2))
        # the statistics are held fixed (eq. 14): with equal input variances the neglected terms
        # of the exact Jacobian are a relative ~2 (1 + xhat_i^2) / n
        xhat = (mean - mean.mean()) / mean.std(unbiased=False)
        assert_moments(ln(x), mu, v, rel_extra=3 * (1 + xhat.square()) / n)


def test_softmax_moments_match_jacobian_and_monte_carlo():
    mean = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    var = torch.tensor([[1e-4, 4e-4, 2e-4, 1e-4], [3e-4, 1e-4, 1e-4, 2e-4]], dtype=torch.float64)
    p, v = softmax_moments(mean, var)  # eq. 8-9
    torch.testing.assert_close(p, torch.softmax(mean, -1))
    torch.testing.assert_close(v, (softmax_jacobian_sq(p) @ var.unsqueeze(-1)).squeeze(-1))  # O(K) == J^2 var
    z = sample_inputs(mean, var, gen(0))
    # logits are independent here, as eq. 9's diagonal propagation assumes
    assert_moments(torch.softmax(z, -1), p, v, rel_extra=0.02)


def test_two_layer_network_of_eq_1_matches_monte_carlo():
    """The paper's example (eq. 1-7): x deterministic -> Linear -> ReLU -> Linear. The hidden
    units are independent (distinct weight rows), so variance-only propagation is exact up to
    the ReLU linearisation."""
    torch.manual_seed(0)
    l1 = random_rho(VDPLinear(6, 5).double(), -7, -6, seed=0)
    l2 = random_rho(VDPLinear(5, 3).double(), -7, -6, seed=2)
    with torch.no_grad():
        l1.bias.copy_(torch.tensor([1.0, -1.0, 0.8, -0.9, 1.2]))  # hidden pre-activations away from 0
        l1.weight.mul_(0.2)
    net = VDPSequential(l1, VDPActivation(nn.ReLU(), None), l2)
    x = torch.randn(3, 6, generator=gen(1), dtype=torch.float64)
    with torch.no_grad():
        mu, v = net(x, None)
    W1, b1 = weight_draws(l1, gen(2))
    W2, b2 = weight_draws(l2, gen(3))
    h = torch.relu(torch.einsum("ni,soi->sno", x, W1) + b1[:, None])
    out = torch.einsum("sni,soi->sno", h, W2) + b2[:, None]
    assert_moments(out, mu, v, rel_extra=1e-3)


def test_dropout_shares_its_mask_between_mean_and_variance():
    d = VDPDropout(0.5)
    mean, var = torch.ones(4, 100), torch.full((4, 100), 2.0)
    d.eval()
    m, v = d(mean, var)
    assert m is mean and v is var
    d.train()
    torch.manual_seed(0)
    m, v = d(mean, var)
    kept = m != 0
    assert 0.3 < kept.double().mean() < 0.7
    torch.testing.assert_close(m[kept], torch.full_like(m[kept], 2.0))
    torch.testing.assert_close(v[kept], torch.full_like(v[kept], 8.0))
    assert (v[~kept] == 0).all()


# -- the converter ---------------------------------------------------------------------------------
def kinds(vdp: VDPNetwork) -> list[str]:
    return [type(m).__name__ for m in vdp.body]


def test_converter_structure_lenet_300_100_and_lenet5():
    torch.manual_seed(0)
    net = build_model("lenet_300_100", (1, 28, 28), 10)
    vdp = to_vdp(net, rho_init=-4.0, example=torch.randn(3, 1, 28, 28))
    assert kinds(vdp) == ["VDPFlatten", "VDPLinear", "VDPBatchNorm", "VDPActivation", "VDPLinear",
                          "VDPBatchNorm", "VDPActivation", "VDPLinear"]
    for i in (1, 4, 7):
        assert torch.equal(vdp.body[i].weight, net[i].weight) and torch.equal(vdp.body[i].bias, net[i].bias)
        assert vdp.body[i].weight is not net[i].weight  # means are copies: training VDP leaves net alone
        assert torch.all(vdp.body[i].weight_rho == -4.0)
    assert vdp.num_stochastic == sum(p.numel() for m in net if isinstance(m, nn.Linear) for p in m.parameters())
    drop = to_vdp(build_model("lenet_300_100", (1, 28, 28), 10, dropout=0.2))
    assert kinds(drop).count("VDPDropout") == 2

    net5 = build_model("lenet5", (1, 28, 28), 10)
    vdp5 = to_vdp(net5, example=torch.randn(3, 1, 28, 28))
    assert kinds(vdp5) == ["VDPConv2d", "VDPBatchNorm", "VDPActivation", "VDPMaxPool2d",
                           "VDPConv2d", "VDPBatchNorm", "VDPActivation", "VDPMaxPool2d", "VDPFlatten",
                           "VDPLinear", "VDPBatchNorm", "VDPActivation", "VDPLinear", "VDPBatchNorm",
                           "VDPActivation", "VDPLinear"]
    assert vdp5.body[0].padding == (2, 2)
    assert vdp5.num_stochastic == sum(p.numel() for m in net5 if isinstance(m, (nn.Linear, nn.Conv2d))
                                      for p in m.parameters())
    mu, var = vdp5.eval()(torch.randn(4, 1, 28, 28))
    assert mu.shape == var.shape == (4, 10) and (var > 0).all()


class BasicBlock(nn.Module):
    """torchvision's ResNet block layout."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + idt)


def test_converter_handles_small_resnets():
    torch.manual_seed(0)
    block = Residual(nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)), post=nn.ReLU())
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), block,
                        BasicBlock(8, 16, stride=2), BasicBlock(16, 16),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    for m in net.modules():  # non-trivial running statistics for the eval-mode check
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
    vdp = to_vdp(net, example=torch.randn(2, 3, 8, 8))  # raises if a block's mean path differs
    assert kinds(vdp)[3:6] == ["VDPResidual"] * 3
    assert isinstance(vdp.body[4].shortcut, VDPSequential)  # the downsampling branch
    mu, var = vdp.eval()(torch.randn(2, 3, 8, 8))
    assert mu.shape == (2, 10) and (var > 0).all()


def test_in_place_prediction_matches_and_leaves_callers_tensors_alone():
    torch.manual_seed(0)
    pre_act = Residual(nn.Sequential(nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1)))
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), pre_act, nn.MaxPool2d(2),
                        Residual(nn.Sequential(nn.Identity(), nn.ReLU())), nn.Flatten(), nn.Linear(64, 3))
    vdp = to_vdp(net).eval()
    x = torch.randn(3, 1, 8, 8)
    mu_g, var_g = vdp(x)  # autograd on: no in-place updates
    with torch.no_grad():
        mu_n, var_n = vdp(x)
    torch.testing.assert_close(mu_n, mu_g.detach())
    torch.testing.assert_close(var_n, var_g.detach())
    block = vdp.body[3]  # the shortcut's input must survive the body's in-place BN / ReLU
    m_in, v_in = torch.randn(2, 4, 8, 8), torch.rand(2, 4, 8, 8)
    kept = v_in.clone()
    with torch.no_grad():
        block(m_in, v_in)
        vdp.body[5](m_in, v_in)  # identity first in the body: the ReLU must not write into v_in
    assert torch.equal(v_in, kept)


def test_converter_rejects_unknown_modules_and_wrong_mean_paths():
    class Odd(nn.Module):
        def forward(self, x):
            return x.flip(-1)

    with pytest.raises(BenchError, match="no conversion for Odd"):
        to_vdp(nn.Sequential(nn.Flatten(), Odd()))

    class NotResidual(BasicBlock):  # BasicBlock's attribute names, a different forward
        def forward(self, x):
            return self.bn2(self.conv2(self.conv1(x)))

    with pytest.raises(BenchError, match="changed the mean path"):
        to_vdp(nn.Sequential(NotResidual(4, 4)), example=torch.randn(2, 4, 6, 6))


# -- the loss --------------------------------------------------------------------------------------
def tiny_network() -> VDPNetwork:
    layer = VDPLinear(2, 3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -0.5], [0.25, 0.75], [-1.0, 0.0]], dtype=torch.float64))
        layer.bias.copy_(torch.tensor([0.1, 0.0, -0.2], dtype=torch.float64))
        layer.weight_rho.copy_(torch.tensor([[-1.0, -2.0], [0.0, -3.0], [-1.5, 0.5]], dtype=torch.float64))
        layer.bias_rho.copy_(torch.tensor([-2.0, -1.0, -4.0], dtype=torch.float64))
    return VDPNetwork(VDPSequential(layer))


def hand_loss(x, y, kl_weight, num_train, floor, likelihood):
    """Every term of eq. 3, 8, 9, 11, 12 with Python floats."""
    W = [[1.0, -0.5], [0.25, 0.75], [-1.0, 0.0]]
    b = [0.1, 0.0, -0.2]
    rw = [[-1.0, -2.0], [0.0, -3.0], [-1.5, 0.5]]
    rb = [-2.0, -1.0, -4.0]
    sp = lambda r: math.log1p(math.exp(r))  # noqa: E731
    nll_total = 0.0
    for xi, yi in zip(x, y):
        mu = [sum(W[k][j] * xi[j] for j in range(2)) + b[k] for k in range(3)]
        var = [sum(xi[j] ** 2 * sp(rw[k][j]) ** 2 for j in range(2)) + sp(rb[k]) ** 2 for k in range(3)]  # eq. 3
        e = [math.exp(m) for m in mu]
        p = [v / sum(e) for v in e]
        if likelihood == "gaussian":
            jac = [[p[k] * ((k == j) - p[j]) for j in range(3)] for k in range(3)]
            vy = [sum(jac[k][j] ** 2 * var[j] for j in range(3)) for k in range(3)]  # eq. 9
            nll_total += sum(0.5 * (math.log(2 * math.pi) + math.log(vy[k] + floor)
                                    + ((k == yi) - p[k]) ** 2 / (vy[k] + floor)) for k in range(3))
        else:
            nll_total += -math.log(p[yi]) + 0.5 * sum(p[k] * (1 - p[k]) * var[k] for k in range(3))
    kl = 0.0  # eq. 12, per weight, N(0, 1) prior
    for mu, rho in [(W[k][j], rw[k][j]) for k in range(3) for j in range(2)] + list(zip(b, rb)):
        s2 = sp(rho) ** 2
        kl += 0.5 * (s2 + mu ** 2 - 1 - math.log(s2))
    return nll_total / len(x) + kl_weight * kl / num_train, kl


@pytest.mark.parametrize("likelihood", ["gaussian", "cross_entropy"])
def test_loss_equals_hand_computation(likelihood):
    net = tiny_network()
    x = [[0.5, -1.0], [2.0, 0.3]]
    y = [2, 0]
    log = {}
    fn = vdp_loss(num_train=50, kl_weight=0.3, likelihood=likelihood, var_floor=1e-3, log=log)
    got = fn(net, torch.tensor(x, dtype=torch.float64), torch.tensor(y), 0.0)
    want, kl = hand_loss(x, y, 0.3, 50, 1e-3, likelihood)
    assert got.item() == pytest.approx(want, rel=1e-10)
    assert float(log["kl"]) == pytest.approx(kl, rel=1e-10)
    assert net.kl().item() >= 0


def test_kl_is_zero_at_the_prior():
    net = tiny_network()
    with torch.no_grad():
        for mu, rho in net.gaussian_params():
            mu.zero_()
            rho.fill_(math.log(math.e - 1))  # softplus = 1
    assert net.kl().item() == pytest.approx(0.0, abs=1e-6)


# -- the method ------------------------------------------------------------------------------------
N_TRAIN = 96


@pytest.fixture
def ctx(tmp_path):
    build = partial(build_model, "lenet_300_100", (1, 4, 4), 3)
    train = TrainConfig(epochs=2, batch_size=32, lr=0.05, momentum=0.9, weight_decay=1e-5)
    return MethodContext(task=classification(3), build_model=build, train=train, device=torch.device("cpu"),
                         seed=0, num_train=N_TRAIN, work_dir=tmp_path / "work")


@pytest.mark.parametrize("likelihood", ["gaussian", "cross_entropy"])
def test_vdp_fit_predict_and_state_dict_round_trip(ctx, tmp_path, likelihood):
    x, y = synthetic(N_TRAIN, 0)
    torch.manual_seed(0)
    method = METHODS.get("vdp")(ctx, likelihood=likelihood, kl_weight=0.5)
    method.fit(TensorLoader(x, y, 32, shuffle=True, seed=1), synthetic(20, 5))
    assert not (ctx.work_dir / "vdp.partial").exists()
    k = method.num_stochastic_params()
    assert k == sum(p.numel() for m in ctx.build_model() if isinstance(m, nn.Linear) for p in m.parameters())
    # eq. 12: one sigma per output unit of every weight matrix, one per bias entry
    n_var = sum(m.out_features * (2 if m.bias is not None else 1) for m in ctx.build_model() if isinstance(m, nn.Linear))
    assert method.net.num_variance_params == n_var
    assert method.num_params() == n_var + sum(p.numel() for p in ctx.build_model().parameters())

    x_test, y_test = synthetic(40, 7)
    pred = method.predict(x_test)
    assert pred.probs.shape == (40, 3) and pred.sample_probs is None and pred.variance.shape == (40,)
    torch.testing.assert_close(pred.probs.sum(1), torch.ones(40))
    assert (pred.variance > 0).all()
    assert (pred.probs.argmax(1) == y_test).double().mean() > 0.6  # separable clusters
    halves = concat([method.predict(x_test[:13]), method.predict(x_test[13:])])
    torch.testing.assert_close(halves.probs, pred.probs)
    torch.testing.assert_close(halves.variance, pred.variance)

    save_torch({"method": method.state_dict()}, tmp_path / "fitted.pt")
    fresh = METHODS.get("vdp")(ctx, likelihood=likelihood, kl_weight=0.5)
    fresh.load_state_dict(load_torch(tmp_path / "fitted.pt")["method"])
    after = fresh.predict(x_test)
    assert torch.equal(after.probs, pred.probs) and torch.equal(after.variance, pred.variance)
    diag = fresh.diagnostics()
    assert diag["kl"] > 0 and 0 <= diag["frac_weights_snr_below_1"] <= 1 and diag["train"]["epochs"] == 2


def test_vdp_options_are_validated(ctx):
    x, y = synthetic(32, 0)
    with pytest.raises(BenchError, match="unknown option"):
        METHODS.get("vdp")(ctx, kl=1.0)
    with pytest.raises(BenchError, match="likelihood"):
        METHODS.get("vdp")(ctx, likelihood="mse").fit(TensorLoader(x, y, 32), None)


def test_cached_prediction_weights_follow_parameter_changes():
    torch.manual_seed(0)
    vdp = to_vdp(build_model("lenet_300_100", (1, 4, 4), 3)).eval()
    x = torch.randn(5, 1, 4, 4)
    with torch.no_grad():
        _, v1 = vdp(x)
        vdp.body[1].weight_rho.add_(1.0)  # in place: the version counter changes
        _, v2 = vdp(x)
    assert (v2 > v1).all()
    from torch.nn.utils import prune

    prune.global_unstructured([(vdp.body[1], "weight")], prune.L1Unstructured, amount=0.9)
    with torch.no_grad():
        mu3, _ = vdp(x)
        vdp.body[1].weight_orig.mul_(0)  # pruning recomputes `weight` from weight_orig each call
        mu4, _ = vdp(x)
    assert not torch.allclose(mu3, mu4)


# -- predictive, metrics, suite --------------------------------------------------------------------
def test_predictive_variance_and_metrics():
    p = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    a = ClassificationPredictive(p[:2], variance=torch.tensor([0.1, 0.2]))
    b = ClassificationPredictive(p[2:], variance=torch.tensor([0.3]))
    both = concat([a, b])
    torch.testing.assert_close(both.variance, torch.tensor([0.1, 0.2, 0.3]))
    assert concat([a, ClassificationPredictive(p[2:])]).variance is None
    y = torch.tensor([0, 1, 1])
    m, _ = classification_metrics(both.probs, y, None, both.variance)
    assert m["vdp_variance"] == pytest.approx(0.2)
    assert "vdp_variance" not in classification_metrics(both.probs, y)[0]
    o, _ = ood_metrics(p, p, None, torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.4, 0.5, 0.6]))
    assert o["auroc_vdp_variance"] == 1.0 and o["vdp_variance"] == pytest.approx(0.5)
    assert "auroc_vdp_variance" not in ood_metrics(p, p)[0]


def test_noise_snr_definition():
    from bench.suites.mnist_noise import add_noise

    x = torch.randn(200, 1, 28, 28, generator=gen(0)) * 2 + 0.5
    for snr in (20.0, 0.0, -6.0):
        noisy = add_noise(x, snr, seed=3)
        ratio = x.pow(2).flatten(1).mean(1) / (noisy - x).pow(2).flatten(1).mean(1)
        assert 10 * math.log10(ratio.mean().item()) == pytest.approx(snr, abs=0.1)
        assert torch.equal(noisy, add_noise(x, snr, seed=3))  # seeded


def test_mnist_noise_smoke_run_with_vdp(fake_mnist, tmp_path):
    from bench.cli import main
    from bench.store import load_records

    out = tmp_path / "results"
    args = ["run", "--suite", "mnist_noise", "--profile", "smoke", "--quiet", "--data-root", str(fake_mnist),
            "--out", str(out), "--no-report", "--methods", "deterministic,vdp", "--set", "data.n_val=100",
            "--set", "data.n_train=500", "--set", "data.n_test=100", "--set", "data.n_ood=100",
            "--set", "train.epochs=2"]
    assert main(args) == 0
    df = load_records(out)
    vdp = df[df["method"] == "vdp"]
    assert sorted(vdp["severity"].dropna()) == [-6, 0, 20, 40]
    assert vdp["metrics.vdp_variance"].notna().all() and (vdp["metrics.vdp_variance"] > 0).all()
    assert df.loc[df["method"] == "deterministic", "metrics.vdp_variance"].isna().all()
    assert vdp.loc[vdp["kind"] == "ood", "metrics.auroc_vdp_variance"].between(0, 1).all()
    assert (vdp["cost.stochastic_params"] > 0).all()
    assert vdp.loc[vdp["kind"] == "id", "metrics.accuracy"].iloc[0] > 0.5

    # the experiment script reads these records and checkpoints
    import importlib.util

    spec = importlib.util.spec_from_file_location("vdp_experiments", ROOT / "benchmarks" / "vdp_experiments.py")
    exp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exp)
    doc = tmp_path / "doc.md"
    doc.write_text("# notes\n")
    common = ["--results", str(out), "--suite", "mnist_noise", "--profile", "smoke", "--doc", str(doc)]
    assert exp.main(["noise"] + common) == 0
    assert exp.main(["summary"] + common) == 0
    assert exp.main(["prune", "--data-root", str(fake_mnist), "--threads", "1"] + common) == 0
    text = doc.read_text()
    assert text.startswith("# notes") and "Spearman" in text and "99% pruned" in text
    assert text.count("<!-- BEGIN vdp_experiments:noise -->") == 1
    assert exp.main(["noise"] + common) == 0  # a re-run replaces its block
    assert doc.read_text().count("<!-- BEGIN vdp_experiments:noise -->") == 1


def test_cifar10_noise_smoke_run_and_experiments(tmp_path):
    """The CIFAR-10 noise suite (cifar10c's split, augmentation and resnet_small) on a fixture in
    the official pickle layout, and the experiment script's noise / prune / cost on it."""
    import importlib.util

    from bench.cli import main
    from bench.store import load_records
    from bench.suites import SUITES
    from bench.suites.cifar10_noise import CLEAN_SEVERITY
    from bench.suites.cifar10c import make_augment
    from datasets.cifar10 import normalize
    from test_cifar10c_suite import make_fake_cifar

    root = tmp_path / "data"
    tr_x, tr_y, te_x, te_y = make_fake_cifar(root, n_train=1100, n_test=200)

    # the data: cifar10c's split, augmentation and normalisation; noise in the normalised domain
    suite = SUITES.get("cifar10_noise")()
    data = suite.load(root, dict(suite.profiles["smoke"]["data"]), False)
    assert torch.equal(data.val_x, normalize(torch.from_numpy(tr_x[-500:])))
    assert len(data.train_x) == 512 and data.augment is not None
    assert type(data.augment).__qualname__ == type(make_augment()).__qualname__
    sets = {(e.kind, e.severity): e for e in data.eval_sets}
    assert sorted(s for k, s in sets if k == "shift") == [-6.0, 0.0, 20.0]
    clean = sets[("id", CLEAN_SEVERITY)]
    assert torch.equal(clean.x[:], normalize(torch.from_numpy(te_x)))  # n_test = all 200, in order
    for snr in (20.0, 0.0, -6.0):
        e = sets[("shift", snr)]
        assert torch.equal(e.y, clean.y)
        noise = e.x[:] - clean.x[:]
        ratio = clean.x[:].pow(2).flatten(1).mean(1) / noise.pow(2).flatten(1).mean(1)
        assert 10 * math.log10(ratio.mean().item()) == pytest.approx(snr, abs=0.2)
    again = suite.load(root, dict(suite.profiles["smoke"]["data"]), False)
    assert torch.equal(again.eval_sets[-1].x[:], data.eval_sets[-1].x[:])  # seeded noise

    out = tmp_path / "results"
    args = ["run", "--suite", "cifar10_noise", "--profile", "smoke", "--quiet", "--data-root", str(root),
            "--out", str(out), "--no-report"]
    assert main(args) == 0
    df = load_records(out)
    assert set(df["method"]) == {"deterministic", "vdp", "mfvi"} and set(df["model"]) == {"resnet_small"}
    vdp = df[df["method"] == "vdp"]
    assert sorted(vdp["severity"].dropna()) == [-6, 0, 20, CLEAN_SEVERITY]
    assert (vdp["metrics.vdp_variance"] > 0).all()

    spec = importlib.util.spec_from_file_location("vdp_experiments", ROOT / "benchmarks" / "vdp_experiments.py")
    exp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exp)
    doc = tmp_path / "doc.md"
    doc.write_text("# notes\n\n<!-- BEGIN vdp_experiments:noise -->\nMNIST\n<!-- END vdp_experiments:noise -->\n")
    common = ["--results", str(out), "--suite", "cifar10_noise", "--profile", "smoke", "--doc", str(doc)]
    assert exp.main(["noise"] + common) == 0
    assert exp.main(["prune", "--data-root", str(root), "--threads", "1"] + common) == 0
    assert exp.main(["cost", "--data-root", str(root), "--threads", "1", "--batch-size", "16", "--rounds", "1",
                     "--device", "cpu"] + common) == 0
    text = doc.read_text()
    assert "MNIST" in text  # the mnist_noise blocks are left alone
    for block in ("noise", "prune", "cost"):
        assert text.count(f"<!-- BEGIN vdp_experiments:{block}-cifar10_noise -->") == 1
    assert "resnet_small" in text and "99% pruned" in text and "memory / det" in text


@pytest.mark.parametrize("method", ["ssvi", "vdp"])
def test_the_kl_divisor_of_ssvi_and_vdp_counts_observations_or_inputs(method, tmp_path):
    """kl_scale: "dataset" divides the KL by the observations (pixels on segmentation: here 16 per
    input), "examples" by the training inputs (the segmentation profiles' per-image KL)."""
    import dataclasses

    from bench.data import TensorLoader
    from bench.tasks import classification
    from bench.training import TrainConfig
    from methods import METHODS
    from methods.base import MethodContext

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 3, (64,), generator=g)

    def build(dropout=0.0):
        from bench.models import build_model
        return build_model("lenet_300_100", (1, 8, 8), 3, dropout=dropout)

    ctx = MethodContext(task=classification(3), build_model=build, train=TrainConfig(epochs=1, batch_size=32, lr=0.01),
                        device=torch.device("cpu"), seed=0, map_cache=None, num_train=64 * 16,
                        work_dir=tmp_path / "w")
    for scale, expected in (("dataset", 64 * 16), ("examples", 64)):
        torch.manual_seed(0)
        m = METHODS.get(method)(dataclasses.replace(ctx, work_dir=tmp_path / scale), kl_scale=scale)
        m.fit(TensorLoader(x, y, 32, shuffle=True, seed=0), None)
        assert m.meta["train"]["kl_divisor"] == expected, scale


@pytest.mark.parametrize("method", ["ssvi", "vdp"])
def test_kl_scale_at_its_earlier_behaviour_keeps_the_kept_records_identity(method):
    """An option added later (Method.LATER_OPTIONS) at the value that reproduces the earlier
    behaviour is no part of the cell's identity: the kept rotated-MNIST records (made before
    kl_scale existed) are the cells the current plan names, so a rerun skips them."""
    import json
    from pathlib import Path

    from bench.config import resolve_plan
    from bench.harness import cell_identity
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from methods import METHODS

    root = Path(__file__).resolve().parents[1] / "docs" / "records"
    from bench.store import pack_path, read_pack

    kept = {r["config_hash"] for r in read_pack(pack_path(root / "mnist_rotated")).values()
            if r["method"] == method and r["profile"] == "quick" and r["model"] == "lenet_300_100"}
    assert kept, "no kept record to compare with"
    suite = SUITES.get("mnist_rotated")()
    # the kept records ran the quick profile's earlier 5 epochs (the profile trains 15 now; the
    # training budget is part of a cell's identity)
    plan = resolve_plan(suite, "quick", [method], {"train.epochs": [5]}, method_registry=METHODS)
    (cfg,) = plan.methods[method]
    assert cfg["kl_scale"] == "dataset"
    store = ResultsStore("unused")
    cid = cell_identity(suite, plan, store, METHODS, "lenet_300_100", method, cfg, 0, torch.device("cpu"))
    assert cid.chash in kept
    other = cell_identity(suite, plan, store, METHODS, "lenet_300_100", method, {**cfg, "kl_scale": "examples"}, 0,
                          torch.device("cpu"))
    assert other.chash != cid.chash and "kl_scale=examples" in other.label
