"""Build the VDP++ version of a standard network instead of writing every architecture twice.

:func:`to_vdp` walks an ``nn.Sequential`` / module tree and replaces each module by its
moment-propagating counterpart (``bench.vdp.layers``). Linear / Conv2d become Gaussian
layers whose means are the original weights (a fresh deterministic initialisation or a
trained MAP network) and whose ``rho`` is a constant ``rho_init``; batch / layer / group norm keep
the original module (its affine parameters and running statistics) and add the variance rule.

Residual networks: a block written as :class:`Residual` (``post(body(x) + shortcut(x))``) is
converted structurally; torchvision-style ``BasicBlock`` / ``Bottleneck`` modules (attributes
``conv1, bn1, conv2, bn2[, conv3, bn3]`` and ``downsample`` or ``shortcut``) are recognised by
those names. Anything else needs a rule: ``@register_converter(MyBlock)`` with a function
``(module, convert) -> VDPModule``; anything else (a module with its own ``forward``, a layer
without a moment rule) is a :class:`BenchError` naming the first such module by its qualified name
and type, with the supported list (``methods/vdp.py`` checks it when a run is planned). Because
every mean path equals the deterministic layer,
:func:`check_mean_path` (run by :func:`to_vdp` when given ``example``) verifies a conversion:
the VDP mean output must equal the original network's output.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from bench.errors import BenchError
from bench.vdp.layers import (ELEMENTWISE, VDPActivation, VDPAvgPool2d, VDPBatchNorm, VDPConv2d, VDPDropout,
                              VDPFlatten, VDPGroupNorm, VDPIdentity, VDPLayerNorm, VDPLinear, VDPMaxPool2d, VDPModule,
                              VDPResidual, VDPSequential, VDPWeightLayer)


class Residual(nn.Module):
    """A residual block ``post(body(x) + shortcut(x))`` (shortcut / post default to identity).

    Plain PyTorch; a model builder that writes its blocks with it gets them converted to VDP
    without a custom rule (eq. 13)."""

    def __init__(self, body: nn.Module, shortcut: nn.Module | None = None, post: nn.Module | None = None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else nn.Identity()
        self.post = post if post is not None else nn.Identity()

    def forward(self, x):
        return self.post(self.body(x) + self.shortcut(x))


Converter = Callable[[nn.Module, Callable[[nn.Module], VDPModule]], VDPModule]
_RULES: dict[type, Converter] = {}


def register_converter(cls: type):
    """Decorator: ``fn(module, convert)`` builds the VDP module for modules of type ``cls``;
    ``convert`` converts sub-modules with the same settings."""

    def deco(fn: Converter) -> Converter:
        _RULES[cls] = fn
        return fn

    return deco


def _is_basic_block(m: nn.Module) -> bool:
    return all(isinstance(getattr(m, n, None), nn.Module) for n in ("conv1", "bn1", "conv2", "bn2"))


def _basic_block(m: nn.Module, convert) -> VDPModule | None:
    """torchvision ``BasicBlock`` / ``Bottleneck`` by attribute names, else None."""
    if not _is_basic_block(m):
        return None
    act = getattr(m, "relu", None) or nn.ReLU()
    layers = [m.conv1, m.bn1, act, m.conv2, m.bn2]
    if isinstance(getattr(m, "conv3", None), nn.Module) and isinstance(getattr(m, "bn3", None), nn.Module):
        layers += [act, m.conv3, m.bn3]
    short = getattr(m, "downsample", None)
    if short is None:
        short = getattr(m, "shortcut", None)
    body = VDPSequential(*[convert(layer) for layer in layers])
    return VDPResidual(body, None if short is None else convert(short), convert(act))


#: what :func:`convert_module` converts (the error message lists it)
SUPPORTED = ("nn.Sequential chains, bench.vdp.Residual blocks, torchvision-style residual blocks (conv1, bn1, conv2, "
             "bn2[, conv3, bn3], downsample / shortcut), Linear, Conv2d (grouped and depthwise too), BatchNorm, "
             "LayerNorm, GroupNorm, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, Identity, element-wise "
             "activations ({acts}; first-order Taylor at the mean, eq. 4-5), and any type with a converter registered "
             "by bench.vdp.register_converter (the UNet's)")


def supported_text() -> str:
    return SUPPORTED.format(acts=", ".join(c.__name__ for c in ELEMENTWISE))


def _child_name(parent: nn.Module, parent_name: str, sub: nn.Module) -> str:
    for n, m in parent.named_modules():
        if m is sub and n:
            return f"{parent_name}.{n}" if parent_name else n
    return f"{parent_name}.<{type(sub).__name__}>" if parent_name else f"<{type(sub).__name__}>"


def _leaf_rule(m: nn.Module) -> bool:
    """Whether a module without children has a moment rule (:func:`convert_module`'s leaf cases)."""
    if any(cls in _RULES for cls in type(m).__mro__):
        return True
    leaf = (nn.Linear, nn.Conv2d, nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.MaxPool2d,
            nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Dropout, nn.Identity)
    return isinstance(m, leaf) or type(m) in ELEMENTWISE


def unsupported_message(m: nn.Module, name: str) -> str:
    """Why VDP++ cannot convert ``m`` (qualified name ``name``), with what it supports."""
    label = f"module {name!r}" if name else "the network itself"
    if list(m.children()):
        inner = []

        def walk(mod, prefix):  # the modules inside with no rule (not descending into them)
            for n, sub in mod.named_children():
                q = f"{prefix}{n}"
                if isinstance(sub, (nn.Sequential, Residual)):
                    walk(sub, q + ".")
                elif not _leaf_rule(sub) or (list(sub.children()) and not any(c in _RULES for c in type(sub).__mro__)
                                             and not _is_basic_block(sub)):
                    inner.append(f"{q} ({type(sub).__name__})")

        walk(m, "")
        why = ("a module with its own forward(): VDP++ converts a network structurally and cannot follow an "
               "arbitrary forward; write it as nn.Sequential / bench.vdp.Residual or register a converter for "
               f"{type(m).__name__}")
        if inner:
            why += f"; its layers without a moment rule: {', '.join(inner[:5])}"
    else:
        why = "no moment rule for this layer type"
    return f"VDP++: no conversion for {type(m).__name__}, {label}: {why}. Supported: {supported_text()}"


def convert_module(m: nn.Module, rho_init: float = -5.0, name: str = "") -> VDPModule:
    """The VDP counterpart of ``m`` (recursively); raises :class:`BenchError` naming the first module
    (its qualified name ``name...`` and type) that has no conversion, with the supported types."""

    def convert(sub: nn.Module) -> VDPModule:
        return convert_module(sub, rho_init, _child_name(m, name, sub))

    for cls in type(m).__mro__:
        if cls in _RULES:
            return _RULES[cls](m, convert)
    if isinstance(m, nn.Sequential):
        seq = VDPSequential()
        for child_name, child in m.named_children():
            seq.add_module(child_name, convert(child))
        return seq
    if isinstance(m, Residual):
        return VDPResidual(convert(m.body), convert(m.shortcut), convert(m.post))
    if isinstance(m, nn.Linear):
        return VDPLinear.from_module(m, rho_init)
    if isinstance(m, nn.Conv2d):
        return VDPConv2d.from_module(m, rho_init)
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return VDPBatchNorm(m)
    if isinstance(m, nn.LayerNorm):
        return VDPLayerNorm(m)
    if isinstance(m, nn.GroupNorm):
        return VDPGroupNorm(m)
    if isinstance(m, nn.MaxPool2d):
        return VDPMaxPool2d(m)
    if isinstance(m, (nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
        return VDPAvgPool2d(m)
    if isinstance(m, nn.Flatten):
        return VDPFlatten(m.start_dim, m.end_dim)
    if isinstance(m, nn.Dropout):
        return VDPDropout(m.p)
    if isinstance(m, nn.Identity):
        return VDPIdentity()
    for cls, grad in ELEMENTWISE.items():
        if type(m) is cls:
            return VDPActivation(m, grad)
    block = _basic_block(m, convert)
    if block is not None:
        return block
    raise BenchError(unsupported_message(m, name))


class VDPNetwork(nn.Module):
    """A converted network: ``forward(x) -> (logit means, logit variances)``; ``kl()`` (eq. 12)."""

    def __init__(self, body: VDPModule):
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, var = self.body(x, None)  # the input is deterministic (eq. 2-3)
        if var is None:
            var = torch.zeros_like(mu)
        return mu, var

    def gaussian_layers(self) -> list[nn.Module]:
        return [m for m in self.modules() if isinstance(m, VDPWeightLayer)]

    def gaussian_params(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [pair for m in self.gaussian_layers() for pair in m.gaussian_params()]

    def mean_params(self) -> list[nn.Parameter]:
        """Parameters that are not ``rho`` (weight / bias means, batch-norm affine parameters)."""
        return [p for n, p in self.named_parameters() if not n.endswith("_rho")]

    def rho_params(self) -> list[nn.Parameter]:
        return [p for n, p in self.named_parameters() if n.endswith("_rho")]

    def prediction_tensors(self) -> list[torch.Tensor]:
        """Every tensor a prediction keeps resident: parameters, buffers and the per-layer cached
        ``sigma_w^2`` / ``sigma_w^2 + mu_w^2`` / ``sigma_b^2`` (for memory accounting)."""
        out = list(self.parameters()) + list(self.buffers())
        for m in self.gaussian_layers():
            cache = getattr(m, "_cache", None)
            if cache is not None:
                out += [t for t in cache[2] if t is not None]
        return out

    @property
    def num_stochastic(self) -> int:
        """Weights and biases that have a variance."""
        return sum(mu.numel() for mu, _ in self.gaussian_params())

    @property
    def num_variance_params(self) -> int:
        """``rho`` entries: one per output unit (eq. 12) or one per weight."""
        return sum(rho.numel() for _, rho in self.gaussian_params())

    def set_sigma_per(self, sigma_per: str, rho_init: float) -> "VDPNetwork":
        """Re-parameterise every weight layer's variance (``"unit"``: eq. 12, ``"weight"``), rho = rho_init."""
        for m in self.gaussian_layers():
            m._init_rho(rho_init, sigma_per)
        return self

    def kl(self, prior_scale: float = 1.0) -> torch.Tensor:
        """KL[q || p] (eq. 12) for the prior ``N(0, prior_scale^2)`` per weight.

        Eq. 12 is ``-1/2 sum_n (j log sigma_n^2 - ||mu_n||^2 - j sigma_n^2)`` for one variance per
        output unit n (j inputs) and a N(0, I) prior. Summed per weight with sigma_i = the
        sigma of its unit (or its own, with a variance per weight) it is
        ``1/2 sum_i (sigma_i^2 / s^2 + mu_i^2 / s^2 - 1 - log(sigma_i^2 / s^2))``, which adds the
        constant ``-1/2`` per weight so that the KL is >= 0 and exactly 0 at the prior (the
        constant does not change the gradients).
        """
        s2 = float(prior_scale) ** 2
        total = None
        for mu, rho in self.gaussian_params():
            sigma2 = torch.nn.functional.softplus(rho).square().expand_as(mu)
            term = 0.5 * (sigma2 / s2 + mu.square() / s2 - 1.0 - torch.log(sigma2 / s2)).sum()
            total = term if total is None else total + term
        if total is None:
            return torch.zeros(())
        return total


def check_mean_path(net: nn.Module, vdp: VDPNetwork, example: torch.Tensor, atol: float = 1e-4) -> None:
    """Raise BenchError unless the VDP mean output equals ``net(example)`` (both in eval mode)."""
    was = net.training, vdp.training
    net.eval(), vdp.eval()
    try:
        with torch.no_grad():
            ref = net(example)
            mu, var = vdp(example)
    finally:
        net.train(was[0]), vdp.train(was[1])
    if ref.shape != mu.shape or not torch.allclose(ref, mu, atol=atol, rtol=1e-4):
        err = (ref - mu).abs().max().item() if ref.shape == mu.shape else float("nan")
        raise BenchError(f"VDP conversion of {type(net).__name__} changed the mean path "
                         f"(shapes {tuple(ref.shape)} vs {tuple(mu.shape)}, max error {err:.3g}); "
                         f"a module's forward is not what its structure says -- register a converter for it")
    if not bool((var >= 0).all()) or not bool(torch.isfinite(var).all()):
        raise BenchError("VDP conversion produced negative or non-finite variances")


def to_vdp(net: nn.Module, rho_init: float = -5.0, example: torch.Tensor | None = None,
           sigma_per: str = "weight") -> VDPNetwork:
    """VDP++ network with ``net``'s weights as means and ``rho = rho_init`` everywhere; one weight
    sigma per output unit (``sigma_per="unit"``, eq. 12) or per weight.

    ``net`` is not modified, but batch-norm / layer-norm modules are shared with it (deep-copy
    ``net`` first if it must stay independent). With ``example`` the mean path is checked.
    """
    vdp = VDPNetwork(convert_module(net, rho_init))
    if sigma_per != "weight":
        vdp.set_sigma_per(sigma_per, rho_init)
    if example is not None:
        check_mean_path(net, vdp, example)
    return vdp
