"""Is a fitted PBN's sigma where its ELBO wants it, or where it started?

A PBN fit whose sigma ends at its initial value (the CamVid quick run: mean ratio final / initial
0.997) is either at the ELBO's optimum already or not learning. This tells the two apart without
training: it loads the fitted network, sets every stochastic weight's sigma to one level at a time
and measures the gradient of the training objective (the negative ELBO per observation, the KL
weight at its end value) with respect to log sigma, averaged over the stochastic weights, on
``--batches`` training batches (mean and standard error over batches, batch norm in training mode
as in the fit). A learning sigma has a stationary point: the gradient is positive above it (the
likelihood wants less noise) and negative below it (the KL wants more). Under a quadratic model of
the likelihood the per-weight optimum is sigma*^2 = beta / (N h), with N h the weight's summed
curvature, so the level where the mean gradient crosses zero is the order of the optimum.

    .venv/bin/python benchmarks/pbn_sigma_stationarity.py --suite camvid --profile quick --seed 0

Prints a markdown table; ``--save PATH`` also writes the numbers as JSON (with the checkpoint and
the levels), which ``--from-json PATH`` prints again without recomputing.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.data import TensorLoader  # noqa: E402
from bench.harness import model_builder, num_observations  # noqa: E402
from bench.store import ResultsStore  # noqa: E402
from bench.subnet.partial_vi import elbo_loss  # noqa: E402
from bench.subnet.ssvi import softplus_inv  # noqa: E402
from bench.torch_files import load_torch  # noqa: E402
from experiment_cli import run_experiment  # noqa: E402
from methods import METHODS, MethodContext  # noqa: E402


def fitted_pbn(results: Path, suite, plan, model: str, seed: int):
    """The fitted PBN of ``seed`` whose records are in ``results`` (its fit_hash names the checkpoint)."""
    recs = sorted((results / suite.name / "records" / model).glob(f"pbn-*/seed{seed}/id-clean-0.json"))
    if not recs:
        raise SystemExit(f"no pbn record of seed {seed} under {results / suite.name / 'records' / model}")
    rec = json.loads(recs[-1].read_text())
    ckpt = ResultsStore(results).fitted_checkpoint(rec)
    if not ckpt.exists():
        raise SystemExit(f"the fitted checkpoint {ckpt} is not there (checkpoints are not kept in git: rerun the cell)")
    state = load_torch(ckpt)  # weights only: a crafted checkpoint is a DamagedCheckpointError, never run
    build = model_builder(suite, plan.data, model)
    ctx = MethodContext(task=suite.task, build_model=build, train=plan.train, device=torch.device("cpu"), seed=seed,
                        map_cache=None, num_train=0)
    method = METHODS.get("pbn")(ctx, **rec["method_config"])
    method.load_state_dict(state["method"])
    return method, rec, ckpt


def scan(method, data, num_train: int, levels, batches: int, batch_size: int, samples: int, seed: int) -> list[dict]:
    vi, c = method.vi, method.config
    beta = float(c["beta_end"])
    loss_fn = elbo_loss(method.ctx.task, num_train, samples=samples, beta_start=beta, beta_end=beta)
    vi.train()
    rows = []
    for level in levels:
        with torch.no_grad():
            vi.rho.fill_(float(softplus_inv(torch.tensor(level))))
        sig = vi.sigma().detach()
        dlog = []  # per batch: mean over weights of d loss / d log sigma
        loader = TensorLoader(data.train_x, data.train_y, batch_size, shuffle=True, seed=seed)
        torch.manual_seed(seed)
        for i, (x, y) in enumerate(loader):
            if i == batches:
                break
            vi.zero_grad(set_to_none=True)
            loss_fn(vi, x, y, 1.0).backward()
            # d/d log sigma = d/d rho * d rho / d log sigma = d/d rho * sigma / sigmoid(rho)
            g = vi.rho.grad.detach() * sig / torch.sigmoid(vi.rho.detach())
            dlog.append(g)
        g = torch.stack(dlog)  # (batches, k)
        per_batch = g.mean(1)
        per_weight = g.mean(0)
        mean = float(per_batch.mean())
        se = float(per_batch.std(unbiased=True) / math.sqrt(len(per_batch)))
        rows.append({"sigma": float(level), "mean_grad_log_sigma": mean, "se": se,
                     "fraction_of_weights_pushed_down": float((per_weight > 0).float().mean()),
                     # d (beta KL / N) / d log sigma = beta (sigma^2 / prior^2 - 1) / N per weight
                     "kl_part": beta * (float((sig ** 2).mean()) / float(c["prior_scale"]) ** 2 - 1.0) / num_train})
    return rows


def table(out: dict) -> str:
    lines = [f"Fitted PBN of {out['suite']} / {out['model']} seed {out['seed']} ({out['k']:,} stochastic weights, "
             f"fitted sigma mean {out['fitted_sigma_mean']:.3g}, initial {out['initial_sigma_mean']:.3g}); "
             f"gradient of the negative ELBO per observation (beta = {out['beta']}, N = {out['num_train']:,}) "
             f"with respect to log sigma, every stochastic weight at the level, {out['batches']} training batches "
             f"of {out['batch_size']}, {out['samples']} samples each:", "",
             "| sigma | mean d loss / d log sigma | standard error | weights pushed down | KL part alone |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for r in out["rows"]:
        lines.append(f"| {r['sigma']:.0e} | {r['mean_grad_log_sigma']:.3e} | {r['se']:.1e} | "
                     f"{r['fraction_of_weights_pushed_down']:.0%} | {r['kl_part']:.1e} |")
    return "\n".join(lines)


def compute(a, suite, plan, model, data) -> dict:
    method, rec, ckpt = fitted_pbn(Path(a.results), suite, plan, model, a.seed)
    fitted = method.vi.sigma().detach()
    n = num_observations(suite, plan, data)
    samples = int(a.samples or method.config["train_samples"])
    rows = scan(method, data, n, [float(v) for v in a.levels.split(",")], a.batches, plan.train.batch_size,
                samples, a.seed)
    return {"checkpoint": str(ckpt), "record_commit": rec.get("git_commit"), "k": int(fitted.numel()),
            "fitted_sigma_mean": float(fitted.mean()),
            "initial_sigma_mean": float(rec["diagnostics"]["sigma_init"]["mean"]),
            "beta": float(method.config["beta_end"]), "num_train": n, "batches": a.batches,
            "batch_size": plan.train.batch_size, "samples": samples, "rows": rows}


def add_arguments(p) -> None:
    p.add_argument("--levels", default="1e-4,3e-4,1e-3,3e-3,1e-2,3e-2")
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--samples", type=int, default=None, help="posterior samples per batch (default: the fit's)")


def main(argv=None) -> int:
    return run_experiment(argv, description=__doc__.splitlines()[0], method="pbn", compute=compute, table=table,
                          add_arguments=add_arguments)


if __name__ == "__main__":
    sys.exit(main())
