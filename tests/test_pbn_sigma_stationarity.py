"""benchmarks/pbn_sigma_stationarity.py: the gradient of the negative ELBO per observation with
respect to log sigma, checked against its closed form for a linear softmax model, whose Hessian
diagonal is computed here by hand: for small sigma,

    d/d log sigma_i = sigma_i^2 h_i + beta / N (sigma_i^2 / p^2 - 1),
    h_i = mean_n x_nj^2 p_nk (1 - p_nk)  (weight i = W_kj),

so the scan's zero crossing is where the likelihood's curvature and the KL balance."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from bench.subnet.partial_vi import PartialVI
from bench.subnet.ssvi import softplus_inv
from bench.tasks import classification

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("pbn_sigma_stationarity", ROOT / "benchmarks" / "pbn_sigma_stationarity.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


def test_scan_matches_the_closed_form_of_a_linear_softmax_model():
    torch.manual_seed(0)
    n, d, k = 400, 3, 4
    x = torch.randn(n, d)
    net = nn.Sequential(nn.Linear(d, k, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.randn(k, d))
    y = torch.distributions.Categorical(logits=net(x)).sample()
    beta, prior = 0.2, 1.0
    vi = PartialVI(net, torch.arange(k * d), prior_scale=prior, rho_init_mean=float(softplus_inv(torch.tensor(0.01))),
                   rho_init_std=0.0)
    method = SimpleNamespace(vi=vi, config={"beta_end": beta, "prior_scale": prior},
                             ctx=SimpleNamespace(task=classification(k)))
    data = SimpleNamespace(train_x=x, train_y=y)
    levels = [0.02, 0.05, 0.15]
    rows = mod.scan(method, data, n, levels, batches=8, batch_size=n // 8, samples=256, seed=0)

    p = torch.softmax(net(x), 1).detach()  # (n, k)
    h = ((p * (1 - p)).T @ x.square() / n).reshape(-1)  # W_kj in row-major order, as the flat indices
    for level, row in zip(levels, rows):
        expected = float((level ** 2 * h + beta / n * (level ** 2 / prior ** 2 - 1)).mean())
        assert abs(row["mean_grad_log_sigma"] - expected) <= 0.1 * abs(expected) + 3 * row["se"], (level, row, expected)
    # the KL alone pulls up (negative), the likelihood down: the sign changes between the levels
    assert rows[0]["mean_grad_log_sigma"] < 0 < rows[-1]["mean_grad_log_sigma"]
