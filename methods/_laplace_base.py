"""The Laplace family's shared method machinery: a laplace-torch approximation around the cached
MAP network, its prior precision chosen by one procedure for every variant
(:mod:`bench.laplace.prior`), one default predictive (linearised, probit) for every variant,
prediction in chunks, save / load without refitting.

Plugins (methods/subnet_laplace.py, laplace_diag.py, laplace_last_layer.py) subclass
:class:`LaplaceMethod` and set which weights and which Hessian structure. The machinery it uses
lives in :mod:`bench.laplace` (curvature backend, memory guard, prior search, predictive helpers,
SWAG, the diagonal GLM predictive); this module only holds the plugin base class (a module of
``methods/`` whose name starts with ``_`` registers nothing).
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from functools import partial
from typing import Any

import torch
from torch import nn

from bench.errors import BenchError
from bench.laplace.prior import grid_search_prior_precision
from bench.laplace.subnet_jacobians import backend_class
from bench.laplace.multilabel import multilabel_nll, probit_sigmoid_probs
from bench.laplace.predictive import glm_mc_logits, nll, probit_probs
from bench.options import OneOf, Range
from bench.predictive import ClassificationPredictive, MultilabelPredictive, concat
from bench.seeding import derive_seed
from bench.subnet.selection import as_torch_loader
from methods.base import Method


class _PixelRowDataset(torch.utils.data.Dataset):
    """The images of ``dataset`` (item i: image i and its label map) whose ``len()`` is the number of
    pixel rows, the observations: laplace-torch takes its N (the KFAC rescaling of each batch's
    input factor, ``n_data``) from ``len(train_loader.dataset)``."""

    def __init__(self, dataset, rows_per_item: int):
        self.dataset, self.rows_per_item = dataset, int(rows_per_item)

    def __getitem__(self, i):
        return self.dataset[i]

    def __len__(self):
        return len(self.dataset) * self.rows_per_item


def pixel_label_loader(loader, ignore_index: int):
    """The loader laplace-torch fits a segmentation network with: batches of images and their
    labels flattened to one per pixel row (the network's output rows), and N, the dataset's length
    for laplace-torch, the number of pixel rows. With N the number of images, laplace-torch's KFAC
    divides the summed input outer products of the last layer by the images instead of the pixels
    (its ``A = sum a a^T / N`` with one ``a`` per pixel): a curvature H x W times too large.
    laplace-torch has no ignore label: ignored pixels get class 0, which changes only the loss
    value it reports (the GGN of a softmax likelihood does not depend on the label); they still
    count as observations of the curvature (void: ~5 % of CamVid's pixels), said in
    docs/segmentation.md."""
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    def collate(items):
        xs, ys = zip(*items)
        y = torch.stack([torch.as_tensor(t) for t in ys]).reshape(-1).clone()
        y[y == ignore_index] = 0
        return torch.stack(list(xs)), y

    images = loader.dataset
    rows = torch.as_tensor(images[0][1]).numel() if len(images) else 1
    batches = BatchSampler(SequentialSampler(range(len(images))), loader.batch_size, drop_last=False)
    return DataLoader(_PixelRowDataset(images, rows), batch_sampler=batches, collate_fn=collate)


class LaplaceMethod(Method):
    """A laplace-torch approximation around the cached MAP network: fit, tune the prior
    precision, predict in chunks, save / load without refitting."""
    STARTS_FROM = "map"
    VALIDITY_CHECKS = ("informative", "map_converged", "laplace_prior_grid", "laplace_predictive_variance")

    tasks = ("classification",)
    UNSUPPORTED = {"multilabel": "its curvature comes from laplace-torch's BackPACK / ASDL backends, which have "
                                 "only the softmax GGN here (no Bernoulli / sigmoid likelihood); subnet_laplace "
                                 "supports multilabel with its own subnet-Jacobian backend"}
    #: laplace.Laplace(subset_of_weights=..., hessian_structure=...)
    subset_of_weights = "all"
    hessian_structure = "full"
    common_defaults: dict[str, Any] = {
        "pred_type": "glm",  # "glm" (linearised) | "nn" (sample the network)
        "link_approx": "probit",  # "probit" | "mc" (glm); nn is always MC
        "n_samples": 100,  # MC samples (laplace-torch's default)
        # how glm + mc draws its logits: "moments" = from N(f_mu, J Sigma J^T) formed as laplace-torch
        # does (K backward passes a batch); "jvp" = f_mu + J (theta_s - theta*), one Jacobian-vector
        # product per sample whatever K is (the same Gaussian; bench/laplace/jvp_glm.py), for many classes
        "glm_sampler": "moments",
        # one procedure for every Laplace variant: validation NLL of the method's own predictive
        # over a log10 grid, extended past an edge optimum (bench/laplace/prior.py)
        "prior_precision_method": "gridsearch",  # "gridsearch" (val NLL) | "marglik" | "none" (or None)
        "prior_precision": 1.0,  # used by "none", the start of "marglik"
        "grid_min": -4.0,  # log10 grid of the grid search (laplace-torch's range) ...
        "grid_max": 4.0,
        "grid_size": 21,  # ... with 21 points instead of 100: each point is one pass over val
        "grid_extend_decades": 4.0,  # an edge optimum extends the grid by this much ...
        "grid_max_extensions": 2,  # ... at most this often (1e-12 .. 1e12)
        "val_examples": None,  # None: the whole validation split for the grid search
        "batch_size": 128,  # curvature batch
        "predict_batch_size": 1000,  # chunk inside predict (and the grid search)
        "backend": "auto",
    }
    common_constraints = {
        "pred_type": OneOf("glm", "nn"), "link_approx": OneOf("probit", "mc"), "n_samples": Range(1, integer=True),
        "glm_sampler": OneOf("moments", "jvp"),
        "prior_precision_method": OneOf("gridsearch", "marglik", "none", optional=True),
        "prior_precision": Range(0, lo_open=True), "grid_size": Range(2, integer=True),
        "grid_extend_decades": Range(0), "grid_max_extensions": Range(0, integer=True),
        "val_examples": Range(1, integer=True, optional=True), "batch_size": Range(1, integer=True),
        "predict_batch_size": Range(1, integer=True),
    }
    constraints = common_constraints
    #: whether glm_sampler=jvp applies (a posterior whose ``sample`` gives every trainable weight)
    JVP_SAMPLER = False
    #: the options of the segmentation GGN (backend "sampled") for the variants that use it:
    #: labels drawn per pixel and image (bench/laplace/sampled_ggn.py), one backward pass per draw
    SAMPLED_GGN_CONSTRAINTS = {"ggn_samples": Range(1, integer=True)}
    #: smoke runs (tests) check the pipeline: a 5-point prior grid on 100 validation examples
    profile_defaults = {"smoke": {"grid_size": 5, "val_examples": 100}}

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        c = self.config
        if c["pred_type"] not in ("glm", "nn"):
            raise BenchError(f"{self.name}: pred_type must be 'glm' or 'nn', got {c['pred_type']!r}")
        if c["link_approx"] not in ("probit", "mc"):
            raise BenchError(f"{self.name}: link_approx must be 'probit' or 'mc', got {c['link_approx']!r}")
        if c["pred_type"] == "nn" and c["link_approx"] != "mc":
            self.config["link_approx"] = "mc"  # laplace-torch: the nn predictive is Monte Carlo only
        if c["glm_sampler"] == "jvp" and not (c["pred_type"] == "glm" and c["link_approx"] == "mc"):
            raise BenchError(f"{self.name}: glm_sampler=jvp samples the linearised predictive: it needs "
                             f"pred_type=glm and link_approx=mc (got {c['pred_type']}, {c['link_approx']})")
        if c["glm_sampler"] == "jvp" and not self.JVP_SAMPLER:
            raise BenchError(f"{self.name}: glm_sampler=jvp is for posteriors over the network's weights "
                             f"(laplace_diag, subnet_laplace); the last layer's Jacobian is its feature, already cheap")
        if (ctx.task.kind == "segmentation" and self.JVP_SAMPLER and c["pred_type"] == "glm"
                and c["glm_sampler"] != "jvp"):
            raise BenchError(f"{self.name}: on a segmentation network the linearised predictive is drawn by "
                             f"Jacobian-vector products (link_approx=mc, glm_sampler=jvp) or networks are sampled "
                             f"(pred_type=nn): its moments need the Jacobian of every pixel row (K backward passes per "
                             f"pixel); got link_approx={c['link_approx']}, glm_sampler={c['glm_sampler']}")
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

    def segmentation_backend(self) -> str | None:
        """``"sampled"`` on a segmentation network (the only curvature backend that takes its
        pixels as observations; ``backend`` must be auto or sampled there), else None; a BenchError
        for ``backend=sampled`` on any other task."""
        b = self.config["backend"]
        if self.ctx.task.kind == "segmentation":
            if b not in ("auto", "sampled"):
                raise BenchError(f"{self.name}: a segmentation network's GGN is estimated with backend=sampled "
                                 f"(labels drawn per pixel); {b!r} takes one row per input example")
            return "sampled"
        if b == "sampled":
            raise BenchError(f"{self.name}: backend=sampled is for segmentation networks")
        return None

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
        from bench.laplace import import_laplace
        from bench.laplace.precision import float64_posterior

        import_laplace()  # first, without its dependencies' torch.jit FutureWarnings
        from laplace import Laplace

        net = copy.deepcopy(model).eval()  # BackPACK / ASDL hook into the model: its own copy
        for p in net.parameters():
            p.requires_grad_(True)
        kw = self.laplace_kwargs()
        if backend == "sampled":  # the segmentation GGN from labels drawn per pixel (a seeded draw)
            kw["backend_kwargs"] = {"ignore_index": int(self.ctx.task.ignore_index),
                                    "n_samples": int(self.config["ggn_samples"]),
                                    "seed": derive_seed(self.name, "ggn-labels", self.ctx.seed)}
        # multilabel: laplace-torch's "classification" approximation with the Bernoulli GGN backend
        # (bench.laplace.subnet_jacobians; the likelihood string only sets sigma_noise 1 and the log
        # likelihood -loss there); the predictive is this class's own (_predict_chunk)
        la = Laplace(net, "classification", subset_of_weights=self.subset_of_weights,
                     hessian_structure=self.hessian_structure,
                     backend=backend_class(backend, self.ctx.task.kind),
                     prior_precision=float(self.config["prior_precision"]), **kw)
        # a full subnetwork covariance in float64: float32 cannot factor H + tau I at the small prior
        # precisions the validation search asks for (bench/laplace/precision.py)
        return float64_posterior(la)

    def _val_chunks(self, val):
        """The validation split (or a fixed, seeded subset of ``val_examples``) in chunks."""
        x, y = val
        n = self.config["val_examples"]
        if n is not None and int(n) < len(x):
            gen = torch.Generator().manual_seed(derive_seed(self.name, "val-subset", self.ctx.seed))
            keep = torch.randperm(len(x), generator=gen)[:int(n)].sort().values
            x, y = x[keep], y[keep]
        chunk = int(self.config["predict_batch_size"])
        return [(x[i:i + chunk], y[i:i + chunk]) for i in range(0, len(x), chunk)]

    def val_predictors(self, chunks):
        """``[(probs(), y)]`` per validation chunk, ``probs()`` = this method's predictive at the
        current prior precision. Subclasses may cache what does not depend on it (the
        subnetwork Laplace: the validation Jacobians)."""
        dev = self.ctx.device
        return [(lambda x=x: self._predict_chunk(x.to(dev)).probs, y) for x, y in chunks]

    def labelled(self, probs: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows of ``probs`` that have a label, and their labels: all of them for
        classification and multilabel (a row: an example's L labels); for segmentation the
        pixels of ``y`` (B, H, W) that are not ignored."""
        task = self.ctx.task
        if task.kind != "segmentation":
            return probs, y
        y = y.reshape(-1).to(probs.device)
        keep = y != task.ignore_index
        return probs[keep], y[keep]

    def val_loss(self, probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean NLL of the labelled rows ``y`` under ``probs``: the categorical one, or on a
        multilabel task the binary cross-entropy summed over the labels (mean over examples)."""
        return multilabel_nll(probs, y) if self.ctx.task.kind == "multilabel" else nll(probs, y)

    def val_nll_function(self, chunks):
        """``tau -> mean validation NLL`` of :meth:`val_predictors` (over labelled pixels for
        segmentation; per example, summed over its labels, for multilabel); ``inf`` where the
        posterior cannot be formed (a failed Cholesky factor at a tiny prior precision)."""
        predictors = self.val_predictors(chunks)

        def val_nll(tau: float) -> float:
            self.la.prior_precision = float(tau)
            total, n = 0.0, 0
            try:
                with torch.no_grad():
                    for probs, y in predictors:
                        p, t = self.labelled(probs(), y)
                        total += float(self.val_loss(p, t)) * len(t)
                        n += len(t)
            except torch.linalg.LinAlgError:
                return math.inf
            return total / max(n, 1)

        return val_nll

    def val_nll_many_function(self, chunks):
        """``taus -> [mean validation NLL]`` for several prior precisions in one pass, or None
        (then the grid search calls :meth:`val_nll_function` per point)."""
        return None

    def tune_prior(self, val) -> None:
        c = self.config
        method = c["prior_precision_method"]
        self.meta["prior_precision_method"] = method
        if method == "none":
            return
        if method == "marglik":
            kw = {"pred_type": c["pred_type"], "link_approx": c["link_approx"], "n_samples": int(c["n_samples"])}
            self.la.optimize_prior_precision(method="marglik", init_prior_prec=float(c["prior_precision"]),
                                             prior_structure="scalar", **kw)
            return
        chunks = self._val_chunks(val)
        result = grid_search_prior_precision(
            self.val_nll_function(chunks), log_min=float(c["grid_min"]), log_max=float(c["grid_max"]),
            size=int(c["grid_size"]), extend_decades=float(c["grid_extend_decades"]),
            max_extensions=int(c["grid_max_extensions"]), val_nll_many=self.val_nll_many_function(chunks))
        self.la.prior_precision = float(result["prior_precision"])
        self.meta["prior_search"] = result
        if result["at_grid_edge"]:
            lo, hi = result["log10_grid"][0], result["log10_grid"][-1]
            meaning = ("the validation data prefer the posterior collapsed onto the MAP network"
                       if result["at_grid_edge"] == "upper" else "the validation data prefer the widest posterior")
            self.meta.setdefault("warnings", []).append(
                f"prior precision {result['prior_precision']:.3g} is at the {result['at_grid_edge']} edge of the "
                f"searched grid 1e{lo:g} .. 1e{hi:g} (after {result['n_extensions']} extension(s)): {meaning}")

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
        if self.ctx.task.kind == "segmentation":
            if backend == "sampled":
                from bench.laplace.sampled_ggn import label_map_loader

                loader = label_map_loader(loader)
                self.meta["ggn_samples"] = int(c["ggn_samples"])
            else:
                loader = pixel_label_loader(loader, self.ctx.task.ignore_index)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            self.la = self.fit_laplace(model, loader, backend)
            self.meta["curvature_time_s"] = time.perf_counter() - t0
            self.after_fit()
            t0 = time.perf_counter()
            self.tune_prior(val)
            self.meta["prior_time_s"] = time.perf_counter() - t0
            self.meta["predictive_spread"] = self.predictive_spread(val)
        self.meta["prior_precision"] = self.la.prior_precision.detach().cpu().flatten().tolist()
        try:
            self.meta["log_marginal_likelihood"] = float(self.la.log_marginal_likelihood().detach())
        except Exception:  # noqa: BLE001 - a diagnostic only
            self.meta["log_marginal_likelihood"] = None
        return self

    #: validation inputs on which the predictive's logit variance is compared with MAP's logits
    SPREAD_EXAMPLES = 256

    @torch.no_grad()
    def predictive_spread(self, val) -> dict | None:
        """How far the posterior can move the predictive, at the chosen prior: on up to
        SPREAD_EXAMPLES validation inputs, the linearised predictive's logit variance (the mean of
        the diagonal of J Sigma J^T over inputs and classes; Monte Carlo over the predictive's own
        weight draws for the jvp sampler) against the MAP logits' spread (their variance across the
        classes, mean over inputs). A ratio far below 1 leaves the softmax where MAP puts it
        (bench.validity's laplace_predictive_variance). Classification with the GLM predictive only."""
        if val is None or self.ctx.task.kind != "classification" or self.config["pred_type"] != "glm":
            return None
        x = val[0][: self.SPREAD_EXAMPLES].to(self.ctx.device)
        if not len(x):
            return None
        f_map = self.model(x).double()
        if self.config["glm_sampler"] == "jvp":
            from bench.laplace.jvp_glm import glm_logit_samples, posterior_offsets

            S = max(int(self.config["n_samples"]), 2)
            _, f = glm_logit_samples(self.la.model, x, posterior_offsets(self.la, S, self._generator()),
                                     self._jvp_per_pass(x, S))
            var = f.double().var(dim=0)
        else:
            _, f_var = self.glm_moments(x)
            var = torch.diagonal(f_var, dim1=-2, dim2=-1) if f_var.dim() == 3 else f_var
            var = var.double()
        logit_var = float(var.mean())
        spread = float(f_map.var(dim=1).mean())
        return {"logit_variance": logit_var, "map_logit_spread": spread,
                "ratio": logit_var / spread if spread > 0 else None, "n": int(len(x))}

    def _generator(self):
        """The predictive's draws: a CPU generator seeded with ``predict_seed``, the normals moved to
        the device, so a fitted state predicts the same on every device (as PBN's and SSVI's
        draws; the device check compares a CUDA fit evaluated on both)."""
        return torch.Generator().manual_seed(int(self.meta["predict_seed"]))

    def _device_generator(self):
        """laplace-torch's own weight sampler (``pred_type=nn``) draws on the posterior's device:
        those draws differ between devices."""
        return torch.Generator(device=self.ctx.device).manual_seed(int(self.meta["predict_seed"]))

    #: the predictive's weight draws (S x P floats) are kept on the device up to this size, drawn
    #: once per posterior; larger ones are drawn again for every batch (a host-to-device copy each)
    DRAWS_CACHE_BYTES = 1 << 30

    def _posterior_offsets(self, S: int):
        """The S weight offsets of the jvp sampler (:func:`bench.laplace.jvp_glm.posterior_offsets`
        on :meth:`_generator`): an (S, P) tensor kept for the posterior and prior they were drawn
        for, or, above :attr:`DRAWS_CACHE_BYTES`, an iterator drawing them anew."""
        from bench.laplace.jvp_glm import posterior_offsets

        la = self.la
        key = (la, la.prior_precision, la.prior_precision._version, S)
        cached = getattr(self, "_offsets_cache", None)
        if cached is not None and all(a is b for a, b in zip(cached[0][:2], key[:2])) and cached[0][2:] == key[2:]:
            return cached[1]
        offsets = posterior_offsets(la, S, self._generator())
        if S * la.mean.numel() * la.mean.element_size() > self.DRAWS_CACHE_BYTES:
            return offsets
        offsets = torch.stack(list(offsets))
        self._offsets_cache = (key, offsets)
        return offsets

    def _jvp_per_pass(self, x: torch.Tensor, S: int) -> int:
        """How many of the jvp sampler's S samples share a pass over the batch ``x``
        (:func:`bench.laplace.jvp_glm.samples_per_pass`; the network's activations per example
        counted once per input shape)."""
        from bench.laplace.jvp_glm import samples_per_pass
        from bench.laplace.memory import activation_numel

        counts = self.__dict__.setdefault("_activations_per_example", {})
        shape = tuple(x.shape[1:])
        if shape not in counts:
            counts[shape] = activation_numel(self.la.model, x[:1])
        return samples_per_pass(S, counts[shape] * len(x), self.la.mean.numel())

    def _mc_normals(self, k: int, S: int, like: torch.Tensor) -> torch.Tensor:
        """The (k, S) standard normals the moment-based Monte Carlo predictive shares across every
        batch (:func:`bench.laplace.predictive.glm_mc_logits`), drawn once on :meth:`_generator`."""
        cached = getattr(self, "_normals_cache", None)
        if cached is None or cached.shape != (k, S) or cached.dtype != like.dtype or cached.device != like.device:
            cached = torch.randn(k, S, generator=self._generator(), dtype=like.dtype).to(like.device)
            self._normals_cache = cached
        return cached

    def glm_moments(self, x):
        """``(f_mu, f_var)`` of the linearised predictive at ``x`` (laplace-torch's; subclasses
        may compute them faster)."""
        return self.la._glm_predictive_distribution(x)

    def link(self):
        """``(squash, probit, predictive class)`` of the task: how sampled logits become
        probabilities, the probit approximation of the linearised predictive, and what holds the
        result; a softmax over classes, or on a multilabel task a sigmoid per label
        (bench/laplace/multilabel.py)."""
        if self.ctx.task.kind == "multilabel":
            return torch.sigmoid, probit_sigmoid_probs, MultilabelPredictive
        return partial(torch.softmax, dim=-1), probit_probs, ClassificationPredictive

    def _predict_chunk(self, x):
        c = self.config
        S = int(c["n_samples"])
        squash, probit, predictive = self.link()
        if c["pred_type"] == "glm" and c["glm_sampler"] == "jvp":
            from bench.laplace.jvp_glm import glm_logit_samples

            # the same weight offsets for every chunk (drawn once, or by a fresh generator): batching-independent
            _, f = glm_logit_samples(self.la.model, x, self._posterior_offsets(S), self._jvp_per_pass(x, S))
            return predictive.from_samples(squash(f).float())
        if c["pred_type"] == "glm":
            f_mu, f_var = self.glm_moments(x)
            if c["link_approx"] == "probit":
                return predictive(probit(f_mu, f_var).float())
            return predictive.from_samples(squash(glm_mc_logits(f_mu, f_var, S, self._generator(),
                                                                 self._mc_normals(f_mu.shape[-1], S, f_mu))).float())
        # A fresh generator seeded the same way for every chunk: the same weight samples, so
        # predictions do not depend on how the harness batches.
        if self.ctx.task.kind == "multilabel":  # laplace-torch's predictive_samples applies a softmax
            f = self.la._nn_functional_samples(x, n_samples=S, generator=self._device_generator())
            return predictive.from_samples(squash(f).float())
        probs = self.la.predictive_samples(x, pred_type="nn", n_samples=S, generator=self._device_generator())
        return predictive.from_samples(probs.float())

    def predict(self, x):
        if self.la is None:
            raise BenchError(f"{self.name}: predict before fit / load_state_dict")
        chunk = int(self.config["predict_batch_size"])
        parts = [self._predict_chunk(x[i:i + chunk]) for i in range(0, len(x), chunk)]
        return parts[0] if len(parts) == 1 else concat(parts)

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
        return out

    def diagnostics(self):
        keep = ("backend", "backend_reason", "criterion", "prior_precision", "prior_precision_method",
                "prior_search", "warnings", "log_marginal_likelihood", "memory_estimate_bytes",
                "memory_limit_bytes", "n_zero_curvature", "n_non_identifiable", "select_info", "subnet_size", "subnet_digest",
                "layer_distribution", "select_time_s", "curvature_time_s", "prior_time_s", "ggn_samples",
                "predictive_spread", "head", "last_layer_name", "val_jacobian_cache")
        out = {k: self.meta[k] for k in keep if k in self.meta}
        out.update({k: self.config[k] for k in ("pred_type", "link_approx", "glm_sampler")})
        # the N of the posterior (training examples; pixels on segmentation): s / N bounds the
        # attainable predictive variance of a full-covariance posterior (bench.validity)
        out["num_observations"] = int(self.ctx.num_train) if self.ctx.num_train else None
        return out


def _to_device(obj, device):
    """Every tensor of a nested dict / list / tuple moved to ``device`` (detached)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    return obj
