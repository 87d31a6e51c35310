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

The multi-label :class:`~bench.models.PresenceUNet` pools the UNet's per-pixel class logits into one
logit per class; :class:`VDPPresence` propagates the moments through that pooling (see there).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from bench.models import PixelRows, PresenceUNet, UNetBody
from bench.vdp.convert import register_converter
from bench.vdp.layers import VDPMaxPool2d, VDPModule, softmax_moments


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


class VDPPresence(VDPModule):
    """The moment-propagating :class:`~bench.models.PresenceUNet`: ``scale_k (log s_k - log t) +
    shift_k`` with ``s_k`` the image's mean softmax share of class k over its P pixels.

    * the per-pixel softmax: eq. 8-9 (:func:`~bench.vdp.layers.softmax_moments`);
    * the mean over the pixels: linear, the pixels independent (the mean-field rule
      :class:`~bench.vdp.layers.VDPAvgPool2d` applies to any average), ``var = sum_p var_p / P^2``;
    * the log: first order, ``var / s^2``; where the network clamps the share (below ``SHARE_FLOOR``) the
      derivative, and so the variance, is 0;
    * the per-class ``scale`` and ``shift`` (2 numbers per class) stay point estimates: they are the
      network's own parameters, shared with it and trained with the means, outside the KL.
    """

    def __init__(self, m: PresenceUNet, convert):
        super().__init__()
        self.seg = convert(m.seg)
        self.scale, self.shift = m.scale, m.shift
        self.register_buffer("log_threshold", m.log_threshold.detach().clone())

    def forward(self, mu, var):
        b = mu.shape[0]
        rows_mu, rows_var = self.seg(mu, var)  # (B P, K)
        p, v = softmax_moments(rows_mu, rows_var)
        k = p.shape[-1]
        p, v = p.reshape(b, -1, k), v.reshape(b, -1, k)
        share = p.mean(1)
        share_var = v.sum(1) / p.shape[1] ** 2
        floor = PresenceUNet.SHARE_FLOOR
        clamped = share.clamp_min(floor)
        log_var = torch.where(share > floor, share_var / clamped.square(), torch.zeros_like(share_var))
        out = self.scale * (torch.log(clamped) - self.log_threshold) + self.shift
        return out, self.scale.square() * log_var


@register_converter(PresenceUNet)
def _presence(m: PresenceUNet, convert) -> VDPModule:
    return VDPPresence(m, convert)
