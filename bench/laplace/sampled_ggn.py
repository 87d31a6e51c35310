"""The GGN of a segmentation network, estimated with sampled labels: one backward pass per image
and sample instead of one per pixel and class.

A segmentation network's likelihood has one categorical factor per labelled pixel, so its GGN is
``G = sum_n sum_p J_np^T Lambda_np J_np`` with ``J_np`` the (K x P) Jacobian of pixel p's logits
and ``Lambda = diag(pi) - pi pi^T`` the softmax Hessian. Formed exactly it needs the Jacobian of
every pixel row: K backward passes per pixel (11 x 19,200 per 120 x 160 CamVid image), and the
Jacobian backends of laplace-torch (BackPACK, ASDL) take one row per *input example*, which a
UNet's pixels are not (they share features through the convolutions).

Here each pixel gets a label drawn from the network's own predictive, ``y_p ~ Cat(pi_p)``; the
gradient of the image's summed loss at those labels is ``g_n = sum_p J_np^T r_p`` with residuals
``r_p = pi_p - e_{y_p}``, which have mean 0, covariance ``Lambda_np``, and are independent across
pixels. Hence ``E[g_n g_n^T] = sum_p J_np^T Lambda_np J_np``: the per-image outer product (or its
diagonal) is an unbiased estimate of the image's GGN, the Monte Carlo GGN of BackPACK's
``DiagGGNMC`` and laplace-torch's ``stochastic=True``, taken per image rather than per pixel.
``n_samples`` draws per image share one forward pass; the diagonal then costs one backward pass
per image and draw, the full matrix over a subnetwork of s weights as much plus an s x s product.
Void pixels (the task's ignore label) are no observations: no residual, no loss.

:func:`sampled_ggn_backend` is a laplace-torch curvature backend (``diag`` for ``DiagLaplace``,
``full`` for ``SubnetLaplace``) fed by batches of images and their (B, H, W) label maps.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def image_gradients(model, params, x, y, *, ignore_index: int, n_samples: int, generator: torch.Generator,
                    index: torch.Tensor | None = None):
    """``(loss, G)``: the summed cross-entropy of the labelled pixels of ``x`` (B, C, H, W) under
    their labels ``y`` (B, H, W), and a (B n_samples, P) matrix of sampled-label gradients, one row
    per image and draw, scaled by ``1 / sqrt(n_samples)`` so that ``G^T G`` estimates the batch's
    GGN. ``index`` keeps only those entries of the parameter vector (a subnetwork)."""
    rows, loss = [], x.new_zeros(())
    scale = float(n_samples) ** -0.5
    for b in range(x.shape[0]):
        with torch.enable_grad():
            f = model(x[b:b + 1])  # (H W, K): one row per pixel
        t = y[b].reshape(-1).to(f.device)
        keep = t != ignore_index
        f, t = f[keep], t[keep]
        loss = loss + F.cross_entropy(f.detach(), t, reduction="sum")
        pi = torch.softmax(f.detach().double(), dim=-1)
        for m in range(n_samples):
            draw = torch.multinomial(pi.cpu(), 1, generator=generator).squeeze(1).to(f.device)
            r = (pi - F.one_hot(draw, pi.shape[-1]).to(pi.dtype)).to(f.dtype)
            grads = torch.autograd.grad(f, params, grad_outputs=r, retain_graph=m < n_samples - 1, allow_unused=True)
            g = torch.cat([(gi if gi is not None else torch.zeros_like(p)).reshape(-1) for gi, p in zip(grads, params)])
            rows.append((g if index is None else g[index]) * scale)
    return loss, torch.stack(rows)


def _build_backend():
    from bench.laplace import import_laplace

    import_laplace()  # first, without its dependencies' torch.jit FutureWarnings
    from laplace.curvature import GGNInterface

    class SampledPixelGGN(GGNInterface):
        """laplace-torch backend: the sampled-label GGN of a network with one output row per
        pixel (module docstring). ``y`` batches are label maps with ``ignore_index`` for void."""

        def __init__(self, model, likelihood, last_layer=False, subnetwork_indices=None, dict_key_x="input_ids",
                     dict_key_y="labels", ignore_index: int = 255, n_samples: int = 1, seed: int = 0):
            if last_layer:
                raise ValueError("SampledPixelGGN is for the network's weights, not a last-layer Laplace")
            # laplace-torch's name for a Monte Carlo GGN is stochastic=True
            super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y,
                             stochastic=True, num_samples=int(n_samples))
            self.ignore_index = int(ignore_index)
            self.generator = torch.Generator().manual_seed(int(seed))

        def _rows(self, x, y):
            idx = None if self.subnetwork_indices is None else self.subnetwork_indices.to(x.device)
            return image_gradients(self.model, self.params, x, y, ignore_index=self.ignore_index,
                                   n_samples=self.num_samples, generator=self.generator, index=idx)

        def diag(self, x, y, N=None, **kwargs):
            loss, G = self._rows(x, y)
            return loss.detach(), (G ** 2).sum(0).detach()

        def full(self, x, y, N=None, **kwargs):
            loss, G = self._rows(x, y)
            G = G.double()  # the batch's GGN in float64 (bench/laplace/precision.py)
            return loss.detach(), (G.T @ G).detach()

        def jacobians(self, x, enable_backprop=False):
            raise NotImplementedError("SampledPixelGGN estimates the GGN only; predict with glm_sampler=jvp "
                                      "(one Jacobian-vector product per posterior sample) or pred_type=nn")

        def kron(self, *args, **kwargs):
            raise NotImplementedError("SampledPixelGGN provides the diagonal and full GGN only")

    return SampledPixelGGN


_BACKEND = None


def sampled_ggn_backend():
    """The :class:`SampledPixelGGN` class (built lazily: importing laplace-torch is slow)."""
    global _BACKEND
    if _BACKEND is None:
        _BACKEND = _build_backend()
    return _BACKEND


def label_map_loader(loader):
    """Batches of images and their (B, H, W) label maps as laplace-torch's ``fit`` iterates
    them (``len(loader.dataset)`` = the number of images), in a fixed order."""
    from torch.utils.data import DataLoader

    def collate(items):
        xs, ys = zip(*items)
        return torch.stack(list(xs)), torch.stack([torch.as_tensor(t) for t in ys])

    return DataLoader(loader.dataset, batch_size=loader.batch_size, shuffle=False, collate_fn=collate)
