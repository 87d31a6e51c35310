"""Sparse subspace variational inference (SSVI; Li et al., ICLR 2024), the paper's Algorithm 1.

Fully sparse mean-field VI trained from scratch: outside a set of active weight entries both
``mu`` and ``sigma`` are 0 (the weight is exactly 0), and the set changes during training at
constant size. Section numbers refer to ``../shared/papers/ssvi-sparse-subspace-vi.txt``;
"official code" to github.com/ljb121002/SSVI. Machinery: :mod:`bench.subnet.ssvi`.

1. Random initial subspace at ``density`` per Linear / Conv weight (Alg. 1 line 1, Sec.
   3.1.1); biases dense; a first convolution dense (official code; ``dense_first``).
2. Update phi for ``delta`` steps with the local reparameterisation trick (Sec. 3.2, App. A):
   loss = NLL + beta KL_active / N_train, KL over the active entries only (eq. 3), beta
   warmed up linearly from 0 to ``beta_max`` over the first ``kl_warmup`` of training (Sec. 4.1
   "KL warm-up"; official: kl_scale 0.01 x min(2 epoch / epochs, 1)).
3. Every ``delta`` steps while step < ``t_end`` x total steps (official: 100, 0.75): drop the
   fraction alpha/2 (1 + cos(pi t / T_end)) (alpha = 0.3) of each layer's active entries with the
   lowest removal score (Sec. 3.3.1, ``criterion``; default SNR(|theta|), eq. 7) and add as many
   by |dL/dmu| over the dense means (Sec. 3.3.2 eq. 9, one-step MC = criterion 1 ``grow="grad"``;
   ``"grad_mean"`` = criterion 2, the mean network); new entries mu = 0, sigma = mean sigma of
   the layer's active entries (Sec. 3.2 default) or a constant. As in the official code that
   step's batch only feeds the subspace update (no optimiser step) and momentum of removed
   entries is discarded.
4. Predict with ``predict_samples`` (5, Sec. 4.1 "five samples from the posterior") fixed
   weight draws.

Prior N(0, 0.005^2) and sigma^0 ~ |N(6e-4, 5e-4^2)| are the official code's; rho has its own
parameter group (Adam, rate 0.01: this project's choice; the official code uses SGD with momentum
0.9 at 0.01, ``rho_optimizer="sgd"``). The means follow the profile's
optimiser and schedule. The like-for-like dense baseline of every SSVI claim is this method at
``density=1.0`` (same estimator, prior, initialisation and optimiser; no subspace updates then
change anything). :data:`PAPER_OPTIONS` adds the rest of the official code's values (used by
the suites' ``paper`` profile). docs/ssvi.md lists every choice.
"""
from __future__ import annotations

import copy

import torch

from bench.errors import BenchError
from bench.seeding import derive_seed
from bench.subnet.ssvi import (CRITERIA, GROW_MODES, SSVINet, as_float, kl_warmup_beta, update_fraction)
from bench.subnet.sigma_stats import last_rel_change, sigma_change, sigma_summary
from bench.subnet.stationarity import sigma_stationarity
from bench.training import (OPTIMIZERS, CheckpointSchedule, RunningLoss, TrainingClock, make_optimizer, own_group,
                            restore_training_state, save_training_state)
from methods.base import Method, register_method


#: The official code's values (train_cifar.py / scripts/ssvi_cifar.sh) that are not already the
#: defaults: posterior means N(0, 0.01^2); weight decay 5e-4 on the means.
PAPER_OPTIONS = {"mu_init": 0.01, "weight_decay": 5e-4}  # on top of the defaults, which carry the rest


@register_method("ssvi")
class SSVI(Method):
    # vi_converged: it trains its own network, whose training must end at rest (bench.validity)
    VALIDITY_CHECKS = ("informative", "vi_rate_limit", "vi_moved", "vi_stationarity", "vi_converged")
    description = ("sparse subspace VI: fully sparse mean-field VI from scratch at a fixed density, "
                   "drop-and-grow of the active set (Algorithm 1 of the SSVI paper)")
    tasks = ("classification", "regression", "segmentation", "multilabel")  # segmentation: pixels as examples
    # App. C: ResNet-18 on CIFAR-10/100 for 200 epochs (batch 128, SGD lr 0.01 cosine); the paper trains
    # no other network: a shorter training is unverified until a phase trial shows it suffices
    # (bench.validity: phase_budget)
    PAPER_EPOCHS = {"resnet18_cifar": 200, "resnet18_pbn": 200}
    PREDICT_OPTIONS = ("predict_samples",)  # the S prediction draws are made at predict time
    defaults = {
        "density": 0.1,  # Sec. 4.2 ablations at 0.1; Table 1: 0.1 and 0.05
        "criterion": "snr_abs",  # Sec. 3.3.1 "Criteria Selection": SNR(|theta|) default
        "lambda_exp": 1.0,  # lambda of the exp criteria (official --lambda_exp 1.0)
        "grow": "grad",  # Sec. 3.3.2: one-step MC (criterion 1, default); "grad_mean" = criterion 2
        "grow_sigma": "mean",  # Sec. 3.2: mean sigma of the module's active entries; "mean_rho" | number
        "delta": 100,  # steps between subspace updates (official --delta 100)
        "alpha": 0.3,  # initial replacement fraction (official --alpha 0.3)
        "t_end": 0.75,  # updates stop after this fraction of training (official T_end = 0.75 total)
        "dense_first": "conv",  # first layer dense if it is a conv (official); "always" | "never"
        "train_samples": 1,  # LRT draws per example and step (official: one)
        "predict_samples": 5,  # Sec. 4.1: five posterior samples
        "prior_scale": 0.005,  # the official code's prior N(0, 0.005^2)
        "rho_init_mean": -3.0,  # used only when sigma_init_mean is None
        "rho_init_std": 0.1,
        # sigma ~ |N(sigma_init_mean, sigma_init_std^2)| (official code: 0.0006, 0.0005): a high
        # signal-to-noise start (Sec. 4.2, "Ensuring small sigma^0 is important"); None: rho ~ N(rho_init_*)
        "sigma_init_mean": 0.0006,
        "sigma_init_std": 0.0005,
        "mu_init": None,  # None: the network's own initialisation (as mfvi); a float: N(0, mu_init^2)
        "beta_max": 0.01,  # official kl_scale 0.01 (x KL / N_train); = mfvi's final beta
        "kl_warmup": 0.5,  # beta ramps 0 -> beta_max over this fraction of training (official: half)
        "epochs": None,  # None = the profile's epochs (SSVI trains from scratch, like mfvi)
        "lr": None,  # None = the profile's learning rate (means)
        # rho: its own parameter group at rate 0.01, no weight decay, with Adam (the official code:
        # SGD with momentum 0.9 at 0.01; rho_optimizer="sgd")
        # (scale-free steps; with the means' SGD a softplus rho at sigma ~ 1e-3 does not move:
        # docs/pbn.md "Learning sigma"); the profile's schedule applies to both groups
        "rho_lr": 0.01,
        "rho_optimizer": "adam",
        "weight_decay": None,  # on the means; None = the profile's
        # the KL's divisor: "dataset" the observations (pixels on segmentation), "examples" the
        # training inputs (images: the segmentation profiles' per-image KL, as PBN's)
        "kl_scale": "dataset",
    }
    LATER_OPTIONS = {"kl_scale": "dataset"}  # added after records were made: the earlier behaviour

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.model: SSVINet | None = None
        self.meta: dict = {}
        self._eps: list | None = None
        c = self.config
        if c["criterion"] not in CRITERIA:
            raise BenchError(f"ssvi: unknown criterion {c['criterion']!r}; valid: {', '.join(CRITERIA)}")
        if c["grow"] not in GROW_MODES:
            raise BenchError(f"ssvi: grow must be one of {', '.join(GROW_MODES)}, got {c['grow']!r}")
        as_float(c["grow_sigma"])
        for key in ("train_samples", "predict_samples", "delta"):
            if int(c[key]) < 1:
                raise BenchError(f"ssvi: {key} must be >= 1")
        if not 0 <= float(c["alpha"]) <= 1:
            raise BenchError("ssvi: alpha must be in [0, 1]")
        if not 0 < float(c["density"]) <= 1:
            raise BenchError(f"ssvi: density must be in (0, 1], got {c['density']!r}")
        if not float(c["rho_lr"]) > 0:
            raise BenchError(f"ssvi: rho_lr must be > 0, got {c['rho_lr']!r}")
        if c["rho_optimizer"] not in OPTIMIZERS:
            raise BenchError(f"ssvi: rho_optimizer must be one of {', '.join(OPTIMIZERS)}")
        if c["kl_scale"] not in ("dataset", "examples"):
            raise BenchError(f"ssvi: kl_scale must be one of dataset, examples, got {c['kl_scale']!r}")

    @classmethod
    def check_network(cls, build_model, x, task, config):
        """Eligible layers exist and run as modules (bench.network: SSVI replaces each by a sparse
        Bayesian layer), and the network with them replaced runs (mean and sampling passes)."""
        from bench.network import check_stochastic_layers, try_on_probe

        c = {**cls.defaults, **config}
        net = build_model(dropout=0.0)
        check_stochastic_layers(net, x, cls.name)
        ssvi = SSVINet(net, float(c["density"]), dense_first=str(c["dense_first"]),
                       generator=torch.Generator().manual_seed(0)).eval()

        def both():
            ssvi.set_mode("mean")
            ssvi(x)
            ssvi.set_mode("lrt")
            ssvi(x)

        try_on_probe(both, f"{cls.name}: the network with its Linear / Conv layers replaced by sparse Bayesian layers")

    # -- construction ----------------------------------------------------------------------------
    def _build(self, example: torch.Tensor | None = None) -> SSVINet:
        c = self.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.name, "init", self.ctx.seed))
            net = self.ctx.build_model(dropout=0.0)
        if example is not None:  # every layer to replace runs as a module (bench.network)
            from bench.network import check_stochastic_layers

            check_stochastic_layers(net, example.cpu(), self.name)
        gen = torch.Generator().manual_seed(derive_seed(self.name, "subspace", self.ctx.seed))
        return SSVINet(net, float(c["density"]), dense_first=str(c["dense_first"]),
                       prior_scale=float(c["prior_scale"]), rho_init_mean=float(c["rho_init_mean"]),
                       rho_init_std=float(c["rho_init_std"]),
                       sigma_init_mean=None if c["sigma_init_mean"] is None else float(c["sigma_init_mean"]),
                       sigma_init_std=float(c["sigma_init_std"]),
                       mu_init=None if c["mu_init"] is None else float(c["mu_init"]), generator=gen)

    def _optimizer(self, cfg):
        groups = [{"params": self.model.mean_params(), "lr": cfg.lr, "weight_decay": cfg.weight_decay},
                  own_group(self.model.rho_params(), self.config["rho_optimizer"], self.config["rho_lr"])]
        return make_optimizer(groups, cfg)

    def named_sigmas(self) -> dict:
        """``{parameter name: sigma of its stored (active) entries}``."""
        out = {}
        for name, m in self.model.layers():
            out[f"{name}.weight"] = m.w_sigma().detach()
            if m.b_rho is not None:
                out[f"{name}.bias"] = m.b_sigma().detach()
        return out

    # -- training (Algorithm 1) -------------------------------------------------------------------
    def fit(self, train, val):
        from tqdm.auto import tqdm

        from bench.training import StepFormat, lr_factor, progress_enabled, validation_curve

        c = self.config
        self.model = self._build(train.x[:4]).to(self.ctx.device)
        model = self.model
        cfg = self.train_config()
        # the KL's divisor (the loss is nll + beta KL / num_train): observations or training inputs
        num_train = (self.ctx.num_train or train.num_examples) if c["kl_scale"] == "dataset" else train.num_examples
        x0 = train.x[:1].to(self.ctx.device)
        meta = {"in_shape": list(x0.shape[1:]), "layer_flops": self._layer_flops(x0),
                "sigma_init": sigma_summary(self.named_sigmas())}
        opt = self._optimizer(cfg)
        base_lrs = [g["lr"] for g in opt.param_groups]
        steps_per_epoch = len(train)
        total = max(1, cfg.epochs * steps_per_epoch)
        t_end = int(float(c["t_end"]) * total)
        S = int(c["train_samples"])
        beta_max, warm = float(c["beta_max"]), float(c["kl_warmup"])
        grow_sigma = as_float(c["grow_sigma"])
        history = [{"step": 0, "active": model.active_counts()}]
        start_epoch, log = 0, {"epoch_loss": []}
        resume = self.ctx.resume_path(self.name)
        st = restore_training_state(resume, model, opt, train)
        clock = TrainingClock(st)  # the time of the epochs a resumed checkpoint holds counts too
        checkpoints = CheckpointSchedule()
        if st is not None:
            start_epoch, log, history = st["epoch"], st["log"], st["history"]
        bar = tqdm(total=total, initial=start_epoch * steps_per_epoch, desc=self.name,
                   disable=not progress_enabled(self.ctx.progress), leave=False, mininterval=0.5)
        last = {}
        fmt = StepFormat(cfg, model)  # the profile's precision and memory layout, as train_model's

        def mean_forward(x):  # the network at the posterior means (every active weight's mu)
            model.set_mode("mean")
            try:
                return model(x)
            finally:
                model.set_mode("lrt")

        # the mean network's validation NLL after every epoch: whether the training ended at rest
        curve = validation_curve(model, self.ctx.task, val, cfg.batch_size, forward=mean_forward)
        model.train()
        for epoch in range(start_epoch, cfg.epochs):
            running = RunningLoss(epoch, steps_per_epoch, self.name, bar.close)  # read on the host every few steps
            for i, (x, y) in enumerate(train):
                step = epoch * steps_per_epoch + i
                t = step + 1  # the official scheduler counts calls from 1
                update = t % int(c["delta"]) == 0 and t < t_end
                f = lr_factor(cfg, step, steps_per_epoch)  # cosine schedule on both groups (official)
                for g, lr in zip(opt.param_groups, base_lrs):
                    g["lr"] = lr * f
                if update:
                    for _, m in model.sparse_layers():
                        m.capture_grad = True
                    if c["grow"] == "grad_mean":
                        model.set_mode("mean")
                x = fmt.batch(x)
                xs = x if S == 1 else x.repeat(S, *([1] * (x.dim() - 1)))
                ys = y if S == 1 else y.repeat(S, *([1] * (y.dim() - 1)))
                with fmt.forward(x.device):
                    nll = self.ctx.task.loss(model(xs), ys)
                beta = kl_warmup_beta(step, total, beta_max, warm)
                kl = model.kl()
                loss = nll + beta * kl / num_train
                running.add(i, loss, len(x))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if update:
                    info = model.drop_and_grow(update_fraction(t, t_end, float(c["alpha"])), str(c["criterion"]),
                                               lam=float(c["lambda_exp"]), grow_sigma=grow_sigma, optimizer=opt,
                                               compare=CRITERIA)
                    for _, m in model.sparse_layers():
                        m.capture_grad, m.grad_leaf = False, None
                    model.set_mode("lrt")
                    history.append({"step": t, "progress": t / total, "fraction": info["fraction"],
                                    "active": {n: v["active"] for n, v in info["layers"].items()},
                                    "new": {n: v["new"] for n, v in info["layers"].items()},
                                    "dropped": sum(v["dropped"] for v in info["layers"].values()),
                                    "iou": info["iou"]})
                else:
                    if cfg.grad_clip:
                        torch.nn.utils.clip_grad_norm_(list(model.parameters()), cfg.grad_clip)
                    opt.step()
                bar.update(1)
                last = {"nll": nll.detach(), "kl": kl.detach(), "beta": beta}  # read at the epoch's end
            last = {k: float(v) for k, v in last.items()}
            log["epoch_loss"].append(running.mean())
            sig = torch.cat([v.reshape(-1) for v in self.named_sigmas().values()])
            log.setdefault("epoch_stats", []).append({"sigma_mean": float(sig.mean()), "sigma_median": float(sig.median()),
                                                      **last, **(curve() if curve else {})})
            if resume is not None and epoch + 1 < cfg.epochs and checkpoints.due():
                save_training_state(resume, model, opt, train, epoch=epoch + 1, log=log, history=history,
                                    train_seconds=clock.seconds(), train_usage=clock.usage())
        bar.close()
        fmt.done()
        if resume is not None and resume.exists():
            resume.unlink()
        meta["vi_train_time_s"] = clock.seconds()
        meta["train"] = {"epochs": cfg.epochs, "steps": total, "t_end": t_end, "batch_size": cfg.batch_size,
                         "epoch_loss": [float(v) for v in log["epoch_loss"]], "final_nll": last.get("nll"),
                         "epoch_stats": log.get("epoch_stats", []),
                         "sigma_last_epoch_rel_change": last_rel_change(log.get("epoch_stats", []), "sigma_mean"),
                         "final_kl": last.get("kl"), "final_beta": last.get("beta"),
                         "num_train": int(self.ctx.num_train or train.num_examples), "kl_divisor": int(num_train),
                         "mean_optimizer": cfg.optimizer, "mean_lr": cfg.lr, "schedule": cfg.schedule,
                         "rho_optimizer": str(c["rho_optimizer"]), "rho_lr": float(c["rho_lr"])}
        meta["history"] = history
        xs_of = (lambda t: t) if S == 1 else (lambda t: t.repeat(S, *([1] * (t.dim() - 1))))
        meta["sigma_stationarity"] = sigma_stationarity(
            model, model.rho_params(), lambda m, x, y: self.ctx.task.loss(m(xs_of(x)), xs_of(y)),
            lambda m: beta_max * m.kl() / num_train, train,
            seed=derive_seed(self.name, "stationarity", self.ctx.seed))
        if meta["sigma_stationarity"]:
            meta["sigma_stationarity"]["beta"] = beta_max
        meta["predict_seed"] = derive_seed(self.name, "predict", self.ctx.seed)
        self.meta = meta
        model.eval()
        self._eps = None
        return self

    @torch.no_grad()
    def _layer_flops(self, x0) -> dict:
        """Dense forward FLOPs per example of each Linear / Conv layer (2 x multiply-adds)."""
        out, hooks = {}, []
        was = self.model.training
        self.model.eval()
        self.model.set_mode("mean")
        for name, m in self.model.layers():
            def hook(mod, inp, o, name=name):
                out[name] = 2.0 * (o[0].numel()) * (mod.numel / mod.shape[0])
            hooks.append(m.register_forward_hook(hook))
        try:
            self.model(x0)
        finally:
            for h in hooks:
                h.remove()
            self.model.set_mode("lrt")
            self.model.train(was)
        return out

    # -- prediction -------------------------------------------------------------------------------
    def _noise(self) -> list:
        """Fixed weight noise: every predict call uses the same S posterior draws."""
        if self._eps is None:
            gen = torch.Generator().manual_seed(int(self.meta["predict_seed"]))
            S = int(self.config["predict_samples"])
            eps = []
            for _, m in self.model.layers():
                ew = torch.randn(S, m.k, generator=gen).to(self.ctx.device)
                eb = None if m.b_mu is None else torch.randn(S, m.b_mu.numel(), generator=gen).to(self.ctx.device)
                eps.append((ew, eb))
            self._eps = eps
        return self._eps

    @torch.no_grad()
    def predict(self, x):
        if self.model is None:
            raise BenchError("ssvi: predict before fit / load_state_dict")
        self.model.eval()
        eps = self._noise()
        layers = self.model.layers()
        outs = []
        try:
            for s in range(int(self.config["predict_samples"])):
                for (_, m), (ew, eb) in zip(layers, eps):
                    m.mode, m.eps = "sample", (ew[s], None if eb is None else eb[s])
                outs.append(self.model(x))
        finally:
            for _, m in layers:
                m.mode, m.eps = "lrt", None
        return self.ctx.task.predictive_from_samples(torch.stack(outs))

    # -- persistence ------------------------------------------------------------------------------
    def state_dict(self):
        return {"model": self.model.state_dict(), "meta": copy.deepcopy(self.meta)}

    def load_state_dict(self, state):
        self.model = self._build()
        self.model.load_state_dict({k: v.cpu() for k, v in state["model"].items()})
        self.model.to(self.ctx.device).eval()
        self.meta = copy.deepcopy(state["meta"])
        self._eps = None

    def modules(self):
        return [] if self.model is None else [self.model]

    # -- cost and diagnostics ---------------------------------------------------------------------
    def num_params(self):
        return 0 if self.model is None else sum(p.numel() for p in self.model.parameters())

    def num_stochastic_params(self):
        return 0 if self.model is None else self.model.num_stochastic

    def train_flops(self) -> dict:
        """Analytic training FLOPs of the Linear / Conv layers (the paper's Table 1 measure).

        Per example and step with the LRT: a mean pass and a variance pass per layer, each
        ``d_l F_l`` for a layer of dense forward cost ``F_l`` at density ``d_l``, and a backward
        of twice the forward: ``3 x 2 x S x sum_l d_l F_l``. Dense VI with the same estimator:
        ``d_l = 1``. Each subspace update also forms the dense mean gradient of its batch:
        ``+ B sum_l (1 - d_l) F_l`` per update. Element-wise work, batch norm and the KL are left out.
        """
        fl = self.meta.get("layer_flops", {})
        tr = self.meta.get("train", {})
        if not fl or not tr:
            return {}
        counts, sizes = self.model.active_counts(), self.model.num_weights()
        S = int(self.config["train_samples"])
        sparse_fwd = sum(fl[n] * counts[n] / sizes[n] for n in fl)
        dense_fwd = sum(fl.values())
        per_step = 6.0 * S * sparse_fwd
        per_step_dense = 6.0 * S * dense_fwd
        n, epochs = int(tr["num_train"]), int(tr["epochs"])
        n_updates = max(0, len(self.meta.get("history", [])) - 1)
        update_extra = n_updates * int(tr.get("batch_size", 0)) * sum(fl[n_] * (1 - counts[n_] / sizes[n_]) for n_ in fl)
        total = per_step * n * epochs + update_extra
        total_dense = per_step_dense * n * epochs
        return {"train_flops_per_example_step": per_step, "train_flops_per_example_step_dense_vi": per_step_dense,
                "train_flops": total, "train_flops_dense_vi": total_dense,
                "train_flops_ratio_vs_dense_vi": total / total_dense if total_dense else float("nan"),
                "forward_flops_sparse_layers": sparse_fwd, "forward_flops_dense_layers": dense_fwd}

    def extra_cost(self):
        if self.model is None:
            return {}
        counts, sizes = self.model.active_counts(), self.model.num_weights()
        dense_stoch = sum(sizes.values()) + sum(0 if m.b_mu is None else m.b_mu.numel() for _, m in self.model.layers())
        return {
            "variational_params": self.model.num_stochastic,
            "weight_density": sum(counts.values()) / sum(sizes.values()),
            "variational_state_bytes": self.model.state_bytes(),  # mu + rho (+ int32 positions) of stored entries
            "variational_state_bytes_dense_vi": 2 * 4 * dense_stoch,  # dense float32 mu and rho, for scale
            "vi_train_time_s": self.meta.get("vi_train_time_s"),
            **self.train_flops(),
        }

    def diagnostics(self):
        if self.model is None:
            return {}
        counts, sizes = self.model.active_counts(), self.model.num_weights()
        sig = torch.cat([m.w_sigma().detach().cpu() for _, m in self.model.layers()])
        hist = self.meta.get("history", [])
        final = sigma_summary(self.named_sigmas())
        return {
            "criterion": self.config["criterion"], "density": float(self.config["density"]),
            "active_per_layer": counts, "weights_per_layer": sizes,
            "density_per_layer": {n: counts[n] / sizes[n] for n in counts},
            # active counts per layer at the start and after every drop-and-grow step, with the
            # replaced fraction, the truly new entries and the IoUs of the criteria's removal sets
            "history": hist,
            "n_updates": max(0, len(hist) - 1),
            "sigma": {"mean": float(sig.mean()), "median": float(sig.median()), "min": float(sig.min()),
                      "max": float(sig.max())},
            "sigma_init": self.meta.get("sigma_init", {}),
            "sigma_final": final,
            "sigma_change": sigma_change(self.meta.get("sigma_init", {}), final),
            "train": self.meta.get("train", {}),
            "sigma_stationarity": self.meta.get("sigma_stationarity"),
        }
