"""Subnetwork selection: which parameters of a trained network become stochastic.

One interface for every criterion, shaped like laplace-torch's ``SubnetMask``::

    crit = make_criterion("gradient", size=0.01)          # or GradientCriterion(size=0.01, ...)
    idx = crit.select(model, train_loader, loss_fn=task.loss)   # LongTensor, sorted, unique

``idx`` holds *flat* indices into ``torch.nn.utils.parameters_to_vector(model.parameters())``
(the order of ``model.named_parameters()``), so the same mask can feed PBN's partial VI
(:mod:`bench.subnet.partial_vi`) or a subnetwork Laplace approximation at equal size.

Only *candidate* parameters can be selected. ``param_filter(module_name, module, param_name)``
decides which; the default admits the weights and biases of Linear / Conv layers and
excludes everything else (BatchNorm affine parameters in particular). The subnetwork size is
a count (``int``) or a fraction ``r_bayes`` of the candidate parameters (``float`` in (0, 1]);
the PBN paper writes ``k = r_bayes x N_theta_total`` (Algorithm 1, line 8) -- on the
benchmark's networks candidates are > 99.7 % of all parameters, so the two agree to rounding.

Criteria (registry ``CRITERIA``):

* ``gradient`` -- PBN sensitivity analysis (PBN paper Sec. 3 and Algorithm 1 lines 7-8:
  ``Topk(|grad_theta L|)``); ``squared=True`` ranks by squared gradients as in the earlier
  version (sparse-Bayesian-networks paper, Sec. 2.2 step (2): ``Topk(grad_theta^2)``).
  Gradients of the mean NLL are taken per mini-batch over the training set (or its first
  ``n_batches`` batches) and their magnitudes accumulated (``aggregate="per_batch"``): at a
  MAP optimum the full-data gradient is close to zero and mostly noise, while per-batch
  magnitudes measure how strongly the loss reacts to each parameter. ``aggregate="full"``
  ranks by the magnitude of the full-data gradient instead.
* ``magnitude`` -- largest ``|theta|`` (pruning-style baseline).
* ``random`` -- uniformly random subset (the PBN paper's "random subnetwork of the same size"
  ablation, Sec. 4.3).

Every criterion supports ``per_layer=True``: the budget ``k`` is split over layers in
proportion to their candidate counts (largest-remainder rounding, so the total stays ``k``)
and the top entries are taken within each layer, instead of one global ranking.
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError
from bench.registry import Registry

#: ``param_filter(module_name, module, param_name) -> bool``: may this parameter be selected?
ParamFilter = Callable[[str, nn.Module, str], bool]

#: layer types whose parameters are candidates by default (and that partial VI can sample)
SUPPORTED_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def default_param_filter(module_name: str, module: nn.Module, param_name: str) -> bool:
    """Weights and biases of Linear / Conv layers; never BatchNorm, LayerNorm, embeddings, ..."""
    return isinstance(module, SUPPORTED_LAYERS) and param_name in ("weight", "bias")


def all_params_filter(module_name: str, module: nn.Module, param_name: str) -> bool:
    return True


@dataclass(frozen=True)
class ParamSlot:
    """Where one parameter tensor lives in the flat parameter vector."""

    name: str  # full name, as in model.named_parameters()
    module_name: str
    param_name: str
    module_type: str
    offset: int
    numel: int
    shape: tuple[int, ...]
    candidate: bool

    @property
    def end(self) -> int:
        return self.offset + self.numel


def param_layout(model: nn.Module, param_filter: ParamFilter | None = None) -> list[ParamSlot]:
    """The flat-vector layout of ``model.parameters()`` with each tensor's candidate flag."""
    param_filter = param_filter or default_param_filter
    slots, offset = [], 0
    for name, p in model.named_parameters():
        module_name, _, param_name = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        slots.append(ParamSlot(name, module_name, param_name, type(module).__name__, offset, p.numel(),
                               tuple(p.shape), bool(param_filter(module_name, module, param_name))))
        offset += p.numel()
    return slots


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _module_groups(layout: Sequence[ParamSlot], candidates_only: bool = True) -> list[tuple[str, list[ParamSlot]]]:
    """Slots grouped by owning module (a "layer": its weight and bias), in parameter order."""
    groups: dict[str, list[ParamSlot]] = {}
    for s in layout:
        if s.candidate or not candidates_only:
            groups.setdefault(s.module_name, []).append(s)
    return list(groups.items())


def _slot_range(slots: Iterable[ParamSlot]) -> torch.Tensor:
    return torch.cat([torch.arange(s.offset, s.end) for s in slots]) if slots else torch.empty(0, dtype=torch.long)


def candidate_indices(model: nn.Module, param_filter: ParamFilter | None = None) -> torch.Tensor:
    """Sorted flat indices of every candidate parameter entry."""
    slots = [s for s in param_layout(model, param_filter) if s.candidate]
    return _slot_range(slots) if slots else torch.empty(0, dtype=torch.long)


def resolve_subnet_size(size: int | float, n_candidates: int) -> int:
    """``int`` -> that many parameters; ``float`` in (0, 1] -> round(size x n_candidates) (>= 1)."""
    if isinstance(size, bool) or not isinstance(size, (int, float)):
        raise BenchError(f"subnetwork size must be an int count or a float fraction, got {size!r}")
    if isinstance(size, float) and not (size > 1.0 and size.is_integer()):
        if not 0.0 < size <= 1.0:
            raise BenchError(f"subnetwork fraction must lie in (0, 1], got {size}")
        return max(1, min(n_candidates, int(round(size * n_candidates))))
    k = int(size)  # an int, or an integer-valued float > 1: a count
    if not 0 <= k <= n_candidates:
        raise BenchError(f"subnetwork size {k} outside [0, {n_candidates}] candidate parameters")
    return k


def allocate_per_layer(k: int, sizes: Sequence[int]) -> list[int]:
    """Split ``k`` over layers proportionally to ``sizes`` (largest remainder; sums to ``k``)."""
    total = sum(sizes)
    if total == 0:
        return [0] * len(sizes)
    quotas = [k * n / total for n in sizes]
    counts = [int(math.floor(q)) for q in quotas]
    order = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: k - sum(counts)]:
        counts[i] += 1
    return counts


def _as_index_tensor(indices, n_params: int) -> torch.Tensor:
    idx = torch.as_tensor(indices, dtype=torch.long).flatten().cpu()
    if idx.numel() and (idx.min() < 0 or idx.max() >= n_params):
        raise BenchError(f"subnetwork index out of range [0, {n_params})")
    if idx.numel() != torch.unique(idx).numel():
        raise BenchError("subnetwork indices are not unique")
    return idx.sort().values


def indices_to_masks(model: nn.Module, indices: torch.Tensor) -> dict[str, torch.Tensor]:
    """Flat indices -> ``{param name: bool mask shaped like the parameter}`` (all parameters)."""
    layout = param_layout(model, all_params_filter)
    n = layout[-1].end if layout else 0
    flat = torch.zeros(n, dtype=torch.bool)
    flat[_as_index_tensor(indices, n)] = True
    return {s.name: flat[s.offset:s.end].view(s.shape).clone() for s in layout}


def masks_to_indices(model: nn.Module, masks: dict[str, torch.Tensor]) -> torch.Tensor:
    """``{param name: bool mask}`` (missing names = nothing selected) -> sorted flat indices."""
    layout = param_layout(model, all_params_filter)
    known = {s.name for s in layout}
    unknown = set(masks) - known
    if unknown:
        raise BenchError(f"masks for unknown parameters {sorted(unknown)}")
    parts = []
    for s in layout:
        if s.name in masks:
            m = torch.as_tensor(masks[s.name]).to("cpu", torch.bool)
            if tuple(m.shape) != s.shape:
                raise BenchError(f"mask for {s.name} has shape {tuple(m.shape)}, parameter has {s.shape}")
            parts.append(torch.nonzero(m.flatten(), as_tuple=False).flatten() + s.offset)
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)


def layer_distribution(model: nn.Module, indices: torch.Tensor, param_filter: ParamFilter | None = None) -> list[dict]:
    """Per-layer counts of the selected parameters, in depth order (PBN paper, Appendices D/E).

    One row per layer that has candidate or selected parameters: ``depth`` (0 = closest to the
    input among those layers), ``numel`` (its weights + biases), ``selected``,
    ``fraction_of_layer`` (= 1 - the paper's "sparsity value"), ``fraction_of_subnet``.
    """
    layout = param_layout(model, param_filter)
    n = layout[-1].end if layout else 0
    flat = torch.zeros(n, dtype=torch.bool)
    idx = _as_index_tensor(indices, n)
    flat[idx] = True
    k = max(int(idx.numel()), 1)
    rows = []
    for name, slots in _module_groups(layout, candidates_only=False):
        numel = sum(s.numel for s in slots)
        sel = int(sum(int(flat[s.offset:s.end].sum()) for s in slots))
        if not (any(s.candidate for s in slots) or sel):
            continue
        by_param = {s.param_name: int(flat[s.offset:s.end].sum()) for s in slots}
        rows.append({"layer": name, "type": slots[0].module_type, "depth": len(rows), "numel": numel,
                     "selected": sel, "selected_by_param": by_param, "fraction_of_layer": sel / numel,
                     "sparsity": 1.0 - sel / numel, "fraction_of_subnet": sel / k})
    return rows


# -- criteria ---------------------------------------------------------------------------------
CRITERIA: Registry[type["SubnetCriterion"]] = Registry("subnet criterion")


def register_criterion(name: str):
    def deco(cls):
        cls.name = name
        return CRITERIA.register(name)(cls)

    return deco


class SubnetCriterion(abc.ABC):
    """Scores every parameter entry; ``select`` keeps the top ``size`` candidates."""

    name: ClassVar[str] = "?"
    needs_data: ClassVar[bool] = False

    def __init__(self, size: int | float, *, per_layer: bool = False, param_filter: ParamFilter | None = None):
        self.size = size
        self.per_layer = bool(per_layer)
        self.param_filter = param_filter or default_param_filter

    @abc.abstractmethod
    def compute_param_scores(self, model: nn.Module, train_loader=None, **kwargs) -> torch.Tensor:
        """One score per entry of the flat parameter vector (higher = more worth selecting)."""

    def select(self, model: nn.Module, train_loader=None, **kwargs) -> torch.Tensor:
        """Sorted, unique flat indices (LongTensor on the CPU) of the selected parameters."""
        if self.needs_data and train_loader is None:
            raise BenchError(f"subnet criterion {self.name!r} needs the training data")
        layout = param_layout(model, self.param_filter)
        groups = [_slot_range(slots) for _, slots in _module_groups(layout)]
        n_cand = sum(len(g) for g in groups)
        k = resolve_subnet_size(self.size, n_cand)
        scores = self.compute_param_scores(model, train_loader, **kwargs).detach().float().cpu()
        if scores.numel() != (layout[-1].end if layout else 0):
            raise BenchError(f"criterion {self.name!r} returned {scores.numel()} scores for "
                             f"{layout[-1].end if layout else 0} parameters")
        scores = torch.nan_to_num(scores, nan=-math.inf)
        if self.per_layer:
            chosen = [g[torch.topk(scores[g], c, sorted=False).indices]
                      for g, c in zip(groups, allocate_per_layer(k, [len(g) for g in groups])) if c]
            chosen = torch.cat(chosen) if chosen else torch.empty(0, dtype=torch.long)
        else:
            cand = torch.cat(groups) if groups else torch.empty(0, dtype=torch.long)
            chosen = cand[torch.topk(scores[cand], k, sorted=False).indices]
        return chosen.sort().values


@register_criterion("gradient")
class GradientCriterion(SubnetCriterion):
    """Top-k ``|dL/dtheta|`` (or ``(dL/dtheta)^2``): PBN's first-order sensitivity analysis."""

    needs_data = True

    def __init__(self, size, *, squared: bool = False, n_batches: int | None = None,
                 aggregate: str = "per_batch", per_layer: bool = False, param_filter: ParamFilter | None = None):
        super().__init__(size, per_layer=per_layer, param_filter=param_filter)
        if aggregate not in ("per_batch", "full"):
            raise BenchError(f"unknown gradient aggregate {aggregate!r}; valid: full, per_batch")
        self.squared, self.aggregate = bool(squared), aggregate
        self.n_batches = None if n_batches is None else int(n_batches)

    def compute_param_scores(self, model, train_loader=None, loss_fn=None, **kwargs):
        """Accumulated gradient magnitudes of the mean loss, with the network in eval mode.

        Eval mode: batch norm uses its running statistics (the deployed network's
        sensitivity) and no buffer of ``model`` changes; ``.grad`` fields are not touched.
        ``loss_fn(output, y)`` defaults to cross-entropy (pass ``task.loss`` for regression).
        """
        loss_fn = loss_fn or F.cross_entropy
        params = list(model.parameters())
        trainable = [i for i, p in enumerate(params) if p.requires_grad]
        sizes = [p.numel() for p in params]
        device = params[0].device if params else torch.device("cpu")
        acc = torch.zeros(sum(sizes), dtype=torch.float64, device=device)
        n_seen = 0
        was_training = model.training
        model.eval()
        try:
            for b, (x, y) in enumerate(train_loader):
                if self.n_batches is not None and b >= self.n_batches:
                    break
                with torch.enable_grad():
                    loss = loss_fn(model(x), y)
                    grads = torch.autograd.grad(loss, [params[i] for i in trainable], allow_unused=True)
                full = [torch.zeros(n, device=device) for n in sizes]
                for i, g in zip(trainable, grads):
                    if g is not None:
                        full[i] = g.detach().flatten()
                g = torch.cat(full).double() if full else acc
                w = len(x)
                if self.aggregate == "full":
                    acc += w * g
                else:
                    acc += w * (g.square() if self.squared else g.abs())
                n_seen += w
        finally:
            model.train(was_training)
        if n_seen == 0:
            raise BenchError("gradient criterion saw no training batches")
        acc /= n_seen
        if self.aggregate == "full":
            acc = acc.square() if self.squared else acc.abs()
        return acc.float()


@register_criterion("magnitude")
class MagnitudeCriterion(SubnetCriterion):
    """Largest ``|theta|``."""

    def compute_param_scores(self, model, train_loader=None, **kwargs):
        return torch.cat([p.detach().flatten().abs().cpu() for p in model.parameters()])


@register_criterion("random")
class RandomCriterion(SubnetCriterion):
    """A uniformly random subset (seeded): the "random subnetwork of equal size" ablation."""

    def __init__(self, size, *, seed: int = 0, per_layer: bool = False, param_filter: ParamFilter | None = None):
        super().__init__(size, per_layer=per_layer, param_filter=param_filter)
        self.seed = int(seed)

    def compute_param_scores(self, model, train_loader=None, **kwargs):
        gen = torch.Generator().manual_seed(self.seed)
        return torch.rand(num_params(model), generator=gen)


def make_criterion(name: str, size: int | float, **options) -> SubnetCriterion:
    """Build a registered criterion; options the criterion does not take are an error."""
    cls = CRITERIA.get(name)
    import inspect

    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "size"}
    unknown = set(options) - accepted
    if unknown:
        raise BenchError(f"subnet criterion {name!r} takes no option(s) {sorted(unknown)}; valid: {sorted(accepted)}")
    return cls(size, **options)
