"""The Laplace machinery of bench/laplace and the subnetwork-Laplace paper's criterion as its
authors ran it: diagonal SWAG against laplace-torch's independent implementation, the exclusion
of weights the data cannot identify, the prior-precision grid search against a brute-force
argmin, the diagonal linearised predictive against laplace-torch's, and a tuned subnetwork
Laplace that must differ from the MAP network. Tiny networks: seconds."""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from bench.data import TensorLoader
from bench.laplace.prior import grid_search_prior_precision
from bench.laplace.swag import fit_diagonal_swag
from bench.subnet.identifiability import non_identifiable
from bench.subnet.selection import candidate_indices, make_criterion, param_layout

warnings.filterwarnings("ignore")
pytest.importorskip("laplace")

from bench.laplace.diag_glm import diag_glm_moments  # noqa: E402
from bench.laplace.predictive import nll as _nll, probit_probs  # noqa: E402
from methods._laplace_base import LaplaceMethod  # noqa: E402
from methods.laplace_diag import LaplaceDiag  # noqa: E402
from methods.subnet_laplace import SubnetLaplace  # noqa: E402
from tests.test_subnet_laplace import D_IN, N_CLASSES, ctx_for, data  # noqa: E402


def constant_input_net(seed: int = 0) -> nn.Module:
    """Linear-BN-ReLU-Linear; fed inputs whose feature 0 is constant (see constant_input_data)."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(D_IN, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, N_CLASSES))
    net.train()
    with torch.no_grad():
        net(constant_input_data(256, 5)[0])
    return net.eval()


def constant_input_data(n: int = 96, seed: int = 0):
    x, y = data(n, seed)
    x[:, 0] = -0.42  # a never-inked pixel after normalisation
    return x, y


# -- diagonal SWAG -----------------------------------------------------------------------------
def test_swag_variances_equal_laplace_torch_fit_diagonal_swag_var_on_the_same_batches():
    from laplace.utils.swag import fit_diagonal_swag_var

    net = nn.Sequential(nn.Linear(D_IN, 6), nn.Tanh(), nn.Linear(6, N_CLASSES))
    x, y = data(64)
    dl = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
    torch.manual_seed(0)
    ref = fit_diagonal_swag_var(net, dl, nn.CrossEntropyLoss(), n_snapshots_total=7, lr=0.05)
    var, info = fit_diagonal_swag(net, x, y, F.cross_entropy, n_snapshots=7, lr=0.05, batches=lambda epoch: dl)
    assert info["n_snapshots"] == 7 and info["steps"] == 7 * 4
    torch.testing.assert_close(var, ref, rtol=1e-4, atol=1e-12)
    assert float(var.max()) > 1e-6  # SGD moved the weights: a real spread, not the clamp


def test_swag_snapshot_every_steps_counts_snapshots_and_steps():
    net = nn.Sequential(nn.Linear(D_IN, 6), nn.Tanh(), nn.Linear(6, N_CLASSES))
    x, y = data(64)
    _, info = fit_diagonal_swag(net, x, y, F.cross_entropy, n_snapshots=5, snapshot_every=3, batch_size=16)
    assert info["n_snapshots"] == 5 and info["steps"] == 15 and info["snapshot_unit"] == "steps"


class _Stop(Exception):
    pass


def _stopping_loss(at_step: int | None):
    """Cross-entropy that raises _Stop at its ``at_step``-th call (a run stopped part way)."""
    calls = [0]

    def loss(out, y):
        calls[0] += 1
        if at_step is not None and calls[0] == at_step:
            raise _Stop()
        return F.cross_entropy(out, y)

    return loss


def _dropout_net():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(D_IN, 6), nn.Tanh(), nn.Dropout(0.3), nn.Linear(6, N_CLASSES))


@pytest.mark.parametrize("every", [None, 3], ids=["one-per-epoch", "every-3-steps"])
def test_swag_stopped_part_way_resumes_to_the_uninterrupted_variances(every, tmp_path, monkeypatch):
    """A SWAG run stopped in its 6th epoch (4 steps an epoch; checkpoints after every epoch) and
    called again goes on from its last checkpoint: the variances equal those of the run never
    stopped, bit for bit (dropout in the network: torch's random state is restored too), the
    earlier seconds count, and the checkpoint is gone once the run ends."""
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")
    net, (x, y) = _dropout_net(), data(64)
    kw = dict(n_snapshots=9, snapshot_every=every, lr=0.05, batch_size=16, seed=4)
    torch.manual_seed(7)
    ref, ref_info = fit_diagonal_swag(net, x, y, _stopping_loss(None), **kw)
    path = tmp_path / "swag.partial"
    torch.manual_seed(7)
    with pytest.raises(_Stop):
        fit_diagonal_swag(net, x, y, _stopping_loss(22), resume_path=path, **kw)
    saved = torch.load(path, weights_only=False)
    assert saved["epoch"] == 5 and saved["step"] == 20 and saved["train_seconds"] > 0 and "model" in saved
    torch.manual_seed(7)  # as the criterion seeds each call: the checkpoint's random state must take over
    var, info = fit_diagonal_swag(net, x, y, _stopping_loss(None), resume_path=path, **kw)
    assert torch.equal(var, ref) and float(var.max()) > 1e-6
    assert (info["steps"], info["n_snapshots"]) == (ref_info["steps"], ref_info["n_snapshots"])
    assert info["resumed_s"] == saved["train_seconds"] and info["fit_time_s"] > info["resumed_s"]
    assert not path.exists()


def test_a_swag_checkpoint_of_other_settings_is_set_aside_and_the_run_starts_over(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")
    net, (x, y) = _dropout_net(), data(64)
    kw = dict(n_snapshots=6, batch_size=16, seed=4)
    path = tmp_path / "swag.partial"
    torch.manual_seed(7)
    with pytest.raises(_Stop):
        fit_diagonal_swag(net, x, y, _stopping_loss(10), resume_path=path, lr=0.05, **kw)
    torch.manual_seed(7)
    ref, _ = fit_diagonal_swag(net, x, y, _stopping_loss(None), lr=0.04, **kw)
    torch.manual_seed(7)
    var, info = fit_diagonal_swag(net, x, y, _stopping_loss(None), resume_path=path, lr=0.04, **kw)
    assert torch.equal(var, ref) and info["resumed_s"] == 0.0
    assert (tmp_path / "swag.partial.bad").is_file() and not path.exists()


@pytest.mark.cuda
def test_swag_on_cuda_gives_the_cpu_variances_without_a_host_copy_per_step():
    """On a GPU the SWAG run gathers its batches there (the training set copied once): the CPU
    run's variances within float tolerance, and a handful of synchronisations, not one a step."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA: runs on a lent GPU machine (python -m bench.device_session, docs/device.md)")
    net, (x, y) = _dropout_net().eval(), data(640)
    net[2].p = 0.0  # no dropout: the two devices' random streams differ
    kw = dict(n_snapshots=6, lr=0.05, batch_size=16, seed=4)
    ref, _ = fit_diagonal_swag(net, x, y, F.cross_entropy, **kw)
    fit_diagonal_swag(net, x, y, F.cross_entropy, device="cuda", **{**kw, "n_snapshots": 2})  # warm-up
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            var, info = fit_diagonal_swag(net, x, y, F.cross_entropy, device="cuda", **kw)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "called a synchronizing" in str(w.message)]
    # the network's and the data's copies to the device and the variances' back: a dozen at most, not one a step
    assert info["steps"] == 6 * 40 and len(syncs) <= 12, syncs
    # E[w^2] - E[w]^2 cancels: judged against the largest variance, not entry by entry
    torch.testing.assert_close(var, ref, rtol=1e-2, atol=1e-3 * float(ref.max()))


@pytest.mark.parametrize("method", ["subnet_laplace", "pbn"])
def test_the_subnetwork_methods_run_swag_resumable_in_their_fit_work_folder(method, tmp_path, monkeypatch):
    """subnet_laplace and PBN with the Wasserstein (SWAG) criterion hand the SWAG run a resume path
    in the fit's work folder, where a stopped fit's partial files are found (the device session
    sends them back); without a work folder, none."""
    import bench.laplace.swag as swag
    from methods.pbn import PBN
    from tests.test_subnet_laplace import ctx_for as method_ctx, loader, plain_net

    seen = []

    def stop(*args, resume_path=None, **kw):
        seen.append(resume_path)
        raise _Stop()

    monkeypatch.setattr(swag, "fit_diagonal_swag", stop)
    for work in (tmp_path, None):
        ctx = method_ctx(plain_net)
        ctx.work_dir = work
        m = (SubnetLaplace(ctx, criterion="wasserstein", n_subnet=5) if method == "subnet_laplace"
             else PBN(ctx, criterion="wasserstein", n_bayes=5))
        with pytest.raises(_Stop):
            m.fit(loader(), data(16, 1))
    assert seen == [tmp_path / "swag.partial", None]


@pytest.mark.parametrize("method", ["subnet_laplace", "pbn"])
def test_the_selection_time_counts_a_resumed_swag_runs_earlier_seconds_once(method, monkeypatch):
    """select_time_s is the whole selection's: a SWAG run that resumed one said to have run 1000 s
    before adds them; the same variances from this process's cache (a second fit) do not."""
    import bench.laplace.swag as swag
    from bench.subnet import selection
    from methods.pbn import PBN
    from tests.test_subnet_laplace import ctx_for as method_ctx, loader, plain_net

    real = swag.fit_diagonal_swag

    def resumed(*args, **kw):
        var, info = real(*args, **kw)
        return var, {**info, "resumed_s": 1000.0}

    monkeypatch.setattr(swag, "fit_diagonal_swag", resumed)
    monkeypatch.setattr(selection, "_SWAG_CACHE", {})
    times = []
    for _ in range(2):
        ctx = method_ctx(plain_net)
        m = (SubnetLaplace(ctx, criterion="wasserstein", n_subnet=5, swag_n_snapshots=4) if method == "subnet_laplace"
             else PBN(ctx, criterion="wasserstein", n_bayes=5))
        if method == "pbn":  # its selection alone (build_posterior's metadata)
            times.append(m.build_posterior(loader())[2]["select_time_s"])
        else:
            m.fit(loader(), data(16, 1))
            times.append(m.meta["select_time_s"])
    assert times[0] >= 1000.0 and times[1] < 1000.0


def test_wasserstein_criterion_ranks_by_swag_variance_of_an_independent_computation():
    from laplace.utils.swag import fit_diagonal_swag_var

    net = nn.Sequential(nn.Linear(D_IN, 6), nn.Tanh(), nn.Linear(6, N_CLASSES)).eval()
    x, y = data(64)
    k = 11
    crit = make_criterion("wasserstein", k, n_snapshots=6, lr=0.05, batch_size=16, seed=3)
    idx = crit.select(net, TensorLoader(x, y, 16, shuffle=False), loss_fn=F.cross_entropy)
    # the same SGD trajectory through laplace-torch: the criterion's seeded shuffling, replayed
    gen = torch.Generator().manual_seed(3)
    perms = [torch.randperm(64, generator=gen) for _ in range(6)]
    batches = [[(x[p[i:i + 16]], y[p[i:i + 16]]) for i in range(0, 64, 16)] for p in perms]

    class Replay:
        epoch = 0

        def __iter__(self):
            b = batches[Replay.epoch]
            Replay.epoch += 1
            return iter(b)

    torch.manual_seed(3)
    ref = fit_diagonal_swag_var(copy.deepcopy(net), Replay(), nn.CrossEntropyLoss(), n_snapshots_total=6, lr=0.05)
    cand = candidate_indices(net)
    expected = cand[torch.topk(ref[cand], k).indices].sort().values
    assert idx.tolist() == expected.tolist()
    assert crit.info["estimator"] == "swag" and crit.info["n_non_identifiable"] == 0


# -- weights the data cannot identify ----------------------------------------------------------
def test_constant_input_weights_and_pre_bn_biases_are_non_identifiable():
    net = constant_input_net()
    x, y = constant_input_data()
    cand = candidate_indices(net)
    bad, info = non_identifiable(net, [(x[i:i + 32], y[i:i + 32]) for i in range(0, 96, 32)], F.cross_entropy, cand)
    lay = {s.name: s for s in param_layout(net)}
    w, b = lay["0.weight"], lay["0.bias"]
    expected = {w.offset + o * D_IN for o in range(8)} | set(range(b.offset, b.end))
    assert set(bad.nonzero().flatten().tolist()) == expected
    assert info["n_non_identifiable"] == 16


@pytest.mark.parametrize("name", ["wasserstein_diag_laplace", "wasserstein"])
def test_variance_criteria_skip_non_identifiable_weights_that_they_would_otherwise_pick(name):
    net = constant_input_net()
    x, y = constant_input_data()
    lay = {s.name: s for s in param_layout(net)}
    w, b = lay["0.weight"], lay["0.bias"]
    dead = {w.offset + o * D_IN for o in range(8)} | set(range(b.offset, b.end))
    opts = {"n_snapshots": 20, "lr": 0.1} if name == "wasserstein" else {}
    k = 16
    tl = TensorLoader(x, y, 32, shuffle=False)
    unguarded = make_criterion(name, k, exclude_non_identifiable=False, batch_size=32, **opts).select(net, tl)
    guarded = make_criterion(name, k, batch_size=32, **opts)
    idx = guarded.select(net, tl)
    if name == "wasserstein_diag_laplace":
        # eval-mode curvature of the BN-cancelled weights is small, so 1 / (h + tau) ranks them first
        assert len(set(unguarded.tolist()) & dead) >= 8
    assert not set(idx.tolist()) & dead
    assert guarded.info["n_non_identifiable"] == 16
    assert guarded.info["n_non_identifiable_in_top"] == len(set(unguarded.tolist()) & dead)


# -- prior precision -----------------------------------------------------------------------------
def test_grid_search_returns_the_argmin_and_extends_past_an_edge():
    calls = []

    def f(tau):
        calls.append(tau)
        return (math.log10(tau) - 5.3) ** 2  # minimum beyond the default grid's upper edge 1e4

    r = grid_search_prior_precision(f, log_min=-4, log_max=4, size=21)
    grid = r["log10_grid"]
    assert r["n_extensions"] == 1 and r["at_grid_edge"] is None
    assert r["log10_prior_precision"] == min(grid, key=lambda g: (g - 5.3) ** 2)
    assert r["val_nll"] == pytest.approx([(g - 5.3) ** 2 for g in grid])
    assert len(calls) == len(grid) == 21 + 10  # one extension of 4 decades at the grid's 0.4-decade spacing
    assert r["log10_prior_precision"] == pytest.approx(5.2)


def test_grid_search_flags_an_edge_and_a_plateau_towards_the_map_limit():
    r = grid_search_prior_precision(lambda tau: -math.log10(tau), max_extensions=1)
    assert r["at_grid_edge"] == "upper" and r["n_extensions"] == 1 and r["log10_grid"][-1] == pytest.approx(8)
    plateau = grid_search_prior_precision(lambda tau: 1.0 + 1.0 / (1.0 + tau ** 2))  # flat once tau >> 1
    assert plateau["at_grid_edge"] == "upper"
    assert grid_search_prior_precision(lambda tau: math.log10(tau) ** 2 + 0.5)["at_grid_edge"] is None


def overconfident_net(seed: int = 0) -> nn.Module:
    """A small MLP whose logits are scaled up 20x: confidently wrong on noisy labels."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(D_IN, 16), nn.Tanh(), nn.Linear(16, N_CLASSES))
    x, y = data(96, 7)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    with torch.no_grad():
        net[2].weight.mul_(20.0)
        net[2].bias.mul_(20.0)
    return net.eval()


def test_tuned_subnet_laplace_is_the_brute_force_argmin_and_beats_an_overconfident_map():
    ctx = ctx_for(overconfident_net)
    val = data(60, 11)  # labels unrelated to the training labels: the MAP network is confidently wrong
    m = SubnetLaplace(ctx, criterion="random", n_subnet=40, grid_size=9, backend="subnet").fit(
        TensorLoader(*data(96, 7), 32, shuffle=False), val)
    search = m.meta["prior_search"]
    # brute force: the validation NLL of laplace-torch's own predictive at every grid point
    brute = []
    for lg in search["log10_grid"]:
        m.la.prior_precision = 10.0 ** lg
        brute.append(float(_nll(m.la(val[0], pred_type="glm", link_approx="probit"), val[1])))
    m.la.prior_precision = search["prior_precision"]
    torch.testing.assert_close(torch.tensor(search["val_nll"]), torch.tensor(brute), rtol=1e-4, atol=1e-6)
    assert search["log10_prior_precision"] == search["log10_grid"][min(range(len(brute)), key=brute.__getitem__)]
    assert search["at_grid_edge"] != "upper"
    with torch.no_grad():
        map_probs = torch.softmax(ctx.map_cache.get(0)(val[0]), -1)
        la_probs = m.predict(val[0]).probs
    assert float(_nll(la_probs, val[1])) < float(_nll(map_probs, val[1])) - 0.5
    assert float((la_probs - map_probs).abs().max()) > 0.1


# -- the diagonal linearised predictive ------------------------------------------------------------
def conv_bn_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 2, 3, stride=2),
                        nn.Flatten(), nn.Linear(18, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 4))
    net.train()
    net(torch.randn(32, 1, 7, 7) * 2 + 0.5)
    return net.eval()


def test_diag_glm_moments_equal_laplace_torch_functional_variance():
    from laplace import Laplace
    from laplace.curvature import BackPackGGN

    net = conv_bn_net()
    x, y = torch.randn(40, 1, 7, 7), torch.randint(0, 4, (40,))
    la = Laplace(net, "classification", subset_of_weights="all", hessian_structure="diag", backend=BackPackGGN,
                 prior_precision=0.7)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    xt = torch.randn(6, 1, 7, 7)
    f_mu, f_var = la._glm_predictive_distribution(xt)
    mu, var = diag_glm_moments(net, xt, la.posterior_variance)
    torch.testing.assert_close(mu, f_mu)
    torch.testing.assert_close(var, f_var, rtol=1e-4, atol=1e-6)
    assert float(var.diagonal(dim1=1, dim2=2).min()) > 0


def test_laplace_diag_predicts_with_the_linearised_probit_predictive_by_default():
    ctx = ctx_for(overconfident_net)
    val = data(60, 11)
    m = LaplaceDiag(ctx, grid_size=5).fit(TensorLoader(*data(96, 7), 32, shuffle=False), val)
    assert m.config["pred_type"] == "glm" and m.config["link_approx"] == "probit"
    with torch.no_grad():
        ref = m.la(val[0], pred_type="glm", link_approx="probit")
        got = m.predict(val[0]).probs
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)


def test_subnet_fast_grid_path_equals_the_generic_predictive():
    ctx = ctx_for(overconfident_net)
    val = data(60, 11)
    m = SubnetLaplace(ctx, criterion="magnitude", n_subnet=30, prior_precision_method="none",
                      predict_batch_size=25).fit(TensorLoader(*data(96, 7), 32, shuffle=False), val)
    chunks = m._val_chunks(val)
    fast = m.val_nll_function(chunks)
    generic_predictors = LaplaceMethod.val_predictors(m, chunks)  # every chunk predicted by la's own path

    def generic(tau):
        m.la.prior_precision = tau
        with torch.no_grad():
            return sum(float(_nll(probs(), y)) * len(y) for probs, y in generic_predictors) / len(val[1])

    for tau in (0.01, 1.0, 100.0):
        assert fast(tau) == pytest.approx(generic(tau), rel=1e-5)
    f_mu, f_var = m.la._glm_predictive_distribution(val[0][:5])
    torch.testing.assert_close(probit_probs(f_mu, f_var), m.la(val[0][:5], pred_type="glm", link_approx="probit"))


@pytest.mark.parametrize("place", ["device", "host", None])
def test_subnet_grid_keeps_the_validation_jacobians_where_they_fit(place, monkeypatch):
    """The grid search's validation NLL is the generic predictive's whether the Jacobians are kept
    on the device, in the host's memory (a GPU run's larger ones; here the CPU is both) or
    recomputed at every grid point; the record says which."""
    ctx = ctx_for(overconfident_net)
    val = data(60, 11)
    m = SubnetLaplace(ctx, criterion="magnitude", n_subnet=30, prior_precision_method="none",
                      predict_batch_size=25).fit(TensorLoader(*data(96, 7), 32, shuffle=False), val)
    chunks = m._val_chunks(val)
    generic_predictors = LaplaceMethod.val_predictors(m, chunks)
    monkeypatch.setattr(m, "jacobian_cache_place", lambda nbytes: place)
    fast = m.val_nll_function(chunks)
    assert m.diagnostics()["val_jacobian_cache"] == {"place": place or "none", "bytes": 60 * 3 * 30 * 4}
    for tau in (0.01, 100.0):
        m.la.prior_precision = tau
        with torch.no_grad():
            ref = sum(float(_nll(probs(), y)) * len(y) for probs, y in generic_predictors) / len(val[1])
        assert fast(tau) == pytest.approx(ref, rel=1e-5)


def test_subnet_jacobian_cache_place_by_size_and_device(monkeypatch):
    """Up to JACOBIAN_CACHE_BYTES on the device; above, in the host's memory on a GPU run only (up to
    a quarter of what the host has available), else recomputed."""
    import psutil

    class VM:
        available = 40 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM)
    m = SubnetLaplace(ctx_for(overconfident_net), criterion="magnitude", n_subnet=30)
    assert m.jacobian_cache_place(2 * 2**30) == "device"
    assert m.jacobian_cache_place(2 * 2**30 + 1) is None  # a CPU run: the host is the device
    m.ctx.device = torch.device("cuda")
    assert m.jacobian_cache_place(10 * 2**30) == "host"
    assert m.jacobian_cache_place(10 * 2**30 + 1) is None


def test_diag_glm_moments_for_several_variance_vectors_at_once_equal_one_at_a_time(monkeypatch):
    from bench.laplace import diag_glm

    net = conv_bn_net()
    xt = torch.randn(5, 1, 7, 7)
    P = sum(p.numel() for p in net.parameters())
    V = torch.rand(3, P) * torch.tensor([1e-3, 1e-1, 10.0])[:, None]
    mu, var = diag_glm_moments(net, xt, V)
    assert var.shape == (3, 5, 4, 4)
    for t in range(3):
        mu1, var1 = diag_glm_moments(net, xt, V[t])
        torch.testing.assert_close(mu, mu1)
        torch.testing.assert_close(var[t], var1, rtol=1e-5, atol=1e-8)
    # from PAIR_PRODUCTS_FROM vectors on, the pairwise products contracted with all of them at once
    # (in blocks of 7 entries here: the sum split across blocks)
    monkeypatch.setattr(diag_glm, "PAIR_BLOCK_FLOATS", 5 * 10 * 7)
    V = torch.rand(diag_glm.PAIR_PRODUCTS_FROM + 1, P) * torch.logspace(-3, 1, diag_glm.PAIR_PRODUCTS_FROM + 1)[:, None]
    mu, var = diag_glm_moments(net, xt, V)
    for t in range(len(V)):
        mu1, var1 = diag_glm_moments(net, xt, V[t])
        torch.testing.assert_close(mu, mu1)
        torch.testing.assert_close(var[t], var1, rtol=1e-5, atol=1e-8)


@pytest.mark.cuda
def test_diag_glm_moments_of_a_grid_on_cuda_are_the_cpus():
    """The grid's pairwise-product path (bench.laplace.diag_glm._quadratic_many) on the GPU gives
    the CPU's moments."""
    from bench.laplace import diag_glm

    if not torch.cuda.is_available():
        pytest.skip("no CUDA: runs on a lent GPU machine (python -m bench.device_session, docs/device.md)")
    net = conv_bn_net()
    xt = torch.randn(5, 1, 7, 7)
    P = sum(p.numel() for p in net.parameters())
    V = torch.rand(diag_glm.PAIR_PRODUCTS_FROM + 2, P) * torch.logspace(-3, 1, diag_glm.PAIR_PRODUCTS_FROM + 2)[:, None]
    mu, var = diag_glm_moments(net, xt, V)
    mu_c, var_c = diag_glm_moments(net.cuda(), xt.cuda(), V.cuda())
    torch.testing.assert_close(mu_c.cpu(), mu, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(var_c.cpu(), var, rtol=1e-4, atol=1e-6)


def test_laplace_diag_grid_in_one_pass_equals_the_grid_point_by_point():
    """The batched grid (all prior precisions in one pass) gives each grid point the validation
    NLL the point-by-point search computes with the method's own predictive."""
    ctx = ctx_for(overconfident_net)
    val = data(60, 11)
    m = LaplaceDiag(ctx, grid_size=5).fit(TensorLoader(*data(96, 7), 32, shuffle=False), val)
    chunks = m._val_chunks(val)
    taus = [1e-3, 0.1, 1.0, 30.0, 1e4]
    one = m.val_nll_function(chunks)
    many = m.val_nll_many_function(chunks)
    assert many is not None
    torch.testing.assert_close(torch.tensor(many(taus)), torch.tensor([one(t) for t in taus]), rtol=1e-5, atol=1e-7)
    search = m.meta["prior_search"]  # the fit used the batched grid: its losses are the per-point ones
    torch.testing.assert_close(torch.tensor(search["val_nll"]),
                               torch.tensor([one(10.0 ** lg) for lg in search["log10_grid"]]), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("bias", [True, False])
def test_last_layer_kron_variance_equals_laplace_torchs_jacobian_path(bias):
    """The closed-form diagonal of J Sigma J^T for a last-layer KFAC Laplace equals laplace-torch's
    own value from the explicit (B, K, K x D) Jacobian, at two prior precisions, and for a damped
    Kronecker precision the value of its inv_square_form on the explicit Jacobians."""
    from laplace import Laplace

    from bench.laplace.kron_diag import last_layer_kron_variance

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 7, bias=bias))
    x, y = torch.randn(80, 6), torch.randint(0, 7, (80,))
    la = Laplace(model, "classification", subset_of_weights="last_layer", hessian_structure="kron")
    la.fit(DataLoader(TensorDataset(x, y), batch_size=20))
    xt = torch.randn(9, 6)
    for tau in (0.3, 4.0):
        la.prior_precision = tau
        f_mu_ref, f_var_ref = la._glm_predictive_distribution(xt)
        f_mu, f_var = last_layer_kron_variance(la, xt)
        assert torch.allclose(f_mu, f_mu_ref, atol=1e-6)
        assert torch.allclose(f_var, f_var_ref.diagonal(dim1=1, dim2=2), rtol=1e-4, atol=1e-7)
        P = la.posterior_precision
        P.damping = True
        Js, _ = la.backend.last_layer_jacobians(xt)
        ref = P.inv_square_form(Js).diagonal(dim1=1, dim2=2)
        assert torch.allclose(last_layer_kron_variance(la, xt, precision=P)[1], ref, rtol=1e-4, atol=1e-7)
        assert not torch.allclose(ref, f_var, rtol=1e-3)  # damping changes the value: the test can tell


def test_last_layer_prior_search_with_cached_features_equals_the_plain_predictive(tmp_path, monkeypatch):
    """The last-layer Laplace's prior search computes the validation features once; its validation
    NLL at any prior precision equals the one from the full predictive (no cache)."""
    from methods.laplace_last_layer import LaplaceLastLayer
    from tests.test_method_contract import data, fitted

    _, m = fitted("laplace_last_layer", tmp_path)
    chunks = m._val_chunks(data(48, seed=1))
    cached = m.val_nll_function(chunks)
    monkeypatch.setattr(LaplaceLastLayer, "FEATURE_CACHE_BYTES", 0)
    plain = m.val_nll_function(chunks)
    for tau in (1e-3, 0.7, 30.0):
        assert cached(tau) == pytest.approx(plain(tau), rel=1e-6)
    assert cached(1e-3) != pytest.approx(cached(30.0), rel=1e-3)  # the prior matters here


def _logit_moments_by_jvp_sampling(la, xt, n_samples, seed=0):
    from bench.laplace.jvp_glm import glm_logit_samples, posterior_offsets

    gen = torch.Generator().manual_seed(seed)
    f_mu, f = glm_logit_samples(la.model, xt, posterior_offsets(la, n_samples, gen))
    centred = f - f.mean(0)
    cov = torch.einsum("sbk,sbj->bkj", centred, centred) / (n_samples - 1)
    return f_mu, f, cov


def test_jvp_samples_sharing_a_pass_are_the_samples_one_at_a_time():
    """Several samples through the network in one pass (vmap over their offsets: the primal
    shared) give each sample's logits as one at a time does, in the same order, from a stacked
    tensor of offsets or an iterator of them; how many share a pass is bounded by JVP_PASS_FLOATS."""
    from bench.laplace import jvp_glm

    net = conv_bn_net()
    P = sum(p.numel() for p in net.parameters())
    xt = torch.randn(6, 1, 7, 7)
    D = torch.randn(7, P, generator=torch.Generator().manual_seed(1)) * 0.1
    f_mu, one = jvp_glm.glm_logit_samples(net, xt, D)
    assert one.shape == (7, 6, 4)
    for per_pass in (3, 7, 50):
        mu, f = jvp_glm.glm_logit_samples(net, xt, D, per_pass)
        torch.testing.assert_close(mu, f_mu)
        torch.testing.assert_close(f, one, rtol=1e-5, atol=1e-6)
        _, g = jvp_glm.glm_logit_samples(net, xt, iter(list(D)), per_pass)
        torch.testing.assert_close(g, one, rtol=1e-5, atol=1e-6)
    assert float((one[0] - f_mu).abs().max()) > 1e-3  # the offsets move the logits
    n = jvp_glm.JVP_PASS_FLOATS
    assert jvp_glm.samples_per_pass(10, n // 4 - 1000, 1000) == 4
    assert jvp_glm.samples_per_pass(10, n // 4 - 999, 1000) == 3
    assert jvp_glm.samples_per_pass(10, 1000, n // 3 - 1000) == 3  # the stacked offsets count too
    assert jvp_glm.samples_per_pass(10, 2 * n, 1000) == 1 and jvp_glm.samples_per_pass(10, 10, 10) == 10


@pytest.mark.parametrize("structure", ["diag", "subnet"])
def test_jvp_samples_of_the_linearised_logits_have_laplace_torchs_mean_and_covariance(structure):
    """f_mu + J (theta_s - theta*) with theta_s from the posterior's own sampler is a draw of the
    GLM predictive's N(f_mu, J Sigma J^T): checked by Monte Carlo against laplace-torch's
    f_var, which it forms from Jacobians computed by its backend (an independent computation)."""
    from laplace import Laplace
    from laplace.curvature import BackPackGGN

    net = conv_bn_net()
    x, y = torch.randn(40, 1, 7, 7), torch.randint(0, 4, (40,))
    kw = {"subset_of_weights": "all", "hessian_structure": "diag"}
    if structure == "subnet":
        P = sum(p.numel() for p in net.parameters())
        kw = {"subset_of_weights": "subnetwork", "hessian_structure": "full",
              "subnetwork_indices": torch.randperm(P, generator=torch.Generator().manual_seed(0))[:25].sort().values}
    la = Laplace(net, "classification", backend=BackPackGGN, prior_precision=0.3, **kw)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    xt = torch.randn(6, 1, 7, 7)
    f_mu_ref, f_var_ref = la._glm_predictive_distribution(xt)
    S = 4000
    f_mu, f, cov = _logit_moments_by_jvp_sampling(la, xt, S)
    torch.testing.assert_close(f_mu, f_mu_ref)
    sd = f_var_ref.diagonal(dim1=1, dim2=2).sqrt()
    assert float(sd.min()) > 1e-3  # a posterior that moves the logits
    # the sample mean within 5 standard errors, the covariance within ~5 of its MC standard errors
    assert float(((f.mean(0) - f_mu_ref).abs() / (sd / math.sqrt(S))).max()) < 5
    scale = sd.unsqueeze(-1) * sd.unsqueeze(-2)
    assert float(((cov - f_var_ref).abs() / scale).max()) < 5 * math.sqrt(2 / S)


def test_laplace_diag_jvp_sampler_equals_moment_sampling_in_distribution():
    """The method's glm + mc predictive with glm_sampler=jvp: its Monte Carlo average agrees with
    the one drawn from laplace-torch's moments (a z-test per probability on 3,000 samples each,
    different random streams), it is what the method predicts, for any batching, and a
    configuration it does not apply to is refused."""
    from bench.errors import BenchError
    from bench.laplace.jvp_glm import glm_logit_samples, posterior_offsets
    from bench.laplace.predictive import glm_mc_probs

    ctx = ctx_for(overconfident_net)
    val = data(60, 11)
    S = 3000
    m = LaplaceDiag(ctx, glm_sampler="jvp", prior_precision_method="none", prior_precision=0.05, link_approx="mc",
                    n_samples=S).fit(TensorLoader(*data(96, 7), 32, shuffle=False), val)
    x = val[0][:20]
    with torch.no_grad():
        pa = torch.softmax(glm_logit_samples(m.la.model, x, posterior_offsets(m.la, S, m._generator()))[1], -1)
        f_mu, f_var = m.la._glm_predictive_distribution(x)
        pb = glm_mc_probs(f_mu, f_var, S, torch.Generator().manual_seed(5))
        got = m.predict(x).probs
        m.config["predict_batch_size"] = 7
        rebatched = m.predict(x).probs
    z = (pa.mean(0) - pb.mean(0)) / ((pa.var(0) + pb.var(0)) / S).sqrt()
    assert float(z.abs().max()) < 4.5  # 60 probabilities
    assert float((pa.mean(0) - torch.softmax(f_mu, -1)).abs().max()) > 0.1  # a posterior that matters
    torch.testing.assert_close(got, pa.mean(0))
    torch.testing.assert_close(rebatched, got)
    with pytest.raises(BenchError, match="link_approx=mc"):
        LaplaceDiag(ctx, glm_sampler="jvp")


@pytest.mark.parametrize("structure", ["diag", "full", "subnet", "subnet_diag", "kron"])
def test_posterior_offsets_are_laplace_torchs_samples_drawn_on_the_callers_generator(structure):
    """posterior_offsets draws the standard normals on the caller's generator (a CPU one: the same
    weights on every device) and applies the posterior's own scale: on the CPU, where laplace-torch's
    sample draws from the same stream, its offsets equal sample() minus the mean, for every
    structure the methods use; a Kronecker posterior goes through sample() itself."""
    from laplace import Laplace
    from laplace.curvature import BackPackGGN

    from bench.laplace.jvp_glm import posterior_offsets, sampled_size

    torch.manual_seed(0)  # BackPACK's Kronecker factors have no batch-norm extension: an MLP there
    net = conv_bn_net() if structure != "kron" else nn.Sequential(nn.Flatten(), nn.Linear(49, 8), nn.ReLU(),
                                                                   nn.Linear(8, 4))
    x, y = torch.randn(40, 1, 7, 7), torch.randint(0, 4, (40,))
    P = sum(p.numel() for p in net.parameters())
    idx = torch.randperm(P, generator=torch.Generator().manual_seed(0))[:25].sort().values
    kw = {"diag": {"subset_of_weights": "all", "hessian_structure": "diag"},
          "full": {"subset_of_weights": "all", "hessian_structure": "full"},
          "subnet": {"subset_of_weights": "subnetwork", "hessian_structure": "full", "subnetwork_indices": idx},
          "subnet_diag": {"subset_of_weights": "subnetwork", "hessian_structure": "diag", "subnetwork_indices": idx},
          "kron": {"subset_of_weights": "all", "hessian_structure": "kron"}}[structure]
    la = Laplace(net, "classification", backend=BackPackGGN, prior_precision=0.3, **kw)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    assert sampled_size(la) == {"diag": P, "full": P, "subnet": 25, "subnet_diag": 25, "kron": None}[structure]
    mean = la.mean.detach().reshape(-1)
    ours = torch.stack(list(posterior_offsets(la, 3, torch.Generator().manual_seed(4))))
    gen = torch.Generator().manual_seed(4)
    theirs = torch.stack([la.sample(1, generator=gen)[0] - mean for _ in range(3)])
    assert float(ours.abs().max()) > 1e-3  # offsets that move the weights
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    if structure.startswith("subnet"):
        outside = torch.ones(P, dtype=torch.bool)
        outside[idx] = False
        assert float(ours[:, outside].abs().max()) == 0.0
