"""VDP++ experiments beyond the harness: noise robustness summary, self-compression, cost.

Run from the repository root (``datasets`` must be this repository's package)::

    .venv/bin/python benchmarks/vdp_experiments.py noise --results results --suite mnist_noise
    .venv/bin/python benchmarks/vdp_experiments.py prune --results results --suite mnist_noise --data-root data
    .venv/bin/python benchmarks/vdp_experiments.py cost --data-root data
    .venv/bin/python benchmarks/vdp_experiments.py all --results results --data-root data --doc docs/vdp.md

* ``noise`` (VDP++ paper Fig. 1c / Fig. 3), from the stored records of a noise suite
  (``mnist_noise``, ``cifar10_noise``): accuracy against SNR per method; the mean output variance of the predicted class,
  normalised by its value at the lowest SNR (the paper's normalisation); the Spearman rank
  correlation between SNR and that variance (per seed, and pooled over seeds with its p-value),
  next to the same correlation for the predictive entropy of every method; and the effect of
  ``kl_weight`` when the records hold a sweep of it.
* ``prune`` (Fig. 2): magnitude pruning (:mod:`bench.pruning`: the paper's global L1 unstructured
  pruning, and as controls layer-wise and batch-norm-folded magnitude) of the Linear / Conv weight
  means of the fitted ``deterministic``, ``vdp`` and ``mfvi`` checkpoints in the results store, at
  0-99 %, accuracy on the clean test set. A pruned weight is removed: its mean and its variance
  become 0. Biases and batch-norm parameters are not pruned.
* ``cost`` (Fig. 1a-b): time and memory of a training step of each method at batch size 512
  (the paper's), interleaved in one process on the same batches, reported per epoch of the
  suite's training images. Memory = parameters + gradients + optimiser state + the
  activations autograd saves for the backward pass + the input batch (on a GPU, the
  allocator's peak of a step instead).

Any noise suite works (``--suite mnist_noise`` or ``cifar10_noise``; the CIFAR-10 one with
``resnet_small``): ``--model`` / ``--models`` default to the suite profile's models, and ``cost``
times the suite's own training split.

``--doc FILE`` replaces the block between ``<!-- BEGIN vdp_experiments:NAME -->`` and
``<!-- END vdp_experiments:NAME -->`` in FILE (appending it when absent) with the printed table;
NAME is ``noise`` / ``prune`` / ``cost`` for ``mnist_noise`` and ``noise-SUITE`` etc. for other
suites, ``summary-SUITE`` for ``summary``.
"""
from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from bench.reporting.tables import mean_std_text as mean_std  # noqa: E402
from torch import nn  # noqa: E402

PRUNE_FRACTIONS = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99]
PRUNED_RHO = -30.0  # softplus(-30) ~ 1e-13: a removed weight has no variance either


# ------------------------------------------------------------------------------------- helpers
def md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def update_doc(path: Path, name: str, text: str) -> None:
    begin, end = f"<!-- BEGIN vdp_experiments:{name} -->", f"<!-- END vdp_experiments:{name} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    doc = path.read_text() if path.exists() else ""
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)


def load_ok_records(results: Path, suite: str, model: str) -> pd.DataFrame:
    from bench.store import load_records

    df = load_records(results, suite)
    if df.empty:
        raise SystemExit(f"no records for suite {suite!r} under {results}")
    df = df[(df["status"] == "ok") & (df["model"] == model)].copy()
    df["severity"] = pd.to_numeric(df["severity"], errors="coerce")
    return df


def _profile(args) -> dict:
    """The suite's profile ``--profile`` (quick when empty or unknown to the suite)."""
    from bench.suites import SUITES

    profiles = SUITES.get(args.suite).profiles
    return profiles.get(args.profile or "quick", profiles["quick"])


def _models(args) -> list[str]:
    """``--models``, else every model of the suite's profile."""
    return args.models.split(",") if args.models else list(_profile(args)["models"])


def _model(args) -> str:
    """``--model``, else the first model of the suite's profile."""
    return args.model or _profile(args)["models"][0]


# --------------------------------------------------------------------------------------- noise
def noise(args) -> str:
    from scipy.stats import spearmanr

    from bench.suites.mnist_noise import CLEAN_SEVERITY

    args.model = _model(args)
    df = load_ok_records(Path(args.results), args.suite, args.model)
    if args.profile:
        df = df[df["profile"] == args.profile]
    ev = df[df["kind"].isin(["id", "shift"])]
    levels = sorted(ev["severity"].dropna().unique(), reverse=True)
    lab = lambda s: "clean" if s == CLEAN_SEVERITY else f"{s:g} dB"  # noqa: E731
    labels = sorted(ev["method_label"].unique())
    n_seeds = ", ".join(f"{m} {ev.loc[ev['method_label'] == m, 'seed'].nunique()}" for m in labels)
    parts = [f"Suite `{args.suite}`, model `{args.model}`; mean ± std over seeds (seeds per method: {n_seeds})."]

    # accuracy vs SNR
    rows = []
    for m in labels:
        sub = ev[ev["method_label"] == m]
        rows.append([m] + [mean_std(sub.loc[sub["severity"] == s, "metrics.accuracy"]) for s in levels])
    parts.append("**Accuracy vs SNR**\n\n" + md_table(["method"] + [lab(s) for s in levels], rows))

    # normalised output variance (VDP) and Spearman correlations
    shift_levels = [s for s in levels if s != CLEAN_SEVERITY]
    lowest = min(shift_levels)
    var_rows, rho_rows = [], []
    for m in labels:
        sub = ev[ev["method_label"] == m]
        for metric, name in (("metrics.vdp_variance", "output variance"), ("metrics.entropy", "entropy"),
                             ("metrics.mutual_information", "mutual information")):
            if metric not in sub or sub[metric].isna().all():
                continue
            per_seed_rho, pooled_x, pooled_y, normed = [], [], [], {s: [] for s in levels}
            monotone = []  # per seed: the score never falls as the SNR falls (clean set included)
            for seed, g in sub.groupby("seed"):
                g = g.set_index("severity")[metric]
                if lowest not in g.index:
                    continue
                for s in levels:
                    if s in g.index:
                        normed[s].append(g[s] / g[lowest])
                ordered = [g[s] for s in levels if s in g.index]  # clean first, then falling SNR
                monotone.append(bool(np.all(np.diff(ordered) >= 0)))
                sh = g[[s for s in shift_levels if s in g.index]]
                if len(sh) >= 3:
                    per_seed_rho.append(spearmanr(sh.index, sh.values).statistic)
                    pooled_x += list(sh.index)
                    pooled_y += list(sh.values)
            if metric == "metrics.vdp_variance":
                var_rows.append([m] + [mean_std(normed[s], "{:.3g}") for s in levels])
            if pooled_x:
                r = spearmanr(pooled_x, pooled_y)
                rho_rows.append([m, name, mean_std(per_seed_rho, "{:.3f}"), f"{r.statistic:.3f}", f"{r.pvalue:.2g}",
                                 len(pooled_x), f"{sum(monotone)}/{len(monotone)}"])
    if var_rows:
        parts.append(f"**Mean output variance of the predicted class, normalised by its value at {lowest:g} dB** "
                     "(per seed, then mean ± std; the paper's Fig. 3 normalisation)\n\n"
                     + md_table(["method"] + [lab(s) for s in levels], var_rows))
        raw = []
        for m in labels:
            sub = ev[ev["method_label"] == m]
            if "metrics.vdp_variance" in sub and sub["metrics.vdp_variance"].notna().any():
                raw.append([m] + [mean_std(sub.loc[sub["severity"] == s, "metrics.vdp_variance"], "{:.3g}") for s in levels])
        parts.append("Raw mean output variance:\n\n" + md_table(["method"] + [lab(s) for s in levels], raw))
    for metric, title in (("metrics.entropy", "Mean predictive entropy (nats) vs SNR, every method"),
                          ("metrics.mutual_information", "Mean mutual information (nats) vs SNR, sampling methods")):
        rows = []
        for m in labels:
            sub = ev[ev["method_label"] == m]
            if metric in sub and (sub[metric].fillna(0) != 0).any():  # some recorded, non-zero value
                rows.append([m] + [mean_std(sub.loc[sub["severity"] == s, metric], "{:.3g}") for s in levels])
        if rows:
            parts.append(f"{title}:\n\n" + md_table(["method"] + [lab(s) for s in levels], rows))
    if rho_rows:
        parts.append("**Spearman rank correlation between SNR (dB) and the uncertainty score** over the noisy sets "
                     "(negative = more uncertainty at lower SNR); per seed (mean ± std), and pooled over seeds with "
                     "its p-value; last column: seeds in which the score never decreases as the SNR falls "
                     "(clean set included)\n\n"
                     + md_table(["method", "score", "rho per seed", "rho pooled", "p pooled", "points",
                                 "monotone (seeds)"], rho_rows))

    # kl_weight sweep
    vdp = df[df["method"] == "vdp"]
    if not vdp.empty:
        vdp = vdp.assign(kl_weight=vdp["method_config"].map(lambda c: c.get("kl_weight") if isinstance(c, dict) else None))
        others = vdp["method_config"].map(lambda c: tuple(sorted((k, str(v)) for k, v in c.items() if k != "kl_weight")))
        vdp = vdp.assign(_others=others)
        for key, grp in vdp.groupby("_others"):
            if grp["kl_weight"].nunique() < 2:
                continue
            rows = []
            for kw, g in sorted(grp.groupby("kl_weight"), key=lambda kv: float(kv[0])):
                idr, sh, ood = g[g["kind"] == "id"], g[g["kind"] == "shift"], g[g["kind"] == "ood"]
                low = sh[sh["severity"] == lowest]
                ratio = [low.loc[low.seed == s, "metrics.vdp_variance"].mean() / idr.loc[idr.seed == s, "metrics.vdp_variance"].mean()
                         for s in sorted(idr["seed"].unique())]
                rhos = []
                for _, gs in sh.groupby("seed"):
                    if gs["severity"].nunique() >= 3:
                        rhos.append(spearmanr(gs["severity"], gs["metrics.vdp_variance"]).statistic)
                diag = [d for d in idr.get("diagnostics", pd.Series(dtype=object)) if isinstance(d, dict)]
                rows.append([f"{float(kw):g}", mean_std(idr["metrics.accuracy"]), mean_std(low["metrics.accuracy"]),
                             mean_std(sh.groupby("seed")["metrics.accuracy"].mean()), mean_std(idr["metrics.nll"]),
                             mean_std(idr["metrics.ece"]),
                             mean_std(ratio, "{:.3g}"), mean_std(rhos), mean_std(ood.get("metrics.auroc", [])),
                             mean_std(ood.get("metrics.auroc_vdp_variance", [])),
                             mean_std([d["sigma"]["median"] for d in diag], "{:.4f}"),
                             mean_std([d["frac_weights_snr_below_1"] for d in diag])])
            parts.append(f"**Effect of `kl_weight`** (vdp, other options {dict(key) or 'default'})\n\n" + md_table(
                ["kl_weight", "acc clean", f"acc {lowest:g} dB", "acc mean over SNRs", "NLL clean", "ECE clean",
                 f"var {lowest:g} dB / clean", "Spearman(SNR, var)", "OOD AUROC (entropy)", "OOD AUROC (variance)",
                 "median sigma", "frac. weights with abs(mu) < sigma"], rows))
    text = "\n\n".join(parts)
    print(text)
    return text


# ------------------------------------------------------------------------------------- summary
def summary(args) -> str:
    """Any suite: in-distribution, shift-averaged and OOD metrics per method (mean ± std over seeds)."""
    args.model = _model(args)
    df = load_ok_records(Path(args.results), args.suite, args.model)
    if args.profile:
        df = df[df["profile"] == args.profile]
    rows = []
    for m in sorted(df["method_label"].unique()):
        g = df[df["method_label"] == m]
        idr, sh, ood = g[g["kind"] == "id"], g[g["kind"] == "shift"], g[g["kind"] == "ood"]
        per_seed = lambda col: sh.groupby("seed")[col].mean() if col in sh else []  # noqa: E731
        rows.append([m, idr["seed"].nunique(), mean_std(idr["metrics.accuracy"]), mean_std(idr["metrics.nll"]),
                     mean_std(idr["metrics.ece"]), mean_std(per_seed("metrics.accuracy")),
                     mean_std(per_seed("metrics.nll")), mean_std(per_seed("metrics.ece")),
                     mean_std(ood["metrics.auroc"]) if "metrics.auroc" in ood else "-",
                     mean_std(ood["metrics.auroc_vdp_variance"]) if "metrics.auroc_vdp_variance" in ood else "-"])
    text = (f"Suite `{args.suite}`, model `{args.model}`, profile `{args.profile or 'all'}`; shift columns average "
            f"every shifted set per seed, then mean ± std over seeds.\n\n" + md_table(
                ["method", "seeds", "acc id", "NLL id", "ECE id", "acc shift", "NLL shift", "ECE shift",
                 "OOD AUROC (entropy)", "OOD AUROC (vdp variance)"], rows))
    print(text)
    return text


# --------------------------------------------------------------------------------------- prune
def _fitted_methods(results: Path, suite_name: str, model: str, methods: list[str], seeds):
    """[(label, method name, seed, method object)] for every fitted checkpoint in the store."""
    from bench.checkpoints import load_torch
    from bench.harness import model_builder
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from bench.training import TrainConfig
    from methods import METHODS, MethodContext

    suite = SUITES.get(suite_name)()
    df = load_ok_records(results, suite_name, model)
    df = df[df["method"].isin(methods) & (df["kind"] == "id")]
    store = ResultsStore(results)
    out, data_cfgs = [], []
    for (name, chash, seed), g in df.groupby(["method", "config_hash", "seed"]):
        if seeds and int(seed) not in seeds:
            continue
        rec = g.iloc[0]
        ckpt = store.fitted_checkpoint(rec)
        if not ckpt.exists():
            print(f"  (no fitted checkpoint {ckpt}; skipped)", file=sys.stderr)
            continue
        ctx = MethodContext(task=suite.task, build_model=model_builder(suite, rec["data_config"], model),
                            train=TrainConfig.from_dict(rec["train_config"]), device=torch.device("cpu"), seed=int(seed),
                            num_train=1)
        method = METHODS.get(name)(ctx, **rec["method_config"])
        method.load_state_dict(load_torch(ckpt)["method"])
        out.append((rec["method_label"], name, int(seed), method))
        data_cfgs.append(rec["data_config"])
    return suite, out, (data_cfgs[0] if data_cfgs else {})


def _prune_method(method, name: str, amount: float, scheme: str = "global"):
    """A pruned copy of a fitted method (:func:`bench.pruning.prune_`): the Linear / Conv weight
    means by ``scheme`` (the paper's global L1, layer-wise, or batch-norm-folded magnitude)."""
    from bench.pruning import prune_

    m = copy.deepcopy(method)
    net = m.model if name == "deterministic" else m.net if name == "vdp" else m.vi.net
    n_zero, n_total = prune_(net, amount, scheme) if amount > 0 else (0, sum(
        x.weight.numel() for x in net.modules() if isinstance(x, (nn.Linear, nn.Conv2d)) or hasattr(x, "weight_rho")))
    with torch.no_grad():
        if name not in ("deterministic", "vdp"):  # mfvi / pbn: a removed weight has no variance either
            vi = m.vi
            for slot in vi._slots:
                if slot.param_name != "weight":
                    continue
                local = vi._local(slot).long()
                zero = vi._param(slot).reshape(-1)[local] == 0
                vi.rho[slot.start:slot.end][zero] = PRUNED_RHO
    return m, n_zero, n_total


def prune_experiment(args) -> str:
    from bench.harness import predict_all

    torch.set_num_threads(args.threads)
    args.model = _model(args)
    results = Path(args.results)
    suite, fitted, data_cfg = _fitted_methods(results, args.suite, args.model, args.methods.split(","),
                                              [int(s) for s in args.seeds.split(",")] if args.seeds else None)
    if args.labels:  # only these method labels (e.g. one KL weight of a sweep)
        keep = args.labels.split(";")
        fitted = [f for f in fitted if f[0] in keep]
    if not fitted:
        raise SystemExit("no fitted checkpoints found: run e.g. `python -m bench run --suite mnist_noise --profile quick "
                         "--data-root data --methods deterministic,vdp,mfvi --set models=lenet_300_100` first")
    data = suite.load(Path(args.data_root), data_cfg, False)
    test = data.id_set()
    acc: dict = {}
    t0 = time.perf_counter()
    schemes = args.prune_schemes.split(",")
    for label, name, seed, method in fitted:
        for scheme in schemes:
            for frac in PRUNE_FRACTIONS:
                pruned, n_zero, n_total = _prune_method(method, name, frac, scheme)
                pred, _ = predict_all(pruned, test.x, 1000, torch.device("cpu"))
                a = (pred.probs.argmax(-1) == test.y).double().mean().item()
                acc.setdefault((label, scheme), {}).setdefault(frac, []).append(a)
                print(f"  {label} seed {seed} {scheme} pruned {frac:.0%} ({n_zero}/{n_total} weights zero): acc {a:.4f}",
                      file=sys.stderr, flush=True)
    rows = [[label, scheme] + [mean_std(acc[(label, scheme)][f], "{:.4f}") for f in PRUNE_FRACTIONS]
            for label, scheme in sorted(acc, key=lambda k: (k[0], schemes.index(k[1])))]
    seeds = sorted({s for _, _, s, _ in fitted})
    text = (f"Clean-test accuracy after magnitude pruning of the Linear / Conv weight means: `global` = the "
            f"paper's global L1 unstructured pruning, `layerwise` = the same fraction in every layer, `bn_folded` = "
            f"global on |w| x |gamma| / sqrt(running var + eps) of the batch norm after the layer (bench/pruning.py) "
            f"(suite `{args.suite}`, model `{args.model}`, seeds {seeds}; mean ± std over seeds)\n\n"
            + md_table(["method", "pruning"] + [f"{f:.0%} pruned" for f in PRUNE_FRACTIONS], rows))
    print(f"  pruning took {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(text)
    return text


# ---------------------------------------------------------------------------------------- cost
def _steppers(model_name: str, in_shape, n_train: int, device, lr_sgd: float):
    """One training step of each method, built exactly as the plugins' fit builds them."""
    from bench.models import build_model
    from bench.subnet.partial_vi import PartialVI, elbo_loss
    from bench.subnet.selection import candidate_indices
    from bench.tasks import classification
    from bench.training import TrainConfig, make_optimizer
    from methods.pbn import softplus_inv_float
    from bench.vdp import to_vdp, vdp_loss
    from bench.vdp.memory import saved_activation_bytes, state_bytes
    from methods.mfvi import MFVI
    from methods.vdp import VDP

    task = classification(10)
    torch.manual_seed(0)
    out = {}

    det = build_model(model_name, in_shape, 10).to(device).train()
    out["deterministic"] = (det, torch.optim.SGD(det.parameters(), lr=lr_sgd, momentum=0.9, weight_decay=1e-5),
                            lambda model, x, y: task.loss(model(x), y))
    c = VDP.defaults
    vdp = to_vdp(build_model(model_name, in_shape, 10), float(c["rho_init"])).to(device).train()
    vloss = vdp_loss(n_train, kl_weight=float(c["kl_weight"]), likelihood=c["likelihood"], var_floor=float(c["var_floor"]))
    out["vdp"] = (vdp, torch.optim.Adam(vdp.parameters(), lr=float(c["lr"])), lambda model, x, y: vloss(model, x, y, 0.5))
    m = MFVI.defaults
    net = build_model(model_name, in_shape, 10)
    vi = PartialVI(net, candidate_indices(net), rho_init_mean=softplus_inv_float(m["sigma_init"]),
                   rho_init_std=m["rho_init_std"],
                   generator=torch.Generator().manual_seed(0)).to(device).train()
    mloss = elbo_loss(task, n_train, samples=int(m["train_samples"]), beta_start=m["beta_start"], beta_end=m["beta_end"],
                      weight_decay=1e-5)
    groups = [{"params": list(net.parameters()), "lr": lr_sgd},
              {"params": [vi.rho], "lr": m["rho_lr"], "optimizer": m["rho_optimizer"], "weight_decay": 0.0}]
    opt = make_optimizer(groups, TrainConfig(optimizer="sgd", lr=lr_sgd, momentum=0.9))
    out["mfvi"] = (vi, opt, lambda model, x, y: mloss(model, x, y, 0.5))

    def step(name, x, y):
        model, opt, loss_fn = out[name]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()

    def memory(name, x, y):
        model, opt, loss_fn = out[name]
        params = list(model.parameters())
        opt.zero_grad(set_to_none=True)
        saved, loss = saved_activation_bytes(lambda: loss_fn(model, x, y), exclude=params + list(model.buffers()))
        loss.backward()
        opt.step()
        p = state_bytes(params) + state_bytes(model.buffers())
        g = state_bytes(q for q in params if q.requires_grad)
        o = state_bytes(t for st in opt.state.values() for t in st.values() if isinstance(t, torch.Tensor))
        return {"params": p, "grads": g, "optimizer": o, "saved": saved, "input": state_bytes([x, y])}

    return step, memory


def cost_experiment(args) -> str:
    from bench.cost import synchronize
    from bench.suites import SUITES

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    suite = SUITES.get(args.suite)()
    data = suite.load(Path(args.data_root), dict(_profile(args)["data"]), False)  # the profile's training split
    x_all, y_all = data.train_x, data.train_y
    del data
    n_train, bs = len(x_all), args.batch_size
    steps_per_epoch = math.ceil(n_train / bs)
    in_shape = tuple(suite.in_shape)
    lines = [f"Suite `{args.suite}` training split ({n_train:,} images, {'x'.join(map(str, in_shape))}; no "
             f"augmentation in the timed steps). Batch size {bs} (the paper's), {steps_per_epoch} steps per epoch; "
             f"{args.rounds} interleaved rounds, median step time x steps per epoch; device {device}, "
             f"{torch.get_num_threads()} threads."]
    for model_name in _models(args):
        step, memory = _steppers(model_name, in_shape, n_train, device, 0.05)
        names = ["deterministic", "vdp", "mfvi"]
        g = torch.Generator().manual_seed(0)
        batches = []
        for _ in range(args.rounds + 1):
            idx = torch.randint(0, n_train, (bs,), generator=g)
            batches.append((x_all[idx].to(device), y_all[idx].to(device)))
        times = {n: [] for n in names}
        for r, (x, y) in enumerate(batches):
            for n in names:
                synchronize(device)
                t0 = time.perf_counter()
                step(n, x, y)
                synchronize(device)
                if r:  # round 0 warms up
                    times[n].append(time.perf_counter() - t0)
        x, y = batches[0]
        mem = {}
        for n in names:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                step(n, x, y)
                mem[n] = {"peak": torch.cuda.max_memory_allocated(device)}
            else:
                mem[n] = memory(n, x, y)
                mem[n]["peak"] = sum(mem[n].values())
        det_t, det_m = statistics.median(times["deterministic"]), mem["deterministic"]["peak"]
        rows = []
        for n in names:
            t = statistics.median(times[n])
            mb = mem[n]
            rows.append([n, f"{t * 1e3:.1f}", f"{t * steps_per_epoch:.1f}", f"{t / det_t:.2f}",
                         f"{mb.get('params', float('nan')) / 2**20:.2f}", f"{mb.get('optimizer', float('nan')) / 2**20:.2f}",
                         f"{mb.get('saved', float('nan')) / 2**20:.1f}", f"{mb['peak'] / 2**20:.1f}",
                         f"{mb['peak'] / det_m:.2f}"])
        lines.append(f"**{model_name}**\n\n" + md_table(
            ["method", "step (ms)", "epoch (s)", "time / det", "params (MiB)", "optimiser state (MiB)",
             "saved activations (MiB)", "step memory (MiB)", "memory / det"], rows))
    text = "\n\n".join(lines)
    print(text)
    return text


# ---------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["noise", "summary", "prune", "cost", "all"])
    ap.add_argument("--results", default="results")
    ap.add_argument("--suite", default="mnist_noise")
    ap.add_argument("--profile", default="quick", help="records of this profile only (noise); '' for all")
    ap.add_argument("--model", default="", help="noise / summary / prune: the model (default: the first of the "
                    "suite's profile)")
    ap.add_argument("--models", default="", help="cost: architectures (default: the suite's profile's)")
    ap.add_argument("--methods", default="deterministic,vdp,mfvi", help="prune: methods")
    ap.add_argument("--seeds", default="", help="prune: seeds (default: all found)")
    ap.add_argument("--prune-schemes", default="global,layerwise,bn_folded", help="prune: bench/pruning.py schemes")
    ap.add_argument("--labels", default="", help="prune: only these method labels, separated by ';'")
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=min(2, torch.get_num_threads()))
    ap.add_argument("--doc", default="", help="update this markdown file's vdp_experiments blocks")
    args = ap.parse_args(argv)
    jobs = {"noise": noise, "summary": summary, "prune": prune_experiment, "cost": cost_experiment}
    options = {"noise": ["results", "suite", "profile", "model"], "summary": ["results", "suite", "profile", "model"],
               "prune": ["results", "suite", "model", "methods", "seeds", "data_root"],
               "cost": ["suite", "profile", "data_root", "models", "batch_size", "rounds", "device", "threads"]}
    for name in (["noise", "prune", "cost"] if args.what == "all" else [args.what]):
        text = jobs[name](args)
        if args.doc:
            flags = " ".join(f"--{k.replace('_', '-')} {getattr(args, k)}" for k in options[name]
                             if str(getattr(args, k)) != "")
            # mnist_noise keeps the original block names; every other suite gets its own blocks
            if name == "summary":
                block = f"summary-{args.suite}"
            else:
                block = name if args.suite == "mnist_noise" else f"{name}-{args.suite}"
            update_doc(Path(args.doc), block, f"`.venv/bin/python benchmarks/vdp_experiments.py {name} {flags}`\n\n{text}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
