"""Wasserstein subnetwork Laplace (Daxberger et al. 2021), on top of laplace-torch.

The paper ("Bayesian Deep Learning via Subnetwork Inference"; ../shared/papers/
subnetwork-inference-laplace.txt), section "The full subnetwork inference algorithm":

1. MAP estimate of all weights -- the benchmark's cached MAP network (``ctx.map_cache``);
2. select a subnetwork -- "Q3": the weights with the largest marginal variance, the minimiser
   of the Wasserstein distance to a factorised full posterior. ``criterion="wasserstein"``
   (default) estimates the marginal variances with diagonal SWAG, as laplace-torch's port of the
   authors' mask does (256 snapshots here, this project's choice; lr 1e-2); ``"wasserstein_diag_laplace"`` with a diagonal Laplace (the
   paper's text). Both skip weights the training data cannot identify
   (:mod:`bench.subnet.identifiability`; the count is in the record). Any other criterion of
   :mod:`bench.subnet.selection` (``random``, ``magnitude``, ``gradient``) works at equal size;
3. full-covariance GGN Laplace over the subnetwork only, every other weight fixed at its MAP
   value ("Q1", "Q2"): ``laplace.Laplace(model, "classification",
   subset_of_weights="subnetwork", hessian_structure="full", subnetwork_indices=idx)``, i.e.
   ``N(w_S; w_S_MAP, H_S^-1)``, with the subnet-only Jacobian backend
   (:mod:`bench.laplace.subnet_jacobians`) when every subnet weight is in a Linear / Conv2d layer;
4. prior precision on the validation NLL (:mod:`bench.laplace.prior`, the procedure of every
   Laplace variant), and prediction by integrating out the subnet weights ("Q4"): the
   linearised predictive with the probit approximation (default), MC, or sampled networks.

The memory a configuration needs is checked before the (slow) selection and again before the
fit (:mod:`bench.laplace.memory`).

Multi-label networks (task kind ``multilabel``: L independent Bernoullis, one sigmoid per logit)
are supported with the subnet-only Jacobian backend only, whose Bernoulli variant
(``BernoulliSubnetJacobianGGN``) has the GGN ``sum_n J_n^T diag(p_n (1 - p_n)) J_n``; laplace-torch's
backends (the fallback for subnet weights outside Linear / Conv2d layers) have only the softmax's.
The predictive is per label (``sigmoid(f_mu / sqrt(1 + pi/8 var))``, or Monte Carlo of the
sigmoids; :mod:`bench.laplace.multilabel`), the prior search's validation loss the binary
cross-entropy summed over labels. The criteria with a diagonal-Laplace estimate (a softmax
likelihood fit) are refused there; SWAG (``wasserstein``) and ``gradient`` train / differentiate
the task's own loss, and ``random`` / ``magnitude`` use no data.
"""
from __future__ import annotations

import time
import warnings

import torch
from torch import nn

from bench.errors import BenchError
from bench.network import check_stochastic_layers
from bench.laplace.memory import COVARIANCE_BYTES, FLOAT_BYTES, activation_numel, check_memory, default_memory_limit
from methods._laplace_base import LaplaceMethod
from bench.laplace.subnet_jacobians import MULTILABEL_BACKENDS, SUBNET_BACKENDS, subnet_jacobian_backend
from bench.seeding import derive_seed
from bench.options import OneOf, Range
from bench.subnet.selection import (CRITERIA, DegenerateSubnetError, candidate_indices, data_seed,
                                    earlier_select_seconds, layer_distribution, make_criterion, resolve_subnet_size,
                                    subnet_digest)
from methods.base import register_method


def memory_terms(config: dict, model: nn.Module, x1: torch.Tensor) -> dict:
    """What the memory guard (``check_memory``) needs besides the backend and subnet size: the
    network's weights, outputs and per-example activations, the widest layer's positions (a bound on
    what the subnet backend gathers per subnet weight), and the fit's batches and predictive from the
    method's options ``config``."""
    from bench.laplace.subnet_jacobians import positions_per_weight

    with torch.no_grad():
        n_outputs = int(model(x1).shape[-1])
    return dict(n_params=sum(p.numel() for p in model.parameters()), n_outputs=n_outputs,
                positions_per_weight=positions_per_weight(model, x1),
                batch_size=int(config["batch_size"]), predict_batch=int(config["predict_batch_size"]),
                activations=activation_numel(model, x1), pred_type=config["pred_type"],
                glm_sampler=config["glm_sampler"], n_samples=int(config["n_samples"]))


@register_method("subnet_laplace")
class SubnetLaplace(LaplaceMethod):
    description = ("Wasserstein subnetwork Laplace (Daxberger et al. 2021): largest-variance subnet of the MAP "
                   "network, full-covariance GGN Laplace over it (laplace-torch)")
    subset_of_weights = "subnetwork"
    hessian_structure = "full"
    VALIDITY_CHECKS = ("informative", "map_converged", "laplace_prior_grid", "laplace_attainable_variance",
                       "laplace_predictive_variance")
    # a random subnetwork of the same size (the paper's Fig. 4-5 "Rand" baseline): what the criterion adds
    CONTROLS = {"random subnetwork": {"criterion": "random"}}
    defaults = {
        # the paper's Wasserstein criterion (Q3) with its authors' estimator of the marginal
        # variances, diagonal SWAG; "wasserstein_diag_laplace" estimates them with a diagonal Laplace
        "criterion": "wasserstein",
        "n_subnet": None,  # a count; None: subnet_fraction, else DEFAULT_SUBNET
        "subnet_fraction": None,  # a fraction of the candidate weights
        "per_layer": False,
        "select_backend": "auto",  # diagonal Laplace of the selection: auto | backpack | asdl | curvlinops
        "select_max_examples": None,  # None: the whole training set for the selection
        # SWAG of the Wasserstein criterion: 256 snapshots is this project's choice (laplace-torch's
        # LargestVarianceSWAGSubnetMask defaults to 40), lr 1e-2 as there ...
        "swag_n_snapshots": 256,
        "swag_lr": 0.01,
        "swag_snapshot_every": None,  # ... one snapshot per epoch; an int: every so many SGD steps
        "swag_batch_size": 128,  # ... SGD batches of 128 examples (segmentation: images of pixels)
        "exclude_non_identifiable": True,  # variance criteria skip weights with no training-mode gradient
        "memory_limit_gb": None,  # None: 25 % of the available memory, 80 % of a GPU's
        **LaplaceMethod.common_defaults,
        # segmentation: 4 label draws per image, so that the sampled GGN over the subnet has rank
        # up to 4 x (training images) (CamVid: 1,468 >= the default 1,000 subnet weights)
        "ggn_samples": 4,
    }
    constraints = {**LaplaceMethod.common_constraints, "criterion": OneOf(*CRITERIA.names()), "n_subnet": Range(1, integer=True, optional=True),
                   "subnet_fraction": Range(0, 1, lo_open=True, optional=True),
                   "select_max_examples": Range(1, integer=True, optional=True),
                   "swag_n_snapshots": Range(2, integer=True), "swag_lr": Range(0, lo_open=True),
                   "swag_snapshot_every": Range(1, integer=True, optional=True),
                   "swag_batch_size": Range(1, integer=True), **LaplaceMethod.SAMPLED_GGN_CONSTRAINTS,
                   "memory_limit_gb": Range(0, lo_open=True, optional=True)}
    #: smoke runs (tests) check the pipeline, not SWAG's estimate: 16 snapshots instead of 256
    profile_defaults = {"smoke": {**LaplaceMethod.profile_defaults["smoke"], "swag_n_snapshots": 16}}
    DEFAULT_SUBNET = 1000
    #: the grid search caches the validation Jacobians (N_val x K x s floats) on the device up to this
    #: size; on a GPU, larger ones in the host's memory up to the guard's CPU limit (a quarter of what
    #: it has available), copied to the GPU chunk by chunk at every grid point (the subnetwork-Laplace
    #: paper's ResNet-18: 10,000 images x 10 outputs x 42,000 weights, 15.6 GB, against ten backward
    #: passes per image and grid point recomputed)
    JACOBIAN_CACHE_BYTES = 2 * 2**30

    JVP_SAMPLER = True
    # segmentation: pixels as observations, sampled-label GGN; multilabel: the subnet backend's Bernoulli GGN
    tasks = ("classification", "segmentation", "multilabel")
    UNSUPPORTED: dict[str, str] = {}
    #: criteria whose marginal variances come from a diagonal Laplace of laplace-torch's backends:
    #: a softmax likelihood fit, wrong for multi-label targets
    SOFTMAX_CRITERIA = ("wasserstein_diag_laplace", "largest_variance_diag_laplace")

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        if self.config["backend"] not in SUBNET_BACKENDS:
            raise BenchError(f"subnet_laplace: backend must be one of {', '.join(SUBNET_BACKENDS)}")
        self.check_task_config(ctx.task, self.config)
        self.indices: torch.Tensor | None = None

    @classmethod
    def check_task_config(cls, task, config: dict) -> None:
        """Options that depend on the suite's task, when the run is planned (exit 2): on a
        multilabel task the Bernoulli GGN exists for the subnet-only Jacobian backend only, and
        the diagonal-Laplace criteria fit a softmax likelihood."""
        if task.kind != "multilabel":
            return
        backend = config.get("backend", "auto")
        if backend not in ("auto",) + MULTILABEL_BACKENDS:
            raise BenchError(f"subnet_laplace: backend {backend!r} has only the softmax GGN; on a multilabel task "
                             f"the Bernoulli (sigmoid) GGN is the subnet-only Jacobian backend's (backend=auto or subnet)")
        criterion = config.get("criterion", cls.defaults["criterion"])
        if criterion in cls.SOFTMAX_CRITERIA:
            raise BenchError(f"subnet_laplace: criterion {criterion!r} estimates the marginal variances with a "
                             f"softmax-likelihood diagonal Laplace (laplace-torch's backends); on a multilabel task use "
                             f"wasserstein (SWAG on the task's loss), gradient, magnitude or random")

    @classmethod
    def check_network(cls, build_model, x, task, config):
        """Eligible layers (bench.network) exist and run as modules: the subnet-only Jacobians hook
        them, and a subnet weight the forward never reads would have no curvature."""
        from bench.network import check_stochastic_layers

        check_stochastic_layers(build_model(dropout=0.0), x, cls.name)

    def laplace_kwargs(self):
        # on the CPU whatever the device: laplace-torch accepts only ``isinstance(idx,
        # torch.LongTensor)``, which a CUDA tensor is not (the first CUDA run failed every cell with
        # "Subnetwork indices must be non-empty 1-dimensional torch.LongTensor"); torch indexes CUDA
        # tensors with CPU index tensors, and bench.laplace's backends move them where they need to
        return {"subnetwork_indices": self.indices.cpu()}

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
        elif name in ("largest_variance_diag_laplace", "wasserstein_diag_laplace"):
            opts.update(backend=c["select_backend"], max_examples=c["select_max_examples"],
                        exclude_non_identifiable=bool(c["exclude_non_identifiable"]), seed=data_seed(name, self.ctx.seed))
        elif name in ("largest_variance_swag", "wasserstein"):
            every = c["swag_snapshot_every"]
            opts.update(n_snapshots=int(c["swag_n_snapshots"]), lr=float(c["swag_lr"]), batch_size=int(c["swag_batch_size"]),
                        snapshot_every=None if every is None else int(every), max_examples=c["select_max_examples"],
                        exclude_non_identifiable=bool(c["exclude_non_identifiable"]),
                        seed=data_seed(name, self.ctx.seed),
                        resume_path=self.ctx.resume_path("swag"))  # a stopped SWAG run resumes
        return opts

    def choose_backend(self, model: nn.Module, x1: torch.Tensor) -> tuple[str, str]:
        """(backend, why). The subnet-only Jacobians scale with the subnet, not the network; of
        laplace-torch's own, BackPACK is preferred to ASDL (whose predictive falls back to torch.func
        Jacobians of all weights); Curvlinops' subnet path is torch.func over all weights: only on
        request. benchmarks/laplace_memory.py measures the backends' time and memory."""
        want = self.config["backend"]
        if self.ctx.task.kind == "multilabel":
            bad = subnet_jacobian_backend().unsupported(model, self.indices)
            if bad:
                raise BenchError(
                    f"subnet_laplace: on a multilabel task the Bernoulli (sigmoid) GGN is computed by the subnet-only "
                    f"Jacobian backend, which supports Linear / Conv2d weights only; the subnet has weights in "
                    f"{bad[:3]}, for which the fallback (BackPACK / ASDL) has only the softmax GGN")
            return "subnet", "multilabel: the Bernoulli (sigmoid) GGN of the subnet-only Jacobians"
        if self.segmentation_backend():
            return "sampled", ("segmentation: Jacobian backends take one row per input example; the subnet GGN "
                               "from labels drawn per pixel (bench/laplace/sampled_ggn.py)")
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
        x1 = train.x[:2].to(self.ctx.device) if hasattr(train, "x") else next(iter(train))[0][:2]
        check_stochastic_layers(model, x1, self.name)
        limit = (int(float(c["memory_limit_gb"]) * 2**30) if c["memory_limit_gb"] is not None
                 else default_memory_limit(self.ctx.device))
        mem_kw = memory_terms(c, model, x1)
        self.meta["n_outputs"] = mem_kw["n_outputs"]
        # 1. cheap check before the (slow) selection, with the cheapest backend that could apply
        want = self.segmentation_backend() or (c["backend"] if c["backend"] != "auto" else "subnet")
        check_memory(limit=limit, what=f"subnet_laplace (n_subnet={s}, backend={want})", backend=want, s=s, **mem_kw)
        # 2. selection ("Q3"), any criterion of the shared module at this size
        criterion = make_criterion(name, s, **self.criterion_options(name))
        t0 = time.perf_counter()
        self.indices = criterion.select(model, train, loss_fn=self.ctx.task.loss).cpu()
        self.meta["criterion"] = {"name": name, "size": size}
        self.meta["select_info"] = getattr(criterion, "info", {})
        # the whole selection's time: a SWAG run resumed from a stopped one counts its earlier seconds
        self.meta["select_time_s"] = time.perf_counter() - t0 + earlier_select_seconds(self.meta["select_info"])
        if "n_non_identifiable" in self.meta["select_info"]:
            self.meta["n_non_identifiable"] = self.meta["select_info"]["n_non_identifiable"]
        self.meta["subnet_size"] = int(self.indices.numel())
        self.meta["subnet_digest"] = subnet_digest(self.indices)
        self.meta["layer_distribution"] = layer_distribution(model, self.indices)
        # 3. backend, and the memory check with it
        backend, why = self.choose_backend(model, x1)
        self.meta["backend"], self.meta["backend_reason"] = backend, why
        if backend == "subnet":  # the layer inputs' entries it gathers per batch, now that the subnet is known
            from bench.laplace.subnet_jacobians import gathered_floats

            mem_kw["gathered"] = gathered_floats(model, self.indices, x1)
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

    def jacobian_cache_place(self, cache_bytes: int) -> str | None:
        """Where the grid search keeps the validation Jacobians: ``"device"`` (up to
        JACOBIAN_CACHE_BYTES), ``"host"`` (a GPU run's larger ones, up to the memory guard's limit on
        the CPU, :func:`bench.laplace.memory.default_memory_limit`), or None (recomputed at every grid
        point)."""
        if cache_bytes <= self.JACOBIAN_CACHE_BYTES:
            return "device"
        if torch.device(self.ctx.device).type == "cuda" and cache_bytes <= default_memory_limit("cpu"):
            return "host"
        return None

    def val_predictors(self, chunks):
        """The linearised probit predictive with the validation Jacobians computed once: per
        prior precision only ``J Sigma J^T`` changes (laplace-torch's own functional variance and
        probit link on the cached Jacobians; tests check it against the generic path). Where they
        are kept (:meth:`jacobian_cache_place`) is in ``meta["val_jacobian_cache"]``."""
        c = self.config
        n_val = sum(len(y) for _, y in chunks)
        cache_bytes = n_val * int(self.meta.get("n_outputs", 10)) * self.num_stochastic_params() * FLOAT_BYTES
        place = self.jacobian_cache_place(cache_bytes) if c["pred_type"] == "glm" and c["link_approx"] == "probit" \
            else None
        self.meta["val_jacobian_cache"] = {"place": place or "none", "bytes": int(cache_bytes)}
        if place is None:
            return super().val_predictors(chunks)
        probit = self.link()[1]  # multilabel: a sigmoid per label instead of the softmax
        dev = self.ctx.device
        host = place == "host"
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x, y in chunks:
                Js, f_mu = (t.detach() for t in self.la.backend.jacobians(x.to(dev)))
                if host:  # pinned where it can be, so that the copy back is asynchronous
                    Js = Js.cpu()
                    try:
                        Js = Js.pin_memory()
                    except RuntimeError:
                        pass

                def probs(Js=Js, f_mu=f_mu):
                    return probit(f_mu, self.la.functional_variance(Js.to(dev, non_blocking=True)))

                out.append((probs, y))
        return out

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
        out.update({"subnet_size": s, "covariance_bytes": s * s * COVARIANCE_BYTES,
                    "posterior_state_bytes": s * s * COVARIANCE_BYTES + s * 8})
        est = self.meta.get("memory_estimate_bytes")
        if est:
            out["memory_estimate_mb"] = est["total"] / 2**20
        return out
