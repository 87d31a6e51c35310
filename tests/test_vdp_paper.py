"""VDP++ checked against its paper's equations by independent computations (issue: "VDP++ as its
equations say"): the Gaussian likelihood of eq. 11 against scipy's multivariate normal, the KL of
eq. 12 with one sigma per output unit written out by hand, moment propagation at a sigma large
enough to matter against Monte Carlo (exact where the layer is linear; the first-order error of a
non-linearity and the residual's dropped cross term measured against closed forms), rho learned
under the ELBO (and not without its own optimiser group), and the pruning step against brute force.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.data import TensorLoader
from bench.pruning import prune_, prune_masks
from bench.vdp import VDPActivation, VDPLinear, VDPResidual, VDPSequential, softmax_moments, to_vdp
from bench.vdp.loss import gaussian_nll
from methods import METHODS
from test_vdp import N_TRAIN, ctx, gen, sample_inputs, weight_draws  # noqa: F401  (ctx is a fixture)
from synthetic import blobs as synthetic

S = 200_000


def test_gaussian_nll_is_the_multivariate_normal_of_eq_11():
    scipy_stats = pytest.importorskip("scipy.stats")
    g = gen(0)
    mu, var = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.rand(4, 5, generator=g, dtype=torch.float64)
    p, v = softmax_moments(mu, var)
    y = torch.tensor([0, 3, 4, 1])
    got = gaussian_nll(p, v, y, var_floor=0.0)
    for i in range(4):
        onehot = F.one_hot(y[i], 5).double().numpy()
        want = -scipy_stats.multivariate_normal(mean=p[i].numpy(), cov=torch.diag(v[i]).numpy()).logpdf(onehot)
        assert got[i].item() == pytest.approx(want, rel=1e-10)


def test_kl_with_one_sigma_per_output_unit_is_eq_12():
    torch.manual_seed(0)
    net = to_vdp(nn.Sequential(nn.Linear(6, 4, bias=False), nn.ReLU(), nn.Linear(4, 3, bias=False)), -1.0,
                 sigma_per="unit")
    eq12, n_weights = 0.0, 0
    with torch.no_grad():
        for layer in net.gaussian_layers():
            layer.weight_rho.copy_(torch.randn(layer.weight_rho.shape, generator=gen(1)))
            assert layer.weight_rho.shape == (layer.weight.shape[0], 1)  # one sigma per output unit
            j = layer.weight.shape[1]
            for n in range(layer.weight.shape[0]):
                s2 = F.softplus(layer.weight_rho[n, 0]).item() ** 2
                eq12 += -0.5 * (j * math.log(s2) - layer.weight[n].square().sum().item() - j * s2)
            n_weights += layer.weight.numel()
    # eq. 12 drops the constant -1/2 per weight that makes the KL zero at the prior
    assert net.kl().item() == pytest.approx(eq12 - 0.5 * n_weights, rel=1e-6)


def test_linear_chain_is_exact_at_a_large_sigma():
    """Eq. 6-7 are exact for a linear layer with Gaussian input at any sigma (sigma_w ~ 0.5 here)."""
    torch.manual_seed(0)
    layer = VDPLinear(3, 2).double()
    with torch.no_grad():
        layer.weight_rho.fill_(0.0)  # sigma = 0.69
        layer.bias_rho.fill_(-0.5)
    x_mu = torch.randn(2, 3, generator=gen(1), dtype=torch.float64)
    x_var = torch.rand(2, 3, generator=gen(2), dtype=torch.float64) + 0.5
    xs = sample_inputs(x_mu, x_var, gen(3))
    W, b = weight_draws(layer, gen(4))
    out = torch.einsum("sni,soi->sno", xs[:, :, :], W[:xs.shape[0]]) + b[:xs.shape[0], None]
    with torch.no_grad():
        mu, v = layer(x_mu, x_var)
    n = out.shape[0]
    assert ((out.mean(0) - mu).abs() <= 5 * (out.var(0) / n).sqrt()).all()
    assert ((out.var(0) - v).abs() <= 5 * out.var(0) * math.sqrt(2 / n)).all()


def test_relu_first_order_error_at_a_large_sigma_is_the_closed_form_gap():
    """Eq. 4-5 linearise ReLU at the mean: at sigma ~ mean the propagated mean relu(mu) misses
    E[relu(z)] = mu Phi(mu/s) + s phi(mu/s) (the closed form, which Monte Carlo confirms)."""
    mu, s = torch.tensor([0.3, -0.2, 1.5], dtype=torch.float64), torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)
    z = mu + s * torch.randn(S, 3, generator=gen(0), dtype=torch.float64)
    mc = torch.relu(z).mean(0)
    normal = torch.distributions.Normal(0.0, 1.0)
    closed = mu * normal.cdf(mu / s) + s * normal.log_prob(mu / s).exp()
    assert ((mc - closed).abs() <= 5 * torch.relu(z).std(0) / math.sqrt(S)).all()
    with torch.no_grad():
        m, v = VDPActivation(nn.ReLU())(mu, s * s)
    torch.testing.assert_close(m, torch.relu(mu))  # eq. 4: the mean path is f(mu)
    torch.testing.assert_close(v, torch.where(mu > 0, s * s, torch.zeros_like(s)))  # eq. 5: f'(mu)^2 sigma^2
    gap = closed - m
    assert gap[0].item() > 0.05 and gap[1].item() > 0.05  # the first-order error matters at this sigma
    assert abs(gap[2].item()) < 0.01  # ... and vanishes 3 sigma away from the kink


def test_identity_residual_drops_exactly_the_cross_term_of_eq_13():
    """x + W x for a random input: the propagated variance sums the branches as independent; the
    true variance (Monte Carlo) adds the cross term 2 diag(dF/dx) sigma_x^2 = 2 diag(W) sigma_x^2."""
    torch.manual_seed(0)
    body = VDPLinear(3, 3).double()
    with torch.no_grad():
        body.weight.copy_(torch.tensor([[0.8, 0.1, -0.2], [0.3, -0.6, 0.1], [0.0, 0.2, 0.5]]))
        body.weight_rho.fill_(-30.0)  # deterministic weights: the cross term alone
        body.bias_rho.fill_(-30.0)
    block = VDPResidual(VDPSequential(body))
    x_mu, x_var = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[1.0, 0.5, 2.0]], dtype=torch.float64)
    xs = sample_inputs(x_mu, x_var, gen(5))[:, 0]
    true_var = (xs + xs @ body.weight.T.detach() + body.bias.detach()).var(0)
    with torch.no_grad():
        _, v = block(x_mu, x_var)
    cross = 2 * torch.diagonal(body.weight.detach()) * x_var[0]
    torch.testing.assert_close(true_var, v[0] + cross, rtol=0.02, atol=0.02)
    assert (cross.abs() > 0.2).all()  # a gap far above the Monte Carlo error


def _train_vdp(ctx, **opts):
    x, y = synthetic(N_TRAIN, 0)
    m = METHODS.get("vdp")(ctx, **opts)
    m.fit(TensorLoader(x, y, 32, shuffle=True, seed=1), synthetic(20, 5))
    return m


def test_rho_is_learned_under_the_elbo_and_reaches_the_kl_optimum_without_data(ctx):
    ctx.train = ctx.train.replace(epochs=30)
    # the data term ignores the variances (bare cross-entropy): the ELBO optimum of every sigma is
    # the prior's (d KL / d sigma = 0 at sigma = prior_scale = 1), which rho must approach
    m = _train_vdp(ctx, ce_variance_term=False, rho_init=-2.0, rho_lr=0.1, kl_weight=1.0)
    s0, s1 = m.meta["sigma_init"]["median"], m.meta["sigma_final"]["median"]
    assert s0 == pytest.approx(F.softplus(torch.tensor(-2.0)).item(), rel=1e-5)
    assert abs(s1 - 1.0) < 0.5 * abs(s0 - 1.0)
    stats = m.meta["train"]["epoch_stats"]
    assert len(stats) == 30 and m.meta["train"]["sigma_last_epoch_rel_change"] is not None


def test_rho_stays_put_without_its_own_group_learning_rate(ctx):
    ctx.train = ctx.train.replace(epochs=3)
    moved = _train_vdp(ctx, rho_lr=0.05)
    frozen = _train_vdp(ctx, rho_lr=1e-12)
    assert moved.meta["sigma_change"]["median_ratio"] != pytest.approx(1.0, abs=0.02)
    assert frozen.meta["sigma_change"]["median_ratio"] == pytest.approx(1.0, abs=1e-6)


# -- pruning ------------------------------------------------------------------------------------------
def bn_mlp():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 5), nn.BatchNorm1d(5), nn.ReLU(),
                        nn.Linear(5, 3))
    with torch.no_grad():
        for bn in (net[1], net[4]):
            bn.weight.copy_(torch.rand(bn.num_features, generator=gen(bn.num_features)) * 3)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=gen(7 + bn.num_features)) + 0.1)
    return net.eval()


def _brute_force_keep(scores: list[torch.Tensor], amount: float) -> list[torch.Tensor]:
    flat = sorted((float(v), li, i) for li, s in enumerate(scores) for i, v in enumerate(s.reshape(-1).tolist()))
    drop = {(li, i) for _, li, i in flat[:int(round(amount * len(flat)))]}
    return [torch.tensor([(li, i) not in drop for i in range(s.numel())]).view_as(s) for li, s in enumerate(scores)]


def test_global_and_bn_folded_pruning_remove_the_smallest_scores():
    net = bn_mlp()
    layers = [net[0], net[3], net[6]]
    raw = [m.weight.detach().abs() for m in layers]
    folded = [raw[0] * (net[1].weight.abs() / torch.sqrt(net[1].running_var + net[1].eps)).detach()[:, None],
              raw[1] * (net[4].weight.abs() / torch.sqrt(net[4].running_var + net[4].eps)).detach()[:, None], raw[2]]
    for scheme, scores in (("global", raw), ("bn_folded", folded)):
        got = [k for _, k in prune_masks(net, 0.6, scheme)]
        for g, w in zip(got, _brute_force_keep(scores, 0.6)):
            assert torch.equal(g, w), scheme
    layer_masks = [k for _, k in prune_masks(net, 0.5, "layerwise")]
    assert [int((~k).sum()) for k in layer_masks] == [24, 20, 8]  # half of each layer


def test_pruned_vdp_weights_lose_mean_and_variance():
    torch.manual_seed(0)
    net = to_vdp(nn.Sequential(nn.Linear(4, 3)), -1.0, sigma_per="unit")
    layer = net.gaussian_layers()[0]
    removed, total = prune_(net, 0.5, "global")
    keep = layer.weight_mask.bool()
    assert removed == 6 and total == 12 and int((~keep).sum()) == 6
    x = torch.randn(5, 4, generator=gen(3))
    with torch.no_grad():
        mu, var = net(x)
        s2 = F.softplus(layer.weight_rho).square().expand_as(layer.weight) * keep
        want_var = (x * x) @ s2.T + F.softplus(layer.bias_rho).square()
    torch.testing.assert_close(mu, x @ layer.weight.T + layer.bias)
    assert (layer.weight[~keep] == 0).all()
    torch.testing.assert_close(var, want_var)


# ------------------------------------------------------------------- the segmentation UNet


def test_bilinear_upsampling_variance_matches_monte_carlo():
    """Bilinear upsampling is linear: with independent Gaussian inputs the output variance is the
    interpolation weights squared times the input variances (checked by sampling)."""
    import torch.nn.functional as F

    from bench.vdp.unet import bilinear_moments

    g = torch.Generator().manual_seed(0)
    mu = torch.randn(1, 2, 5, 7, generator=g, dtype=torch.float64)
    var = torch.rand(1, 2, 5, 7, generator=g, dtype=torch.float64) + 0.1
    out_mu, out_var = bilinear_moments(mu, var, (11, 13))
    z = mu + var.sqrt() * torch.randn(20000, 2, 5, 7, generator=g, dtype=torch.float64)
    samples = F.interpolate(z, size=(11, 13), mode="bilinear", align_corners=False)
    assert torch.allclose(out_mu[0], samples.mean(0), atol=0.03)
    assert torch.allclose(out_var[0], samples.var(0), rtol=0.05, atol=1e-3)


def test_unet_mean_path_and_the_pixel_rows_of_the_variance():
    """The converted UNet (odd input size: padding and cropping) has the deterministic network's
    mean path exactly; with every sigma ~0 but the 1x1 classifier's, the variance of row (pixel)
    r and class k is sigma_k^2 (sum_j h_rj^2) + sigma_bk^2 with h the body's features at that
    pixel: the moments leave the UNet in the same pixel order as the means."""
    from bench.models import MODELS
    from bench.vdp.layers import VDPWeightLayer

    torch.manual_seed(0)
    net = MODELS.get("unet_small")((3, 13, 11), 4).double().eval()
    x = torch.randn(2, 3, 13, 11, dtype=torch.float64)
    vdp = to_vdp(net, rho_init=-60.0, example=x).double().eval()   # check_mean_path runs here
    head = [m for m in vdp.modules() if isinstance(m, VDPWeightLayer)][-1]
    with torch.no_grad():
        head.weight_rho.copy_(torch.linspace(-2.0, -1.0, head.weight_rho.numel()).view_as(head.weight_rho))
        head.bias_rho.fill_(-1.5)
        mu, var = vdp(x)
        assert torch.allclose(mu, net(x), atol=1e-10)
        h = net[1](net[0](x))                                          # (pixels, features), batch-major
        sw2 = F.softplus(head.weight_rho).square().expand_as(head.weight)  # (classes, features)
        want = h.square() @ sw2.t() + F.softplus(head.bias_rho).square()
    assert mu.shape == (2 * 13 * 11, 4) and torch.allclose(var, want, rtol=1e-6, atol=1e-20)


def test_pixel_rows_keep_each_variance_with_its_mean():
    from bench.vdp.unet import VDPPixelRows

    mu = torch.randn(2, 3, 4, 5)
    rows_mu, rows_var = VDPPixelRows()(mu, mu.square() + 1)   # a variance that names its mean
    assert rows_mu.shape == (40, 3) and torch.equal(rows_var, rows_mu.square() + 1)
