"""VDP++ moments through the segmentation UNet (``bench.models.UNetBody``) and its pixel rows.

The UNet adds four operations to the layers of ``bench.vdp.layers``; each is exact for the
mean-field moments (independent inputs):

* zero padding and cropping: deterministic, the variance is padded / cropped the same way;
* 2x2 max pooling: co-pooling as :class:`~bench.vdp.layers.VDPMaxPool2d` (the arg-max mean
  with its own variance);
* bilinear upsampling: linear, ``out = A_h X A_w^T`` per channel with fixed interpolation
  matrices, so ``var_out = (A_h o A_h) V (A_w o A_w)^T`` (element-wise squares; tested against
  Monte Carlo);
* concatenation of the skip and the upsampled path: the moments are concatenated (the two paths
  are treated as independent, as eq. 13 treats a residual's branches).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from bench.models import PixelRows, UNetBody
from bench.vdp.convert import register_converter
from bench.vdp.layers import VDPMaxPool2d, VDPModule


@functools.lru_cache(maxsize=64)
def _interp_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """(n_out, n_in) matrix of 1-D linear interpolation as ``F.interpolate(..., "bilinear",
    align_corners=False)`` applies it along one axis (float64, CPU)."""
    eye = torch.eye(n_in, dtype=torch.float64).view(n_in, 1, n_in, 1)  # n_in images of one column
    cols = F.interpolate(eye, size=(n_out, 1), mode="bilinear", align_corners=False)
    return cols.view(n_in, n_out).t().contiguous()


def bilinear_moments(mu: torch.Tensor, var: torch.Tensor | None, size) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Bilinear upsampling (align_corners=False) of the mean, and the variance of the result for
    independent inputs: the interpolation weights squared."""
    out = F.interpolate(mu, size=size, mode="bilinear", align_corners=False)
    if var is None:
        return out, None
    ah = _interp_matrix(var.shape[-2], int(size[0])).to(var.device, var.dtype)
    aw = _interp_matrix(var.shape[-1], int(size[1])).to(var.device, var.dtype)
    v = torch.einsum("oh,bchw,pw->bcop", ah.square(), var, aw.square())
    return out, v


class VDPUNetBody(VDPModule):
    """The moment-propagating :class:`~bench.models.UNetBody` (same structure, converted blocks)."""

    def __init__(self, body: UNetBody, convert):
        super().__init__()
        self.depth = body.depth
        self.down = torch.nn.ModuleList(convert(b) for b in body.down)
        self.up_conv = torch.nn.ModuleList(convert(c) for c in body.up_conv)
        self.dec = torch.nn.ModuleList(convert(d) for d in body.dec)
        self.pool = VDPMaxPool2d(torch.nn.MaxPool2d(2))   # the body's F.max_pool2d(x, 2), co-pooled

    def forward(self, mu, var):
        h, w = mu.shape[-2:]
        m = 2 ** self.depth
        ph, pw = (-h) % m, (-w) % m
        if ph or pw:
            mu = F.pad(mu, (0, pw, 0, ph))
            var = None if var is None else F.pad(var, (0, pw, 0, ph))
        skips = []
        for i, block in enumerate(self.down):
            mu, var = block(mu, var)
            if i < self.depth:
                skips.append((mu, var))
                mu, var = self.pool(mu, var)
        for up, dec, (s_mu, s_var) in zip(self.up_conv, self.dec, reversed(skips)):
            mu, var = up(*bilinear_moments(mu, var, s_mu.shape[-2:]))
            if s_var is None and var is not None:
                s_var = torch.zeros_like(s_mu)
            if var is None and s_var is not None:
                var = torch.zeros_like(mu)
            mu = torch.cat([s_mu, mu], dim=1)
            var = None if var is None else torch.cat([s_var, var], dim=1)
            mu, var = dec(mu, var)
        return mu[..., :h, :w], None if var is None else var[..., :h, :w]


class VDPPixelRows(VDPModule):
    """``(B, C, H, W)`` moments -> ``(B H W, C)`` rows, as :class:`~bench.models.PixelRows`."""

    def __init__(self):
        super().__init__()
        self.rows = PixelRows()

    def forward(self, mu, var):
        return self.rows(mu), None if var is None else self.rows(var)


@register_converter(UNetBody)
def _unet(m: UNetBody, convert) -> VDPModule:
    return VDPUNetBody(m, convert)


@register_converter(PixelRows)
def _pixel_rows(m: PixelRows, convert) -> VDPModule:
    return VDPPixelRows()
