"""Wasserstein subnetwork Laplace (Daxberger et al. 2021), on top of laplace-torch.

The paper ("Bayesian Deep Learning via Subnetwork Inference"; ../shared/papers/
subnetwork-inference-laplace.txt), section "The full subnetwork inference algorithm":

1. MAP estimate of all weights -- the benchmark's cached MAP network (``ctx.map_cache``);
2. select a subnetwork -- "Q3": the weights with the largest marginal variance under a
   diagonal Laplace over all weights (criterion ``largest_variance_diag_laplace`` of the
   shared module :mod:`bench.subnet.selection`; any other criterion there works at equal size);
3. full-covariance Laplace over the subnetwork only, every other weight fixed at its MAP
   value ("Q1", "Q2"): ``laplace.Laplace(model, "classification",
   subset_of_weights="subnetwork", hessian_structure="full", subnetwork_indices=idx)`` with a
   GGN, i.e. ``N(w_S; w_S_MAP, H_S^-1)``;
4. predict by integrating out the subnet weights ("Q4": "one can either use Monte Carlo or a
   closed-form approximation"): laplace-torch's linearised (``pred_type="glm"``) predictive
   with the probit approximation (default) or MC, or sampling the network (``"nn"``).

The prior precision (the paper does not fix it in the text we have) is tuned post hoc with
laplace-torch's ``optimize_prior_precision``: grid search on the validation split's NLL
(default), or the Laplace marginal likelihood.

Backends. laplace-torch's own backends compute the Jacobian of ALL weights per example and
then slice out the subnetwork (``Js[:, :, subnetwork_indices]``): B x P floats per output (or
B x K x P at once) for a subnet of s << P weights. :class:`SubnetJacobianGGN` is a
laplace-torch curvature backend (a ``GGNInterface``) that builds only the s subnet columns,
from each layer's input and the gradient at its output (Linear and Conv2d layers), so memory
scales with s, not P. Measured on LeNet-300-100 (P = 267k, benchmarks/laplace_memory.py,
docs/subnet_laplace.md): same GGN and predictive as BackPACK / ASDL, 2-20x faster, peak
memory 1-37 MB instead of 130-230 MB (BackPACK, ASDL fit) or 1.4-1.6 GB (ASDL's predictive
and Curvlinops' subnet path, both torch.func Jacobians of all weights). ``backend="auto"``
uses it whenever every subnet weight sits in a supported layer, else BackPACK (probed on two
examples), else ASDL; Curvlinops only on request.

Memory guard: before fitting, the memory a configuration needs (Jacobian batch, the s x s
precision / Cholesky / covariance, prediction chunks) is estimated per backend and the fit is
refused with :class:`MemoryGuardError` when it exceeds ``memory_limit_gb`` (default 25 % of the
available memory), naming a subnet size that fits.

``laplace_diag`` and ``laplace_last_layer`` (methods/laplace_diag.py, laplace_last_layer.py)
share :class:`LaplaceMethod` below.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError
from bench.predictive import ClassificationPredictive
from bench.seeding import derive_seed
from bench.subnet.selection import (DegenerateSubnetError, as_torch_loader, candidate_indices, laplace_backend,
                                    layer_distribution, make_criterion, resolve_subnet_size)
from methods.base import Method, register_method

FLOAT_BYTES = 4
SUBNET_BACKENDS = ("auto", "subnet", "backpack", "asdl", "curvlinops")


class MemoryGuardError(BenchError):
    """A Laplace configuration would need more memory than the configured limit."""


# -- a laplace-torch backend whose Jacobians cover only the subnetwork ------------------------
def _ggn_interface():
    from laplace.curvature import GGNInterface

    return GGNInterface


class _LayerPlan:
    """The subnet entries of one Linear / Conv2d layer: where they go in the Jacobian."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.w_pos, self.w_row, self.w_col = [], [], []
        self.b_pos, self.b_row = [], []

    def finish(self, device):
        t = lambda v: torch.as_tensor(v, dtype=torch.long, device=device)  # noqa: E731
        self.w_pos, self.w_row, self.w_col = t(self.w_pos), t(self.w_row), t(self.w_col)
        self.b_pos, self.b_row = t(self.b_pos), t(self.b_row)
        return self

    def accumulate(self, out: torch.Tensor, a: torch.Tensor, g: torch.Tensor) -> None:
        """Add this call's Jacobian columns to ``out`` (B, K, s); ``g`` = (K, B, *z.shape[1:])
        holds df_k/dz for every output k, ``a`` the layer input.

        Linear: df_k/dW[i, j] = g_ki a_j (summed over extra leading dims);
        Conv2d: df_k/dW[o, c, u, v] = sum_l g_k[o, l] unfold(a)[(c, u, v), l]; biases: sum of g.
        """
        m, K, B = self.module, g.shape[0], g.shape[1]
        if isinstance(m, nn.Linear):
            g = g.reshape(K, B, -1, g.shape[-1])  # (K, B, T, out)
            if self.w_pos.numel():
                a = a.reshape(1, B, -1, a.shape[-1])[..., self.w_col]  # (1, B, T, n)
                out[:, :, self.w_pos] += (g[..., self.w_row] * a).sum(2).transpose(0, 1)
            if self.b_pos.numel():
                out[:, :, self.b_pos] += g[..., self.b_row].sum(2).transpose(0, 1)
        else:  # Conv2d, groups == 1 (checked in SubnetJacobianGGN.unsupported)
            g = g.reshape(K, B, g.shape[2], -1)  # (K, B, O, L)
            if self.w_pos.numel():
                cols = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)
                cols = cols[:, self.w_col, :].unsqueeze(0)  # (1, B, n, L)
                out[:, :, self.w_pos] += (g[:, :, self.w_row, :] * cols).sum(-1).transpose(0, 1)
            if self.b_pos.numel():
                out[:, :, self.b_pos] += g[:, :, self.b_row, :].sum(-1).transpose(0, 1)


def _supported_layer(m: nn.Module) -> str | None:
    """None if :class:`SubnetJacobianGGN` can differentiate w.r.t. ``m``'s parameters, else why not."""
    if isinstance(m, nn.Linear):
        return None
    if isinstance(m, nn.Conv2d):
        if m.groups != 1:
            return "grouped Conv2d"
        if m.padding_mode != "zeros" or isinstance(m.padding, str) and m.padding != "valid":
            return f"Conv2d padding {m.padding!r} / {m.padding_mode!r}"
        return None
    return type(m).__name__


def _build_subnet_jacobian_backend():
    GGNInterface = _ggn_interface()

    class SubnetJacobianGGN(GGNInterface):
        """laplace-torch GGN backend that computes Jacobians of the subnetwork weights only.

        laplace-torch's SubnetLaplace calls ``backend.jacobians(x)`` both for the GGN
        (``GGNInterface.full``: ``sum_n J_n^T Lambda_n J_n`` over the subnet columns) and for
        the linearised predictive; its own backends build the (B, K, P) Jacobian of every
        weight and slice it. Here forward hooks keep each subnet layer's input ``a`` and
        output ``z``; per output k one ``autograd.grad`` gives ``g = df_k/dz`` for all layers
        at once (per example, as the network is in eval mode), and the subnet columns are
        products of ``g`` and ``a`` entries: memory O(B K s + activations), not O(B K P).
        """

        def __init__(self, model, likelihood, last_layer=False, subnetwork_indices=None,
                     dict_key_x="input_ids", dict_key_y="labels", stochastic=False):
            if last_layer:
                raise ValueError("SubnetJacobianGGN is for subnetwork Laplace, not last-layer Laplace")
            super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y,
                             stochastic=stochastic)
            self._plan_key = None
            self._plan: list[_LayerPlan] = []

        # ``subnetwork_indices`` index parameters_to_vector(self.params) (trainable ones)
        def _slots(self):
            offset = 0
            for name, p in self.params_dict.items():
                mod_name, _, pname = name.rpartition(".")
                yield self.model.get_submodule(mod_name) if mod_name else self.model, pname, p, offset
                offset += p.numel()

        @classmethod
        def unsupported(cls, model: nn.Module, indices: torch.Tensor) -> list[str]:
            """Reasons this backend cannot serve ``indices`` of ``model`` (empty = it can)."""
            idx = torch.as_tensor(indices).cpu()
            out, offset = [], 0
            for name, p in model.named_parameters():
                if not p.requires_grad:
                    continue
                n = p.numel()
                hit = bool(((idx >= offset) & (idx < offset + n)).any())
                if hit:
                    mod_name, _, pname = name.rpartition(".")
                    m = model.get_submodule(mod_name) if mod_name else model
                    why = _supported_layer(m)
                    if why is None and pname not in ("weight", "bias"):
                        why = f"parameter {pname!r}"
                    if why is not None:
                        out.append(f"{name} ({why})")
                offset += n
            return out

        def _get_plan(self) -> list[_LayerPlan]:
            idx = self.subnetwork_indices
            if idx is None:
                raise ValueError("SubnetJacobianGGN needs subnetwork_indices")
            key = (idx.data_ptr(), idx.numel())
            if self._plan_key == key:
                return self._plan
            bad = self.unsupported(self.model, idx)
            if bad:
                raise NotImplementedError(f"SubnetJacobianGGN does not support {bad}")
            idx_cpu = idx.cpu()
            order = torch.argsort(idx_cpu)
            sorted_idx = idx_cpu[order]
            plans: dict[int, _LayerPlan] = {}
            for module, pname, p, offset in self._slots():
                lo = int(torch.searchsorted(sorted_idx, offset))
                hi = int(torch.searchsorted(sorted_idx, offset + p.numel()))
                if lo == hi:
                    continue
                local = sorted_idx[lo:hi] - offset
                pos = order[lo:hi]
                plan = plans.setdefault(id(module), _LayerPlan(module))
                if pname == "weight":
                    per_row = p[0].numel()
                    plan.w_pos += pos.tolist()
                    plan.w_row += (local // per_row).tolist()
                    plan.w_col += (local % per_row).tolist()
                else:
                    plan.b_pos += pos.tolist()
                    plan.b_row += local.tolist()
            device = next(self.model.parameters()).device
            self._plan = [pl.finish(device) for pl in plans.values()]
            self._plan_key = key
            return self._plan

        def jacobians(self, x, enable_backprop: bool = False):
            """Jacobians ``(batch, outputs, subnet)`` of the subnet weights, and outputs ``f``."""
            plan = self._get_plan()
            calls: list[tuple[_LayerPlan, torch.Tensor, torch.Tensor]] = []
            by_module = {id(pl.module): pl for pl in plan}

            def hook(module, inputs, output):
                calls.append((by_module[id(module)], inputs[0], output))

            handles = [pl.module.register_forward_hook(hook) for pl in plan]
            try:
                with torch.enable_grad():
                    f = self.model(x)
            finally:
                for h in handles:
                    h.remove()
            if f.dim() != 2:
                raise ValueError(f"SubnetJacobianGGN expects (batch, outputs) model outputs, got {tuple(f.shape)}")
            B, K = f.shape
            s = int(self.subnetwork_indices.numel())
            J = f.new_zeros(B, K, s)
            zs = [z for _, _, z in calls]
            # one backward pass per output k: g[k] = d f_k / d z for every hooked layer output
            # (a plain loop: autograd's is_grads_batched vmap is ~4x slower here, as BatchNorm's
            # backward has no batching rule)
            per_k = []
            for k in range(K):
                with torch.enable_grad():
                    per_k.append(torch.autograd.grad(f[:, k].sum(), zs, retain_graph=k < K - 1 or enable_backprop,
                                                     allow_unused=True))
            with torch.no_grad():
                for i, (pl, a, z) in enumerate(calls):
                    g = torch.stack([gk[i] if gk[i] is not None else torch.zeros_like(z) for gk in per_k])
                    pl.accumulate(J, a.detach(), g)
            return (J, f) if enable_backprop else (J.detach(), f.detach())

        def gradients(self, x, y):  # the empirical Fisher is not offered for subnetworks here
            raise NotImplementedError("SubnetJacobianGGN provides the GGN only")

    return SubnetJacobianGGN


_SUBNET_BACKEND = None


def subnet_jacobian_backend():
    """The :class:`SubnetJacobianGGN` class (built lazily: importing laplace-torch is slow)."""
    global _SUBNET_BACKEND
    if _SUBNET_BACKEND is None:
        _SUBNET_BACKEND = _build_subnet_jacobian_backend()
    return _SUBNET_BACKEND


def backend_class(name: str):
    return subnet_jacobian_backend() if name == "subnet" else laplace_backend(name)


# -- memory estimate -----------------------------------------------------------------------
def activation_numel(model: nn.Module, x1: torch.Tensor) -> int:
    """Floats of every module output for one example (what a backward pass keeps alive)."""
    total = [0]

    def hook(_m, _i, out):
        if isinstance(out, torch.Tensor):
            total[0] += out[:1].numel()

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x1[:1])
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return int(total[0]) + int(x1[:1].numel())


def estimate_memory(*, backend: str, n_params: int, s: int, n_outputs: int, batch_size: int, predict_batch: int,
                    activations: int, pred_type: str = "glm", dtype_bytes: int = FLOAT_BYTES) -> dict:
    """Bytes a full-covariance subnet Laplace needs at its peak, by term.

    Calibrated on LeNet-300-100 (benchmarks/laplace_memory.py prints estimate and measured
    peak side by side). laplace-torch's backends materialise per-example gradients of all
    P weights and slice: BackPACK / ASDL per output (B x P, x3 / x3.5 for gradient,
    concatenation and slice), the torch.func path (Curvlinops; ASDL's predictive falls back to it) all K
    outputs at once (B x K x P, x3). SubnetJacobianGGN needs ~6 B x K x s plus activations.
    The s x s terms: the GGN H, the posterior precision, its Cholesky factor / scale and
    the covariance (4 s^2).
    """
    B, Bp, K, P = int(batch_size), int(predict_batch), int(n_outputs), int(n_params)
    act = 3 * activations  # forward activations + the gradients at the layer outputs

    def jac(b: int, phase: str) -> int:
        if backend == "subnet":  # J, the gathered g and a entries, their product, GGN intermediates
            return 6 * b * K * s + b * act
        if backend == "backpack":
            return 3 * b * P + 2 * b * K * s + b * act
        if backend == "asdl" and phase == "fit":
            return int(3.5 * b * P) + 2 * b * K * s + b * act
        return 3 * b * K * P + 2 * b * K * s + b * act  # torch.func (curvlinops; asdl predictive)

    fit = jac(B, "fit")
    predict = jac(Bp, "predict") if pred_type == "glm" else Bp * act * 2
    cov = 4 * s * s
    terms = {"jacobian_fit": fit * dtype_bytes, "jacobian_predict": predict * dtype_bytes,
             "covariance": cov * dtype_bytes, "params": 3 * P * dtype_bytes}
    terms["total"] = max(terms["jacobian_fit"], terms["jacobian_predict"]) + terms["covariance"] + terms["params"]
    return terms


def default_memory_limit(device: torch.device, fraction: float = 0.25) -> int:
    if torch.device(device).type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(fraction * free)
    import psutil

    return int(fraction * psutil.virtual_memory().available)


def largest_fitting(limit: int, s_max: int, **kw) -> int:
    """Largest subnet size <= s_max whose estimate stays within ``limit`` (0 if none)."""
    lo, hi = 0, int(s_max)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_memory(s=mid, **kw)["total"] <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _fmt_bytes(b: float) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if b >= 0.1 * size:
            return f"{b / size:.2f} {unit}"
    return f"{int(b)} B"


def check_memory(*, limit: int, what: str, **kw) -> dict:
    """The estimate; :class:`MemoryGuardError` with a smaller size that fits when above ``limit``."""
    est = estimate_memory(**kw)
    if est["total"] <= limit:
        return est
    gb = _fmt_bytes
    s_ok = largest_fitting(limit, kw["s"], **{k: v for k, v in kw.items() if k != "s"})
    parts = ", ".join(f"{k} {gb(v)}" for k, v in est.items() if k != "total")
    hint = (f"a subnetwork of at most {s_ok} weights fits (n_subnet={s_ok})" if s_ok > 0 else
            "no subnetwork size fits with this backend and these batch sizes")
    jac = max(est["jacobian_fit"], est["jacobian_predict"])
    if jac > est["covariance"]:
        which = "batch_size" if est["jacobian_fit"] >= est["jacobian_predict"] else "predict_batch_size"
        hint += f"; the Jacobian term dominates: a smaller {which} helps"
        if kw["backend"] != "subnet":
            hint += ", and backend='subnet' computes only the subnet's Jacobian columns"
    raise MemoryGuardError(
        f"{what}: estimated peak memory {gb(est['total'])} ({parts}) exceeds the limit {gb(limit)} "
        f"(memory_limit_gb; default 25% of available memory); {hint}.")


# -- shared method machinery -----------------------------------------------------------------
class LaplaceMethod(Method):
    """A laplace-torch approximation around the cached MAP network: fit, tune the prior
    precision, predict in chunks, save / load without refitting."""

    tasks = ("classification",)
    #: laplace.Laplace(subset_of_weights=..., hessian_structure=...)
    subset_of_weights = "all"
    hessian_structure = "full"
    common_defaults: dict[str, Any] = {
        "pred_type": "glm",  # "glm" (linearised) | "nn" (sample the network)
        "link_approx": "probit",  # "probit" | "mc" (glm); nn is always MC
        "n_samples": 100,  # MC samples (laplace-torch's default)
        "prior_precision_method": "gridsearch",  # "gridsearch" (val NLL) | "marglik" | "none" (or None)
        "prior_precision": 1.0,  # used by "none", the start of "marglik"
        "grid_min": -4.0,  # log10 grid of the grid search (laplace-torch's range) ...
        "grid_max": 4.0,
        "grid_size": 21,  # ... with 21 points instead of 100: each point is one pass over val
        "val_examples": None,  # None: the whole validation split for the grid search
        "batch_size": 128,  # curvature batch
        "predict_batch_size": 1000,  # chunk inside predict (and the grid search)
        "backend": "auto",
    }

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        c = self.config
        if c["pred_type"] not in ("glm", "nn"):
            raise BenchError(f"{self.name}: pred_type must be 'glm' or 'nn', got {c['pred_type']!r}")
        if c["link_approx"] not in ("probit", "mc"):
            raise BenchError(f"{self.name}: link_approx must be 'probit' or 'mc', got {c['link_approx']!r}")
        if c["pred_type"] == "nn" and c["link_approx"] != "mc":
            self.config["link_approx"] = "mc"  # laplace-torch: the nn predictive is Monte Carlo only
        if c["prior_precision_method"] is None:  # `--set ...prior_precision_method=none` parses to None
            self.config["prior_precision_method"] = "none"
        if c["prior_precision_method"] not in ("gridsearch", "marglik", "none"):
            raise BenchError(f"{self.name}: prior_precision_method must be gridsearch, marglik or none")
        if int(c["n_samples"]) < 1:
            raise BenchError(f"{self.name}: n_samples must be >= 1")
        self.la = None
        self.meta: dict = {}
        self.model = ctx.build_model(dropout=0.0).to(ctx.device).eval()

    # -- hooks ----------------------------------------------------------------------------------
    def laplace_kwargs(self) -> dict:
        return {}

    def backend_name(self, model: nn.Module) -> str:
        b = self.config["backend"]
        return "backpack" if b == "auto" else b

    def fit_laplace(self, model: nn.Module, loader, backend: str):
        """A laplace-torch approximation fitted on ``loader`` (the curvature step)."""
        la = self.make_laplace(model, backend)
        la.fit(loader)
        return la

    def before_fit(self, model: nn.Module, train) -> None:
        """Selection, memory checks, ... (fills ``self.meta``)."""

    def after_fit(self) -> None:
        pass

    # -- helpers --------------------------------------------------------------------------------
    def map_network(self) -> nn.Module:
        if self.ctx.map_cache is None:
            raise BenchError(f"{self.name} needs the MAP network cache (ctx.map_cache)")
        return copy.deepcopy(self.ctx.map_cache.get(self.ctx.seed)).to(self.ctx.device).eval()

    def make_laplace(self, model: nn.Module, backend: str):
        from laplace import Laplace

        net = copy.deepcopy(model).eval()  # BackPACK / ASDL hook into the model: its own copy
        for p in net.parameters():
            p.requires_grad_(True)
        return Laplace(net, "classification", subset_of_weights=self.subset_of_weights,
                       hessian_structure=self.hessian_structure, backend=backend_class(backend),
                       prior_precision=float(self.config["prior_precision"]), **self.laplace_kwargs())

    def _val_loader(self, val):
        x, y = val
        n = self.config["val_examples"]
        loader = as_torch_loader(_Pair(x, y), int(self.config["predict_batch_size"]),
                                 seed=derive_seed(self.name, "val-subset", self.ctx.seed),
                                 max_examples=None if n is None else int(n))
        return loader

    def tune_prior(self, val) -> None:
        c = self.config
        method = c["prior_precision_method"]
        if method == "none":
            return
        kw = {"pred_type": c["pred_type"], "link_approx": c["link_approx"], "n_samples": int(c["n_samples"])}
        if method == "marglik":
            self.la.optimize_prior_precision(method="marglik", init_prior_prec=float(c["prior_precision"]),
                                             prior_structure="scalar", **kw)
        else:
            # loss: a plain function, not laplace-torch's default RunningNLLMetric -- in
            # laplace-torch 0.3 ``_gridsearch`` reuses one metric object for every grid point
            # without resetting it, so each "result" is the running mean over all grid points
            # so far and the largest prior precision wins (measured: it picked 1e4 where the
            # validation NLL is lowest near 1; docs/subnet_laplace.md).
            self.la.optimize_prior_precision(method="gridsearch", val_loader=self._val_loader(val), loss=_nll,
                                             log_prior_prec_min=float(c["grid_min"]),
                                             log_prior_prec_max=float(c["grid_max"]),
                                             grid_size=int(c["grid_size"]), **kw)

    # -- the contract -----------------------------------------------------------------------------
    def fit(self, train, val):
        c = self.config
        model = self.map_network()
        self.model = model
        self.meta = {"predict_seed": derive_seed(self.name, "predict", self.ctx.seed)}
        self.before_fit(model, train)
        backend = self.meta.get("backend") or self.backend_name(model)
        self.meta["backend"] = backend
        loader = as_torch_loader(train, int(c["batch_size"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            self.la = self.fit_laplace(model, loader, backend)
            self.meta["curvature_time_s"] = time.perf_counter() - t0
            self.after_fit()
            t0 = time.perf_counter()
            self.tune_prior(val)
            self.meta["prior_time_s"] = time.perf_counter() - t0
        self.meta["prior_precision"] = self.la.prior_precision.detach().cpu().flatten().tolist()
        try:
            self.meta["log_marginal_likelihood"] = float(self.la.log_marginal_likelihood().detach())
        except Exception:  # noqa: BLE001 - a diagnostic only
            self.meta["log_marginal_likelihood"] = None
        return self

    def _generator(self):
        return torch.Generator(device=self.ctx.device).manual_seed(int(self.meta["predict_seed"]))

    def _predict_chunk(self, x):
        c = self.config
        S = int(c["n_samples"])
        if c["pred_type"] == "glm" and c["link_approx"] == "probit":
            return ClassificationPredictive(self.la(x, pred_type="glm", link_approx="probit").float())
        # A fresh generator seeded the same way for every chunk: the same weight (nn) or
        # standard-normal (glm: laplace-torch shares the draws across the batch) samples,
        # so predictions do not depend on how the harness batches.
        try:
            probs = self.la.predictive_samples(x, pred_type=c["pred_type"], n_samples=S, generator=self._generator())
        except torch.linalg.LinAlgError:
            # glm + mc: laplace-torch samples the logits with a Cholesky factor of each K x K
            # functional covariance J Sigma J^T, which is singular when the subnet's Jacobian
            # at x has rank < K (few weights, or subnet weights feeding ReLU units inactive at
            # x). Same sampling (one K x S standard-normal draw shared across the batch, as
            # laplace.utils.normal_samples) with the symmetric square root instead.
            f_mu, f_var = self.la._glm_predictive_distribution(x)
            lam, vec = torch.linalg.eigh(f_var)
            scale = vec * lam.clamp_min(0.0).sqrt().unsqueeze(-2)
            eps = torch.randn(f_mu.shape[-1], S, generator=self._generator(), device=f_mu.device, dtype=f_mu.dtype)
            f = (f_mu.unsqueeze(-1) + scale @ eps).permute(2, 0, 1)
            probs = torch.softmax(f, dim=-1)
        return ClassificationPredictive.from_samples(probs.float())

    def predict(self, x):
        if self.la is None:
            raise BenchError(f"{self.name}: predict before fit / load_state_dict")
        chunk = int(self.config["predict_batch_size"])
        parts = [self._predict_chunk(x[i:i + chunk]) for i in range(0, len(x), chunk)]
        return parts[0] if len(parts) == 1 else ClassificationPredictive.cat(parts)

    def state_dict(self):
        # laplace-torch's state: MAP vector, curvature (H: the s x s GGN, a diagonal, or
        # Kronecker factors), prior precision, n_data, loss, ...; plus the MAP network's own
        # state (BatchNorm statistics) and our metadata (backend, selection, ...)
        return {"laplace": _to_device(self.la.state_dict(), "cpu"), "model": self.model.state_dict(),
                "meta": copy.deepcopy(self.meta)}

    def load_state_dict(self, state):
        self.meta = copy.deepcopy(state["meta"])
        model = self.ctx.build_model(dropout=0.0)
        model.load_state_dict({k: v.cpu() for k, v in state["model"].items()})
        self.model = model.to(self.ctx.device).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.la = self.make_laplace(self.model, self.meta["backend"])
            self.la.load_state_dict(_to_device(state["laplace"], self.ctx.device))
        # laplace-torch restores the posterior but not the network's weights: they come from
        # the saved MAP state (laplace's copy is made from it) -- nothing is refitted

    def modules(self):
        return [self.model]

    def extra_cost(self):
        out = {k: self.meta[k] for k in ("select_time_s", "curvature_time_s", "prior_time_s") if k in self.meta}
        out["laplace_fit_time_s"] = sum(out.values())
        if self.ctx.map_cache is not None:
            out["upstream_train_time_s"] = self.ctx.map_cache.upstream_time([self.ctx.seed])
        return out

    def diagnostics(self):
        keep = ("backend", "backend_reason", "criterion", "prior_precision", "log_marginal_likelihood",
                "memory_estimate_bytes", "memory_limit_bytes", "n_zero_curvature", "select_info", "subnet_size",
                "layer_distribution", "select_time_s", "curvature_time_s", "prior_time_s")
        out = {k: self.meta[k] for k in keep if k in self.meta}
        out.update({k: self.config[k] for k in ("pred_type", "link_approx", "prior_precision_method")})
        return out


def _nll(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of labels under predictive probabilities; +inf when the
    predictive is not finite (e.g. sampled networks overflowing at a tiny prior precision), so
    that the grid search never picks such a point (numpy's argmin would return a NaN's index)."""
    loss = F.nll_loss(probs.clamp_min(1e-12).log(), y.to(probs.device))
    return loss if bool(torch.isfinite(loss)) else torch.full_like(loss, float("inf"))


def _to_device(obj, device):
    """Every tensor of a nested dict / list / tuple moved to ``device`` (detached)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj


class _Pair:
    """(x, y) tensors with the attributes :func:`as_torch_loader` reads."""

    def __init__(self, x, y):
        self.x, self.y = x, y


# -- the subnetwork Laplace plugin -------------------------------------------------------------
@register_method("subnet_laplace")
class SubnetLaplace(LaplaceMethod):
    description = ("Wasserstein subnetwork Laplace (Daxberger et al. 2021): largest-variance subnet of the MAP "
                   "network, full-covariance GGN Laplace over it (laplace-torch)")
    subset_of_weights = "subnetwork"
    hessian_structure = "full"
    defaults = {
        "criterion": "largest_variance_diag_laplace",  # the paper's Wasserstein criterion (Q3)
        "n_subnet": None,  # a count; None: subnet_fraction, else DEFAULT_SUBNET
        "subnet_fraction": None,  # a fraction of the candidate weights
        "per_layer": False,
        "select_backend": "auto",  # diagonal Laplace of the selection: auto | backpack | asdl | curvlinops
        "select_max_examples": None,  # None: the whole training set for the selection
        "swag_n_snapshots": 40,  # largest_variance_swag (laplace-torch's / the authors' defaults)
        "swag_lr": 0.01,
        "memory_limit_gb": None,  # None: 25 % of the available memory
        **LaplaceMethod.common_defaults,
    }
    DEFAULT_SUBNET = 1000

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        if self.config["backend"] not in SUBNET_BACKENDS:
            raise BenchError(f"subnet_laplace: backend must be one of {', '.join(SUBNET_BACKENDS)}")
        self.indices: torch.Tensor | None = None

    def laplace_kwargs(self):
        return {"subnetwork_indices": self.indices.to(self.ctx.device)}

    def subnet_size(self, model) -> int | float:
        c = self.config
        if c["n_subnet"] is not None and c["subnet_fraction"] is not None:
            raise BenchError("subnet_laplace: give n_subnet or subnet_fraction, not both")
        if c["subnet_fraction"] is not None:
            return float(c["subnet_fraction"])
        return int(c["n_subnet"]) if c["n_subnet"] is not None else self.DEFAULT_SUBNET

    def criterion_options(self, name: str) -> dict:
        c = self.config
        opts: dict = {"per_layer": bool(c["per_layer"])}
        if name == "random":
            opts["seed"] = derive_seed("subnet_laplace", "random-subnet", self.ctx.seed)
        elif name == "largest_variance_diag_laplace":
            opts.update(backend=c["select_backend"], max_examples=c["select_max_examples"])
        elif name == "largest_variance_swag":
            opts.update(n_snapshots=int(c["swag_n_snapshots"]), lr=float(c["swag_lr"]),
                        max_examples=c["select_max_examples"], seed=derive_seed("subnet_laplace", "swag", self.ctx.seed))
        return opts

    def choose_backend(self, model: nn.Module, x1: torch.Tensor) -> tuple[str, str]:
        """(backend, why). Measured on LeNet-300-100 / MNIST (docs/subnet_laplace.md): the
        subnet-only Jacobians are the fastest and smallest; of laplace-torch's own, BackPACK
        beats ASDL (whose predictive falls back to torch.func Jacobians of all weights);
        Curvlinops' subnet path is torch.func over all weights: only on request."""
        want = self.config["backend"]
        bad = subnet_jacobian_backend().unsupported(model, self.indices)
        if want == "subnet" and bad:
            raise BenchError(f"subnet_laplace: backend 'subnet' supports Linear / Conv2d weights only, not {bad[:3]}; "
                             f"use backend=auto, backpack or asdl")
        if want != "auto":
            return want, "requested"
        if not bad:
            return "subnet", "every subnet weight is in a Linear / Conv2d layer"
        try:  # BackPACK has no extension for some modules (e.g. residual blocks): probe it
            probe = self.make_laplace(model, "backpack")
            probe.model.output_size = int(model(x1).shape[-1])
            probe.backend.jacobians(x1)
            return "backpack", f"subnet-only Jacobians unsupported for {bad[:3]}"
        except Exception as exc:  # noqa: BLE001
            return "asdl", f"subnet-only Jacobians unsupported for {bad[:3]}; BackPACK failed: {exc}"

    def before_fit(self, model, train):
        c = self.config
        name = str(c["criterion"])
        size = self.subnet_size(model)
        n_cand = candidate_indices(model).numel()
        s = resolve_subnet_size(size, n_cand)
        n_params = sum(p.numel() for p in model.parameters())
        x1 = train.x[:2].to(self.ctx.device) if hasattr(train, "x") else next(iter(train))[0][:2]
        limit = (int(float(c["memory_limit_gb"]) * 2**30) if c["memory_limit_gb"] is not None
                 else default_memory_limit(self.ctx.device))
        acts = activation_numel(model, x1)
        with torch.no_grad():
            K = int(model(x1).shape[-1])
        # 1. cheap check before the (slow) selection, with the cheapest backend that could apply
        want = c["backend"] if c["backend"] != "auto" else "subnet"
        mem_kw = dict(n_params=n_params, n_outputs=K, batch_size=int(c["batch_size"]),
                      predict_batch=int(c["predict_batch_size"]), activations=acts, pred_type=c["pred_type"])
        check_memory(limit=limit, what=f"subnet_laplace (n_subnet={s}, backend={want})", backend=want, s=s, **mem_kw)
        # 2. selection ("Q3"), any criterion of the shared module at this size
        criterion = make_criterion(name, s, **self.criterion_options(name))
        t0 = time.perf_counter()
        self.indices = criterion.select(model, train, loss_fn=self.ctx.task.loss).cpu()
        self.meta["select_time_s"] = time.perf_counter() - t0
        self.meta["criterion"] = {"name": name, "size": size}
        self.meta["select_info"] = getattr(criterion, "info", {})
        self.meta["subnet_size"] = int(self.indices.numel())
        self.meta["layer_distribution"] = layer_distribution(model, self.indices)
        # 3. backend, and the memory check with it
        backend, why = self.choose_backend(model, x1)
        self.meta["backend"], self.meta["backend_reason"] = backend, why
        est = check_memory(limit=limit, what=f"subnet_laplace (n_subnet={s}, backend={backend})", backend=backend,
                           s=int(self.indices.numel()), **mem_kw)
        self.meta["memory_estimate_bytes"] = est
        self.meta["memory_limit_bytes"] = limit

    def after_fit(self):
        # Degenerate-subnet guard: zero GGN diagonal = the weight's Jacobian vanishes on every
        # training example; if that holds for the whole subnet the "posterior" adds no
        # predictive variance on the training distribution -- a point estimate in disguise.
        h = torch.diagonal(self.la.H).detach().cpu()
        tol = 1e-12 * float(h.abs().max()) if h.numel() else 0.0
        zero = int((h <= tol).sum())
        self.meta["n_zero_curvature"] = zero
        if zero == h.numel():
            raise DegenerateSubnetError(
                f"subnet_laplace: all {zero} subnet weights have zero curvature (GGN diagonal = 0) on the training "
                f"data, e.g. weights of dead ReLU units; the Laplace posterior would predict exactly like the MAP "
                f"network. Choose another criterion ({self.config['criterion']!r} picked them) or subnet.")

    def load_state_dict(self, state):
        self.indices = torch.as_tensor(state["indices"], dtype=torch.long)
        super().load_state_dict(state)

    def state_dict(self):
        return {**super().state_dict(), "indices": self.indices.clone()}

    def num_stochastic_params(self):
        return 0 if self.indices is None else int(self.indices.numel())

    def extra_cost(self):
        out = super().extra_cost()
        s = self.num_stochastic_params()
        out.update({"subnet_size": s, "covariance_bytes": s * s * FLOAT_BYTES,
                    "posterior_state_bytes": s * s * FLOAT_BYTES + s * 8})
        est = self.meta.get("memory_estimate_bytes")
        if est:
            out["memory_estimate_mb"] = est["total"] / 2**20
        return out
