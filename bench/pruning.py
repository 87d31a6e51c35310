"""Magnitude pruning of the weight matrices of a network (the VDP++ paper's self-compression
experiment, Fig. 2, and its controls).

Schemes (``scheme``):

* ``global`` -- the paper's: global L1 unstructured pruning, the ``amount`` smallest ``|w|``
  over all Linear / Conv weights (``torch.nn.utils.prune.global_unstructured`` with
  ``L1Unstructured``);
* ``layerwise`` -- the ``amount`` smallest ``|w|`` within each layer (every layer keeps the same
  fraction), so that no layer is emptied by a global threshold;
* ``bn_folded`` -- global, but each weight ranked by its magnitude after folding the batch norm
  that follows its layer, ``|w| * |gamma_o| / sqrt(running_var_o + eps)`` for output unit o. A
  batch norm rescales its layer's output, so raw magnitudes of layers before different batch
  norms are not comparable (a KL or weight decay can shrink a layer's means while its batch
  norm scales them back up); folding compares the weights by their effect on the output.

Weight layers are ``nn.Linear`` / ``nn.Conv2d`` and the VDP++ layers; the batch norm of a layer is
the first batch-norm module that follows it in registration order before the next weight layer,
with as many features as the layer has outputs (Sequential LeNets, ResNet blocks' conv -> bn, the
shortcut's conv -> bn). Biases and batch-norm parameters are never pruned.
"""
from __future__ import annotations

import torch
from torch import nn

from bench.errors import BenchError

SCHEMES = ("global", "layerwise", "bn_folded")


def _is_weight_layer(m: nn.Module) -> bool:
    from bench.vdp.layers import VDPWeightLayer

    return isinstance(m, (nn.Linear, nn.Conv2d, VDPWeightLayer))


def weight_layers_with_bn(model: nn.Module) -> list[tuple[nn.Module, nn.modules.batchnorm._BatchNorm | None]]:
    """``(weight layer, the batch norm that follows it or None)`` in registration order."""
    mods = [m for m in model.modules()]
    out = []
    for i, m in enumerate(mods):
        if not _is_weight_layer(m):
            continue
        bn = None
        for nxt in mods[i + 1:]:
            if _is_weight_layer(nxt):
                break
            if isinstance(nxt, nn.modules.batchnorm._BatchNorm):
                if nxt.num_features == m.weight.shape[0]:
                    bn = nxt
                break
        out.append((m, bn))
    return out


def _scores(layer: nn.Module, bn, scheme: str) -> torch.Tensor:
    w = layer.weight.detach().abs()
    if scheme != "bn_folded" or bn is None:
        return w
    scale = torch.ones(w.shape[0], device=w.device, dtype=w.dtype)
    if bn.weight is not None:
        scale = scale * bn.weight.detach().abs()
    if bn.running_var is not None:
        scale = scale / torch.sqrt(bn.running_var.detach() + bn.eps)
    return w * scale.view(-1, *([1] * (w.dim() - 1)))


def prune_masks(model: nn.Module, amount: float, scheme: str = "global") -> list[tuple[nn.Module, torch.Tensor]]:
    """``(layer, keep mask)`` per weight layer removing the fraction ``amount`` of the weights."""
    if scheme not in SCHEMES:
        raise BenchError(f"pruning scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if not 0.0 <= float(amount) < 1.0:
        raise BenchError(f"pruning amount must be in [0, 1), got {amount}")
    pairs = weight_layers_with_bn(model)
    scores = [_scores(m, bn, scheme) for m, bn in pairs]
    if scheme == "layerwise":
        masks = [_keep_largest(s, int(round(amount * s.numel()))) for s in scores]
    else:
        flat = torch.cat([s.reshape(-1) for s in scores])
        keep_all = _keep_largest(flat, int(round(amount * flat.numel())))
        masks, start = [], 0
        for s in scores:
            masks.append(keep_all[start:start + s.numel()].view_as(s))
            start += s.numel()
    return [(m, k) for (m, _), k in zip(pairs, masks)]


def _keep_largest(scores: torch.Tensor, n_remove: int) -> torch.Tensor:
    """Boolean mask keeping all but the ``n_remove`` smallest scores (ties broken by position)."""
    keep = torch.ones_like(scores, dtype=torch.bool)
    if n_remove > 0:
        idx = torch.topk(scores.reshape(-1), n_remove, largest=False).indices
        keep.view(-1)[idx] = False
    return keep


@torch.no_grad()
def prune_(model: nn.Module, amount: float, scheme: str = "global") -> tuple[int, int]:
    """Prune ``model`` in place: removed weights' means set to 0 and, for VDP++ layers, their
    variances too. Returns ``(weights removed, weights in the pruned layers)``."""
    from bench.vdp.layers import VDPWeightLayer

    removed = total = 0
    for layer, keep in prune_masks(model, amount, scheme):
        layer.weight.mul_(keep)
        if isinstance(layer, VDPWeightLayer):
            layer.set_weight_mask(keep)
        removed += int((~keep).sum())
        total += keep.numel()
    return removed, total
