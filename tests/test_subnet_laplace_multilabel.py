"""Subnetwork Laplace on multi-label networks (methods/subnet_laplace.py with the Bernoulli GGN of
bench/laplace/subnet_jacobians.py and the sigmoid predictive of bench/laplace/multilabel.py),
against computations made here independently of laplace-torch and of the method's code:

* the GGN the posterior holds is sum_n J_n^T diag(p_n (1 - p_n)) J_n with J_n by torch.func.jacrev,
  and the Hessian (torch.autograd.functional.hessian) of the summed binary cross-entropy of the
  network linearised at the MAP (by torch.func.jvp) in the subnet weights;
* the probit predictive is sigmoid(f / sqrt(1 + pi/8 var)), var = diag(J Sigma J^T), Sigma =
  (H + tau I)^-1 by hand; link_approx=mc (moments or Jacobian-vector products) averages sigmoids of
  logits of N(f, var) close to E[sigmoid] by Gauss-Hermite quadrature;
* the prior search's validation loss is the binary cross-entropy summed over labels of those
  probabilities (scikit-learn's log_loss x L);
* laplace_diag / laplace_last_layer are refused at plan time with their reason, subnet_laplace's
  softmax-only options are refused, and a small bench.evaluate run gives ok records.

Tiny: a 4 -> 5 -> 3 MLP on 40 examples; every test runs in seconds."""
from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.data import TensorLoader
from bench.errors import BenchError
from bench.tasks import multilabel
from bench.training import TrainConfig
from methods.base import MethodContext

warnings.filterwarnings("ignore")

pytest.importorskip("laplace")

from methods.subnet_laplace import SubnetLaplace  # noqa: E402

D_IN, HIDDEN, L, N = 4, 5, 3, 40
S_SUB = 14  # subnet weights (of 43)


def make_data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, D_IN, generator=g)
    logits = x @ torch.tensor([[1.5, -1.0, 0.5], [0.0, 2.0, -1.0], [-1.0, 0.5, 1.0], [0.5, 0.0, -2.0]])
    y = (torch.rand(n, L, generator=g) < torch.sigmoid(logits)).float()
    return x, y


def map_net() -> nn.Module:
    """The 4 -> 5 -> 3 MLP after a short, seeded BCE fit (a MAP-like network, not at p = 0.5)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, L))
    x, y = make_data(N, 0)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        F.binary_cross_entropy_with_logits(net(x), y, reduction="sum").div(N).backward()
        opt.step()
    return net.eval()


_MAP = map_net()


class StubCache:
    def get(self, seed):
        return copy.deepcopy(_MAP).eval()

    def upstream_time(self, seeds):
        return 0.0


def ctx() -> MethodContext:
    return MethodContext(task=multilabel(L), build_model=lambda dropout=0.0: copy.deepcopy(_MAP),
                         train=TrainConfig(epochs=1), device=torch.device("cpu"), seed=0, map_cache=StubCache(),
                         num_train=N)


def fitted(**cfg) -> SubnetLaplace:
    cfg = {"criterion": "random", "n_subnet": S_SUB, "prior_precision_method": "none", "prior_precision": 0.3, **cfg}
    x, y = make_data(N, 0)
    return SubnetLaplace(ctx(), **cfg).fit(TensorLoader(x, y, 16, shuffle=False), make_data(24, 1))


# -- independent computations (float64, torch.func / autograd on the network itself) ------------
def subnet_function(idx: torch.Tensor):
    """``(f, w0)``: ``f(w, x)`` the network's logits with its subnet weights ``idx`` (of
    parameters_to_vector order) set to ``w``, the others at the MAP; ``w0`` the MAP subnet weights."""
    net = copy.deepcopy(_MAP).double()
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for _, p in net.named_parameters()]
    theta0 = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
    E = torch.zeros(theta0.numel(), idx.numel(), dtype=torch.float64)
    E[idx, torch.arange(idx.numel())] = 1.0  # theta = theta0 + E (w - w0)
    w0 = theta0[idx].clone()

    def f(w, x):
        theta = theta0 + E @ (w - w0)
        params, i = {}, 0
        for name, shape in zip(names, shapes):
            k = int(np.prod(shape))
            params[name] = theta[i:i + k].view(shape)
            i += k
        return torch.func.functional_call(net, params, (x.double(),))

    return f, w0


def brute_force_ggn(idx, x):
    f, w0 = subnet_function(idx)
    J = torch.func.jacrev(lambda w: f(w, x))(w0)  # (N, L, s), one row block per example
    p = torch.sigmoid(f(w0, x))
    H = sum(J[n].T @ torch.diag(p[n] * (1 - p[n])) @ J[n] for n in range(len(x)))
    return H, J


def linearised_bce_hessian(idx, x, y):
    """Hessian in the subnet weights, at the MAP, of sum_n BCE(f(x_n; w0) + J_n (w - w0), y_n): the
    linearisation by a Jacobian-vector product, the Hessian by double backward."""
    f, w0 = subnet_function(idx)
    f0 = f(w0, x).detach()

    def loss(w):
        _, jd = torch.func.jvp(lambda w_: f(w_, x), (w0,), (w - w0,))
        return F.binary_cross_entropy_with_logits(f0 + jd, y.double(), reduction="sum")

    return torch.autograd.functional.hessian(loss, w0)


def hand_moments(method, xt, tau):
    """``(f, var)`` at ``xt``: MAP logits and diag(J Sigma J^T), Sigma = (H + tau I)^-1, every
    piece computed here."""
    idx = method.indices
    x, _ = make_data(N, 0)
    H, _ = brute_force_ggn(idx, x)
    Sigma = torch.linalg.inv(H + tau * torch.eye(idx.numel(), dtype=torch.float64))
    f, w0 = subnet_function(idx)
    Jt = torch.func.jacrev(lambda w: f(w, xt))(w0)
    var = torch.einsum("nls,st,nlt->nl", Jt, Sigma, Jt)
    return f(w0, xt).detach(), var


def probit(f, var):
    return torch.sigmoid(f / torch.sqrt(1 + math.pi / 8 * var))


def gauss_hermite_sigmoid(f, var, n=80):
    """E[sigmoid(z)], z ~ N(f, var), by Gauss-Hermite quadrature (probabilists' weights)."""
    t, w = np.polynomial.hermite_e.hermegauss(n)
    z = f.numpy()[..., None] + np.sqrt(var.numpy())[..., None] * t
    return torch.as_tensor((1 / (1 + np.exp(-z)) * w).sum(-1) / w.sum())


# -- 1. the GGN ---------------------------------------------------------------------------------
def test_the_posterior_holds_the_bernoulli_ggn_of_the_subnet():
    m = fitted()
    idx = m.indices
    assert m.meta["backend"] == "subnet" and "Bernoulli" in m.meta["backend_reason"]
    assert type(m.la.backend).__name__ == "BernoulliSubnetJacobianGGN"
    x, y = make_data(N, 0)
    H, _ = brute_force_ggn(idx, x)
    H_lin = linearised_bce_hessian(idx, x, y)
    torch.testing.assert_close(H_lin, H, rtol=1e-10, atol=1e-12)  # the two independent references agree
    assert la_H(m).shape == (S_SUB, S_SUB)
    torch.testing.assert_close(la_H(m), H, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(la_H(m), H_lin, rtol=1e-4, atol=1e-6)
    # the loss it reports (its log likelihood -loss): the summed BCE at the MAP
    with torch.no_grad():
        bce = F.binary_cross_entropy_with_logits(_MAP(x), y, reduction="sum")
    assert float(m.la.loss) == pytest.approx(float(bce), rel=1e-5)
    assert float(m.la.log_likelihood) == pytest.approx(-float(bce), rel=1e-5)


def la_H(m):
    return m.la.H.detach().double()


# -- 2. the predictive ----------------------------------------------------------------------------
def test_probit_predictive_is_the_sigmoid_of_the_scaled_logits_by_hand():
    tau = 0.3
    m = fitted(prior_precision=tau)
    xt = make_data(10, 2)[0] * 2
    with torch.no_grad():
        pred = m.predict(xt)
    assert type(pred).__name__ == "MultilabelPredictive" and pred.probs.shape == (10, L) and pred.sample_probs is None
    f, var = hand_moments(m, xt, tau)
    want = probit(f, var)
    torch.testing.assert_close(pred.probs.double(), want, rtol=1e-4, atol=1e-5)
    assert (want - torch.sigmoid(f)).abs().max() > 1e-2  # the posterior moves the prediction off MAP's
    # batching-independent, and a saved posterior predicts the same without refitting
    with torch.no_grad():
        torch.testing.assert_close(m.predict(xt[:3]).probs, pred.probs[:3], rtol=1e-6, atol=1e-6)
    fresh = SubnetLaplace(ctx(), criterion="random", n_subnet=S_SUB, prior_precision_method="none",
                          prior_precision=tau)
    fresh.load_state_dict(copy.deepcopy(m.state_dict()))
    assert type(fresh.la.backend).__name__ == "BernoulliSubnetJacobianGGN"
    with torch.no_grad():
        torch.testing.assert_close(fresh.predict(xt).probs, pred.probs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sampler,n_samples,tol", [("moments", 20000, 0.015), ("jvp", 2000, 0.03)])
def test_monte_carlo_predictive_averages_sigmoids_of_the_linearised_logits(sampler, n_samples, tol):
    tau = 0.3
    m = fitted(prior_precision=tau, link_approx="mc", glm_sampler=sampler, n_samples=n_samples)
    xt = make_data(10, 2)[0] * 2
    with torch.no_grad():
        pred = m.predict(xt)
    assert pred.sample_probs.shape == (n_samples, 10, L)
    torch.testing.assert_close(pred.probs, pred.sample_probs.mean(0))
    f, var = hand_moments(m, xt, tau)
    exact = gauss_hermite_sigmoid(f, var)
    assert (pred.probs.double() - exact).abs().max() < tol
    assert (exact - torch.sigmoid(f)).abs().max() > 3 * tol  # far enough from MAP for the check to bite


def test_sampled_networks_give_a_multilabel_predictive():
    m = fitted(pred_type="nn", n_samples=7)
    with torch.no_grad():
        pred = m.predict(make_data(5, 2)[0])
    assert pred.sample_probs.shape == (7, 5, L) and pred.probs.shape == (5, L)
    assert bool(((pred.probs > 0) & (pred.probs < 1)).all())
    assert not torch.allclose(pred.probs.sum(-1), torch.ones(5))  # sigmoids, not a softmax


# -- 3. the prior search ----------------------------------------------------------------------------
@pytest.mark.parametrize("cached_jacobians", [True, False])
def test_grid_search_loss_is_the_summed_bce_of_the_probit_predictive(cached_jacobians, monkeypatch):
    from sklearn.metrics import log_loss

    if not cached_jacobians:  # the generic path: predict() per grid point
        monkeypatch.setattr(SubnetLaplace, "JACOBIAN_CACHE_BYTES", 0)
    m = fitted(prior_precision_method="gridsearch", grid_min=-2.0, grid_max=2.0, grid_size=5,
               grid_max_extensions=0)
    search = m.meta["prior_search"]
    vx, vy = make_data(24, 1)
    for lg, got in zip(search["log10_grid"], search["val_nll"]):
        f, var = hand_moments(m, vx, 10.0 ** lg)
        p = probit(f, var).numpy()
        want = L * log_loss(vy.numpy().ravel(), p.ravel(), labels=[0, 1])
        assert got == pytest.approx(want, rel=1e-5)
    best = int(np.argmin(search["val_nll"]))
    assert m.meta["prior_precision"][0] == pytest.approx(10.0 ** search["log10_grid"][best])


# -- 4. refusals --------------------------------------------------------------------------------------
def _plan(methods, options=None):
    from bench.api import build_suite

    net = lambda: nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, L))  # noqa: E731
    return build_suite(net, make_data(N, 0), make_data(24, 1), make_data(24, 2), task="multilabel",
                       methods=methods, method_options=options or {})[1]


def test_laplace_diag_and_last_layer_are_refused_at_plan_time_with_their_reason():
    from methods import METHODS

    plan = _plan(["subnet_laplace", "laplace_diag", "laplace_last_layer"])
    assert list(plan.methods) == ["subnet_laplace"]
    for name in ("laplace_diag", "laplace_last_layer"):
        why = METHODS.get(name).UNSUPPORTED["multilabel"]
        assert "BackPACK / ASDL" in why and "softmax GGN" in why
        assert "does not support multilabel tasks" in plan.skipped[name] and why in plan.skipped[name]
    with pytest.raises(BenchError, match="softmax GGN"):
        _plan(["laplace_diag"])
    assert "multilabel" in METHODS.get("subnet_laplace").tasks


@pytest.mark.parametrize("options,words", [({"criterion": "wasserstein_diag_laplace"}, "softmax-likelihood diagonal"),
                                           ({"criterion": "largest_variance_diag_laplace"}, "softmax-likelihood"),
                                           ({"backend": "backpack"}, "only the softmax GGN"),
                                           ({"backend": "sampled"}, "only the softmax GGN")])
def test_subnet_laplace_refuses_its_softmax_only_options_on_multilabel(options, words):
    with pytest.raises(BenchError, match=words):
        _plan(["subnet_laplace"], {"subnet_laplace": options})
    with pytest.raises(BenchError, match=words):
        SubnetLaplace(ctx(), **options)


def test_a_subnet_outside_linear_and_conv2d_layers_is_a_clear_error():
    def bn():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, L)).eval()

    c = MethodContext(task=multilabel(L), build_model=lambda dropout=0.0: bn(), train=TrainConfig(epochs=1),
                      device=torch.device("cpu"), seed=0, map_cache=None, num_train=N)
    m = SubnetLaplace(c, n_subnet=3)
    m.indices = torch.tensor([25, 26, 27])  # BatchNorm1d weight entries (after 20 + 5 of the Linear)
    with pytest.raises(BenchError, match=r"Bernoulli \(sigmoid\) GGN.*BatchNorm1d.*softmax GGN"):
        m.choose_backend(bn(), make_data(2, 0)[0])
    m.indices = torch.tensor([0, 1, 36])  # Linear weights only: the Bernoulli backend
    assert m.choose_backend(bn(), make_data(2, 0)[0])[0] == "subnet"


# -- 5. end to end --------------------------------------------------------------------------------------
def test_subnet_laplace_runs_end_to_end_on_a_multilabel_problem(tmp_path):
    """bench.evaluate on the 8x8 images with three labels and the network of
    tests/test_multilabel_api.py, the default criterion (SWAG on the task's BCE) with a few
    snapshots: every record ok, finite metrics."""
    from test_multilabel_api import bars, net

    import bench

    ev = bench.evaluate(model=net, train=bars(96, 0), val=bars(48, 1), test=bars(64, 2), task="multilabel",
                        methods=["subnet_laplace", "laplace_diag"], out=tmp_path / "out", report=False, quiet=True,
                        device="cpu", train_config={"epochs": 3, "batch_size": 32, "lr": 0.05},
                        method_options={"subnet_laplace": {"n_subnet": 30, "swag_n_snapshots": 4, "grid_size": 5}})
    assert ev.exit_code == 0 and not ev.summary.failed
    df = ev.metrics
    assert sorted(df["method"].unique()) == ["subnet_laplace"] and (df["status"] == "ok").all()
    for key in ("nll", "brier", "auroc_mean"):
        assert np.isfinite(df[f"metrics.{key}"].astype(float)).all(), key
    import json

    rec = next(json.loads(p.read_text()) for p in ev.records if "id-" in p.name)
    assert rec["task"] == "multilabel" and rec["diagnostics"]["backend"] == "subnet"
    assert rec["diagnostics"]["criterion"]["name"] == "wasserstein"


@pytest.mark.parametrize("pairs_factor", [64, 0])  # the batched (rows x columns) product; pairwise
def test_subnet_jacobians_of_pixel_rows_pooled_into_per_image_outputs(pairs_factor, monkeypatch):
    """unet_presence's classifier is an nn.Linear over pixel rows, ``(B H W, C)``, whose outputs are pooled
    into per-image presence logits ``(B, K)``: its Jacobian columns sum over an image's pixel rows. Against
    torch.func.jacrev on a tiny PresenceUNet, the subnet spread over a convolution, the pixel-row Linear's
    weights and its bias. (Before, the rows' count was taken for the batch: a shape error, the
    camvid_multilabel seed-0 fit of 2026-11-29.)"""
    from torch.func import functional_call, jacrev

    import bench.laplace.subnet_jacobians as sj
    from bench.laplace.subnet_jacobians import subnet_jacobian_backend
    from bench.models import PresenceUNet

    monkeypatch.setattr(sj, "DENSE_PAIRS_FACTOR", pairs_factor)
    torch.manual_seed(0)
    net = PresenceUNet((3, 8, 12), 3).double().eval()
    params = dict(net.named_parameters())
    offsets, o = {}, 0
    for n, p in params.items():
        offsets[n] = o
        o += p.numel()
    head = [n for n in params if n.startswith("seg.2.")]  # the pixel-row nn.Linear
    conv = next(n for n in params if n.endswith("weight") and params[n].dim() == 4)
    idx = torch.cat([offsets[conv] + torch.arange(0, 40, 7)] +
                    [offsets[n] + torch.arange(params[n].numel())[::2] for n in head]).sort().values
    x = torch.randn(4, 3, 8, 12, dtype=torch.float64)
    backend = subnet_jacobian_backend()
    J, f = backend(net, "classification", subnetwork_indices=idx).jacobians(x)  # the Jacobians: no likelihood
    full = jacrev(lambda ps: functional_call(net, ps, (x,)))(params)
    full = torch.cat([full[n].reshape(4, 3, -1) for n in params], dim=-1)[:, :, idx]
    assert J.shape == (4, 3, idx.numel())
    torch.testing.assert_close(f.detach(), net(x).detach())
    torch.testing.assert_close(J.double(), full, rtol=1e-6, atol=1e-9)
