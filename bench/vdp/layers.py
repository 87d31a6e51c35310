"""VDP++ layers: every module maps ``(mean, var)`` of its input to ``(mean, var)`` of its output.

Variance-only variational density propagation (VDP++ paper, Sec. 3): each activation is
described by its first two moments, and only the diagonal of the covariance (the variance)
is propagated. ``var is None`` means "deterministic input" (the network input, eq. 2-3).
Assumptions, as in the paper: weights, biases and the entries of an activation vector are
mutually independent Gaussians; non-linear maps are linearised at the mean (first-order
Taylor, eq. 4-5, 8-9, 13), so every mean path below is exactly the deterministic layer
evaluated at the weight means.

Weights: ``w ~ N(mu_w, sigma_w^2)`` per entry with ``sigma_w = softplus(rho_w)``; biases
likewise (eq. 2-3 treat the bias as Gaussian too).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

Moments = tuple[torch.Tensor, "torch.Tensor | None"]

#: the variance parameterisations of a weight layer: eq. 12's one sigma per output unit, or one per weight
SIGMA_PER = ("unit", "weight")


class VDPModule(nn.Module):
    """Base class: ``forward(mu, var) -> (mu, var)``; ``var`` may be None (deterministic).

    Modules with ``inplace_var = True`` also take ``inplace=True``: they may then overwrite
    ``var`` (never ``mu``). :class:`VDPSequential` passes it only without autograd and only for a
    variance tensor the sequence itself created, so no caller's tensor is modified.
    """

    inplace_var = False

    def forward(self, mu: torch.Tensor, var: torch.Tensor | None) -> Moments:  # pragma: no cover
        raise NotImplementedError


def _add_var(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# -- weight layers --------------------------------------------------------------------------------
class VDPWeightLayer(VDPModule):
    """Shared parameter handling of the Gaussian Linear / Conv layers.

    Parameters: ``weight`` / ``bias`` are the means (names as in nn.Linear / nn.Conv2d, so
    ``torch.nn.utils.prune`` and MAP state dicts apply to them unchanged), ``weight_rho`` /
    ``bias_rho`` the softplus-parameterised standard deviations.
    """

    weight: nn.Parameter
    bias: nn.Parameter | None

    def _init_rho(self, rho_init: float, sigma_per: str = "weight") -> None:
        """``rho = rho_init``; ``sigma_per="unit"``: one weight sigma per output unit (eq. 12's
        ``sigma_{v_n}``, shape (out, 1, ...) broadcast over the unit's j inputs), ``"weight"``:
        one per weight. Biases: one per entry (every bias entry is its own unit)."""
        if sigma_per not in SIGMA_PER:
            raise ValueError(f"sigma_per must be one of {SIGMA_PER}, got {sigma_per!r}")
        w = self.weight.detach()
        shape = w.shape if sigma_per == "weight" else (w.shape[0],) + (1,) * (w.dim() - 1)
        self.weight_rho = nn.Parameter(torch.full(shape, float(rho_init), dtype=w.dtype, device=w.device))
        self.sigma_per = sigma_per
        self.bias_rho = None if self.bias is None else nn.Parameter(torch.full_like(self.bias.detach(), float(rho_init)))

    def weight_var(self) -> torch.Tensor:
        """sigma_w^2 with the weight's shape (a per-unit sigma broadcast over its inputs), zero
        where a pruning mask (:meth:`set_weight_mask`) removed the weight."""
        v = F.softplus(self.weight_rho).square().expand_as(self.weight)
        mask = getattr(self, "weight_mask", None)
        return v if mask is None else v * mask

    def set_weight_mask(self, mask: torch.Tensor | None) -> None:
        """Remove weights: a boolean ``mask`` (False = removed) zeroes their variance; the caller
        zeroes their means (``weight``). None restores every variance."""
        if mask is None:
            self.weight_mask = None
            return
        self.register_buffer("weight_mask", mask.to(self.weight.device, self.weight.dtype), persistent=False)

    def bias_var(self) -> torch.Tensor | None:
        return None if self.bias_rho is None else F.softplus(self.bias_rho).square()

    def gaussian_params(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(mean, rho) pairs of every Gaussian parameter tensor of the layer."""
        out = [(self.weight, self.weight_rho)]
        if self.bias is not None:
            out.append((self.bias, self.bias_rho))
        return out

    def _op(self, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _derived(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(sigma_w^2, sigma_w^2 + mu_w^2, sigma_b^2). Without autograd (prediction) they are
        cached, keyed by the identity and version counter of ``weight`` and the ``rho``s, so an
        optimiser step, ``load_state_dict`` or pruning (which recomputes ``weight``) refreshes them."""
        grad = torch.is_grad_enabled() and (self.weight.requires_grad or self.weight_rho.requires_grad)
        tensors = [self.weight, self.weight_rho] + ([] if self.bias_rho is None else [self.bias_rho])
        if getattr(self, "weight_mask", None) is not None:
            tensors.append(self.weight_mask)
        versions = [t._version for t in tensors]
        cache = getattr(self, "_cache", None)
        if (not grad and cache is not None and len(cache[0]) == len(tensors)
                and all(a is b for a, b in zip(cache[0], tensors)) and cache[1] == versions):
            return cache[2]
        s2w = self.weight_var().contiguous()
        out = (s2w, s2w + self.weight * self.weight, self.bias_var())
        if grad:
            self._cache = None
        else:
            self._cache = (tensors, versions, out)  # strong references: no address reuse
        return out

    def forward(self, mu, var):
        mean = self._op(mu, self.weight, self.bias)  # eq. 2 / 6: mu_w^T mu_x + mu_b
        s2w, s2w_plus_mu2, s2b = self._derived()
        # eq. 3 (deterministic x): sigma_z^2 = x^2 . sigma_w^2 + sigma_b^2
        # eq. 7 (Gaussian x):      sigma_z^2 = sigma_w^2 . sigma_x^2 + mu_w^2 . sigma_x^2
        #                                      + sigma_w^2 . mu_x^2 + sigma_b^2
        # regrouped as sigma_w^2 . mu_x^2 + (sigma_w^2 + mu_w^2) . sigma_x^2 + sigma_b^2: two
        # products with the batch, the sums done on the (smaller) weight tensors, the bias added
        # by the first product and the second accumulated in place.
        out_var = self._op(mu * mu, s2w, s2b)
        if var is not None:
            out_var = self._accumulate(out_var, var, s2w_plus_mu2)
        return mean, out_var

    def _accumulate(self, out: torch.Tensor, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return out.add_(self._op(h, weight, None))


class VDPLinear(VDPWeightLayer):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, rho_init: float = -5.0):
        super().__init__()
        ref = nn.Linear(in_features, out_features, bias=bias)
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(ref.weight.detach().clone())
        self.bias = None if ref.bias is None else nn.Parameter(ref.bias.detach().clone())
        self._init_rho(rho_init)

    @classmethod
    def from_module(cls, m: nn.Linear, rho_init: float) -> "VDPLinear":
        new = cls(m.in_features, m.out_features, bias=m.bias is not None, rho_init=rho_init)
        with torch.no_grad():
            new.weight.copy_(m.weight)
            if m.bias is not None:
                new.bias.copy_(m.bias)
        return new.to(m.weight.device, m.weight.dtype)

    def _op(self, h, weight, bias):
        return F.linear(h, weight, bias)

    def _accumulate(self, out, h, weight):
        if h.dim() == 2:  # out += h @ weight^T inside the GEMM
            return out.addmm_(h, weight.t())
        return out.add_(F.linear(h, weight))

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class VDPConv2d(VDPWeightLayer):
    """Convolution = a matrix product over patches, so eq. 2-3 / 6-7 apply per output position
    (VDP++ paper, "VDP++ for Convolutional Kernels"); ``x^2`` and ``sigma_x^2`` are convolved
    with ``sigma_w^2`` and ``sigma_w^2 + mu_w^2``."""

    def __init__(self, conv: nn.Conv2d, rho_init: float = -5.0):
        super().__init__()
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size, self.stride, self.padding = conv.kernel_size, conv.stride, conv.padding
        self.dilation, self.groups, self.padding_mode = conv.dilation, conv.groups, conv.padding_mode
        self._reversed_padding_repeated_twice = getattr(conv, "_reversed_padding_repeated_twice", None)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self._init_rho(rho_init)

    @classmethod
    def from_module(cls, m: nn.Conv2d, rho_init: float) -> "VDPConv2d":
        return cls(m, rho_init)

    def _op(self, h, weight, bias):
        padding = self.padding
        if self.padding_mode != "zeros":
            # padding is applied to mu, mu^2 and sigma^2 alike: replicate / reflect / circular
            # padding copies activations, so their moments are copied with them
            h = F.pad(h, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        return F.conv2d(h, weight, bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, bias={self.bias is not None}")


# -- element-wise non-linearities (eq. 4-5) -----------------------------------------------------
def _relu_grad(mu):
    return (mu > 0).to(mu.dtype)


def _tanh_grad(mu):
    return 1 - torch.tanh(mu).square()


def _sigmoid_grad(mu):
    s = torch.sigmoid(mu)
    return s * (1 - s)


#: element-wise activation modules the converter accepts; a derivative of None means "by autograd"
ELEMENTWISE = {nn.ReLU: _relu_grad, nn.Tanh: _tanh_grad, nn.Sigmoid: _sigmoid_grad, nn.LeakyReLU: None,
               nn.ELU: None, nn.GELU: None, nn.SiLU: None, nn.Softplus: None, nn.Hardtanh: None,
               nn.ReLU6: None, nn.Mish: None}


class VDPActivation(VDPModule):
    """First-order Taylor expansion at the mean (eq. 4-5):
    ``mu_a = f(mu_z)``, ``sigma_a^2 = sigma_z^2 * f'(mu_z)^2``."""

    inplace_var = True

    def __init__(self, fn: nn.Module, grad=None):
        super().__init__()
        self.fn = fn
        self._grad = grad

    def derivative(self, mu: torch.Tensor) -> torch.Tensor:
        if self._grad is not None:
            return self._grad(mu)
        with torch.enable_grad():  # f' of an element-wise f: the gradient of sum f(z)
            z = mu.detach().requires_grad_(True)
            (d,) = torch.autograd.grad(self.fn(z).sum(), z, create_graph=mu.requires_grad)
        return d

    def forward(self, mu, var, inplace: bool = False):
        out = self.fn(mu)
        if var is None:
            return out, None
        if self._grad is _relu_grad:  # f'^2 = f' = 1[mu > 0]: a masked copy
            return out, (var.masked_fill_ if inplace else var.masked_fill)(mu <= 0, 0.0)
        d2 = self.derivative(mu).square()
        return out, (var.mul_(d2) if inplace else var * d2)


# -- normalisation ---------------------------------------------------------------------------------
class VDPBatchNorm(VDPModule):
    """Batch norm on the mean, and its first-order effect on the variance (as for the VDP batch
    norm of [9] and the layer norm of eq. 14): the normalisation statistics are those of the
    mean activations (batch statistics in training, running ones in evaluation) and are
    treated as constants, so ``sigma_y^2 = (gamma / sqrt(v + eps))^2 sigma_x^2``."""

    inplace_var = True

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm):
        super().__init__()
        self.bn = bn

    def _batch_stats_used(self) -> bool:
        bn = self.bn
        return bn.training or not bn.track_running_stats or bn.running_var is None

    def forward(self, mu, var, inplace: bool = False):
        out = self.bn(mu)
        if var is None:
            return out, None
        bn = self.bn
        if self._batch_stats_used():
            dims = [0] + list(range(2, mu.dim()))
            v = mu.var(dim=dims, unbiased=False)
        else:
            v = bn.running_var
        scale2 = 1.0 / (v + bn.eps)
        if bn.weight is not None:
            scale2 = scale2 * bn.weight.square()
        shape = [1, -1] + [1] * (mu.dim() - 2)
        return out, (var.mul_(scale2.view(shape)) if inplace else var * scale2.view(shape))


class VDPLayerNorm(VDPModule):
    """Layer norm (eq. 14), linearised like batch norm: the per-example statistics of the mean
    are constants, ``sigma_y^2 = gamma^2 / (Var(mu_x) + eps) * sigma_x^2``.

    Eq. 14 as printed scales the variance by ``(mu_LN / sqrt(Var(mu_x) + eps))^2``, with the
    layer mean ``mu_LN`` in the numerator; the derivative of ``(x - mu_LN) / sqrt(Var + eps) *
    gamma + beta`` with respect to ``x`` (statistics held fixed) is ``gamma / sqrt(Var + eps)``,
    which is what we use (it is also what eq. 14's mean line implies and what batch norm does).
    """

    inplace_var = True

    def __init__(self, ln: nn.LayerNorm):
        super().__init__()
        self.ln = ln

    def forward(self, mu, var, inplace: bool = False):
        out = self.ln(mu)
        if var is None:
            return out, None
        dims = tuple(range(mu.dim() - len(self.ln.normalized_shape), mu.dim()))
        v = mu.var(dim=dims, unbiased=False, keepdim=True)
        scale2 = 1.0 / (v + self.ln.eps)
        if self.ln.weight is not None:
            scale2 = scale2 * self.ln.weight.square()
        return out, (var.mul_(scale2) if inplace else var * scale2)


class VDPGroupNorm(VDPModule):
    """Group norm, linearised as layer norm (eq. 14) and batch norm: the per-example, per-group
    statistics of the mean are constants, ``sigma_y^2 = gamma_c^2 / (Var_group(mu_x) + eps) * sigma_x^2``."""

    inplace_var = True

    def __init__(self, gn: nn.GroupNorm):
        super().__init__()
        self.gn = gn

    def forward(self, mu, var, inplace: bool = False):
        out = self.gn(mu)
        if var is None:
            return out, None
        n, c, g = mu.shape[0], mu.shape[1], self.gn.num_groups
        v = mu.reshape(n, g, -1).var(dim=-1, unbiased=False)  # (N, G): the statistics GroupNorm uses
        scale2 = (1.0 / (v + self.gn.eps)).repeat_interleave(c // g, dim=1)  # (N, C)
        if self.gn.weight is not None:
            scale2 = scale2 * self.gn.weight.square()
        scale2 = scale2.view(n, c, *([1] * (mu.dim() - 2)))
        return out, (var.mul_(scale2) if inplace else var * scale2)


# -- pooling, reshaping, dropout -------------------------------------------------------------------
class VDPMaxPool2d(VDPModule):
    """Co-pooling ("VDP++ for Convolutional Kernels", after [8]): the maximum of the means is
    passed on, with the variance of the same element (not the maximum variance)."""

    def __init__(self, pool: nn.MaxPool2d):
        super().__init__()
        self.pool = pool

    def forward(self, mu, var):
        p = self.pool
        if var is None:
            return p(mu), None
        out, idx = F.max_pool2d(mu, p.kernel_size, p.stride, p.padding, p.dilation, p.ceil_mode, return_indices=True)
        # indices are flat positions within each (N, C) plane
        v = var.flatten(2).gather(2, idx.flatten(2)).view_as(out)
        return out, v


def _pool_counts(size: int, out: int, device) -> torch.Tensor:
    """Window lengths of adaptive pooling along one axis (PyTorch's start/end rule)."""
    i = torch.arange(out, device=device)
    start = torch.div(i * size, out, rounding_mode="floor")
    end = torch.div((i + 1) * size + out - 1, out, rounding_mode="floor")
    return (end - start).to(torch.get_default_dtype())


class VDPAvgPool2d(VDPModule):
    """Average pooling is linear: the mean of n independent inputs has variance sum(var) / n^2
    = avg(var) / n (n = the window's element count, edges and adaptive windows included)."""

    def __init__(self, pool: nn.Module):
        super().__init__()
        self.pool = pool

    def forward(self, mu, var):
        out = self.pool(mu)
        if var is None:
            return out, None
        p = self.pool
        avg = p(var)
        if isinstance(p, nn.AdaptiveAvgPool2d):
            h, w = out.shape[-2:]
            n = _pool_counts(mu.shape[-2], h, mu.device)[:, None] * _pool_counts(mu.shape[-1], w, mu.device)[None, :]
            return out, avg / n.to(avg.dtype)
        # out = (window sum) / D, so var = sum(var) / D^2 = avg(var) / D. D (kernel area, the
        # in-image count, a clipped ceil-mode window or divisor_override) is read off the pool
        # itself: pooling ones gives n_in / D, and with divisor 1 it gives n_in.
        ones = torch.ones_like(mu[:1, :1])
        n_in = F.avg_pool2d(ones, p.kernel_size, p.stride, p.padding, p.ceil_mode, True, 1)
        divisor = n_in / p(ones)
        return out, avg / divisor


class VDPFlatten(VDPModule):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, mu, var):
        f = lambda t: t.flatten(self.start_dim, self.end_dim)  # noqa: E731
        return f(mu), (None if var is None else f(var))


class VDPIdentity(VDPModule):
    def forward(self, mu, var):
        return mu, var


class VDPDropout(VDPModule):
    """Dropout multiplies an activation by ``m / (1 - p)`` with ``m ~ Bernoulli(1 - p)``; given the
    mask, mean and variance scale by ``1 / (1 - p)`` and ``1 / (1 - p)^2``. One mask is drawn
    per activation in training (shared by its mean and variance); identity in evaluation."""

    def __init__(self, p: float):
        super().__init__()
        self.p = float(p)

    def forward(self, mu, var):
        if not self.training or self.p <= 0.0:
            return mu, var
        if self.p >= 1.0:
            return torch.zeros_like(mu), (None if var is None else torch.zeros_like(var))
        keep = (torch.rand_like(mu) >= self.p).to(mu.dtype)
        scale = 1.0 / (1.0 - self.p)
        return mu * keep * scale, (None if var is None else var * keep * scale * scale)

    def extra_repr(self):
        return f"p={self.p}"


# -- composition -----------------------------------------------------------------------------------
class VDPSequential(nn.Sequential):
    """nn.Sequential over VDP modules: children are named like the original network's."""

    def forward(self, mu, var=None):  # noqa: D401 - nn.Sequential signature with moments
        # ``owned``: ``var`` was allocated inside this sequence (not the caller's tensor, nor a
        # view of it), so element-wise layers may update it in place when autograd is off
        no_grad = not torch.is_grad_enabled()
        owned = False
        for m in self:
            if no_grad and owned and m.inplace_var:
                mu, var = m(mu, var, inplace=True)
                continue
            before = None if var is None else var.untyped_storage().data_ptr()
            mu, var = m(mu, var)
            if var is not None and var.untyped_storage().data_ptr() != before:
                owned = True
        return mu, var


class VDPResidual(VDPModule):
    """``post(body(x) + shortcut(x))`` with moments (eq. 13).

    Eq. 13: ``mu_{l+1} = mu_l + F(mu_l)``, ``sigma^2_{l+1} = J^2 sigma^2_l`` with ``J = I + dF/dx``.
    Both branches are propagated with their own layers (each adds the variance of its own
    weights), and the branch outputs are summed as independent variables: ``var = var_F +
    var_shortcut``. Relative to eq. 13 this drops the cross term ``2 diag(dF/dx) sigma^2_l``
    (the covariance of the two branches), which a variance-only propagation cannot represent.
    """

    def __init__(self, body: VDPModule, shortcut: VDPModule | None = None, post: VDPModule | None = None):
        super().__init__()
        self.body = body
        self.shortcut = shortcut if shortcut is not None else VDPIdentity()
        self.post = post if post is not None else VDPIdentity()

    def forward(self, mu, var):
        mb, vb = self.body(mu, var)
        ms, vs = self.shortcut(mu, var)
        return self.post(mb + ms, _add_var(vb, vs))


# -- softmax (eq. 8-9) -----------------------------------------------------------------------------
def softmax_moments(mu: torch.Tensor, var: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of ``softmax(z)`` for ``z ~ N(mu, diag(var))`` by its Jacobian (eq. 8-9).

    ``mu_y = softmax(mu)``; ``sigma_y^2 = (J o J) sigma_z^2`` with ``J = diag(p) - p p^T`` at ``mu``.
    Row k: ``sum_j J_kj^2 var_j = p_k^2 [(1 - p_k)^2 var_k + sum_{j != k} p_j^2 var_j]`` -- O(K),
    not O(K^2). For the most probable class the two factors are sums over the other classes
    (not ``1 - p_k`` and ``sum_j - p_k^2 var_k``), which would cancel to 0 for a confident output.
    """
    p = torch.softmax(mu, dim=-1)
    if var is None:
        return p, torch.zeros_like(p)
    t = p * p * var
    top = torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).bool()
    others = ~top
    rest_top = (t * others).sum(-1, keepdim=True)  # sum_{j != top} p_j^2 var_j
    q_top = (p * others).sum(-1, keepdim=True)  # 1 - p_top
    rest = torch.where(top, rest_top, t.sum(-1, keepdim=True) - t)
    one_minus_p = torch.where(top, q_top, 1 - p)
    out = p * p * (one_minus_p.square() * var + rest)
    return p, out.clamp_min(0.0)


def sigmoid_moments(mu: torch.Tensor, var: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and variance of ``sigmoid(z)`` label by label for ``z ~ N(mu, diag(var))`` (multi-label
    outputs): eq. 8-9 with the sigmoid in place of the softmax. Its Jacobian is diagonal,
    ``p (1 - p)``, so ``mu_y = sigmoid(mu)`` and ``sigma_y^2 = p^2 (1 - p)^2 sigma_z^2``; ``1 - p`` is
    ``sigmoid(-mu)``, which keeps the variance of a confident label from cancelling to 0."""
    p = torch.sigmoid(mu)
    if var is None:
        return p, torch.zeros_like(p)
    return p, (p * torch.sigmoid(-mu)).square() * var


def softmax_jacobian_sq(p: torch.Tensor) -> torch.Tensor:
    """(N, K, K) squared softmax Jacobian entries (reference for tests)."""
    j = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    return j * j


__all__ = ["VDPModule", "VDPWeightLayer", "VDPLinear", "VDPConv2d", "VDPActivation", "VDPBatchNorm", "VDPLayerNorm",
           "VDPGroupNorm", "VDPMaxPool2d", "VDPAvgPool2d", "VDPFlatten", "VDPIdentity", "VDPDropout", "VDPSequential",
           "VDPResidual", "softmax_moments", "sigmoid_moments", "ELEMENTWISE"]
