"""Subnetwork selection: which parameters of a trained network become stochastic.

One interface for every criterion, shaped like laplace-torch's ``SubnetMask``::

    crit = make_criterion("gradient", size=0.01)          # or GradientCriterion(size=0.01, ...)
    idx = crit.select(model, train_loader, loss_fn=task.loss)   # LongTensor, sorted, unique

``idx`` holds *flat* indices into ``torch.nn.utils.parameters_to_vector(model.parameters())``
(the order of ``model.named_parameters()``), so the same mask can feed PBN's partial VI
(:mod:`bench.subnet.partial_vi`) or a subnetwork Laplace approximation at equal size.

Only *candidate* parameters can be selected. ``param_filter(module_name, module, param_name)``
decides which; the default admits the weights and biases of Linear / Conv1d / Conv2d / Conv3d
layers (grouped and depthwise convolutions too) and excludes everything else (batch, group and
layer norm affine parameters, embeddings, the layers inside an ``nn.MultiheadAttention``, which
reads its ``out_proj`` weights without calling it): the rule of :mod:`bench.network`. The subnetwork size is
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
* ``random`` -- uniformly random subset of the same size (the subnetwork-Laplace paper's
  "Ours (Rand)" baseline; a control beside the PBN paper's criterion, which it does not compare).
* ``largest_variance_diag_laplace`` -- the subnetwork-Laplace paper's Wasserstein criterion
  ("Q3"): largest marginal variance under a diagonal GGN Laplace over all weights
  (laplace-torch's ``LargestVarianceDiagLaplaceSubnetMask``), restricted to weights with
  non-zero curvature (:class:`DegenerateSubnetError` otherwise).
* ``largest_variance_swag`` -- largest marginal variance under diagonal SWAG (laplace-torch's
  ``LargestVarianceSWAGSubnetMask``, the library's port of the authors' mask).

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

from bench.errors import BenchError, MethodFailedError
from bench.registry import Registry
from bench.seeding import derive_seed

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
    """The flat-vector layout of ``model.parameters()`` with each tensor's candidate flag. With the
    default filter, layers whose weights the network reads without calling them (those inside an
    ``nn.MultiheadAttention``: :func:`bench.network.functional_layers`) are not candidates either."""
    from bench.network import functional_layers

    skip = functional_layers(model) if param_filter in (None, default_param_filter) else set()
    param_filter = param_filter or default_param_filter
    slots, offset = [], 0
    for name, p in model.named_parameters():
        module_name, _, param_name = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        slots.append(ParamSlot(name, module_name, param_name, type(module).__name__, offset, p.numel(),
                               tuple(p.shape), bool(param_filter(module_name, module, param_name))
                               and module_name not in skip))
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


register_criterion = CRITERIA.register_class


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


# -- Laplace-based criteria (subnetwork Laplace paper) --------------------------------------
# Daxberger et al. 2021, "Q3. How do we select the subnetwork": minimise the Wasserstein
# distance between the full-network posterior N(w_MAP, H^-1) and the subnetwork posterior;
# under a factorised (diagonal) full-network posterior this is solved exactly by keeping the
# weights with the LARGEST MARGINAL VARIANCES. The variances come from laplace-torch: a
# diagonal GGN Laplace over all weights (``largest_variance_diag_laplace``, the paper's
# choice) or diagonal SWAG (``largest_variance_swag``, laplace-torch's port of the authors' mask).
#
# Indexing: laplace-torch's masks score ``parameters_to_vector(model.parameters())`` -- the
# same flat layout as :func:`param_layout` as long as every parameter requires grad (the
# copies made here make sure of it) -- so its scores drop straight into
# :meth:`SubnetCriterion.select`, whose ``param_filter`` then removes BatchNorm & co.


class DegenerateSubnetError(MethodFailedError):
    """The requested subnetwork would make the Laplace posterior a point estimate on the data."""


def as_torch_loader(train_loader, batch_size: int | None = None, *, shuffle: bool = False,
                    seed: int = 0, max_examples: int | None = None):
    """A ``torch.utils.data.DataLoader`` over the same examples (laplace-torch needs
    ``loader.dataset`` for N). Accepts a :class:`bench.data.TensorLoader`, a DataLoader, or
    any iterable of ``(x, y)`` batches (materialised once)."""
    from torch.utils.data import DataLoader, TensorDataset

    if hasattr(train_loader, "x") and hasattr(train_loader, "y"):
        x, y = train_loader.x, train_loader.y
        bs = batch_size or getattr(train_loader, "batch_size", 128)
    elif isinstance(train_loader, DataLoader) and max_examples is None and batch_size is None:
        return train_loader
    else:
        xs, ys = zip(*[(xb.detach().cpu(), yb.detach().cpu()) for xb, yb in train_loader])
        x, y = torch.cat(xs), torch.cat(ys)
        bs = batch_size or len(xs[0])
    if max_examples is not None and max_examples < len(x):
        # a fixed, seeded subset (the same for every call with the same seed)
        keep = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:max_examples].sort().values
        x, y = x[keep], y[keep]
    gen = torch.Generator().manual_seed(seed) if shuffle else None
    from bench.data import SourceDataset

    dataset = TensorDataset(x, y) if isinstance(x, torch.Tensor) else SourceDataset(x, y)  # files: read per item
    return DataLoader(dataset, batch_size=int(bs), shuffle=shuffle, generator=gen)


#: backends laplace-torch offers for a diagonal GGN (``auto`` tries them in the order of
#: DIAG_BACKEND_ORDER; see docs/subnet_laplace.md for the measurements behind the order)
DIAG_BACKENDS = ("auto", "backpack", "asdl", "curvlinops")
DIAG_BACKEND_ORDER = ("backpack", "asdl")


def laplace_backend(name: str):
    """laplace-torch's GGN backend class for ``"asdl" | "backpack" | "curvlinops"``."""
    from bench.laplace import import_laplace

    import_laplace()  # first, without its dependencies' torch.jit FutureWarnings
    from laplace.curvature import AsdlGGN, BackPackGGN, CurvlinopsGGN

    table = {"asdl": AsdlGGN, "backpack": BackPackGGN, "curvlinops": CurvlinopsGGN}
    if name not in table:
        raise BenchError(f"unknown laplace-torch backend {name!r}; valid: {', '.join(sorted(table))}")
    return table[name]


def _trainable_copy(model: nn.Module) -> nn.Module:
    import copy

    net = copy.deepcopy(model).eval()
    for p in net.parameters():
        p.requires_grad_(True)
    return net


def _fingerprint(model: nn.Module, loader) -> str:
    """Content hash of the network (parameters and buffers) and of the data a loader holds."""
    import hashlib

    h = hashlib.sha1()
    for t in list(model.state_dict().values()):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    ds = getattr(loader, "dataset", None)
    tensors = getattr(ds, "tensors", None)
    if tensors:
        h.update(str([tuple(t.shape) for t in tensors]).encode())
        for t in tensors:
            flat = t.reshape(len(t), -1)
            h.update(flat.detach().cpu().contiguous().numpy().tobytes())
    else:
        h.update(str(id(loader)).encode())
    return h.hexdigest()


#: diagonal GGNs already computed in this process, by (network, data, backend, likelihood):
#: a subnet-size sweep on one MAP network fits the diagonal Laplace once.
_DIAG_GGN_CACHE: "dict[tuple, tuple]" = {}  # key -> (H, loss, backend, fit seconds)
_DIAG_GGN_CACHE_SIZE = 4


def curvlinops_fallback_problem(model: nn.Module, loader, fraction: float = 0.25) -> str | None:
    """Why Curvlinops is not tried as the last diagonal-GGN backend of ``auto`` (None: it is): its
    Jacobians of every weight for a batch, batch x outputs x weights floats, must fit in
    ``fraction`` of the available memory."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return "no trainable parameter"
    x = next(iter(loader))[0]
    with torch.no_grad():
        was = model.training
        model.eval()
        try:
            k = int(model(x[:1].to(params[0].device)).shape[-1])
        finally:
            model.train(was)
    need = len(x) * k * sum(p.numel() for p in params) * 4
    if params[0].device.type == "cuda":  # as bench.laplace.memory.default_memory_limit (not imported: a cycle)
        limit = int(fraction * torch.cuda.mem_get_info(params[0].device)[0])
    else:
        import psutil

        limit = int(fraction * psutil.virtual_memory().available)
    if need > limit:
        return (f"not tried: its Jacobians of every weight need ~{need / 2**30:.2f} GiB per batch of {len(x)}, "
                f"over the {limit / 2**30:.2f} GiB limit (a smaller laplace_diag.batch_size lowers it)")
    return None


def fit_diag_laplace(model: nn.Module, loader, *, likelihood: str = "classification", backend: str = "auto",
                     prior_precision: float = 1.0, cache: bool = True):
    """A fitted laplace-torch diagonal GGN Laplace over ALL weights of a copy of ``model``.

    Returns ``(diag_laplace, info)``; ``info`` names the backend used, the fit time and
    whether the curvature came from the in-process cache. ``backend="auto"`` tries BackPACK,
    then ASDL (BackPACK has no extension for some modules, e.g. residual blocks; ASDL is
    slower on plain MLPs), and Curvlinops only when both fail (e.g. GroupNorm in a network with
    its own forward) and its Jacobians fit in memory (:func:`curvlinops_fallback_problem`: its
    diagonal materialises per-example Jacobians of all weights, 138 s and 9.9 GB for 1,000
    MNIST images on LeNet-300-100).
    """
    import time

    from bench.laplace import import_laplace

    import_laplace()  # first, without its dependencies' torch.jit FutureWarnings
    from laplace import Laplace
    from laplace.utils import LargestVarianceDiagLaplaceSubnetMask

    if backend not in DIAG_BACKENDS:
        raise BenchError(f"unknown diagonal-Laplace backend {backend!r}; valid: {', '.join(DIAG_BACKENDS)}")
    order = DIAG_BACKEND_ORDER if backend == "auto" else (backend,)
    key = None
    if cache:
        key = (_fingerprint(model, loader), tuple(order), likelihood)
        if key in _DIAG_GGN_CACHE:
            H, loss, used, secs = _DIAG_GGN_CACHE[key]
            net = _trainable_copy(model)
            la = Laplace(net, likelihood, subset_of_weights="all", hessian_structure="diag",
                         backend=laplace_backend(used), prior_precision=prior_precision)
            la.H = H.to(la._device, la._dtype).clone()
            la.mean = torch.nn.utils.parameters_to_vector(net.parameters()).detach()
            la.n_data, la.loss = len(loader.dataset), loss.to(la._device) if torch.is_tensor(loss) else loss
            return la, {"backend": used, "fit_time_s": 0.0, "cached": True, "fit_time_s_original": secs}
    errors = {}
    # auto, when BackPACK and ASDL both fail (modules neither has an extension for, e.g. GroupNorm,
    # a custom forward): Curvlinops (torch.func, any module), if its per-example Jacobians of every
    # weight fit in memory (curvlinops_fallback_problem)
    for name in tuple(order) + (("curvlinops",) if backend == "auto" else ()):
        if name == "curvlinops" and backend == "auto":
            why = curvlinops_fallback_problem(model, loader)
            if why:
                errors[name] = why
                continue
        net = _trainable_copy(model)  # BackPACK / ASDL attach hooks and attributes: own copy
        la = Laplace(net, likelihood, subset_of_weights="all", hessian_structure="diag",
                     backend=laplace_backend(name), prior_precision=prior_precision)
        # laplace-torch's Wasserstein mask: compute_param_scores fits the diagonal Laplace
        # and returns its posterior variances, one per entry of parameters_to_vector(net)
        mask = LargestVarianceDiagLaplaceSubnetMask(net, n_params_subnet=1, diag_laplace_model=la)
        t0 = time.perf_counter()
        try:
            mask.compute_param_scores(loader)
        except (MemoryError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - an unsupported module: try the next backend
            if backend != "auto":
                raise
            errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        secs = time.perf_counter() - t0
        if key is not None:
            while len(_DIAG_GGN_CACHE) >= _DIAG_GGN_CACHE_SIZE:
                _DIAG_GGN_CACHE.pop(next(iter(_DIAG_GGN_CACHE)))
            loss = la.loss.detach().cpu().clone() if torch.is_tensor(la.loss) else la.loss
            _DIAG_GGN_CACHE[key] = (la.H.detach().cpu().clone(), loss, name, secs)
        info = {"backend": name, "fit_time_s": secs, "cached": False}
        if errors:
            info["fallback_from"] = errors
        return la, info
    raise BenchError(f"no laplace-torch backend could fit a diagonal Laplace on this network: {errors}")


class VarianceCriterion(SubnetCriterion):
    """Shared part of the largest-marginal-variance criteria: score = marginal variance under a
    diagonal posterior estimate (subclasses: :meth:`variances`), restricted to weights the data
    can identify.

    Two guards, both stored in ``info``: the estimator's own (a weight with zero curvature /
    zero SWAG spread has no variance to offer) and, with ``exclude_non_identifiable`` (default),
    the training-mode gradient test of :mod:`bench.subnet.identifiability` (weights whose
    mini-batch gradient vanishes in training mode, e.g. constant inputs cancelled by batch
    norm). :class:`DegenerateSubnetError` if fewer than ``size`` candidates remain."""

    needs_data = True

    def __init__(self, size, *, likelihood: str = "classification", batch_size: int = 256,
                 max_examples: int | None = None, seed: int = 0, per_layer: bool = False,
                 exclude_non_identifiable: bool = True, identifiability_rtol: float = 1e-8,
                 param_filter: ParamFilter | None = None):
        super().__init__(size, per_layer=per_layer, param_filter=param_filter)
        self.likelihood = likelihood
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.max_examples = None if max_examples is None else int(max_examples)
        self.exclude_non_identifiable = bool(exclude_non_identifiable)
        self.identifiability_rtol = float(identifiability_rtol)
        self.info: dict = {}
        self._scores: torch.Tensor | None = None

    def loader(self, train_loader, shuffle: bool = False):
        return as_torch_loader(train_loader, self.batch_size, shuffle=shuffle, seed=self.seed,
                               max_examples=self.max_examples)

    def default_loss(self):
        return F.cross_entropy if self.likelihood == "classification" else F.mse_loss

    @abc.abstractmethod
    def variances(self, model, loader, loss_fn) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """``(variance, valid, info)`` over the flat parameter vector; ``valid`` False where the
        estimator itself has nothing to offer."""

    def compute_param_scores(self, model, train_loader=None, loss_fn=None, **kwargs):
        from bench.subnet.identifiability import non_identifiable
        from bench.data import TensorLoader

        loss_fn = loss_fn or self.default_loss()
        loader = self.loader(train_loader)
        var, valid, info = self.variances(model, loader, loss_fn)
        var, valid = var.detach().float().cpu(), valid.cpu()
        layout = param_layout(model, self.param_filter)
        cand = _slot_range([s for s in layout if s.candidate])
        info = {**info, "n_examples": len(loader.dataset),
                "n_invalid_candidates": int((~valid[cand]).sum()),
                "exclude_non_identifiable": self.exclude_non_identifiable}
        if self.exclude_non_identifiable:
            x, y = loader.dataset.tensors
            batches = TensorLoader(x, y, self.batch_size, shuffle=True, seed=self.seed)
            bad, ident = non_identifiable(model, batches, loss_fn, cand,
                                          rtol=self.identifiability_rtol)
            info["identifiability"] = ident
            info["n_non_identifiable"] = ident["n_non_identifiable"]
            info["n_non_identifiable_in_top"] = None
            valid = valid & ~bad
        if cand.numel():
            info.update(variance_max=float(var[cand].max()), variance_min=float(var[cand].min()))
        scores = torch.where(valid, var, torch.full_like(var, -math.inf))
        if self.exclude_non_identifiable and cand.numel():
            # how many of the weights the unguarded ranking would have picked were excluded
            k = resolve_subnet_size(self.size, cand.numel())
            top = cand[torch.topk(var[cand], k).indices]
            info["n_non_identifiable_in_top"] = int((~valid[top]).sum())
        self.info = info
        self._scores = scores
        return scores

    def select(self, model, train_loader=None, **kwargs):
        idx = super().select(model, train_loader, **kwargs)
        bad = ~torch.isfinite(self._scores[idx])
        if bool(bad.any()):
            layout = param_layout(model, self.param_filter)
            cand = _slot_range([s for s in layout if s.candidate])
            n_valid = int(torch.isfinite(self._scores[cand]).sum())
            raise DegenerateSubnetError(
                f"subnet criterion {self.name!r}: {int(bad.sum())} of the {idx.numel()} requested weights have "
                f"no variance to offer (zero curvature or SWAG spread on the training data, or a vanishing "
                f"training-mode gradient: weights into or out of dead ReLU units, constant inputs cancelled by "
                f"batch norm); a posterior over them adds no predictive variance. Only {n_valid} of "
                f"{cand.numel()} candidate weights qualify{' in some layer' if self.per_layer else ''}: use a "
                f"subnetwork of at most {n_valid} weights{' or per_layer=False' if self.per_layer else ''}.")
        return idx


@register_criterion("largest_variance_diag_laplace")
class LargestVarianceDiagLaplaceCriterion(VarianceCriterion):
    """Largest marginal variance under a diagonal GGN Laplace over all weights, through
    laplace-torch's ``LargestVarianceDiagLaplaceSubnetMask``: the subnetwork-Laplace paper's
    Wasserstein criterion with the diagonal-Laplace estimate of the marginal variances (the
    paper's text; laplace-torch's port of the authors' mask uses diagonal SWAG, :class:`LargestVarianceSWAGCriterion`).

    var = 1 / (h + tau) is monotone in the curvature h, so this criterion picks the least
    constrained weights; the ranking does not depend on the scalar prior precision. Weights with
    ``diag GGN <= curvature_rtol * max(diag GGN)`` are invalid (their variance is the prior's).
    """

    def __init__(self, size, *, backend: str = "auto", prior_precision: float = 1.0,
                 curvature_rtol: float = 1e-12, likelihood: str = "classification", batch_size: int = 256,
                 max_examples: int | None = None, seed: int = 0, per_layer: bool = False,
                 exclude_non_identifiable: bool = True, identifiability_rtol: float = 1e-8,
                 param_filter: ParamFilter | None = None):
        super().__init__(size, likelihood=likelihood, batch_size=batch_size, max_examples=max_examples,
                         seed=seed, per_layer=per_layer, exclude_non_identifiable=exclude_non_identifiable,
                         identifiability_rtol=identifiability_rtol, param_filter=param_filter)
        if backend not in DIAG_BACKENDS:
            raise BenchError(f"unknown diagonal-Laplace backend {backend!r}; valid: {', '.join(DIAG_BACKENDS)}")
        self.backend, self.prior_precision = backend, float(prior_precision)
        self.curvature_rtol = float(curvature_rtol)

    def variances(self, model, loader, loss_fn):
        la, info = fit_diag_laplace(model, loader, likelihood=self.likelihood, backend=self.backend,
                                    prior_precision=self.prior_precision)
        var = la.posterior_variance  # = the scores of laplace-torch's LargestVarianceDiagLaplaceSubnetMask
        h = la.H.detach().float().cpu()
        valid = h > self.curvature_rtol * float(h.max().clamp_min(0.0))
        info = {**info, "estimator": "diag_laplace", "prior_precision": self.prior_precision}
        return var, valid, info

    def compute_param_scores(self, model, train_loader=None, loss_fn=None, **kwargs):
        scores = super().compute_param_scores(model, train_loader, loss_fn=loss_fn, **kwargs)
        self.info["n_zero_curvature_candidates"] = self.info["n_invalid_candidates"]  # this estimator's invalid = zero GGN
        return scores


@register_criterion("largest_variance_swag")
class LargestVarianceSWAGCriterion(VarianceCriterion):
    """Largest marginal variance under diagonal SWAG (:func:`bench.laplace.swag.fit_diagonal_swag`,
    the estimator of laplace-torch's ``LargestVarianceSWAGSubnetMask``, the library's port of the
    subnetwork-Laplace authors' mask): SGD (momentum 0.9, weight decay 3e-4) at a constant learning rate from the MAP
    weights, the variance of ``n_snapshots`` iterates. Defaults: 256 snapshots (this project's
    choice: the paper gives none, laplace-torch's mask defaults to 40), lr 1e-2 and one snapshot per
    epoch (as laplace-torch's); ``snapshot_every`` (SGD steps) shortens the run. ``resume_path``:
    where the SWAG run checkpoints, so that a stopped selection resumes (:func:`fit_diagonal_swag`)."""

    def __init__(self, size, *, n_snapshots: int = 256, snapshot_every: int | None = None, lr: float = 0.01,
                 momentum: float = 0.9, weight_decay: float = 3e-4,
                 likelihood: str = "classification", batch_size: int = 128, max_examples: int | None = None,
                 seed: int = 0, per_layer: bool = False, exclude_non_identifiable: bool = True,
                 identifiability_rtol: float = 1e-8, param_filter: ParamFilter | None = None,
                 resume_path=None):
        super().__init__(size, likelihood=likelihood, batch_size=batch_size, max_examples=max_examples,
                         seed=seed, per_layer=per_layer, exclude_non_identifiable=exclude_non_identifiable,
                         identifiability_rtol=identifiability_rtol, param_filter=param_filter)
        self.resume_path = resume_path  # where the SWAG run checkpoints (None: it does not)
        self.n_snapshots, self.lr = int(n_snapshots), float(lr)
        self.snapshot_every = None if snapshot_every is None else int(snapshot_every)
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)

    def variances(self, model, loader, loss_fn):
        from bench.laplace.swag import fit_diagonal_swag

        x, y = loader.dataset.tensors
        settings = (self.n_snapshots, self.snapshot_every, self.lr, self.momentum, self.weight_decay,
                    self.batch_size, self.seed, getattr(loss_fn, "__name__", repr(loss_fn)))
        key = (_fingerprint(model, loader), settings)
        if key in _SWAG_CACHE:  # a size sweep on one MAP network runs SWAG once per process
            var, info = _SWAG_CACHE[key]
            info = {**info, "cached": True}
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                var, info = fit_diagonal_swag(model, x, y, loss_fn, n_snapshots=self.n_snapshots,
                                              snapshot_every=self.snapshot_every, lr=self.lr, momentum=self.momentum,
                                              weight_decay=self.weight_decay, batch_size=self.batch_size,
                                              seed=self.seed, resume_path=self.resume_path)
            while len(_SWAG_CACHE) >= _SWAG_CACHE_SIZE:
                _SWAG_CACHE.pop(next(iter(_SWAG_CACHE)))
            _SWAG_CACHE[key] = (var, info)
            info = {**info, "cached": False}
        # SWAG clamps variances at 1e-30; a weight SGD never moved has no spread to offer
        return var, var > 1e-30, {**info, "estimator": "swag"}


def earlier_select_seconds(info: dict) -> float:
    """The seconds earlier processes spent on a selection that this one resumed (a stopped SWAG
    run's, ``info["resumed_s"]``); 0.0 when nothing was resumed or the variances came from this
    process's cache (whose run those seconds belong to)."""
    return 0.0 if info.get("cached") else float(info.get("resumed_s") or 0.0)


#: SWAG variances already computed in this process, by (network, data, settings)
_SWAG_CACHE: "dict[tuple, tuple]" = {}
_SWAG_CACHE_SIZE = 8


@register_criterion("wasserstein")
class WassersteinCriterion(LargestVarianceSWAGCriterion):
    """The subnetwork-Laplace paper's Wasserstein criterion with the marginal variances of diagonal
    SWAG (laplace-torch's port of the authors' mask; 256 snapshots here, lr 1e-2)."""


@register_criterion("wasserstein_diag_laplace")
class WassersteinDiagLaplaceCriterion(LargestVarianceDiagLaplaceCriterion):
    """The Wasserstein criterion with the marginal variances of a diagonal Laplace (the paper's
    text) instead of SWAG (laplace-torch's port of the authors' mask)."""


def subnet_digest(indices: torch.Tensor) -> str:
    """Short hash of a subnetwork (its sorted flat indices): equal digests = the same weights,
    e.g. one mask under two inference schemes."""
    import hashlib

    idx = torch.as_tensor(indices).flatten().long().sort().values.cpu().numpy().astype("int64")
    return hashlib.sha256(idx.tobytes()).hexdigest()[:12]


def data_seed(name: str, seed: int) -> int:
    """Seed of a variance criterion's own randomness (SWAG's SGD, the identifiability batches) in
    run ``seed``. Shared by every method that selects a subnetwork, so one MAP network and one
    criterion give one mask whatever inference follows (partial VI or Laplace); the namespace is
    the subnetwork Laplace's, where these criteria first ran (its records stay reproducible)."""
    cls = CRITERIA.get(name)
    purpose = "swag" if issubclass(cls, LargestVarianceSWAGCriterion) else "identifiability"
    return derive_seed("subnet_laplace", purpose, seed)


def make_criterion(name: str, size: int | float, **options) -> SubnetCriterion:
    """Build a registered criterion; options the criterion does not take are an error."""
    cls = CRITERIA.get(name)
    import inspect

    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "size"}
    unknown = set(options) - accepted
    if unknown:
        raise BenchError(f"subnet criterion {name!r} takes no option(s) {sorted(unknown)}; valid: {sorted(accepted)}")
    return cls(size, **options)
