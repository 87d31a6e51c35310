"""Variational methods learn their variances (PBN, mfvi, SSVI): checks against the papers'
objective, not against the code's own formulas.

* Mean-field VI on a linear-Gaussian model has a closed-form optimum (the posterior mean and
  sigma_i^2 = 1 / Lambda_ii with Lambda = X^T X / s_n^2 + I / s_p^2): the trained sigma must
  reach it from an initial value that is too large for one weight and too small for another.
* Through the plugins: sigma shrinks on a weight the data pins down and moves towards the prior
  on a weight the data cannot see; the KL weight follows the papers' schedules step by step;
  predictions sample the posterior and converge to the mean network as sigma -> 0.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bench.data import TensorLoader
from bench.subnet.partial_vi import PartialVI, beta_schedule, elbo_loss
from bench.subnet.selection import candidate_indices
from bench.subnet.ssvi import kl_warmup_beta
from bench.tasks import classification
from bench.training import TrainConfig, make_optimizer, train_model
from methods import METHODS, MethodContext
from methods.pbn import softplus_inv_float


class _GaussianTask:
    """Known-noise Gaussian likelihood: per-example NLL (y - f)^2 / (2 s_n^2) (+ const)."""

    def __init__(self, noise: float):
        self.noise = noise

    def loss(self, out, y):
        return ((out.reshape(-1) - y.reshape(-1)) ** 2).mean() / (2 * self.noise ** 2)


def test_mean_field_vi_reaches_the_exact_linear_gaussian_optimum():
    g = torch.Generator().manual_seed(0)
    n, noise, prior = 200, 0.5, 1.0
    scales = torch.tensor([3.0, 1.0, 0.1])
    x = torch.randn(n, 3, generator=g) * scales
    w_true = torch.tensor([0.5, -1.0, 2.0])
    y = x @ w_true + noise * torch.randn(n, generator=g)
    # the exact posterior: precision Lambda, mean Lambda^-1 X^T y / s_n^2; the mean-field
    # optimum of KL(q || posterior) has the same mean and variances 1 / Lambda_ii
    lam = x.double().T @ x.double() / noise ** 2 + torch.eye(3, dtype=torch.float64) / prior ** 2
    mean = torch.linalg.solve(lam, x.double().T @ y.double() / noise ** 2)
    sigma_opt = (1.0 / torch.diagonal(lam)).sqrt()

    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(3, 1, bias=False))
    vi = PartialVI(net, candidate_indices(net), prior_scale=prior, rho_init_mean=softplus_inv_float(0.05),
                   rho_init_std=0.0)
    cfg = TrainConfig(epochs=1500, batch_size=n, optimizer="adam", lr=0.05, schedule="cosine")
    groups = [{"params": list(net.parameters())}, {"params": [vi.rho], "optimizer": "adam", "lr": 0.05}]
    loss = elbo_loss(_GaussianTask(noise), n, samples=32, beta_start=1.0, beta_end=1.0)
    train_model(vi, TensorLoader(x, y, n, shuffle=False), cfg, loss, params=groups)
    sigma = vi.sigma().detach().double()
    # sigma started at 0.05: it must shrink 4x on the well-measured weight and grow 6x on the
    # weight whose feature is nearly constant, to the closed-form values
    assert sigma_opt[0] < 0.015 and sigma_opt[2] > 0.3
    torch.testing.assert_close(sigma, sigma_opt, rtol=0.1, atol=0.0)
    torch.testing.assert_close(net[0].weight.detach().double().reshape(-1), mean, rtol=0.0,
                               atol=float(3 * sigma_opt.max() / math.sqrt(32)))


def _linear_ctx(x, y, epochs=30, seed=0):
    """A 2-input linear classifier: input 0 separates the classes, input 1 is always 0."""
    task = classification(2)
    build = lambda dropout=0.0: nn.Sequential(nn.Flatten(), nn.Linear(2, 2))  # noqa: E731
    train = TrainConfig(epochs=epochs, batch_size=50, lr=0.05, momentum=0.9)
    return MethodContext(task=task, build_model=build, train=train, device=torch.device("cpu"), seed=seed,
                         num_train=len(x))


def _pinned_and_blind_data(n=200):
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.stack([0.5 * (2.0 * y - 1.0) + torch.randn(n, generator=g), torch.zeros(n)], 1).view(n, 1, 2)
    return x, y


def _fit_dense_at_sigma(method, ctx, x, y, sigma0):
    """mfvi, or SSVI at density 1 with mfvi's N(0, 1) prior, every sigma starting at ``sigma0``."""
    opts = ({"sigma_init": sigma0, "rho_init_std": 0.0} if method == "mfvi"
            else {"sigma_init_mean": sigma0, "sigma_init_std": 0.0, "density": 1.0, "prior_scale": 1.0})
    return METHODS.get(method)(ctx, **opts).fit(TensorLoader(x, y, 50, seed=0), (x, y))


@pytest.mark.parametrize("method", ["mfvi", "ssvi"])
def test_sigma_shrinks_where_the_data_pins_a_weight_and_grows_where_it_cannot(method):
    x, y = _pinned_and_blind_data()
    ctx = _linear_ctx(x, y, epochs=100)
    m = _fit_dense_at_sigma(method, ctx, x, y, 0.3)
    if method == "mfvi":
        sig = m.vi.sigma_of("1.weight")
    else:
        layer = dict(m.model.layers())["1"]
        sig = layer.dense(layer.w_sigma().detach()).view(2, 2)
    d = m.diagnostics()
    assert d["sigma_init"]["median"] == pytest.approx(0.3, rel=0.02)
    # weights of input 0 (large data gradient): shrink well below the initial 0.3
    assert float(sig[:, 0].max()) < 0.15, sig
    # weights of input 1 (always 0: no data gradient at all): the KL pulls them towards the prior's 1
    assert float(sig[:, 1].min()) > 0.4, sig
    assert d["sigma_final"]["per_layer"] and d["sigma_final"]["mean"] != d["sigma_init"]["mean"]
    stats = d["train"]["epoch_stats"]
    assert len(stats) == ctx.train.epochs and d["train"]["sigma_last_epoch_rel_change"] is not None


def test_beta_follows_the_pbn_schedule_step_by_step():
    """Appendix H.6: beta goes linearly from 0.2 to 0.01 over training; the value the fit used
    in the last step of every epoch is the schedule's at that step."""
    x, y = _pinned_and_blind_data()
    ctx = _linear_ctx(x, y, epochs=4)
    m = METHODS.get("mfvi")(ctx).fit(TensorLoader(x, y, 50, seed=0), (x, y))
    steps_per_epoch, total = 4, 16
    for e, st in enumerate(m.meta["train"]["epoch_stats"]):
        t = ((e + 1) * steps_per_epoch - 1) / total
        assert st["beta"] == pytest.approx(0.2 + (0.01 - 0.2) * t, abs=1e-12)
    assert beta_schedule(0.0, 0.2, 0.01) == 0.2 and beta_schedule(1.0, 0.2, 0.01) == pytest.approx(0.01)


def test_ssvi_kl_warmup_at_step_t():
    """Sec. 4.1 / official code: beta = 0.01 x min(2 epoch / epochs, 1), here per step."""
    assert kl_warmup_beta(0, 1000, 0.01, 0.5) == 0.0
    assert kl_warmup_beta(250, 1000, 0.01, 0.5) == pytest.approx(0.005)
    assert kl_warmup_beta(500, 1000, 0.01, 0.5) == pytest.approx(0.01)
    assert kl_warmup_beta(900, 1000, 0.01, 0.5) == pytest.approx(0.01)
    x, y = _pinned_and_blind_data()
    ctx = _linear_ctx(x, y, epochs=4)
    m = METHODS.get("ssvi")(ctx, density=1.0).fit(TensorLoader(x, y, 50, seed=0), (x, y))
    for e, st in enumerate(m.meta["train"]["epoch_stats"]):
        step = (e + 1) * 4 - 1
        assert st["beta"] == pytest.approx(0.01 * min(1.0, step / 16 / 0.5), abs=1e-12)


@pytest.mark.parametrize("method", ["mfvi", "ssvi"])
def test_predictions_sample_the_posterior_and_tend_to_the_mean_network(method):
    x, y = _pinned_and_blind_data()
    ctx = _linear_ctx(x, y, epochs=5)
    m = _fit_dense_at_sigma(method, ctx, x, y, 0.3)
    xt = torch.linspace(-2, 2, 41).view(-1, 1, 1).expand(-1, 1, 2).clone()
    xt[:, 0, 1] = 1.0  # the blind input is on at test time: its learned (large) sigma shows
    net = m.vi.net if method == "mfvi" else m.model
    with torch.no_grad():
        if method == "ssvi":
            m.model.set_mode("mean")
        mean_probs = net(xt).softmax(-1)
        if method == "ssvi":
            m.model.set_mode("lrt")
        pred = m.predict(xt)
    spread = (pred.sample_probs - pred.sample_probs.mean(0)).abs().max()
    assert float(spread) > 0.05, "posterior draws must give different predictions"
    assert float((pred.probs - mean_probs).abs().max()) > 0.01, "the predictive is not the mean network's"
    # sigma -> 0: the predictive tends to the mean network's
    with torch.no_grad():
        if method == "mfvi":
            m.vi.rho.fill_(softplus_inv_float(1e-7))
        else:
            for _, layer in m.model.layers():
                for r in (layer.w_rho, layer.b_rho):
                    if r is not None:
                        r.fill_(softplus_inv_float(1e-7))
        pred0 = m.predict(xt)
    torch.testing.assert_close(pred0.probs, mean_probs, atol=1e-5, rtol=0)
