"""bench/laplace/precision.py: the full subnetwork posterior in float64, against numpy's float64
inverse and Cholesky factor of ``H + tau I`` (computed here, not by laplace-torch), on a GGN shaped
like camvid_multilabel's (largest eigenvalue ~2e4, the smallest zero) at the prior precisions the
validation search reaches (1e-4): laplace-torch's float32 posterior cannot factor it there, this one
gives the covariance, the functional variance and the posterior draws of the exact inverse. And the
subnet backends' GGN is float64 and positive semi-definite to float64 rounding where its rank is
lower than the subnet (a float32 sum leaves eigenvalues well below zero)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

warnings.filterwarnings("ignore")
pytest.importorskip("laplace")

from bench.laplace import import_laplace  # noqa: E402
from bench.laplace import precision  # noqa: E402
from bench.laplace.precision import float64_posterior  # noqa: E402
from bench.laplace.subnet_jacobians import bernoulli_subnet_backend, subnet_jacobian_backend  # noqa: E402

import_laplace()
from laplace import Laplace  # noqa: E402

S, K = 40, 3


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, K))


def laplace(backend, precision64: bool, tau: float = 1e-4):
    idx = torch.arange(S) * 2  # first-layer weights and biases, then the second's
    la = Laplace(net(), "classification", subset_of_weights="subnetwork", hessian_structure="full",
                 subnetwork_indices=idx, backend=backend, prior_precision=tau)
    return float64_posterior(la) if precision64 else la


def ill_conditioned_ggn(seed: int = 0) -> np.ndarray:
    """A PSD s x s matrix with eigenvalues from 2e4 down to 1e-3 and five exact zeros (float64)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((S, S)))
    lam = np.concatenate([np.logspace(np.log10(2e4), -3, S - 5), np.zeros(5)])
    return (q * lam) @ q.T


@pytest.mark.parametrize("block_columns", [S, 3])
def test_the_float64_posterior_is_the_exact_inverse_where_float32_cannot_factor_it(block_columns, monkeypatch):
    """With the scale formed in one block and three columns at a time (precision.lower_scale's
    blocks), and the log-determinant and functional covariance read off the scale against numpy's."""
    monkeypatch.setattr(precision, "SCALE_BLOCKS", 1)
    monkeypatch.setattr(precision, "SCALE_BLOCK_BYTES", block_columns * S * 8)
    H = ill_conditioned_ggn()
    tau = 1e-4
    P = H + tau * np.eye(S)
    cov = np.linalg.inv(P)
    L = np.linalg.cholesky(cov)
    la = laplace(subnet_jacobian_backend(), True, tau)
    la.H = torch.from_numpy(H)  # as fit leaves it (fit also sets the mean: the MAP weights)
    la.mean = torch.nn.utils.parameters_to_vector(la.model.parameters()).detach()
    np.testing.assert_allclose(la.posterior_covariance.numpy(), cov, rtol=1e-6, atol=1e-6 * np.abs(cov).max())
    J = torch.randn(7, K, S)  # float32, as the backends give them
    f_var = la.functional_variance(J)
    Jd = J.double().numpy()
    ref = np.einsum("ncp,pq,nkq->nck", Jd, cov, Jd)
    assert f_var.dtype == torch.float32
    np.testing.assert_allclose(f_var.double().numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    f_cov = la.functional_covariance(J).double().numpy()
    ref_cov = Jd.reshape(-1, S) @ cov @ Jd.reshape(-1, S).T
    np.testing.assert_allclose(f_cov, ref_cov, rtol=1e-5, atol=1e-5 * np.abs(ref_cov).max())
    sign, logdet = np.linalg.slogdet(H + float(np.float32(tau)) * np.eye(S))  # the prior as laplace-torch holds it
    assert sign == 1 and float(la.log_det_posterior_precision) == pytest.approx(logdet, rel=1e-9)
    # posterior draws: the mean plus the exact covariance's Cholesky factor times the same normals
    g = torch.Generator().manual_seed(3)
    draws = la.sample(4, generator=g)[:, la.backend.subnetwork_indices] - la.mean_subnet
    eps = torch.randn(4, S, generator=torch.Generator().manual_seed(3)).double().numpy()
    np.testing.assert_allclose(draws.double().numpy(), eps @ L.T, rtol=1e-4, atol=1e-4 * np.abs(L).max())
    # laplace-torch's own posterior, in float32, fails to factor it or gets the variance wrong
    la32 = laplace(subnet_jacobian_backend(), False, tau)
    la32.H = torch.from_numpy(H).float()
    try:
        got = la32.functional_variance(J).double().numpy()
    except Exception:  # noqa: BLE001 - torch.linalg's Cholesky error (not positive definite)
        return
    assert not np.allclose(got, ref, rtol=1e-2, atol=1e-2 * np.abs(ref).max())


@pytest.mark.parametrize("backend", ["softmax", "bernoulli"])
def test_the_subnet_backends_ggn_is_float64_and_psd_below_its_rank(backend):
    """Six examples of three outputs: the GGN has rank <= 18 (12 for the softmax) of 40, so at least
    22 eigenvalues are zero; summed in float64 they are zero to float64 rounding, and the GGN is the
    float64 sum of J^T Lambda J over the examples' own Jacobians (torch.func here)."""
    from torch.func import functional_call, jacrev

    cls = subnet_jacobian_backend() if backend == "softmax" else bernoulli_subnet_backend()
    la = laplace(cls, True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 6, generator=g)
    y = torch.randint(0, K, (6,), generator=g) if backend == "softmax" else (torch.rand(6, K, generator=g) < .5).float()
    la.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=3))
    H = la.H
    assert H.dtype == torch.float64
    eig = torch.linalg.eigvalsh(H)
    assert eig.min() >= -1e-12 * eig.max(), eig[:3]
    # the reference: per-example Jacobians of the subnet weights in float64
    model = net().double()
    names = [n for n, _ in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    idx = la.backend.subnetwork_indices

    def f(theta_sub, xi):
        full = flat.clone().index_put((idx,), theta_sub)
        params, o = {}, 0
        for n, p in model.named_parameters():
            params[n] = full[o:o + p.numel()].reshape(p.shape)
            o += p.numel()
        return functional_call(model, params, (xi.double()[None],))[0]

    ref = torch.zeros(S, S, dtype=torch.float64)
    for xi in x:
        Jn = jacrev(f)(flat[idx], xi)  # (K, S)
        out = f(flat[idx], xi)
        if backend == "softmax":
            p = torch.softmax(out, -1)
            lam = torch.diag(p) - torch.outer(p, p)
        else:
            p = torch.sigmoid(out)
            lam = torch.diag(p * (1 - p))
        ref += Jn.T @ lam @ Jn
    assert names
    torch.testing.assert_close(H, ref, rtol=1e-5, atol=1e-6 * float(ref.abs().max()))


@pytest.mark.cuda
def test_the_scale_on_cuda_is_the_cpus_and_holds_three_s_by_s_matrices(monkeypatch):
    """precision.lower_scale on the GPU (50 blocks of 40 columns) equals the CPU's, and the
    allocator's peak above the GGN is the Cholesky factor, the scale and three blocks, short of a
    third s x s (no hidden copy of the factor in the triangular solves)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA: runs on a lent GPU machine (python -m bench.device_session, docs/device.md)")
    s = 2000
    rng = np.random.default_rng(0)
    A = rng.standard_normal((s, s // 2))
    H = torch.from_numpy(A @ A.T)
    prior = torch.full((s,), 1e-3)
    monkeypatch.setattr(precision, "SCALE_BLOCKS", 50)
    cpu = precision.lower_scale(H, 1.0, prior)
    Hc = H.cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    got = precision.lower_scale(Hc, 1.0, prior.cuda())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    torch.testing.assert_close(got.cpu(), cpu, rtol=1e-9, atol=1e-9 * float(cpu.abs().max()))
    block = s * precision.scale_block_columns(s) * 8
    # half an s x s of slack for the solver's workspace: a hidden copy of a factor would add a whole one
    assert peak <= 2.5 * H.nbytes + 3 * block, (peak / H.nbytes)
