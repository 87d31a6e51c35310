"""VDP++ on multi-label tasks: sigmoid moments per label, the two likelihoods label by label, and the
moments through the presence pooling of ``unet_presence``, each against Monte Carlo or a hand
computation; the method end to end is in test_multilabel.py (every supporting method)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from bench.models import build_model
from bench.vdp import multilabel_nll, sigmoid_moments, to_vdp, vdp_loss
from bench.vdp.unet import VDPPresence
from test_vdp import assert_moments, gen, sample_inputs


def test_sigmoid_moments_match_monte_carlo_per_label():
    # confident labels too (|mu| = 9): 1 - p is taken as sigmoid(-mu), so their variance is not lost
    mean = torch.tensor([[2.0, -0.5, 0.0, 9.0], [-9.0, 0.3, 1.2, -2.0]], dtype=torch.float64)
    var = torch.tensor([[1e-4, 4e-4, 2e-4, 3e-4], [2e-4, 1e-4, 1e-4, 2e-4]], dtype=torch.float64)
    p, v = sigmoid_moments(mean, var)
    torch.testing.assert_close(p, torch.sigmoid(mean))
    assert (v > 0).all()
    z = sample_inputs(mean, var, gen(3))  # independent logits, as the diagonal propagation assumes
    assert_moments(torch.sigmoid(z), p, v, rel_extra=0.02)
    # without a variance the labels are certain
    assert (sigmoid_moments(mean, None)[1] == 0).all()


def test_expected_binary_cross_entropy_is_the_monte_carlo_mean_to_second_order():
    """E[BCE(z)] over z ~ N(mu, var) by Monte Carlo (common random numbers) against the BCE of the
    means plus 1/2 p (1 - p) var per label, summed over the labels; the bare BCE misses it."""
    mu = torch.tensor([[1.5, -0.7, 0.2], [0.0, 2.5, -3.0]], dtype=torch.float64)
    var = torch.tensor([[0.04, 0.09, 0.02], [0.06, 0.03, 0.08]], dtype=torch.float64)
    y = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    eps = torch.randn((200_000, *mu.shape), generator=gen(5), dtype=torch.float64)
    z = mu + var.sqrt() * eps
    mc = F.binary_cross_entropy_with_logits(z, y.expand_as(z), reduction="none").sum(-1).mean(0)
    got = multilabel_nll(mu, var, y, "cross_entropy")
    bare = multilabel_nll(mu, var, y, "cross_entropy", ce_variance_term=False)
    torch.testing.assert_close(bare, F.binary_cross_entropy_with_logits(mu, y, reduction="none").sum(-1))
    term = (bare - mc).abs()
    assert (term > 0.005).all()  # the variance term is large enough here to be seen
    assert ((got - mc).abs() < 0.1 * term).all(), (got, mc, bare)


def test_gaussian_multilabel_likelihood_equals_hand_computation():
    mu = [[0.4, -1.1], [2.0, 0.0]]
    var = [[0.3, 0.05], [0.2, 0.5]]
    y = [[1, 0], [0, 1]]
    floor = 1e-3
    got = multilabel_nll(torch.tensor(mu, dtype=torch.float64), torch.tensor(var, dtype=torch.float64),
                         torch.tensor(y), "gaussian", var_floor=floor)
    for i in range(2):
        want = 0.0
        for m, v, t in zip(mu[i], var[i], y[i]):
            p = 1 / (1 + math.exp(-m))
            s2 = (p * (1 - p)) ** 2 * v + floor
            want += 0.5 * (math.log(2 * math.pi * s2) + (t - p) ** 2 / s2)
        assert got[i].item() == pytest.approx(want, rel=1e-12)


def test_the_elbo_of_a_multilabel_network_is_its_label_nll_plus_the_scaled_kl():
    torch.manual_seed(0)
    net = to_vdp(build_model("lenet_300_100", (1, 8, 8), 3), rho_init=-3.0)
    x, y = torch.randn(5, 1, 8, 8), (torch.rand(5, 3) > 0.5).float()
    log = {}
    loss = vdp_loss(40, kl_weight=0.5, likelihood="cross_entropy", log=log, multilabel=True)(net, x, y, 0.0)
    mu, var = net(x)
    want = multilabel_nll(mu, var, y, "cross_entropy").mean() + 0.5 * net.kl() / 40
    torch.testing.assert_close(loss, want)
    assert float(log["nll"]) == pytest.approx(float(multilabel_nll(mu, var, y, "cross_entropy").mean()), rel=1e-6)


def test_presence_pooling_moments_match_monte_carlo_over_the_pixel_logits():
    """unet_presence converts with its mean path intact; given the UNet's per-pixel logit moments,
    the presence logits' variance is that of the pooling applied to independent Gaussian pixel
    logits (Monte Carlo), with a per-class scale that is not 1."""
    torch.manual_seed(1)
    net = build_model("unet_presence", (3, 16, 16), 3)
    with torch.no_grad():
        net.scale.copy_(torch.tensor([1.7, 0.6, 1.0]))
        net.shift.copy_(torch.tensor([0.2, -0.3, 0.0]))
    x = torch.randn(2, 3, 16, 16)
    vdp = to_vdp(net, rho_init=-6.0, example=x)  # checks the mean path against the network
    pres = vdp.body
    assert isinstance(pres, VDPPresence) and pres.scale is net.scale
    with torch.no_grad():
        mu, var = vdp(x)
        rows_mu, rows_var = pres.seg(x, None)
    assert (var > 0).all()
    rows_mu, rows_var = rows_mu.double(), rows_var.double()
    g = gen(7)
    draws = []
    for _ in range(20):  # 20 x 1,000 draws of every pixel's logits, independently
        z = rows_mu + rows_var.sqrt() * torch.randn((1000, *rows_mu.shape), generator=g, dtype=torch.float64)
        share = torch.softmax(z, -1).reshape(1000, 2, -1, 3).mean(2)
        draws.append(net.scale.double() * (torch.log(share.clamp_min(1e-6)) - math.log(0.01)) + net.shift.double())
    assert_moments(torch.cat(draws), mu.double(), var.double(), rel_extra=0.03)


def test_a_vdp_network_trains_and_predicts_on_a_multilabel_task(tmp_path):
    """The method's fit / predict on a multi-label context: sigmoid probabilities per label (not a
    softmax: the rows do not sum to 1), its ELBO the multi-label one."""
    from bench.predictive import MultilabelPredictive
    from bench.tasks import multilabel
    from bench.training import TrainConfig
    from methods import METHODS, MethodContext
    from test_multilabel_api import L, bars

    task = multilabel(L)
    (tx, ty), (sx, _) = bars(64, 0), bars(16, 2)
    build = lambda dropout=0.0: build_model("lenet_300_100", (1, 8, 8), L, dropout=dropout)  # noqa: E731
    ctx = MethodContext(build_model=build, task=task, device=torch.device("cpu"), seed=0,
                        train=TrainConfig(epochs=2, batch_size=16, lr=1e-3), num_train=64)
    from bench.data import TensorLoader

    m = METHODS.get("vdp")(ctx, kl_weight=0.1)
    m.fit(TensorLoader(tx, ty, 16, shuffle=True, seed=0), None)
    pred = m.predict(sx)
    assert isinstance(pred, MultilabelPredictive) and pred.probs.shape == (16, L)
    mu, _ = m.net(sx)
    torch.testing.assert_close(pred.probs, torch.sigmoid(mu.double()).float())
    assert not torch.allclose(pred.probs.sum(-1), torch.ones(16))
    assert m.meta["train"]["final_nll"] is not None and m.meta["sigma_stationarity"]
