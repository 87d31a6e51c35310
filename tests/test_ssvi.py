"""SSVI (methods/ssvi.py, bench/subnet/ssvi.py): closed forms, constant density, regrowth, sparsity."""
from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal, kl_divergence

from bench.data import TensorLoader
from bench.errors import BenchError
from bench.models import build_model
from bench.subnet.ssvi import (CRITERIA, SSVINet, SparseBayesLayer, active_count, exp_abs_mean, exp_abs_snr,
                               folded_normal_mean, folded_normal_snr, removal_scores, update_fraction)
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS, MethodContext

MU = torch.tensor([0.0, 0.01, -0.05, 0.3, 1.0, -2.0, 0.002], dtype=torch.float64)
SIG = torch.tensor([0.05, 0.02, 0.01, 0.5, 0.1, 1.0, 0.04], dtype=torch.float64)


@pytest.fixture(scope="module")
def draws():
    g = torch.Generator().manual_seed(0)
    return MU[:, None] + SIG[:, None] * torch.randn(len(MU), 400_000, generator=g, dtype=torch.float64)


# -- closed forms of the removal criteria against Monte Carlo ---------------------------------------
def test_folded_normal_mean_and_snr_match_monte_carlo(draws):
    a = draws.abs()
    torch.testing.assert_close(folded_normal_mean(MU, SIG), a.mean(1), rtol=3e-3, atol=0)
    torch.testing.assert_close(folded_normal_snr(MU, SIG), a.mean(1) / a.std(1), rtol=5e-3, atol=0)


@pytest.mark.parametrize("lam", [1.0, 2.5])
def test_exp_criteria_match_monte_carlo(draws, lam):
    e = torch.exp(lam * draws.abs())
    keep = SIG * lam < 0.6  # heavy-tailed e^{lam |theta|}: MC of its variance is unreliable beyond
    torch.testing.assert_close(exp_abs_mean(MU, SIG, lam)[keep], e.mean(1)[keep], rtol=3e-3, atol=0)
    torch.testing.assert_close(exp_abs_mean(MU, SIG, lam), e.mean(1), rtol=3e-2, atol=0)
    torch.testing.assert_close(exp_abs_snr(MU, SIG, lam)[keep], (e.mean(1) / e.std(1))[keep], rtol=1e-2, atol=0)


def test_criteria_are_numerically_safe_and_consistent():
    mu = torch.tensor([0.0, 1e-8, 0.5, -3.0, 1.0], dtype=torch.float32)
    sig = torch.tensor([1e-6, 1e-3, 1e-7, 1e-4, 10.0], dtype=torch.float32)
    for c in CRITERIA:
        s = removal_scores(c, mu, sig)
        assert s.dtype == torch.float64 and bool(torch.isfinite(s).all()) and bool((s >= 0).all()), c
        assert bool((s[1:] > 0).all()), c  # only |mu| and |mu|/sigma vanish, and only at mu = 0
    # |mu| >> sigma: |theta| is almost N(|mu|, sigma^2), so SNR(|theta|) -> |mu|/sigma (no cancellation)
    torch.testing.assert_close(folded_normal_snr(torch.tensor([1.0]), torch.tensor([1e-6])),
                               torch.tensor([1e6], dtype=torch.float64), rtol=1e-6, atol=0)
    # mu = 0: E|theta| = sigma sqrt(2/pi), SNR(|theta|) = sqrt(2/pi) / sqrt(1 - 2/pi)
    torch.testing.assert_close(folded_normal_mean(torch.zeros(1), torch.tensor([2.0])),
                               torch.tensor([2 * math.sqrt(2 / math.pi)], dtype=torch.float64))
    r0 = math.sqrt(2 / math.pi) / math.sqrt(1 - 2 / math.pi)
    torch.testing.assert_close(folded_normal_snr(torch.zeros(1), torch.tensor([0.3])),
                               torch.tensor([r0], dtype=torch.float64))
    # E exp(lam |theta|) -> exp(lam |mu|) as sigma -> 0; symmetric in the sign of mu
    torch.testing.assert_close(exp_abs_mean(torch.tensor([-0.7]), torch.tensor([1e-9]), 2.0),
                               torch.tensor([math.exp(1.4)], dtype=torch.float64))
    with pytest.raises(BenchError):
        removal_scores("nope", mu, sig)


# -- the network -------------------------------------------------------------------------------------
def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(20, 30), nn.BatchNorm1d(30), nn.ReLU(), nn.Linear(30, 5))


def _ssvi_net(density=0.2, **kw) -> SSVINet:
    return SSVINet(_mlp(), density, generator=torch.Generator().manual_seed(1), **kw)


def _grad_step(model: SSVINet, x, y):
    for _, m in model.sparse_layers():
        m.capture_grad = True
    model.zero_grad(set_to_none=True)
    (F.cross_entropy(model(x), y) + 1e-3 * model.kl()).backward()


def test_random_initial_subspace_and_no_dense_state():
    model = _ssvi_net(0.2)
    sizes = model.num_weights()
    assert model.active_counts() == {n: active_count(v, 0.2) for n, v in sizes.items()}
    for _, m in model.layers():
        assert m.sparse and m.w_mu.shape == m.w_rho.shape == m.w_idx.shape == (m.k,)
        assert m.w_idx.dtype == torch.int32 and bool((m.w_idx[1:] > m.w_idx[:-1]).all())
        # no parameter of the layer has the dense weight's size: the state is proportional to density
        assert all(p.numel() < m.numel for p in m.parameters())
    full = _ssvi_net(1.0)
    assert model.state_bytes() < 0.3 * full.state_bytes()
    # LeNet-5: the first convolution stays dense (official code), the rest at the density
    cnn = SSVINet(build_model("lenet5", (1, 28, 28), 10), 0.1, generator=torch.Generator().manual_seed(0))
    layers = cnn.layers()
    assert not layers[0][1].sparse and layers[0][1].k == layers[0][1].numel
    assert all(m.sparse and m.k == active_count(m.numel, 0.1) for _, m in layers[1:])
    with pytest.raises(BenchError):
        SSVINet(_mlp(), 0.0)


def test_constant_density_across_drop_and_grow_steps():
    model = _ssvi_net(0.2)
    before = model.active_counts()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    changed = 0
    for step in range(6):
        x, y = torch.randn(32, 20, generator=g), torch.randint(0, 5, (32,), generator=g)
        _grad_step(model, x, y)
        old = {n: m.w_idx.clone() for n, m in model.sparse_layers()}
        info = model.drop_and_grow(0.3, "snr_abs", optimizer=opt, compare=CRITERIA)
        opt.step()  # momentum buffers were permuted consistently (same shapes)
        assert model.active_counts() == before, step
        for n, m in model.sparse_layers():
            assert m.k == before[n] and torch.unique(m.w_idx).numel() == before[n]
            assert bool((m.w_idx[1:] > m.w_idx[:-1]).all())
            assert info["layers"][n]["dropped"] == int(before[n] * 0.3)
            changed += int((~torch.isin(m.w_idx, old[n])).sum())
        assert len(info["iou"]) == 15 and all(0 <= v <= 1 for v in info["iou"].values())
    assert changed > 0  # the subspace did move


def test_regrown_entries_have_zero_mean_and_module_mean_sigma():
    model = _ssvi_net(0.25)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # spread sigma so that the mean is informative
        for _, m in model.layers():
            m.w_rho.copy_(torch.randn(m.k, generator=g) - 3)
    _grad_step(model, torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g))
    expected = {}
    for n, m in model.sparse_layers():
        k, n_drop = m.k, int(m.k * 0.3)
        scores = removal_scores("snr_abs", m.w_mu, m.w_sigma())
        keep = torch.sort(scores, descending=True, stable=True).indices[:k - n_drop]
        expected[n] = (m.w_idx.clone(), m.w_sigma()[keep].double().mean().item())
    model.drop_and_grow(0.3, "snr_abs", grow_sigma="mean")
    for n, m in model.sparse_layers():
        old_idx, mean_sigma = expected[n]
        new = ~torch.isin(m.w_idx, old_idx)
        assert new.sum() > 0
        assert bool((m.w_mu[new] == 0).all())
        torch.testing.assert_close(m.w_sigma()[new].double(), torch.full((int(new.sum()),), mean_sigma,
                                   dtype=torch.float64), rtol=1e-5, atol=0)
    # a constant instead of the mean
    _grad_step(model, torch.randn(16, 20, generator=g), torch.randint(0, 5, (16,), generator=g))
    old = {n: m.w_idx.clone() for n, m in model.sparse_layers()}
    model.drop_and_grow(0.3, "mu_abs", grow_sigma=0.01)
    for n, m in model.sparse_layers():
        new = ~torch.isin(m.w_idx, old[n])
        torch.testing.assert_close(m.w_sigma()[new], torch.full((int(new.sum()),), 0.01), rtol=1e-4, atol=0)


def test_growth_picks_largest_dense_gradients():
    model = _ssvi_net(0.2)
    g = torch.Generator().manual_seed(5)
    _grad_step(model, torch.randn(32, 20, generator=g), torch.randint(0, 5, (32,), generator=g))
    _, m = model.sparse_layers()[0]
    grad = m.grad_leaf.grad.abs().reshape(-1).clone()
    k, n_drop = m.k, int(m.k * 0.3)
    keep = torch.sort(removal_scores("snr_abs", m.w_mu, m.w_sigma()), descending=True, stable=True).indices[:k - n_drop]
    kept = m.w_idx.long()[keep]
    grad[kept] = -1
    want = set(torch.topk(grad, n_drop).indices.tolist()) | set(kept.tolist())
    model.drop_and_grow(0.3, "snr_abs")
    assert set(m.w_idx.long().tolist()) == want


def test_inactive_weights_are_exactly_zero_in_forward_passes():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4)
    idx = torch.tensor([1, 7, 8, 20])
    layer = SparseBayesLayer(lin, idx, lin.weight.reshape(-1)[idx], torch.full((4,), -2.0), torch.full((4,), -2.0))
    w = torch.zeros(24)
    w[idx] = lin.weight.detach().reshape(-1)[idx]
    w = w.view(4, 6)
    x = torch.randn(5, 6)
    layer.mode = "mean"
    torch.testing.assert_close(layer(x), x @ w.T + lin.bias.detach())
    eps_w, eps_b = torch.randn(4), torch.randn(4)
    layer.mode, layer.eps = "sample", (eps_w, eps_b)
    ws = torch.zeros(24)
    ws[idx] = layer.w_mu.detach() + F.softplus(torch.tensor(-2.0)) * eps_w
    torch.testing.assert_close(layer(x), x @ ws.view(4, 6).T + lin.bias.detach() + F.softplus(torch.tensor(-2.0)) * eps_b)
    # LRT: inputs that only meet inactive weights (columns 3 and 5 hold none) change nothing
    layer.mode = "lrt"
    x2 = x.clone()
    x2[:, [3, 5]] += 100.0
    torch.manual_seed(1)
    a = layer(x)
    torch.manual_seed(1)
    b = layer(x2)
    torch.testing.assert_close(a, b)
    # the whole network after a drop-and-grow: weights outside the subspace are exactly zero
    model = _ssvi_net(0.2)
    _grad_step(model, torch.randn(8, 20), torch.randint(0, 5, (8,)))
    model.drop_and_grow(0.3, "e_abs")
    for _, m in model.layers():
        dense = m.dense(m.w_mu.detach()).reshape(-1)
        mask = torch.zeros(m.numel, dtype=torch.bool)
        mask[m.w_idx.long()] = True
        assert bool((dense[~mask] == 0).all()) and bool((m.dense(m.w_sigma().detach()).reshape(-1)[~mask] == 0).all())


def test_kl_over_active_entries_is_sum_of_closed_form_kls():
    model = _ssvi_net(0.2, prior_scale=0.5)
    want = torch.zeros((), dtype=torch.float64)
    prior = Normal(torch.zeros((), dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64))
    for _, m in model.layers():
        for mu, sig in ((m.w_mu, m.w_sigma()), (m.b_mu, m.b_sigma())):
            want = want + kl_divergence(Normal(mu.detach().double(), sig.detach().double()), prior).sum()
    torch.testing.assert_close(model.kl().double(), want, rtol=1e-5, atol=0)
    n_active = sum(m.k + m.b_mu.numel() for _, m in model.layers())
    assert n_active == model.num_stochastic < sum(m.numel for _, m in model.layers())


def test_update_fraction_cosine_schedule():
    assert update_fraction(0, 1000, 0.3) == pytest.approx(0.3)
    assert update_fraction(500, 1000, 0.3) == pytest.approx(0.15)
    assert update_fraction(250, 1000, 0.3) == pytest.approx(0.15 * (1 + math.cos(math.pi / 4)))
    assert update_fraction(1000, 1000, 0.3) == 0.0 and update_fraction(1500, 1000, 0.3) == 0.0


# -- the method ----------------------------------------------------------------------------------------
def _ctx(epochs=2, seed=0):
    task = classification(5)

    def build(dropout=0.0):
        return build_model("lenet_300_100", (1, 6, 6), 5, dropout=dropout)

    return MethodContext(task=task, build_model=build, train=TrainConfig(epochs=epochs, batch_size=32, lr=0.05,
                         momentum=0.9, schedule="cosine"), device=torch.device("cpu"), seed=seed, num_train=256)


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 1, 6, 6, generator=g), torch.randint(0, 5, (256,), generator=g)


@pytest.fixture(scope="module")
def fitted():
    x, y = _data()
    m = METHODS.get("ssvi")(_ctx(), density=0.2, delta=2)
    m.fit(TensorLoader(x, y, 32, seed=0), None)
    return m


def test_fit_schedule_history_and_constant_density(fitted):
    d = fitted.diagnostics()
    total, t_end = 16, 12  # 2 epochs x 8 steps; updates at t = 2, 4, ..., 10 (t < T_end)
    hist = d["history"]
    assert [h["step"] for h in hist] == [0, 2, 4, 6, 8, 10]
    for h in hist[1:]:
        assert h["fraction"] == pytest.approx(0.3 / 2 * (1 + math.cos(math.pi * h["step"] / t_end)))
        assert h["active"] == {n: v for n, v in hist[0]["active"].items()}
    assert d["active_per_layer"] == hist[0]["active"] and d["n_updates"] == 5
    assert fitted.meta["train"]["steps"] == total
    cost = fitted.extra_cost()
    assert cost["variational_state_bytes"] < cost["variational_state_bytes_dense_vi"]
    assert 0 < cost["train_flops_ratio_vs_dense_vi"] < 0.5


def test_state_dict_round_trip_gives_identical_predictions(fitted):
    x, _ = _data()
    p1 = fitted.predict(x[:50]).probs
    buf = io.BytesIO()
    torch.save(fitted.state_dict(), buf)
    buf.seek(0)
    other = METHODS.get("ssvi")(_ctx(), density=0.2, delta=2)
    other.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(other.predict(x[:50]).probs, p1, rtol=0, atol=0)
    # batch-size independent and repeatable
    torch.testing.assert_close(torch.cat([fitted.predict(x[:20]).probs, fitted.predict(x[20:50]).probs]), p1)
    assert all(torch.equal(a.w_idx, b.w_idx) for (_, a), (_, b) in zip(fitted.model.layers(), other.model.layers()))


@pytest.mark.parametrize("check, words", [(1, r"non-finite loss nan at epoch 0 step 5 \(ssvi\)"),
                                          (4, r"non-finite loss at epoch 0, in steps 4-7 \(ssvi\)")],
                         ids=["cpu-every-step", "accelerator-every-4-steps"])
def test_a_diverging_fit_fails_at_the_check_after_its_first_non_finite_loss(check, words, monkeypatch):
    """A non-finite input in batch 5 makes the loss NaN there: on the CPU the fit fails at that step;
    with the accelerator's schedule (the loss read every few steps, not at each) at the next check,
    naming the steps between, as bench.training.train_model."""
    from bench import training
    from bench.errors import DivergedError

    monkeypatch.setattr(training, "divergence_check_steps", lambda device: check)
    x, y = _data()
    x[5 * 32 + 3] = float("nan")
    m = METHODS.get("ssvi")(_ctx(epochs=1), density=0.2, delta=1000)
    with pytest.raises(DivergedError, match=words):
        m.fit(TensorLoader(x, y, 32, shuffle=False), None)


def test_bad_options_are_rejected():
    for bad in ({"criterion": "x"}, {"grow": "x"}, {"grow_sigma": "x"}, {"delta": 0}, {"nope": 1}):
        with pytest.raises(BenchError):
            METHODS.get("ssvi")(_ctx(), **bad)


def test_snr_abs_ranks_like_snr():
    """SNR(|theta|) (eq. 7) depends on mu and sigma only through r = |mu|/sigma and increases with
    it, so criteria 2 and 4 remove the same entries (docs/ssvi.md, criteria ablation)."""
    r = torch.linspace(1e-3, 60, 200_001, dtype=torch.float64)
    s = folded_normal_snr(r, torch.ones_like(r))
    assert bool((s[1:] > s[:-1]).all())
    torch.testing.assert_close(folded_normal_snr(3 * r[:100], 3 * torch.ones(100)), s[:100])


def test_paper_profile_uses_the_official_options():
    from bench.suites import SUITES
    from methods.ssvi import PAPER_OPTIONS

    assert SUITES.get("mnist_rotated").profiles["paper"]["methods"]["ssvi"] == PAPER_OPTIONS
