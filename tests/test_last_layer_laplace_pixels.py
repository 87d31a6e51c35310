"""The last-layer KFAC Laplace of a segmentation network, pixels as observations, against the
GGN computed by brute force, pixel by pixel.

The 1 x 1 classifier's exact GGN is ``sum_p Lambda_p (x) a_p a_p^T`` (``a_p`` pixel p's features,
``Lambda_p = diag(pi_p) - pi_p pi_p^T``); KFAC (Martens & Grosse 2015) replaces it by
``(sum_p Lambda_p) (x) (sum_p a_p a_p^T) / N`` with N the number of observations, the pixels.
When every pixel has the same ``Lambda`` (a classifier with zero weights: a uniform softmax) the two
are equal, whatever the batching; the void pixels count as observations (a softmax GGN does not
depend on the label)."""
from __future__ import annotations

import torch
from torch import nn

from bench.data import TensorLoader
from bench.models import PixelRows
from bench.subnet.selection import as_torch_loader
from bench.tasks import segmentation
from bench.training import TrainConfig
from methods import METHODS, MethodContext
from methods._laplace_base import pixel_label_loader

K, D, H, W, N = 3, 4, 4, 5, 5


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 3, H, W, generator=g)
    y = torch.randint(0, K, (N, H, W), generator=g)
    y[0, 0, :2] = 255  # void pixels
    return x, y


def _net(zero_classifier: bool):
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(3, D, 3, padding=1), nn.Tanh(), PixelRows(), nn.Linear(D, K))
    if zero_classifier:
        nn.init.zeros_(net[-1].weight)
        nn.init.zeros_(net[-1].bias)
    return net.eval()


def _fit(net, x, y, batch_size: int):
    ctx = MethodContext(task=segmentation(K), build_model=lambda **_: net, train=TrainConfig(), device=torch.device("cpu"),
                        seed=0)
    method = METHODS.get("laplace_last_layer")(ctx, batch_size=batch_size)
    loader = pixel_label_loader(as_torch_loader(TensorLoader(x, y, batch_size), batch_size), 255)
    return method.fit_laplace(net, loader, "backpack")


def _by_hand(net, x):
    """Features, softmax Hessians and the exact GGN blocks (weights, biases), in float64."""
    with torch.no_grad():
        a = net[:3](x).double()  # (N H W, D): one row per pixel
        pi = torch.softmax(a @ net[3].weight.double().T + net[3].bias.double(), -1)
    lam = torch.diag_embed(pi) - pi[:, :, None] * pi[:, None, :]  # (P, K, K)
    ggn_w = sum(torch.kron(l, ap[:, None] * ap[None, :]) for l, ap in zip(lam, a))
    return a, lam, ggn_w, lam.sum(0)


def test_kfac_on_pixels_equals_the_exact_ggn_when_lambda_is_constant():
    x, y = _data()
    net = _net(zero_classifier=True)
    _, _, ggn_w, ggn_b = _by_hand(net, x)
    for batch_size in (1, 2, N):
        la = _fit(net, x, y, batch_size)
        (g, a), (g_b,) = la.H_facs.kfacs
        assert torch.allclose(torch.kron(g.double(), a.double()), ggn_w, rtol=1e-4, atol=1e-6), batch_size
        assert torch.allclose(g_b.double(), ggn_b, rtol=1e-4, atol=1e-6), batch_size
        assert la.n_data == N * H * W  # the observations are pixels


def test_kfac_factors_are_sums_over_pixels_divided_by_the_pixels():
    x, y = _data()
    net = _net(zero_classifier=False)
    a, lam, ggn_w, _ = _by_hand(net, x)
    for batch_size in (1, 3):
        (g, a_fac), _ = _fit(net, x, y, batch_size).H_facs.kfacs
        assert torch.allclose(a_fac.double(), a.T @ a / (N * H * W), rtol=1e-4, atol=1e-6)
        assert torch.allclose(g.double(), lam.sum(0), rtol=1e-4, atol=1e-6)
        # the approximation's scale is the exact GGN's (the trace of a Kronecker product factorises)
        ratio = float(torch.trace(g.double()) * torch.trace(a_fac.double()) / torch.trace(ggn_w))
        assert 0.5 < ratio < 2.0, ratio
