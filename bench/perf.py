"""``python -m bench perf``: speed targets, measured side by side in one process.

Each case times a candidate and its reference alternately (``repeats`` rounds, median),
on the same tensors, and prints the ratio next to its target:

* harness prediction throughput / bare PyTorch loop throughput (same work; scoring timed apart) >= 0.95
* deep ensemble (M=5) prediction / (M x one deterministic forward) <= 1.1
* MC dropout (S samples) prediction / (S x one deterministic forward) <= 1.2
* PBN (r_bayes = 1 %) training step / full mean-field VI training step, same S = 5 samples <= 1.0,
  and PBN's variational state (rho + indices) / mfvi's                                       < 0.05
* PBN (S = 5) prediction / (S x one deterministic forward)                                   <= 1.2
* mfvi training step speed / bayesian-torch 0.5's (``dnn_to_bnn``), S = 1 and 5               >= 1.0
* MC dropout and deep-ensemble prediction speed / torch-uncertainty 0.13's wrappers            >= 1.0
  (the peers need the ``perf`` extra; without it their rows say so and count as skipped)
* VDP++ prediction (one moment-propagating pass) / one deterministic forward                  <= 3,
  and its peak tensor memory / the deterministic forward's                                  <= 2
* prediction throughput of the harness on a JPEG folder (``ImageFiles`` read by ``--loader-workers``
  loader processes) / a bare torchvision ``ImageFolder`` + ``DataLoader`` loop on the same files,
  same network, same workers                                                                   >= 0.95
* peak memory of a run over 20 evaluation cells / over 1 cell (a ``bench run`` of the
  ``imagenetc`` smoke profile on a fixture, in a child process each)                           <= 1.1

* (``bench/perf_scaleout.py``) the thread policy beside a busy process and idle, glibc's allocator settings
  (bench/allocator.py) against its defaults on a conv network's step, and the Dask
  executor against the local one on an 8-cell grid, with its overhead per cell (issue 17)

A case returns one row ``(measure, ratio, op, target, detail[, model])`` or a list of them (``model``
when the case measures a network of its own rather than the loop's).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from bench.checkpoints import MapCache
from bench.cost import synchronize
from bench.harness import predict_all, score_set
from bench.measurement import OtherWork, ThreadUsage, host_load, usage_fractions
from bench.models import build_model
from bench.perf_cases import MODELS, REGISTERED, case, merge_rows
from bench.provenance import resolve_device
from bench.subnet.partial_vi import PartialVI, elbo_loss
from bench.subnet.selection import candidate_indices, make_criterion
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS, MethodContext

_registered = REGISTERED  # the registry lives in bench.perf_cases (bench.perf_scaleout registers there too)


def timed(fn, device) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def side_by_side(candidate, reference, repeats: int, device) -> tuple[float, float]:
    """Median seconds of each, alternating so that both see the same machine state."""
    candidate(), reference()  # warm-up
    c, r = [], []
    for _ in range(repeats):
        c.append(timed(candidate, device))
        r.append(timed(reference, device))
    return statistics.median(c), statistics.median(r)


def _context(model_name: str, in_shape, device, tmp) -> MethodContext:
    """A context whose MAP 'training' is zero epochs: perf needs shapes, not accuracy."""
    task = classification(10)

    def build(dropout=0.0):
        return build_model(model_name, in_shape, 10, dropout=dropout)

    x = torch.randn(64, *in_shape)
    y = torch.randint(0, 10, (64,))
    cfg = TrainConfig(epochs=0, batch_size=64)
    cache = MapCache(tmp, {"model": model_name, "perf": True}, build, task, x, y, cfg, device)
    return MethodContext(task=task, build_model=build, train=cfg, device=device, seed=0, map_cache=cache,
                         num_train=64)


def _fitted(name, ctx, **cfg):
    torch.manual_seed(0)
    m = METHODS.get(name)(ctx, **cfg)
    if name == "mc_dropout":
        m._eval_mode()
    else:
        m.fit(None, None)
    return m


def _scoring(pred, eset, device, repeats: int, harness_s: float) -> str:
    """Scoring a set's predictions (``score_set``), the same job in the harness and in a user's loop
    (which computes accuracy, NLL, ECE too): timed apart from the two loops being compared and named
    in the row's detail, with its share of the harness's whole evaluation."""
    s = statistics.median(timed(lambda: score_set("classification", pred, eset), device)
                          for _ in range(max(1, repeats)))
    return (f"scoring them (the same in either loop) {s * 1e3:,.1f} ms, {s / (harness_s + s):.0%} of the harness's "
            f"evaluation")


@case
def harness_vs_bare_loop(model_name, in_shape, device, repeats, tmp, n=10_000, batch=1000):
    """The harness's prediction loop (``predict_all``: batching, the method's ``Predictive``, the
    gather on the CPU) against the loop a user writes, both doing the same work: predicting
    ``n`` inputs. Scoring the predictions is the same job in either loop (a user's loop computes
    accuracy, NLL, ECE too); it is timed apart and named in the detail, not charged to one side."""
    ctx = _context(model_name, in_shape, device, tmp)
    det = _fitted("deterministic", ctx)
    x = torch.randn(n, *in_shape)
    y = torch.randint(0, 10, (n,))
    from bench.data import EvalSet

    eset = EvalSet("id", "clean", 0.0, x, y)
    out = {}

    def harness():
        out["harness"], _ = predict_all(det, x, batch, device)

    def bare():
        with torch.no_grad():
            probs = [torch.softmax(det.model(x[i:i + batch].to(device)), -1).cpu() for i in range(0, n, batch)]
        out["bare"] = torch.cat(probs)

    c, r = side_by_side(harness, bare, repeats, device)
    same = torch.allclose(out["harness"].probs, out["bare"], atol=1e-6)
    return ("harness predict throughput / bare loop", r / c, ">=", 0.95,
            f"{n / c:,.0f} vs {n / r:,.0f} img/s, same probs: {same}; "
            f"{_scoring(out['harness'], eset, device, repeats, c)}")


@case
def ensemble_vs_single(model_name, in_shape, device, repeats, tmp, n=2000, members=5):
    ctx = _context(model_name, in_shape, device, tmp)
    ens = _fitted("deep_ensemble", ctx, members=members)
    single = ens.members[0]
    x = torch.randn(n, *in_shape, device=device)

    def ensemble():
        ens.predict(x)

    def one():
        with torch.no_grad():
            torch.softmax(single(x), -1)

    c, r = side_by_side(ensemble, one, repeats, device)
    return f"deep ensemble M={members} / (M x single forward)", c / (members * r), "<=", 1.1, f"{c * 1e3:.1f} ms vs {members} x {r * 1e3:.1f} ms"


@case
def mc_dropout_vs_single(model_name, in_shape, device, repeats, tmp, n=2000, samples=20):
    ctx = _context(model_name, in_shape, device, tmp)
    mcd = _fitted("mc_dropout", ctx, p=0.1, samples=samples)
    ctx2 = _context(model_name, in_shape, device, tmp)
    det = _fitted("deterministic", ctx2)
    x = torch.randn(n, *in_shape, device=device)

    def mc():
        mcd.predict(x)

    def one():
        with torch.no_grad():
            torch.softmax(det.model(x), -1)

    c, r = side_by_side(mc, one, repeats, device)
    return f"MC dropout S={samples} / (S x single forward)", c / (samples * r), "<=", 1.2, f"{c * 1e3:.1f} ms vs {samples} x {r * 1e3:.1f} ms"


def _torch_uncertainty():
    """torch-uncertainty 0.13's method wrappers, or None without the ``perf`` extra."""
    try:
        from torch_uncertainty.methods.deep_ensembles import deep_ensembles
        from torch_uncertainty.methods.mc_dropout import mc_dropout
    except ImportError:
        return None
    return mc_dropout, deep_ensembles


def _tu_probs(wrapper, x, members: int) -> torch.Tensor:
    """torch-uncertainty's wrappers return the (M x B, C) logits of every member: a user averages
    the softmax over members (its ``ClassificationRoutine`` does the same)."""
    with torch.no_grad():
        logits = wrapper(x)
        return torch.softmax(logits, -1).reshape(members, x.shape[0], -1).mean(0)


_TU_MISSING = "(not installed: pip install -e .[perf])"


@case
def mc_dropout_vs_torch_uncertainty(model_name, in_shape, device, repeats, tmp, n=2000, samples=20):
    """MC dropout prediction against the peer a user would pick instead: torch-uncertainty 0.13's
    ``mc_dropout`` wrapper (its default: the batch repeated S times in one pass) around the same
    trained network, to averaged probabilities. Needs the ``perf`` extra."""
    tu = _torch_uncertainty()
    if tu is None:
        return (f"MC dropout predict speed / torch-uncertainty's {_TU_MISSING}", float("nan"), "skip", 1.0, "")
    import copy

    ctx = _context(model_name, in_shape, device, tmp)
    mcd = _fitted("mc_dropout", ctx, p=0.1, samples=samples)
    wrapper = tu[0](copy.deepcopy(mcd.model), num_estimators=samples).to(device).eval()
    x = torch.randn(n, *in_shape, device=device)
    c, r = side_by_side(lambda: _tu_probs(wrapper, x, samples), lambda: mcd.predict(x), repeats, device)
    return (f"MC dropout S={samples} predict speed / torch-uncertainty's", c / r, ">=", 1.0,
            f"{r * 1e3:.1f} ms vs {c * 1e3:.1f} ms for {n} inputs")


@case
def ensemble_vs_torch_uncertainty(model_name, in_shape, device, repeats, tmp, n=2000, members=5):
    """Deep-ensemble prediction against torch-uncertainty 0.13's ``deep_ensembles`` wrapper
    around the same members (no parameter reset), to averaged probabilities."""
    tu = _torch_uncertainty()
    if tu is None:
        return (f"deep ensemble predict speed / torch-uncertainty's {_TU_MISSING}", float("nan"), "skip", 1.0, "")
    import copy

    ctx = _context(model_name, in_shape, device, tmp)
    ens = _fitted("deep_ensemble", ctx, members=members)
    wrapper = tu[1]([copy.deepcopy(m) for m in ens.members], reset_model_parameters=False).to(device).eval()
    x = torch.randn(n, *in_shape, device=device)
    c, r = side_by_side(lambda: _tu_probs(wrapper, x, members), lambda: ens.predict(x), repeats, device)
    return (f"deep ensemble M={members} predict speed / torch-uncertainty's", c / r, ">=", 1.0,
            f"{r * 1e3:.1f} ms vs {c * 1e3:.1f} ms for {n} inputs")


def _partial_vi(model_name, in_shape, device, r_bayes: float | None) -> PartialVI:
    """Randomly initialised network wrapped in PartialVI: ``r_bayes`` of the candidate entries
    stochastic (a random subnetwork from the selection module; speed does not depend on which
    entries), or every candidate entry (full mean-field VI) when ``r_bayes`` is None."""
    torch.manual_seed(0)
    net = build_model(model_name, in_shape, 10, dropout=0.0)
    if r_bayes is None:
        indices = candidate_indices(net)
    else:
        indices = make_criterion("random", r_bayes, seed=0).select(net)
    return PartialVI(net, indices, generator=torch.Generator().manual_seed(0)).to(device)


def _state_bytes(vi: PartialVI) -> int:
    return vi.rho.numel() * vi.rho.element_size() + vi.indices.numel() * vi.indices.element_size()


@case
def pbn_vs_mfvi_train_step(model_name, in_shape, device, repeats, tmp, batch=128, samples=5, steps=3, r_bayes=0.01):
    """Full SGD steps (S-sample forward, negative ELBO, backward, update) on one batch."""
    task = classification(10)
    x = torch.randn(batch, *in_shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    stepper = {}
    for name, r in (("pbn", r_bayes), ("mfvi", None)):
        vi = _partial_vi(model_name, in_shape, device, r).train()
        opt = torch.optim.SGD(vi.parameters(), lr=1e-3, momentum=0.9)
        loss_fn = elbo_loss(task, 60_000, samples=samples)

        def run(vi=vi, opt=opt, loss_fn=loss_fn):
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss_fn(vi, x, y, 0.5).backward()
                opt.step()

        stepper[name] = (vi, run)
    c, r = side_by_side(stepper["pbn"][1], stepper["mfvi"][1], repeats, device)
    pbn_vi, mfvi_vi = stepper["pbn"][0], stepper["mfvi"][0]
    pb, mb = _state_bytes(pbn_vi), _state_bytes(mfvi_vi)
    return [
        (f"PBN r={r_bayes:.0%} train step / mfvi train step (S={samples})", c / r, "<=", 1.0,
         f"{c / steps * 1e3:.1f} ms vs {r / steps * 1e3:.1f} ms per step, batch {batch}"),
        ("PBN variational state / mfvi variational state", pb / mb, "<", 0.05,
         f"{pb:,} B vs {mb:,} B (rho + indices; k = {pbn_vi.num_stochastic:,} vs {mfvi_vi.num_stochastic:,})"),
    ]


@case
def vi_training_loop_vs_bare_steps(model_name, in_shape, device, repeats, tmp, batch=50, steps=60, r_bayes=0.01):
    """PBN's training as the method runs it (:func:`bench.training.train_model`: the learning-rate
    schedule, the loss summed on the device and checked every few steps, the ELBO's terms kept in its
    log and read after the epoch) against the same steps in a bare loop (forward, negative ELBO,
    backward, update) over the same loader, at the paper's batch of 50: what the loop adds to a
    step. On a GPU a read of a value on the host waits for the step (docs/device.md)."""
    from bench.data import TensorLoader
    from bench.training import host_float, make_optimizer, train_model

    task = classification(10)
    x, y = torch.randn(batch * steps, *in_shape), torch.randint(0, 10, (batch * steps,))
    loader = TensorLoader(x, y, batch, seed=0, device=device)
    cfg = TrainConfig(epochs=1, batch_size=batch, lr=1e-3, momentum=0.9)
    looped, bare_vi = (_partial_vi(model_name, in_shape, device, r_bayes) for _ in range(2))
    last: dict = {}
    logged = elbo_loss(task, 60_000, samples=5, log=last)
    plain = elbo_loss(task, 60_000, samples=5)
    opt = make_optimizer(bare_vi.parameters(), cfg)

    def loop():
        train_model(looped, loader, cfg, logged,
                    epoch_stats=lambda: {"nll": host_float(last.get("nll")), "kl": host_float(last.get("kl"))})

    def bare():
        bare_vi.train()
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            plain(bare_vi, xb, yb, 0.5).backward()
            opt.step()

    c, r = side_by_side(loop, bare, repeats, device)
    return ("PBN training loop / bare steps", c / r, "<=", 1.1,
            f"{c / steps * 1e3:.2f} ms vs {r / steps * 1e3:.2f} ms per step, batch {batch}, {steps} steps")


@case
def ssvi_vs_mfvi_train_step(model_name, in_shape, device, repeats, tmp, batch=128, steps=3, density=0.1):
    """SSVI (10 %, LRT, one draw, its default) train step vs mfvi's (dense, S = 5 weight draws, its
    default) and vs dense VI with SSVI's own estimator (density 1); variational state sizes."""
    from bench.subnet.ssvi import SSVINet

    task = classification(10)
    x = torch.randn(batch, *in_shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def stepper(model, loss_fn):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

        def run():
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss_fn(model).backward()
                opt.step()
        return run

    def ssvi_net(d):
        torch.manual_seed(0)
        return SSVINet(build_model(model_name, in_shape, 10), d, generator=torch.Generator().manual_seed(0)).to(device)

    def ssvi_loss(m):
        return task.loss(m(x), y) + 0.01 * m.kl() / 60_000

    sparse, dense = ssvi_net(density).train(), ssvi_net(1.0).train()
    mf = _partial_vi(model_name, in_shape, device, None).train()
    mf_loss = elbo_loss(task, 60_000, samples=5)
    c, r = side_by_side(stepper(sparse, ssvi_loss), stepper(mf, lambda m: mf_loss(m, x, y, 0.5)), repeats, device)
    c2, r2 = side_by_side(stepper(sparse, ssvi_loss), stepper(dense, ssvi_loss), repeats, device)
    sb, mb = sparse.state_bytes(), 2 * mf.rho.numel() * mf.rho.element_size()  # mfvi: mu + rho of every entry
    return [
        (f"SSVI d={density:.0%} train step / mfvi train step", c / r, "<=", 1.0,
         f"{c / steps * 1e3:.1f} ms vs {r / steps * 1e3:.1f} ms per step (LRT S=1 vs S=5), batch {batch}"),
        (f"SSVI d={density:.0%} train step / dense LRT VI step", c2 / r2, "<=", 1.0,
         f"{c2 / steps * 1e3:.1f} ms vs {r2 / steps * 1e3:.1f} ms per step (same estimator)"),
        ("SSVI variational state / mfvi variational state", sb / mb, "<", 0.25,
         f"{sb:,} B vs {mb:,} B (mu + rho + int32 positions vs dense mu + rho)"),
    ]


def _vi_optimizer(mean_params, rho_params):
    """The VI plugins' optimiser: the means with the profile's SGD, rho in its own group with
    ``mfvi``'s default optimiser and rate (methods/pbn.py)."""
    from bench.training import make_optimizer, own_group

    d = METHODS.get("mfvi").defaults
    return make_optimizer([{"params": list(mean_params)}, own_group(rho_params, d["rho_optimizer"], d["rho_lr"])],
                          TrainConfig(optimizer="sgd", lr=1e-3, momentum=0.9))


@case
def mfvi_vs_bayesian_torch_train_step(model_name, in_shape, device, repeats, tmp, batch=128, steps=3):
    """Full mean-field VI training step against the peer a user would pick instead: bayesian-torch
    0.5's ``dnn_to_bnn`` (Reparameterization layers) on the same network, same optimiser split
    (SGD means, Adam rho), same ELBO (mean cross-entropy over S weight draws + KL / N), at S = 1
    and S = 5 (bayesian-torch: S forward passes; mfvi: one batched pass). Needs the ``perf``
    extra (``pip install -e .[perf]``); reported as skipped without it."""
    try:
        from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss
    except ImportError:
        return [("mfvi train step / bayesian-torch (not installed: pip install -e .[perf])", float("nan"), "skip",
                 1.0, "")]
    import copy

    import torch.nn.functional as F

    task = classification(10)
    x = torch.randn(batch, *in_shape, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    rows = []
    for samples in (1, 5):
        mf = _partial_vi(model_name, in_shape, device, None).train()
        mf_opt = _vi_optimizer(mf.net.parameters(), [mf.rho])
        mf_loss = elbo_loss(task, 60_000, samples=samples)
        torch.manual_seed(0)
        bnn = copy.deepcopy(build_model(model_name, in_shape, 10, dropout=0.0))
        dnn_to_bnn(bnn, {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0, "posterior_rho_init": -6.9,
                         "type": "Reparameterization", "moped_enable": False})
        bnn = bnn.to(device).train()
        rho = [p for n, p in bnn.named_parameters() if "rho" in n]
        bt_opt = _vi_optimizer([p for n, p in bnn.named_parameters() if "rho" not in n], rho)

        def run_mf(mf=mf, opt=mf_opt, loss_fn=mf_loss):
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss_fn(mf, x, y, 0.5).backward()
                opt.step()

        def run_bt(bnn=bnn, opt=bt_opt, samples=samples):
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                nll = sum(F.cross_entropy(bnn(x), y) for _ in range(samples)) / samples
                (nll + 0.1 * get_kl_loss(bnn) / 60_000).backward()
                opt.step()

        c, r = side_by_side(run_bt, run_mf, repeats, device)
        rows.append((f"mfvi train step speed / bayesian-torch's (S={samples})", c / r, ">=", 1.0,
                     f"{r / steps * 1e3:.1f} ms vs {c / steps * 1e3:.1f} ms per step, batch {batch}"))
    return rows


@case
def pbn_predict_vs_single(model_name, in_shape, device, repeats, tmp, n=2000, samples=5, r_bayes=0.01):
    """The pbn method's own predict path on a posterior set up without training."""
    ctx = _context(model_name, in_shape, device, tmp)
    pbn = METHODS.get("pbn")(ctx, r_bayes=r_bayes, predict_samples=samples)
    pbn.vi = _partial_vi(model_name, in_shape, device, r_bayes).eval()
    pbn.meta = {"predict_seed": 0}
    net = pbn.vi.net  # the posterior-mean network: one deterministic forward
    x = torch.randn(n, *in_shape, device=device)

    def predict():
        pbn.predict(x)

    def one():
        with torch.no_grad():
            torch.softmax(net(x), -1)

    c, r = side_by_side(predict, one, repeats, device)
    return (f"PBN r={r_bayes:.0%} S={samples} predict / (S x single forward)", c / (samples * r), "<=", 1.2,
            f"{c * 1e3:.1f} ms vs {samples} x {r * 1e3:.1f} ms")



@case
def vdp_predict_vs_single(model_name, in_shape, device, repeats, tmp, n=2000):
    """VDP++ paper, Sec. 1 / Fig. 1: propagating variances costs at most ~3x a deterministic
    pass in time and 2x in memory. The vdp method's own predict path (untrained network) vs
    one deterministic forward; memory = peak tensor bytes, parameters and the input included
    (bench.vdp.memory: CUDA's allocator peak on a GPU, tracked tensor storages on a CPU)."""
    from bench.vdp.memory import peak_tensor_bytes

    ctx = _context(model_name, in_shape, device, tmp)
    vdp = METHODS.get("vdp")(ctx)
    torch.manual_seed(0)
    net = build_model(model_name, in_shape, 10).to(device).eval()
    vdp.net = vdp.build(net).eval()  # means = net's weights, rho = the default rho_init
    x = torch.randn(n, *in_shape, device=device)

    def predict():
        return vdp.predict(x)

    def one():
        with torch.no_grad():
            return torch.softmax(net(x), -1)

    c, r = side_by_side(predict, one, repeats, device)
    with torch.no_grad():
        mem_c = peak_tensor_bytes(predict, vdp.net.prediction_tensors() + [x], device)
        mem_r = peak_tensor_bytes(one, list(net.parameters()) + list(net.buffers()) + [x], device)
    return [(f"VDP++ predict / single forward (n={n})", c / r, "<=", 3.0, f"{c * 1e3:.1f} ms vs {r * 1e3:.1f} ms"),
            ("VDP++ predict peak memory / single forward", mem_c / mem_r, "<=", 2.0,
             f"{mem_c / 2**20:.1f} MiB vs {mem_r / 2**20:.1f} MiB (parameters and input included)")]

OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
       "skip": lambda a, b: True}


@case
def laplace_glm_jvp_vs_moments(model_name, in_shape, device, repeats, tmp, n=100, classes=200, samples=20):
    """The diagonal Laplace's linearised predictive at Tiny-ImageNet's 200 classes (resnet_small,
    64 x 64): drawn with one Jacobian-vector product per sample (glm_sampler=jvp, S = 20) against
    laplace-torch's route through J Sigma J^T (here our exact diag_glm_moments: K backward passes
    a batch) followed by the same Monte Carlo."""
    if model_name != MODELS[0][0]:
        return []
    import warnings

    from bench.data import TensorLoader
    from methods.laplace_diag import LaplaceDiag

    shape = (3, 64, 64)
    task = classification(classes)

    def build(dropout=0.0):
        return build_model("resnet_small", shape, classes, dropout=dropout)

    gen = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(32, *shape, generator=gen), torch.randint(0, classes, (32,), generator=gen)
    cfg = TrainConfig(epochs=0, batch_size=32)
    cache = MapCache(tmp, {"model": "resnet_small", "perf": "glm", "classes": classes}, build, task, xs, ys, cfg, device)
    ctx = MethodContext(task=task, build_model=build, train=cfg, device=device, seed=0, map_cache=cache, num_train=32)
    common = {"prior_precision_method": "none", "prior_precision": 1.0, "link_approx": "mc", "n_samples": samples,
              "batch_size": 16, "predict_batch_size": n}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jvp_m = LaplaceDiag(ctx, glm_sampler="jvp", **common).fit(TensorLoader(xs, ys, 16, shuffle=False), None)
        mom_m = LaplaceDiag(ctx, **common).fit(TensorLoader(xs, ys, 16, shuffle=False), None)
    x = torch.randn(n, *shape, generator=gen).to(device)

    def jvp_path():
        jvp_m.predict(x)

    def moments_path():
        mom_m.predict(x)

    c, r = side_by_side(jvp_path, moments_path, max(1, repeats // 2), device)
    return (f"diag Laplace GLM, K={classes}: jvp S={samples} / moments", c / r, "<=", 0.5,
            f"{c * 1e3 / n:.1f} vs {r * 1e3 / n:.1f} ms per image", "resnet_small")


@case
def diag_glm_grid_pairs_vs_per_vector(model_name, in_shape, device, repeats, tmp, n=8, grid=21):
    """The diagonal Laplace's prior search evaluates its 21 grid points in one pass over the
    validation data (``diag_glm_moments`` with 21 variance vectors): the pairwise products of the
    output gradients formed once and contracted with every vector in one matrix product
    (``_quadratic_many``) against one weighted product per vector (``_quadratic``, the code before),
    on resnet_small at CIFAR-10's 32 x 32, ``n`` images."""
    if model_name != MODELS[0][0]:
        return []
    from bench.laplace import diag_glm

    torch.manual_seed(0)
    net = build_model("resnet_small", (3, 32, 32), 10).to(device).eval()
    n_weights = sum(p.numel() for p in net.parameters())
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, 32, 32, generator=gen).to(device)
    V = (torch.rand(grid, n_weights, generator=gen) * torch.logspace(-4, 4, grid)[:, None]).to(device)
    out = {}

    def pairs():
        out["pairs"] = diag_glm.diag_glm_moments(net, x, V)[1]

    def per_vector():
        before, diag_glm.PAIR_PRODUCTS_FROM = diag_glm.PAIR_PRODUCTS_FROM, grid + 1
        try:
            out["per_vector"] = diag_glm.diag_glm_moments(net, x, V)[1]
        finally:
            diag_glm.PAIR_PRODUCTS_FROM = before

    c, r = side_by_side(pairs, per_vector, max(1, repeats // 2), device)
    rel = float(((out["pairs"] - out["per_vector"]).abs() / out["per_vector"].abs().amax((-2, -1), keepdim=True)).max())
    return (f"diag Laplace GLM grid of {grid}: pairwise products / one product per vector", c / r, "<=", 0.85,
            f"{c * 1e3 / n:.0f} vs {r * 1e3 / n:.0f} ms per image, largest difference {rel:.1e} of the largest "
            f"variance", "resnet_small")


def posterior_peak(path: str, s: int, device="cpu", n_jac: int = 64, classes: int = 10) -> dict:
    """Peak memory above the GGN (bench.cost.PeakMemory: the allocator's peak on a GPU, the resident
    set on the CPU) and time of an s-weight subnetwork posterior in float64 (``path``: ``bench``,
    :mod:`bench.laplace.precision`; ``laplace-torch``, its own full-covariance path on the same float64
    GGN): the scale at one prior precision, the functional variance of ``n_jac`` x ``classes``
    Jacobian rows, the log-determinant. A random GGN of rank s / 2 (values do not change memory or
    time). Measure each path in its own process on the CPU (memory an earlier one freed stays
    resident)."""
    import warnings

    from bench.cost import PeakMemory
    from bench.laplace import import_laplace
    from bench.laplace.precision import float64_posterior

    import_laplace()
    from laplace import Laplace

    device = torch.device(device)
    torch.manual_seed(0)
    width = int(s ** 0.5) + 1
    net = torch.nn.Sequential(torch.nn.Linear(width, width)).to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        la = Laplace(net, "classification", subset_of_weights="subnetwork", hessian_structure="full",
                     subnetwork_indices=torch.arange(s), prior_precision=1.0)
    if path == "bench":
        la = float64_posterior(la)
    A = torch.randn(s, s // 2, dtype=torch.float64, device=device)
    la.H = A @ A.T  # the GGN as fit leaves it: float64
    del A
    J = torch.randn(n_jac, classes, s, device=device)
    if path == "laplace-torch":  # its einsum takes the GGN's dtype (the float64 posterior's code before)
        J = J.double()
    times, out = {}, []
    with PeakMemory(device) as mem:
        times["scale_s"] = timed(lambda: la.posterior_scale, device)
        times["functional_variance_s"] = timed(lambda: out.append(la.functional_variance(J)), device)
        times["logdet_s"] = timed(lambda: out.append(float(la.log_det_posterior_precision)), device)
    f_var, logdet = out
    return {"path": path, "s": s, "peak_mb": mem.peak_mb, "ss_mb": s * s * 8 / 2**20, **times,
            "f_var": f_var[:2].flatten().tolist(), "logdet": logdet}


def posterior_agreement(ours: dict, ref: dict) -> tuple[float, float]:
    """How closely two :func:`posterior_peak` results agree: the largest difference of their
    functional variances relative to the reference's largest, and of their log-determinants."""
    rel = max(abs(a - b) for a, b in zip(ours["f_var"], ref["f_var"])) / max(abs(v) for v in ref["f_var"])
    return rel, abs(ours["logdet"] - ref["logdet"])


def posterior_peak_in_child(path: str, s: int, device="cpu") -> dict:
    """:func:`posterior_peak` in a child process of its own."""
    import json
    import subprocess
    import sys

    code = ("import json, sys; from bench.perf import posterior_peak; "
            "print('RESULT', json.dumps(posterior_peak(sys.argv[1], int(sys.argv[2]), sys.argv[3])))")
    res = subprocess.run([sys.executable, "-c", code, path, str(s), str(device)], capture_output=True, text=True)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode or not line:
        raise RuntimeError(f"posterior_peak({path}, {s}) failed: {res.stderr[-2000:]}")
    return json.loads(line[-1][len("RESULT "):])


@case
def subnet_posterior_memory(model_name, in_shape, device, repeats, tmp, s=3000):
    """The full-covariance subnetwork posterior's peak memory above its GGN, in s x s float64
    matrices (:func:`posterior_peak`: its scale, a functional variance, the log-determinant), by
    :mod:`bench.laplace.precision` (``lower_scale``, ``(J L)(J L)^T``, the scale's diagonal) and by
    laplace-torch's own path on the same float64 GGN (``invsqrt_precision``, the covariance formed
    per functional variance, an LU log-determinant), each in a process of its own."""
    if model_name != MODELS[0][0]:
        return []
    ours, theirs = (posterior_peak_in_child(p, s, device) for p in ("bench", "laplace-torch"))
    rel, d_logdet = posterior_agreement(ours, theirs)
    detail = (f"s = {s:,}: {ours['peak_mb']:.0f} vs {theirs['peak_mb']:.0f} MB; functional variance "
              f"{ours['functional_variance_s'] * 1e3:.0f} vs {theirs['functional_variance_s'] * 1e3:.0f} ms; variances "
              f"agree to {rel:.1e}, log-determinants to {d_logdet:.1e}")
    return [("subnet posterior peak above its GGN / s x s (bench.laplace.precision)", ours["peak_mb"] / ours["ss_mb"],
             "<=", 3.0, detail, "subnet posterior"),
            ("subnet posterior peak: bench.laplace.precision / laplace-torch's path",
             ours["peak_mb"] / theirs["peak_mb"], "<=", 0.6, detail, "subnet posterior")]


@case
def segmentation_jvp_vs_forward(model_name, in_shape, device, repeats, tmp, n=8, samples=10, classes=11):
    """The cost of one linearised-predictive sample on segmentation (the diagonal and subnetwork
    Laplace on CamVid, glm_sampler=jvp): unet_small at the camvid quick resolution, 120 x 160,
    S Jacobian-vector products (bench.laplace.jvp_glm, every weight perturbed) against S plain
    forward passes of the same batch. Forward-mode differentiation costs a small constant times
    the function (about 2-3 passes: each operation also propagates its tangent); above 3 a
    sample would cost more than the theory allows for and the profile's sample count would
    need revisiting. Second row: the samples sharing passes as the methods draw them
    (``samples_per_pass``: the primal computed once a pass) against one at a time."""
    if model_name != MODELS[0][0]:
        return []
    from bench.laplace.jvp_glm import glm_logit_samples, samples_per_pass
    from bench.laplace.memory import activation_numel

    shape = (3, 120, 160)
    torch.manual_seed(0)
    net = build_model("unet_small", shape, classes).to(device).eval()
    n_weights = sum(p.numel() for p in net.parameters())
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, *shape, generator=gen).to(device)
    offsets = 1e-3 * torch.randn(samples, n_weights, generator=gen)

    per_pass = samples_per_pass(samples, activation_numel(net, x[:1]) * n, n_weights)
    out = {}

    def jvp_path():  # one sample at a time
        out["one"] = glm_logit_samples(net, x, offsets)[1]

    def forward_path():
        with torch.no_grad():
            for _ in range(samples):
                net(x)

    def shared_path():
        out["shared"] = glm_logit_samples(net, x, offsets, per_pass)[1]

    c, r = side_by_side(jvp_path, forward_path, max(1, repeats // 2), device)
    cs, rs = side_by_side(shared_path, jvp_path, max(1, repeats // 2), device)
    same = float((out["shared"] - out["one"]).abs().max())
    return [(f"segmentation GLM sample (JVP) / forward, S={samples}", c / r, "<=", 3.0,
             f"{c * 1e3 / (n * samples):.1f} vs {r * 1e3 / (n * samples):.1f} ms per image and sample, "
             f"120 x 160", "unet_small"),
            (f"segmentation GLM samples, {per_pass} a pass / one at a time, S={samples}", cs / rs, "<=", 0.85,
             f"{cs * 1e3 / (n * samples):.1f} vs {rs * 1e3 / (n * samples):.1f} ms per image and sample, "
             f"largest logit difference {same:.1e}", "unet_small")]


def _jpeg_folder(tmp, n: int, size: int, classes: int = 20):
    """``n`` JPEGs of ``size`` x ``size`` in ``classes`` ImageFolder class folders (made once)."""
    from pathlib import Path

    import numpy as np
    from PIL import Image

    root = Path(tmp) / f"jpegs-{n}-{size}"
    if not root.exists():
        rng = np.random.default_rng(0)
        for i in range(n):
            d = root / f"c{i % classes:03d}"
            d.mkdir(parents=True, exist_ok=True)
            smooth = rng.integers(0, 255, (size // 8, size // 8, 3)).astype(np.uint8)
            img = Image.fromarray(smooth).resize((size, size), Image.BILINEAR)  # photo-like: compresses
            img.save(d / f"{i:06d}.JPEG", quality=85)
    return root


@case
def jpeg_eval_vs_imagefolder(model_name, in_shape, device, repeats, tmp, n=2000, size=64, batch=250):
    """The harness's prediction over a JPEG folder against the loop a user would write with
    torchvision: ``ImageFolder`` + ``DataLoader`` with the same workers, the same network, the same
    work (scoring timed apart, as in :func:`harness_vs_bare_loop`)."""
    if model_name != MODELS[0][0]:
        return []  # one network is enough: the data path is what is measured
    import torchvision.datasets as tvd
    import torchvision.transforms as T

    from bench.threads import default_workers
    from bench.data import EvalSet
    from datasets.imagenet import MEAN, STD
    from datasets.sources import ImageFiles

    root = _jpeg_folder(tmp, n, size)
    workers = default_workers()
    net = build_model("resnet_small", (3, size, size), 200).to(device).eval()
    ctx = _context("resnet_small", (3, size, size), device, tmp)
    det = _fitted("deterministic", ctx)
    det.model = net
    folder = tvd.ImageFolder(str(root), transform=T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)]))
    paths = [p for p, _ in folder.samples]
    y = torch.tensor([t for _, t in folder.samples])
    source = ImageFiles(paths, size, MEAN, STD)
    eset = EvalSet("id", "clean", 0.0, source, y)
    out = {}

    def harness():
        out["harness"], _ = predict_all(det, source, batch, device, workers)

    def bare():
        loader = torch.utils.data.DataLoader(folder, batch_size=batch, shuffle=False, num_workers=workers,
                                             pin_memory=device.type == "cuda")
        with torch.no_grad():
            out["bare"] = torch.cat([torch.softmax(net(xb.to(device)), -1).cpu() for xb, _ in loader])

    c, r = side_by_side(harness, bare, repeats, device)
    same = torch.allclose(out["harness"].probs, out["bare"], atol=1e-6)
    return ("harness JPEG predict / ImageFolder+DataLoader", r / c, ">=", 0.95,
            f"{n / c:,.0f} vs {n / r:,.0f} img/s, resnet_small at {size}px, {workers} worker(s), same probs: {same}; "
            f"{_scoring(out['harness'], eset, device, repeats, c)}", "resnet_small")


def _run_peak_rss_mb(args: list[str]) -> float:
    """Peak resident memory (MB) of ``python -m bench`` with ``args`` in a child process."""
    import subprocess
    import sys

    from bench.perf_cases import PEAK_KB_CODE

    code = PEAK_KB_CODE + (
        "import runpy, sys; sys.argv = ['bench'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('bench', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('PEAK_KB', peak_kb())")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("PEAK_KB")]
    if res.returncode or not line:
        raise RuntimeError(f"bench {' '.join(args)} failed: {res.stderr[-2000:]}")
    return int(line[-1].split()[1]) / 1024


@case
def eval_memory_many_cells_vs_one(model_name, in_shape, device, repeats, tmp, per_class=40):
    """Peak memory of a whole run over 20 ImageNet-C cells (4 corruptions x 5 severities) against
    the same run over 1 cell, on a fixture in the official layout: flat when cells stream."""
    if model_name != MODELS[0][0]:
        return []
    from pathlib import Path

    from datasets.imagenet import imagenet_wnids, write_fixture

    root = Path(tmp) / "imagenet-fixture"
    corr = ["gaussian_noise", "contrast", "fog", "pixelate"]
    if not root.exists():
        write_fixture(root, [imagenet_wnids()[i] for i in (0, 1, 2)], per_class, corruptions=corr,
                      severities=(1, 2, 3, 4, 5), sizes=((256, 256),))
    weights = root / "weights.pt"
    torch.save(build_model("resnet_small", (3, 224, 224), 1000).state_dict(), weights)
    base = ["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(root), "--methods",
            "deterministic", "--no-report", "--quiet", "--loader-workers", "1", "--device", str(device),
            "--set", f"data.weights={weights}", "--set", f"data.parts=[{per_class // 4},{per_class // 8},{per_class // 2}]"]
    one = _run_peak_rss_mb(base + ["--out", str(root / "r1"), "--set", "data.corruptions=gaussian_noise",
                                   "--set", "data.severities=[1]"])
    many = _run_peak_rss_mb(base + ["--out", str(root / "r20"), "--set", f"data.corruptions=[{','.join(corr)}]",
                                    "--set", "data.severities=[1,2,3,4,5]"])
    n_test = 3 * (per_class // 2)
    inmem = 20 * n_test * 3 * 224 * 224 * 4 / 2**20
    return ("peak memory: 20 cells / 1 cell", many / one, "<=", 1.1,
            f"{many:,.0f} vs {one:,.0f} MB ({n_test} images a cell; 20 cells in memory as floats: {inmem:,.0f} MB)",
            "resnet_small")


def _save(path, rows: list[dict], meta: dict) -> list[tuple[str, str]]:
    """Merge ``rows`` into the JSON file at ``path`` (:func:`bench.perf_cases.merge_rows`: a later run
    of a case replaces what that case stored, unless it measured nothing there). Returns the (case,
    network) pairs whose stored rows were kept."""
    import json
    from pathlib import Path

    from bench.store import atomic_write_json

    path = Path(path)
    old = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    merged, keep_old = merge_rows(old, rows)
    atomic_write_json(path, {"rows": merged})
    return keep_old


def main(repeats: int = 5, device: str = "auto", cases: list[str] | None = None, save: str | None = None) -> int:
    import datetime
    import tempfile

    from bench import perf_scaleout  # noqa: F401 - registers the scale-out cases
    from bench.errors import BenchError
    from bench.provenance import device_description, git_commit

    unknown = set(cases or []) - {f.__name__ for f in _registered}
    if unknown:
        raise BenchError(f"unknown perf case(s) {sorted(unknown)}; valid: {', '.join(f.__name__ for f in _registered)}")
    dev = resolve_device(device)
    meta = {"device": device_description(dev), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "repeats": repeats, "git_commit": git_commit(),
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    print(f"device {dev}, torch {torch.__version__}, {torch.get_num_threads()} threads, {repeats} repeats (median)")
    print(f"{'model':14s} {'measure':48s} {'ratio':>7s}  target   {'':6s} detail")
    missed = 0
    saved: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_name, shape in MODELS:
            for fn in [f for f in _registered if not cases or f.__name__ in cases]:
                load0, usage, others = host_load(), ThreadUsage(), OtherWork()
                rows = fn(model_name, shape, dev, repeats, tmp)
                # the conditions of the case (this process's thread; children's pauses are not seen, the
                # work of other processes is): a ratio taken beside other work or across a stop is named
                # so in the table
                loads = [v for v in (load0, host_load()) if v is not None]
                other = others.cores()
                conditions = {**usage_fractions(usage.usage(), "case"), "host_load_1m": max(loads) if loads else None,
                              "case_other_cores": None if other is None else round(other, 3)}
                for row in (rows if isinstance(rows, list) else [rows]):
                    label, ratio, op, target, detail = row[:5]
                    model = row[5] if len(row) > 5 else model_name  # a case may measure its own network
                    ok = OPS[op](ratio, target)
                    missed += not ok
                    print(f"{model:14s} {label:48s} {ratio:7.3f}  {op:2s} {target:<5} "
                          f"{'ok' if ok else 'MISSED':6s} {detail}", flush=True)
                    saved.append({"case": fn.__name__, "model": model, "measure": label, "ratio": float(ratio),
                                  "op": op, "target": target, "ok": bool(ok), "detail": detail, **meta,
                                  **conditions})
    if save:
        for case, model in _save(save, saved, meta):
            print(f"{save}: kept the measured rows of {case} on {model} (nothing measured this time)")
    return 1 if missed else 0
