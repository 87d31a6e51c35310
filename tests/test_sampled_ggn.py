"""The sampled-label GGN of a segmentation network (bench/laplace/sampled_ggn.py) against the
exact GGN formed by brute force: the Jacobian of every pixel row by torch.func, the softmax Hessian
of every labelled pixel, ``sum_p J_p^T (diag(pi_p) - pi_p pi_p^T) J_p``, void pixels left out.
The estimate is a Monte Carlo average, so it is compared within a multiple of its own standard
error, entry by entry; through laplace-torch (DiagLaplace, SubnetLaplace) as the methods use it."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call, jacrev

from bench.laplace.sampled_ggn import image_gradients, label_map_loader, sampled_ggn_backend
from bench.models import PixelRows

IGNORE = 255


def tiny_segmenter(seed=0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Tanh(), nn.Conv2d(3, 3, 1), PixelRows()).double().eval()


def data(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 2, 4, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (3, 4, 5), generator=g)
    y[0, 0, :3] = IGNORE  # void pixels: no observation
    y[2, 3, 4] = IGNORE
    return x, y


def exact_ggn(model, x, y) -> torch.Tensor:
    """sum over images and labelled pixels of J_p^T Lambda_p J_p (P x P), by brute force."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    names = list(params)
    G = 0
    for b in range(len(x)):
        def f(*flat):
            return functional_call(model, dict(zip(names, flat)), (x[b:b + 1],))

        jac = jacrev(f, argnums=tuple(range(len(names))))(*params.values())  # per param: (rows, K, *shape)
        J = torch.cat([j.reshape(j.shape[0], j.shape[1], -1) for j in jac], dim=2)  # (rows, K, P)
        with torch.no_grad():
            pi = torch.softmax(f(*params.values()), dim=-1)
        keep = y[b].reshape(-1) != IGNORE
        J, pi = J[keep], pi[keep]
        lam = torch.diag_embed(pi) - pi[:, :, None] * pi[:, None, :]
        G = G + torch.einsum("rkp,rkl,rlq->pq", J, lam, J)
    return G


def sampled_rows(model, x, y, n, seed=0, index=None):
    params = [p for p in model.parameters()]
    _, G = image_gradients(model, params, x, y, ignore_index=IGNORE, n_samples=n,
                           generator=torch.Generator().manual_seed(seed), index=index)
    return G  # (B n, P), scaled by 1 / sqrt(n)


def within_standard_errors(est_terms: torch.Tensor, exact: torch.Tensor, n: int, k: float = 5.0):
    """``est_terms`` (n, ...) are n i.i.d. estimates (per draw) of ``exact``: their mean must be within
    ``k`` standard errors of it, entry by entry (plus a hair for entries that are exactly 0)."""
    mean = est_terms.mean(0)
    se = est_terms.std(0) / math.sqrt(n)
    bad = (mean - exact).abs() > k * se + 1e-9 * exact.abs().max()
    return mean, int(bad.sum())


def test_sampled_diagonal_matches_the_exact_pixel_ggn():
    model = tiny_segmenter()
    x, y = data()
    exact = torch.diagonal(exact_ggn(model, x, y))
    n = 1000
    G = sampled_rows(model, x, y, n) * math.sqrt(n)  # unscaled rows: one per image and draw
    per_draw = (G ** 2).reshape(len(x), n, -1).sum(0)  # (n, P): one GGN-diagonal estimate per draw
    mean, n_bad = within_standard_errors(per_draw, exact, n)
    assert n_bad == 0, (mean, exact)
    assert torch.allclose(mean, exact, rtol=0.15, atol=1e-6 * float(exact.max()))


def test_sampled_subnetwork_ggn_matches_the_exact_block():
    model = tiny_segmenter()
    x, y = data()
    idx = torch.tensor([0, 5, 17, 40, 55, 60, 67])  # weights of both convolutions and a bias
    exact = exact_ggn(model, x, y)[idx][:, idx]
    n = 1000
    G = (sampled_rows(model, x, y, n, index=idx) * math.sqrt(n)).reshape(len(x), n, -1)
    per_draw = torch.einsum("bnp,bnq->npq", G, G)  # (n, s, s): one estimate of the block per draw
    mean, n_bad = within_standard_errors(per_draw, exact, n)
    assert n_bad == 0, (mean, exact)


@pytest.mark.parametrize("structure", ["diag", "subnet"])
def test_laplace_torch_fits_with_the_sampled_backend(structure):
    """Through laplace-torch as laplace_diag / subnet_laplace call it: ``la.H`` is the sampled
    GGN (the same rows as image_gradients with the backend's seed), close to the exact one."""
    from laplace import Laplace

    model = tiny_segmenter()
    x, y = data()
    exact = exact_ggn(model, x, y)
    ds = torch.utils.data.TensorDataset(x, y)
    loader = label_map_loader(torch.utils.data.DataLoader(ds, batch_size=2))
    n = 600
    kw = {"backend_kwargs": {"ignore_index": IGNORE, "n_samples": n, "seed": 7}}
    if structure == "diag":
        la = Laplace(model, "classification", subset_of_weights="all", hessian_structure="diag",
                     backend=sampled_ggn_backend(), **kw)
        want = torch.diagonal(exact)
    else:
        idx = torch.tensor([1, 8, 30, 55, 63])
        la = Laplace(model, "classification", subset_of_weights="subnetwork", hessian_structure="full",
                     subnetwork_indices=idx, backend=sampled_ggn_backend(), **kw)
        want = exact[idx][:, idx]
    la.fit(loader)
    assert la.n_data == 3
    rows = sampled_rows(model, x, y, n, seed=7, index=None if structure == "diag" else idx)
    same = (rows ** 2).sum(0) if structure == "diag" else rows.T @ rows
    assert torch.allclose(la.H, same.to(la.H.dtype))
    scale = float(torch.diagonal(exact).max())
    assert (la.H - want).abs().max() < 0.1 * scale, (la.H, want)
