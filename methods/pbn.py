"""Partial Bayesian networks (PBN): gradient-selected subnetwork trained with mean-field VI.

PBN paper ("sensitivity-guided subnetwork VI"), Algorithm 1:

1. start from the trained deterministic (MAP) network (line 2; ``ctx.map_cache``);
2. sensitivity analysis: ``Topk(|grad_theta L|)`` with ``k = r_bayes x N_theta`` (lines 7-8;
   :class:`bench.subnet.selection.GradientCriterion`);
3. ``mu = theta_MAP`` for every weight, ``sigma_b = softplus(rho_b)`` with
   ``rho_b ~ N(mu_init, sigma_init)`` for the selected ones, ``sigma_d = 0`` otherwise (line 9;
   :class:`bench.subnet.partial_vi.PartialVI`);
4. minimise ``NLL + beta KL(q || N(0, I))`` with 5 posterior samples, means and ``rho`` jointly
   (line 10; Sec. 3 "Training the PBN"), beta annealed from 0.2 to 0.01 (Appendix H.6); the NLL
   optionally class-weighted (``class_weights``, the medical PBN paper; bench/class_weights.py);
5. predict with the average of 5 posterior samples (Appendix H.6).

Ablations and controls, as options: ``criterion="random"`` (a random subnetwork of the same
size: a control of this benchmark, the baseline subnetwork Laplace's paper reports for its own
criterion, "Ours (Rand)"; the PBN paper has no such ablation), ``init="random"`` (random mu and
rho on the same gradient-selected subnetwork, Sec. 4.3 and Fig. 6), ``squared=True`` (the
earlier paper's squared-gradient saliency).

The shared machinery (:class:`VIMethod`) also backs ``mfvi`` (methods/mfvi.py).
"""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from bench import class_weights
from bench.errors import BenchError
from bench.network import PROBE_EXAMPLES, check_stochastic_layers
from bench.options import Check, OneOf, Range
from bench.seeding import derive_seed
from bench.subnet.partial_vi import PartialVI, elbo_loss, forward_flops
from bench.subnet.selection import (CRITERIA, LargestVarianceSWAGCriterion, VarianceCriterion, candidate_indices,
                                    data_seed, earlier_select_seconds, layer_distribution, make_criterion,
                                    param_layout, subnet_digest)
from bench.subnet.sigma_stats import last_rel_change, sigma_change, sigma_summary
from bench.subnet.stationarity import sigma_stationarity
from bench.subnet.ssvi import softplus_inv
from bench.training import OPTIMIZERS, host_float, own_group, train_model, validation_curve
from methods.base import Method, register_method


def softplus_inv_float(sigma: float) -> float:
    """rho with softplus(rho) = sigma (a float; :func:`bench.subnet.ssvi.softplus_inv` does the work)."""
    return float(softplus_inv(torch.tensor(float(sigma), dtype=torch.float64)))


#: first-layer sigma tensors up to this many entries are stored whole in the diagnostics
MAX_SIGMA_VALUES = 5000


class VIMethod(Method):
    """Common fit / predict / save / cost code of PBN and full mean-field VI."""

    tasks = ("classification", "regression", "segmentation", "multilabel")  # segmentation: pixels as examples
    VALIDITY_CHECKS = ("informative", "vi_rate_limit", "vi_moved", "vi_stationarity")

    #: hyperparameters shared by both (PBN paper, Sec. 3 and Appendix H.6)
    vi_defaults = {
        "train_samples": 5,  # Sec. 3 "Five posterior samples were chosen"; App. H.6
        "predict_samples": 5,  # App. H.6 "5 posterior samples were drawn during training and inference"
        "prior_scale": 1.0,  # N(0, I) prior, Sec. 3 "Notation"
        # rho_b ~ N(mu_init, sigma_init) (Algorithm 1 line 9); the paper gives no values. The
        # initial sigma must be small against the weights (SSVI paper Sec. 4.2: "Ensuring small
        # sigma^0 is important for preventing training failures"): 1e-3, between SSVI's official
        # 6e-4 and the 0.001-0.01 range of its Fig. 2; rho ~ N(softplus^-1(sigma_init), rho_init_std^2).
        # (Was softplus(-3) = 0.049, larger than the initial weight std of most layers: see docs/pbn.md.)
        "sigma_init": 1e-3,
        "rho_init_std": 0.1,
        # rho has its own parameter group, optimiser and rate, without weight decay. At a small
        # sigma the softplus makes d loss / d rho ~ sigma x d loss / d sigma: with the means' SGD
        # rho does not move at any usable rate (docs/pbn.md, "Learning sigma"); Adam's
        # per-parameter step size is scale-free. The profile's schedule applies to both groups.
        "rho_optimizer": "adam",
        "rho_lr": 0.01,
        "beta_start": 0.2,  # App. H.6: KL weight annealed from 0.2 ...
        "beta_end": 0.01,  # ... to 0.01 over training
        "local_reparam": False,  # the paper uses the plain reparameterisation trick (Sec. 3)
        "epochs": None,  # None = the profile's training epochs
        "lr": None,  # None = the profile's learning rate (the VI phase may fine-tune at a smaller one)
        # How the KL enters the per-example loss: "dataset" = beta KL / N_train (the ELBO per
        # observation; beta < 1 tempers it; on segmentation N counts training pixels), "examples"
        # = beta KL / the number of training inputs (images on segmentation, where the medical PBN
        # paper does not say which N it used; = "dataset" on classification), "batch" = beta KL /
        # batch size (common Bayes-by-backprop code; a N/B times stronger pull towards the prior)
        "kl_scale": "dataset",
        # the likelihood's class weights (medical PBN paper Sec. 3.1: "a weighted cross-entropy"):
        # "none" | "median_frequency" | "balanced" (from the training labels) | K numbers (multi-label:
        # the labels' positives); normalised to mean 1 over the training observations, so that KL / N
        # keeps its N (bench/class_weights.py)
        "class_weights": "none",
    }

    vi_constraints = {
        "train_samples": Range(1, integer=True), "predict_samples": Range(1, integer=True),
        "prior_scale": Range(0, lo_open=True), "sigma_init": Range(0, lo_open=True), "rho_init_std": Range(0),
        "rho_optimizer": OneOf(*OPTIMIZERS), "rho_lr": Range(0, lo_open=True), "beta_start": Range(0),
        "beta_end": Range(0), "epochs": Range(1, integer=True, optional=True),
        "lr": Range(0, lo_open=True, optional=True), "kl_scale": OneOf("dataset", "examples", "batch"),
        "class_weights": Check(class_weights.parse, class_weights.DESCRIPTION),
    }
    constraints = vi_constraints
    LATER_OPTIONS = {"class_weights": "none"}  # added after records were made: the earlier behaviour
    PREDICT_OPTIONS = ("predict_samples",)  # the S prediction draws are made at predict time

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.vi: PartialVI | None = None
        self.meta: dict = {}
        self._predict_eps: torch.Tensor | None = None
        self._class_weights: torch.Tensor | None = None  # normalised (K,) / (2, L) multi-label, or None: the task's own loss

    # -- hooks -------------------------------------------------------------------------------
    def build_posterior(self, train) -> tuple[nn.Module, torch.Tensor, dict]:
        """(network holding mu, sorted flat indices of the stochastic entries, metadata)."""
        raise NotImplementedError

    @classmethod
    def check_task_config(cls, task, config: dict) -> None:
        """Options that depend on the suite's task, when the run is planned (exit 2): one class
        weight per class, and only for a per-class likelihood."""
        if "class_weights" in config:
            class_weights.check_task(config["class_weights"], task)

    # -- helpers -----------------------------------------------------------------------------
    def _vi_kwargs(self) -> dict:
        c = self.config
        return {"prior_scale": float(c["prior_scale"]), "rho_init_mean": softplus_inv_float(float(c["sigma_init"])),
                "rho_init_std": float(c["rho_init_std"])}

    def param_groups(self) -> list[dict]:
        """The means with the profile's optimiser; rho with its own optimiser and rate, no decay."""
        return [{"params": list(self.vi.net.parameters())},
                own_group([self.vi.rho], self.config["rho_optimizer"], self.config["rho_lr"])]

    def fresh_network(self, tag: str) -> nn.Module:
        """A randomly initialised network, seeded per method / seed, leaving the global RNG as it was."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.name, tag, self.ctx.seed))
            return self.ctx.build_model(dropout=0.0)

    @classmethod
    def check_network(cls, build_model, x, task, config):
        """Eligible layers exist and run as modules (bench.network), and partial VI's sampling forward
        works on the network with every eligible weight stochastic."""
        from bench.network import check_stochastic_layers, try_on_probe

        net = build_model(dropout=0.0)
        check_stochastic_layers(net, x, cls.name)
        vi = PartialVI(net, candidate_indices(net), rho_init_mean=-5.0, generator=torch.Generator().manual_seed(0)).eval()
        try_on_probe(lambda: vi(x, 2), f"{cls.name}: partial VI's sampling forward")

    # -- the contract ------------------------------------------------------------------------
    def fit(self, train, val):
        c = self.config
        for key in ("train_samples", "predict_samples"):
            if int(c[key]) < 1:
                raise BenchError(f"{self.name}: {key} must be >= 1")
        for key in ("sigma_init", "rho_lr"):
            if not float(c[key]) > 0:
                raise BenchError(f"{self.name}: {key} must be > 0, got {c[key]!r}")
        if c["rho_optimizer"] not in OPTIMIZERS:
            raise BenchError(f"{self.name}: rho_optimizer must be one of {', '.join(OPTIMIZERS)}")
        net, indices, meta = self.build_posterior(train)
        check_stochastic_layers(net, train.x[:PROBE_EXAMPLES].to(self.ctx.device), self.name)
        gen = torch.Generator().manual_seed(derive_seed(self.name, "rho", self.ctx.seed))
        self.vi = PartialVI(net, indices, generator=gen, **self._vi_kwargs()).to(self.ctx.device)
        meta["sigma_init"] = sigma_summary(self.vi.named_sigmas())
        x0 = train.x[:1].to(self.ctx.device)
        meta["in_shape"] = list(x0.shape[1:])
        meta["forward_flops"] = forward_flops(self.vi.net, x0)
        cfg = self.train_config()
        num_train = self.ctx.num_train or train.num_examples
        divisors = {"dataset": num_train, "examples": train.num_examples, "batch": cfg.batch_size}
        if c["kl_scale"] not in divisors:
            raise BenchError(f"{self.name}: kl_scale must be one of {', '.join(divisors)}, got {c['kl_scale']!r}")
        kl_divisor = divisors[c["kl_scale"]]
        self._class_weights, meta["class_weights"] = class_weights.resolve(c["class_weights"], self.ctx.task, train.y)
        last: dict = {}
        # The optimiser runs without weight decay so that rho is not shrunk towards 0
        # (sigma -> 0.69); the profile's L2 is applied to the means inside the loss instead.
        loss_fn = elbo_loss(self.ctx.task, kl_divisor, samples=int(c["train_samples"]),
                            beta_start=float(c["beta_start"]), beta_end=float(c["beta_end"]),
                            local_reparam=bool(c["local_reparam"]), weight_decay=cfg.weight_decay, log=last,
                            class_weights=self._class_weights)
        # the mean network's validation NLL after every epoch: whether the training ended at rest
        curve = validation_curve(self.vi, self.ctx.task, val, cfg.batch_size, forward=self.vi.mean_forward)

        def epoch_stats():  # convergence evidence: sigma and the KL weight after every epoch
            sig = self.vi.sigma().detach()
            return {"sigma_mean": float(sig.mean()) if sig.numel() else None,
                    "sigma_median": float(sig.median()) if sig.numel() else None,
                    "beta": last.get("beta"), "nll": host_float(last.get("nll")),
                    "kl": host_float(last.get("kl")), **(curve() if curve else {})}

        log = train_model(self.vi, train, cfg.replace(weight_decay=0.0), loss_fn, params=self.param_groups(),
                          epoch_stats=epoch_stats, desc=self.name,
                          progress=self.ctx.progress, resume_path=self.ctx.resume_path(self.name))
        meta["vi_train_time_s"] = log["train_seconds"]
        meta["sigma_stationarity"] = self.measure_stationarity(train, kl_divisor, c)
        meta["train"] = {"epochs": cfg.epochs, "steps": cfg.epochs * len(train),
                         "epoch_loss": [float(v) for v in log.get("epoch_loss", [])],
                         "epoch_stats": log.get("epoch_stats", []),
                         "sigma_last_epoch_rel_change": last_rel_change(log.get("epoch_stats", []), "sigma_mean"),
                         "final_nll": host_float(last.get("nll")), "final_kl": host_float(last.get("kl")),
                         "final_beta": last.get("beta"),
                         "num_train": int(num_train), "kl_divisor": int(kl_divisor),
                         "mean_optimizer": cfg.optimizer, "mean_lr": cfg.lr, "schedule": cfg.schedule,
                         "rho_optimizer": str(c["rho_optimizer"]), "rho_lr": float(c["rho_lr"])}
        meta["predict_seed"] = derive_seed(self.name, "predict", self.ctx.seed)
        self.meta = meta
        self.vi.eval()
        self._predict_eps = None
        return self

    def measure_stationarity(self, train, kl_divisor: int, c: dict) -> dict:
        """d (negative ELBO per observation) / d log c with every sigma scaled by c, at the end KL
        weight, on a few training batches (:mod:`bench.subnet.stationarity`; check vi_stationarity)."""
        likelihood = elbo_loss(self.ctx.task, kl_divisor, samples=int(c["train_samples"]), beta_start=0.0,
                               beta_end=0.0, local_reparam=bool(c["local_reparam"]),
                               class_weights=self._class_weights)
        beta = float(c["beta_end"])
        out = sigma_stationarity(self.vi, [self.vi.rho], lambda m, x, y: likelihood(m, x, y, 1.0),
                                 lambda m: beta * m.kl() / kl_divisor, train,
                                 seed=derive_seed(self.name, "stationarity", self.ctx.seed))
        return {**out, "beta": beta} if out else {}

    def _eps(self) -> torch.Tensor:
        """Fixed weight noise for prediction: every ``predict`` call uses the same S posterior
        draws, so predictions are reproducible and independent of how the harness batches."""
        if self._predict_eps is None:
            gen = torch.Generator().manual_seed(int(self.meta["predict_seed"]))
            self._predict_eps = self.vi.sample_eps(int(self.config["predict_samples"]), gen).to(self.ctx.device)
        return self._predict_eps

    @torch.no_grad()
    def predict(self, x):
        if self.vi is None:
            raise BenchError(f"{self.name}: predict before fit / load_state_dict")
        self.vi.eval()
        eps = self._eps()
        # on a CPU, S passes over N rows beat one pass over S*N rows (eval-mode BN: same result)
        chunk = 1 if x.device.type == "cpu" else None
        out = self.vi(x, eps.shape[0], eps=eps, chunk=chunk)
        return self.ctx.task.predictive_from_samples(out)

    def state_dict(self):
        return {"vi": self.vi.state_dict(), "meta": copy.deepcopy(self.meta)}

    def load_state_dict(self, state):
        net = self.ctx.build_model(dropout=0.0)
        vi_state = {k: v.cpu() for k, v in state["vi"].items()}
        self.vi = PartialVI.from_state_dict(net, vi_state, **self._vi_kwargs()).to(self.ctx.device)
        self.vi.eval()
        self.meta = copy.deepcopy(state["meta"])
        self._predict_eps = None

    def modules(self):
        return [] if self.vi is None else [self.vi]

    # -- cost and diagnostics ------------------------------------------------------------------
    def num_stochastic_params(self):
        return 0 if self.vi is None else self.vi.num_stochastic

    def _sizes(self) -> tuple[int, int]:
        theta = sum(p.numel() for p in self.vi.net.parameters())
        return theta, self.vi.num_stochastic

    def paper_train_flops(self, f_d: float, r: float, n_samples: int) -> dict:
        raise NotImplementedError

    def extra_cost(self):
        if self.vi is None:
            return {}
        theta, k = self._sizes()
        f_d = float(self.meta.get("forward_flops", float("nan")))
        r = k / theta
        bytes_rho = self.vi.rho.numel() * self.vi.rho.element_size()
        bytes_idx = self.vi.indices.numel() * self.vi.indices.element_size()
        cost = {
            "variational_params": k,
            "mean_params": theta,
            # Appendix B: (1 + r_bayes) theta stored parameters (mu for all, sigma for k)
            "param_ratio_vs_deterministic": (theta + k) / theta,
            "variational_state_bytes": bytes_rho + bytes_idx,  # rho + flat indices (int32)
            "variational_state_bytes_dense_rho": theta * self.vi.rho.element_size(),  # a dense rho, for scale
            "forward_flops_deterministic": f_d,
            # Appendix C forward cost of prediction: (1 + r_bayes) N f_d
            "predict_flops_per_example_paper": (1 + r) * int(self.config["predict_samples"]) * f_d,
            "vi_train_time_s": self.meta.get("vi_train_time_s"),
            **self.paper_train_flops(f_d, r, int(self.config["train_samples"])),
        }
        return cost

    def first_layer_sigma(self) -> dict:
        """Sigma of the first Linear / Conv weight (PBN paper Fig. 3 heat maps)."""
        slots = [s for s in param_layout(self.vi.net) if s.candidate and s.param_name == "weight"]
        if not slots:
            return {}
        s = slots[0]
        sig = self.vi.sigma_of(s.name).detach().cpu()
        sel = sig[sig > 0]
        out = {"param": s.name, "shape": list(sig.shape), "stochastic": int(sel.numel()),
               "mean": float(sel.mean()) if sel.numel() else 0.0,
               "max": float(sel.max()) if sel.numel() else 0.0,
               "min": float(sel.min()) if sel.numel() else 0.0}
        if sig.numel() <= MAX_SIGMA_VALUES:
            out["values"] = sig.tolist()
        elif sig.dim() == 2:  # Linear (out, in): per-input maps, e.g. 28x28 for MNIST
            out["per_input_mean"] = sig.mean(0).tolist()
            out["per_input_max"] = sig.max(0).values.tolist()
            out["per_input_count"] = (sig > 0).sum(0).tolist()
            if self.meta.get("in_shape"):
                out["input_shape"] = self.meta["in_shape"]
        return out

    def diagnostics(self):
        if self.vi is None:
            return {}
        theta, k = self._sizes()
        sig = self.vi.sigma().detach().float().cpu()
        n_cand = int(self.meta.get("n_candidates", candidate_indices(self.vi.net).numel()))
        out = {
            "k": k, "n_params": theta, "n_candidates": n_cand, "r_bayes_effective": k / max(n_cand, 1),
            "layer_distribution": layer_distribution(self.vi.net, self.vi.indices.cpu()),
            "sigma": ({"mean": float(sig.mean()), "median": float(sig.median()), "min": float(sig.min()),
                       "max": float(sig.max())} if k else {}),
            # evidence that sigma was learned: the summaries at initialisation and after training
            "sigma_init": self.meta.get("sigma_init", {}),
            "sigma_final": sigma_summary(self.vi.named_sigmas()),
            "first_layer_sigma": self.first_layer_sigma(),
        }
        out["sigma_change"] = sigma_change(out["sigma_init"], out["sigma_final"])
        for key in ("criterion", "select_time_s", "subnet_digest", "select_info", "init", "train",
                    "sigma_stationarity", "class_weights"):
            if key in self.meta:
                out[key] = self.meta[key]
        return out


@register_method("pbn")
class PBN(VIMethod):
    STARTS_FROM = "map"
    VALIDITY_CHECKS = VIMethod.VALIDITY_CHECKS + ("map_converged",)  # and the MAP network it starts from
    # a random subnetwork of the same size (subnetwork Laplace's paper's "Ours (Rand)" baseline;
    # the PBN paper compares none); and the same pipeline with no stochastic weight
    # (the MAP network fine-tuned for the same epochs at the same rate): what the extra training does
    CONTROLS = {"random subnetwork": {"criterion": "random"}, "fine-tuning only": {"n_bayes": 0}}
    # the paper's training epochs per network (App. H.3: LeNet-300-100 and the small ResNet 50, ResNet-18
    # 100 for the Bayesian and partially Bayesian networks): a shorter VI phase is unverified until a phase
    # trial shows it suffices (bench.validity: phase_budget)
    PAPER_EPOCHS = {"lenet_300_100": 50, "resnet_small": 50, "resnet18_pbn": 100}
    description = ("partial Bayesian network: top-k |gradient| subnetwork of the MAP network, "
                   "mean-field VI on it (Algorithm 1 of the PBN paper)")
    defaults = {
        # r_bayes: Sec. 4.3 / 4.4 headline configuration "Partial 1%" (ImageNet, Cityscapes); the
        # earlier paper's Table 1 finds 1 % best. MNIST figures sweep r_bayes (use --set).
        "r_bayes": 0.01,
        "n_bayes": None,  # a count that overrides r_bayes
        "criterion": "gradient",  # Algorithm 1 line 8; "magnitude" | "random" (controls, not the paper's)
        # |grad| (Alg. 1); True: grad^2 (medical PBN paper, Sec. 2.2 step 2), squared per mini-batch and
        # accumulated (aggregate "per_batch"); with aggregate "full" it ranks as |full-data gradient|
        "squared": False,
        "per_layer": False,  # one global Top-k (Sec. 3: Bayesian / deterministic mix within layers)
        "n_grad_batches": None,  # None: one pass over the training set (Alg. 1 line 7)
        # "per_batch": |grad| accumulated over mini-batches; "full": |gradient of the full-data
        # loss| (bench/subnet/selection.py GradientCriterion)
        "aggregate": "per_batch",
        "init": "map",  # "map" (Alg. 1 line 9) | "random" (Sec. 4.3, Fig. 6 "Rand init")
        **VIMethod.vi_defaults,
    }
    constraints = {**VIMethod.vi_constraints, "r_bayes": Range(0, 1, lo_open=True),
                   "n_bayes": Range(0, integer=True, optional=True), "criterion": OneOf(*CRITERIA.names()),
                   "n_grad_batches": Range(1, integer=True, optional=True), "aggregate": OneOf("per_batch", "full"),
                   "init": OneOf("map", "random")}

    def build_posterior(self, train):
        c = self.config
        if self.ctx.map_cache is None:
            raise BenchError("pbn needs the MAP network cache (ctx.map_cache)")
        if c["init"] not in ("map", "random"):
            raise BenchError(f"pbn: init must be 'map' or 'random', got {c['init']!r}")
        map_net = copy.deepcopy(self.ctx.map_cache.get(self.ctx.seed)).to(self.ctx.device).eval()
        size = int(c["n_bayes"]) if c["n_bayes"] is not None else float(c["r_bayes"])
        name = str(c["criterion"])
        opts = {"per_layer": bool(c["per_layer"])}
        if name != "gradient" and (c["squared"] or c["n_grad_batches"] is not None or c["aggregate"] != "per_batch"):
            raise BenchError(f"pbn: squared / n_grad_batches / aggregate only apply to criterion 'gradient', "
                             f"not {name!r}")
        if name == "gradient":
            opts.update(squared=bool(c["squared"]), n_batches=c["n_grad_batches"], aggregate=str(c["aggregate"]))
        elif name == "random":
            opts["seed"] = derive_seed("pbn", "random-subnet", self.ctx.seed)
        elif isinstance(CRITERIA.get(name), type) and issubclass(CRITERIA.get(name), VarianceCriterion):
            if self.ctx.task.kind == "multilabel":  # their Laplace / SWAG fits use a softmax likelihood
                raise BenchError(f"pbn: criterion {name!r} fits a softmax-likelihood posterior; on a multilabel "
                                 "task use gradient, magnitude or random")
            # the subnetwork Laplace's criteria at their defaults (SWAG: 256 snapshots, this
            # project's choice, at lr 1e-2) and with its seed: the same mask as subnet_laplace on the same MAP network
            opts["seed"] = data_seed(name, self.ctx.seed)
            if issubclass(CRITERIA.get(name), LargestVarianceSWAGCriterion):
                opts["resume_path"] = self.ctx.resume_path("swag")  # a stopped SWAG run resumes

        criterion = make_criterion(name, size, **opts)
        t0 = time.perf_counter()
        indices = criterion.select(map_net, train, loss_fn=self.ctx.task.loss)
        described = {k: v for k, v in opts.items() if k not in ("seed", "resume_path")}
        info = getattr(criterion, "info", {})
        meta = {"criterion": {"name": name, **described, "size": size},
                # the whole selection's time: a resumed SWAG run counts its earlier seconds
                "select_time_s": time.perf_counter() - t0 + earlier_select_seconds(info),
                "subnet_digest": subnet_digest(indices), "select_info": info,
                "n_candidates": int(candidate_indices(map_net).numel()), "init": c["init"]}
        net = map_net if c["init"] == "map" else self.fresh_network("random-init").to(self.ctx.device)
        return net, indices, meta

    def paper_train_flops(self, f_d, r, n_samples):
        # Appendix C: (1 + r_bayes) f_d (N + 2) per example and step, plus 3 f_d per example and
        # epoch of deterministic pre-training (total = per-step cost x examples x epochs)
        n = int(self.meta.get("train", {}).get("num_train", self.ctx.num_train))
        epochs = int(self.meta.get("train", {}).get("epochs", self.train_config().epochs))
        per_step = (1 + r) * (n_samples + 2) * f_d
        pre = 3 * f_d * n * self.ctx.train.epochs
        return {"train_flops_per_example_step_paper": per_step,
                "train_flops_paper": per_step * n * epochs + pre, "pretrain_flops_paper": pre}
