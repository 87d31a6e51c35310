"""The linearised (GLM) predictive of a diagonal posterior over all weights, without the
per-example Jacobian of every weight.

``f_var[b] = J_b diag(v) J_b^T`` (laplace-torch's ``DiagLaplace.functional_variance``) needs the
Jacobian ``J_b`` (K x P) of every weight for every example: B x K x P floats, ~4.7 s per 200 test
images on LeNet-300-100 with laplace-torch's backends. The sum over weights factorises per layer
through the layer input ``a`` and the gradient ``g_k = df_k/dz`` at its output (one backward pass
per output k, as :mod:`bench.laplace.subnet_jacobians`):

* Linear, ``dz_o/dW[o, i] = a_i``: ``f_var[k, j] += sum_o g_ko g_jo (sum_i a_i^2 v_W[o, i] + v_b[o])``
  -- one (B, in) x (in, out) product, no per-weight tensor;
* Conv2d: the per-example weight gradient ``G_k[o, c] = sum_l g_k[o, l] unfold(a)[c, l]``
  (K x B x O x C floats for this layer only), then ``sum_{o,c} G_k G_j v``; biases ``sum_l g``;
  a grouped (depthwise) convolution's row ``o`` reads its group's columns only;
* BatchNorm in eval mode, GroupNorm and LayerNorm (``z = gamma * xhat + beta``, ``xhat`` the
  normalised input): ``G_k[c] = sum_l g_k[c, l] xhat[c, l]`` and ``sum_l g_k[c, l]`` (per channel;
  per normalised entry for LayerNorm).

Exact (up to float rounding) for networks whose parameters all sit in these layers; anything else
raises :class:`NotImplementedError`, and callers fall back to laplace-torch's predictive.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SUPPORTED = (nn.Linear, nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)
#: floats of one block of per-example convolution weight gradients (K x examples x O x C); on a GPU
#: eight times as many (a ResNet's widest convolution: one example a block on the CPU, five there)
CONV_BLOCK_FLOATS = 2**24
CUDA_CONV_BLOCK_FLOATS = 2**27


def unsupported_modules(model: nn.Module) -> list[str]:
    """Modules holding trainable parameters that :func:`diag_glm_moments` cannot handle."""
    out = []
    for name, m in model.named_modules():
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if not isinstance(m, SUPPORTED):
            out.append(f"{name} ({type(m).__name__})")
        elif isinstance(m, nn.Conv2d) and (m.padding_mode != "zeros" or isinstance(m.padding, str)):
            out.append(f"{name} (Conv2d padding mode)")
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)) and m.training:
            out.append(f"{name} (batch norm in training mode)")
    return out


def _variance_views(model: nn.Module, variance: torch.Tensor) -> dict[int, dict[str, torch.Tensor]]:
    """Per module id: its parameters' slices of the flat variance vectors ``(T, P)``
    (parameters_to_vector order over trainable parameters, as laplace-torch), each ``(T, *shape)``."""
    views: dict[int, dict[str, torch.Tensor]] = {}
    offset = 0
    modules = dict(model.named_modules())
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        mod_name, _, pname = name.rpartition(".")
        m = modules[mod_name] if mod_name else model
        views.setdefault(id(m), {})[pname] = variance[:, offset:offset + p.numel()].reshape(len(variance), *p.shape)
        offset += p.numel()
    if offset != variance.shape[1]:
        raise ValueError(f"variance has {variance.shape[1]} entries, the model {offset} trainable parameters")
    return views


def _quadratic(G: torch.Tensor, w: torch.Tensor, per_example: bool = False) -> torch.Tensor:
    """``(B, K, K)``: ``sum_n G[k, b, n] w[n] G[j, b, n]`` (``w[b, n]`` when ``per_example``) for
    per-output gradients ``G`` (K, B, ...), as one batched matrix product (a three-operand einsum
    may build the K x K x B x ... outer product first: minutes on a ResNet)."""
    K, B = G.shape[:2]
    Gb = G.reshape(K, B, -1).transpose(0, 1)  # (B, K, N)
    w = w.reshape(B, 1, -1) if per_example else w.reshape(1, 1, -1)
    return torch.bmm(Gb * w, Gb.transpose(1, 2))


#: from this many variance vectors on, :func:`_quadratic_many` forms the K (K + 1) / 2 products of
#: output gradients once and contracts them with every vector in one matrix product (below, one
#: product per vector is cheaper)
PAIR_PRODUCTS_FROM = 4
#: floats of one block of those pairwise products (examples x pairs x entries): on the CPU a block
#: that stays near the caches; on a GPU one 16 times larger, for fewer kernel launches per example (a
#: ResNet's widest convolution holds 2.4 M weights x 55 pairs per example: 32 CPU-sized blocks)
PAIR_BLOCK_FLOATS = 2**22
CUDA_PAIR_BLOCK_FLOATS = 2**26


def _quadratic_many(G: torch.Tensor, W: torch.Tensor, per_example: bool = False) -> torch.Tensor:
    """``(T, B, K, K)``: :func:`_quadratic` of ``G`` (K, B, ...) for each of the T variance vectors
    ``W`` (``(T, ...)``; ``(T, B, ...)`` when ``per_example``). The products ``G[k] G[j]`` of every
    pair ``k <= j`` are formed once, a block of entries at a time, and contracted with all T vectors
    in one matrix product, instead of one weighted copy of ``G`` and one product per vector
    (``python -m bench perf --case diag_glm_grid_pairs_vs_per_vector`` times both)."""
    K, B = G.shape[:2]
    Gb = G.reshape(K, B, -1).transpose(0, 1)  # (B, K, N)
    N, T = Gb.shape[-1], len(W)
    Wt = W.reshape(T, B, N) if per_example else W.reshape(T, N)
    rows, cols = torch.triu_indices(K, K, device=G.device)
    acc = G.new_zeros(B, len(rows), T)
    block = CUDA_PAIR_BLOCK_FLOATS if G.device.type == "cuda" else PAIR_BLOCK_FLOATS
    step = max(1, block // (B * len(rows)))
    for s in range(0, N, step):
        g = Gb[..., s:s + step]
        P = g[:, rows] * g[:, cols]  # (B, pairs, n)
        acc += torch.bmm(P, Wt[:, :, s:s + step].permute(1, 2, 0)) if per_example else P @ Wt[:, s:s + step].T
    out = G.new_empty(B, K, K, T)
    out[:, rows, cols] = acc
    out[:, cols, rows] = acc
    return out.permute(3, 0, 1, 2)


def diag_glm_moments(model: nn.Module, x: torch.Tensor, variance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f_mu (B, K), f_var (B, K, K))`` of the linearised network under ``N(w_MAP, diag(variance))``.

    ``variance`` of shape ``(T, P)`` gives ``f_var`` of shape ``(T, B, K, K)``, one per variance
    vector, for about the cost of one: the Jacobian pieces are computed once (the prior-precision
    grid search evaluates all its grid points this way)."""
    bad = unsupported_modules(model)
    if bad:
        raise NotImplementedError(f"diag_glm_moments does not support {bad[:3]}")
    single = variance.dim() == 1
    variance = variance.to(x.device, torch.float32)
    views = _variance_views(model, variance[None] if single else variance)
    T = 1 if single else len(variance)
    calls: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []

    def hook(module, inputs, output):
        calls.append((module, inputs[0], output))

    handles = [m.register_forward_hook(hook) for m in model.modules() if id(m) in views]
    try:
        with torch.enable_grad():
            f = model(x.detach().requires_grad_(True))  # a graph even when no weight requires grad
    finally:
        for h in handles:
            h.remove()
    B, K = f.shape
    zs = [z for _, _, z in calls]
    with torch.enable_grad():
        per_k = [torch.autograd.grad(f[:, k].sum(), zs, retain_graph=k < K - 1, allow_unused=True) for k in range(K)]
    f_var = f.new_zeros(T, B, K, K)

    def add(G, w, rows=slice(None), per_example=False):
        if T >= PAIR_PRODUCTS_FROM:
            f_var[:, rows] += _quadratic_many(G, w, per_example=per_example)
            return
        for t in range(T):
            f_var[t, rows] += _quadratic(G, w[t], per_example=per_example)

    with torch.no_grad():
        for i, (m, a, z) in enumerate(calls):
            g = torch.stack([gk[i] if gk[i] is not None else torch.zeros_like(z) for gk in per_k])  # (K, B, ...)
            v = views[id(m)]
            a = a.detach()
            if isinstance(m, nn.Linear):
                if a.dim() != 2:
                    raise NotImplementedError("diag_glm_moments: Linear layers on (batch, features) inputs only")
                c = torch.stack([((a * a) @ v["weight"][t].T if "weight" in v else a.new_zeros(B, z.shape[1]))
                                 + (v["bias"][t] if "bias" in v else 0.0) for t in range(T)])  # (T, B, out)
                add(g, c, per_example=True)
            elif isinstance(m, nn.Conv2d):
                gl = g.reshape(K, B, g.shape[2], -1)  # (K, B, O, L)
                if "weight" in v:
                    cols = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)
                    vw = v["weight"].reshape(T, gl.shape[2], -1)
                    block = CUDA_CONV_BLOCK_FLOATS if a.device.type == "cuda" else CONV_BLOCK_FLOATS
                    step = max(1, block // (K * vw[0].numel()))  # examples per block
                    ng, L = m.groups, gl.shape[-1]
                    for s in range(0, B, step):  # per-example weight gradients, a block at a time
                        gs, cs = gl[:, s:s + step], cols[s:s + step]
                        if ng == 1:
                            G = torch.einsum("kbol,bcl->kboc", gs, cs)
                        else:  # row o of group j reads group j's columns of the unfolded input
                            G = torch.einsum("kbjol,bjcl->kbjoc", gs.reshape(K, gs.shape[1], ng, -1, L),
                                             cs.reshape(cs.shape[0], ng, -1, L)).flatten(2, 3)
                        add(G, vw, rows=slice(s, s + step))
                if "bias" in v:
                    add(gl.sum(-1), v["bias"])
            elif isinstance(m, nn.LayerNorm):  # z = gamma * xhat + beta over the normalised trailing dims
                xhat = F.layer_norm(a, m.normalized_shape, None, None, m.eps)
                n = math.prod(m.normalized_shape)
                gl = g.reshape(K, B, -1, n)
                if "weight" in v:
                    add((gl * xhat.reshape(1, B, -1, n)).sum(2), v["weight"])
                if "bias" in v:
                    add(gl.sum(2), v["bias"])
            else:  # batch norm (eval mode) / group norm: z = gamma * xhat + beta per channel
                if isinstance(m, nn.GroupNorm):
                    xhat = F.group_norm(a, m.num_groups, None, None, m.eps)
                else:
                    shape = (1, -1) + (1,) * (a.dim() - 2)
                    xhat = (a - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps)
                gl = g.reshape(K, B, a.shape[1], -1)
                if "weight" in v:
                    add((gl * xhat.reshape(1, B, a.shape[1], -1)).sum(-1), v["weight"])
                if "bias" in v:
                    add(gl.sum(-1), v["bias"])
    if single:
        f_var = f_var[0]
    return f.detach(), f_var
