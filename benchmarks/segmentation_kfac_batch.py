"""The last-layer KFAC Laplace of a segmentation network: memory, time and float32 error per curvature batch.

laplace-torch (BackPACK's KFLR) sums the 1 x 1 classifier's Kronecker factors over the pixel rows of
each curvature batch: ``A = sum_p a_p a_p^T / N`` (N the pixel rows of the training set) and
``G = sum_p Lambda_p``. A batch of B images is B x H x W rows in one BackPACK pass. This fits the
curvature of one seed's MAP UNet (the grid's cached network) with each batch size in
``--batch-sizes``, each in its own subprocess so that its peak resident memory is its own
(:class:`bench.cost.PeakMemory`), and compares both factors with the same sums taken here in
float64 over every pixel (relative Frobenius error), the reference any batching should reach.

    .venv/bin/python benchmarks/segmentation_kfac_batch.py --suite camvid --profile quick --seed 0 \\
        --save docs/records/camvid/diagnostics/kfac_batch_seed0.json

Times are wall-clock seconds of the curvature pass (compare them only from one run on an otherwise
idle machine). ``--from-json PATH`` prints a saved result again.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cost import PeakMemory  # noqa: E402
from bench.data import TensorLoader  # noqa: E402
from bench.subnet.selection import as_torch_loader  # noqa: E402
from experiment_cli import grid_map_cache, run_experiment  # noqa: E402
from methods import METHODS, MethodContext  # noqa: E402
from methods._laplace_base import pixel_label_loader  # noqa: E402


def fit_factors(a, suite, plan, model, data, batch_size: int) -> dict:
    """One curvature fit (run in a subprocess): its peak memory, time and factors."""
    cache = grid_map_cache(a, suite, plan, model, data)
    ctx = MethodContext(task=suite.task, build_model=cache.build_model, train=plan.train, device=torch.device("cpu"),
                        seed=a.seed, map_cache=cache, num_train=len(data.train_x))
    method = METHODS.get("laplace_last_layer")(ctx, batch_size=batch_size)
    net = method.map_network()
    loader = pixel_label_loader(as_torch_loader(TensorLoader(data.train_x, data.train_y, batch_size), batch_size),
                                suite.task.ignore_index)
    t0 = time.perf_counter()
    with PeakMemory(torch.device("cpu")) as pm:
        la = method.fit_laplace(net, loader, "backpack")
    seconds = time.perf_counter() - t0
    (g, a_fac), _ = la.H_facs.kfacs
    return {"batch_size": batch_size, "peak_mib": pm.peak_mb, "seconds": seconds, "n_data": int(la.n_data),
            "G": g.tolist(), "A": a_fac.tolist()}


def reference_factors(net, x, batch: int = 4) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``sum_p a_p a_p^T / P`` and ``sum_p Lambda_p`` over every pixel row, in float64."""
    classifier = net[-1]
    feats = []
    hook = classifier.register_forward_hook(lambda mod, inp, out: feats.append(inp[0].detach()))
    d, k = classifier.in_features, classifier.out_features
    aa, lam, rows = torch.zeros(d, d, dtype=torch.float64), torch.zeros(k, k, dtype=torch.float64), 0
    w, b = classifier.weight.detach().double(), classifier.bias.detach().double()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            feats.clear()
            net(x[i:i + batch])
            f = feats[0].double()
            pi = torch.softmax(f @ w.T + b, -1)
            aa += f.T @ f
            lam += torch.diag(pi.sum(0)) - pi.T @ pi
            rows += len(f)
    hook.remove()
    return aa / rows, lam, rows


def compute(a, suite, plan, model, data) -> dict:
    net = grid_map_cache(a, suite, plan, model, data).get(a.seed).eval()
    ref_a, ref_g, rows = reference_factors(net, data.train_x)
    out_rows = []
    for bs in (int(v) for v in a.batch_sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "fit.json"
            cmd = [sys.executable, __file__, "--results", a.results, "--data-root", a.data_root, "--suite", a.suite,
                   "--profile", a.profile, "--seed", str(a.seed), "--child-batch", str(bs), "--child-out", str(path)]
            if a.model:
                cmd += ["--model", a.model]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            r = json.loads(path.read_text())
        g, af = torch.tensor(r.pop("G"), dtype=torch.float64), torch.tensor(r.pop("A"), dtype=torch.float64)
        r["G_rel_error"] = float((g - ref_g).norm() / ref_g.norm())
        r["A_rel_error"] = float((af - ref_a).norm() / ref_a.norm())
        r["rows_per_batch"] = bs * rows // len(data.train_x)
        out_rows.append(r)
    return {"n_train_images": len(data.train_x), "pixel_rows": rows, "rows": out_rows}


def table(out: dict) -> str:
    lines = [f"Last-layer KFAC of the MAP {out['model']} of {out['suite']} seed {out['seed']} ({out['profile']} profile; "
             f"{out['n_train_images']} training images, {out['pixel_rows']:,} pixel rows), BackPACK KFLR through "
             "laplace-torch, one subprocess per curvature batch; factor errors against float64 sums over every pixel:", "",
             "| images per batch | pixel rows per batch | peak MiB | seconds | N (laplace-torch) | rel. error G = Σ Λ | rel. error A = Σ a aᵀ / N |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in out["rows"]:
        lines.append(f"| {r['batch_size']} | {r['rows_per_batch']:,} | {r['peak_mib']:.0f} | {r['seconds']:.0f} | "
                     f"{r['n_data']:,} | {r['G_rel_error']:.1e} | {r['A_rel_error']:.1e} |")
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("--batch-sizes", default="1,8,128", help="images per curvature batch, comma-separated")
    p.add_argument("--child-batch", type=int, default=None, help=argparse.SUPPRESS)  # one fit, in a subprocess
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)


def compute_or_child(a, suite, plan, model, data) -> dict:
    if a.child_batch is None:
        return compute(a, suite, plan, model, data)
    Path(a.child_out).write_text(json.dumps(fit_factors(a, suite, plan, model, data, a.child_batch)))
    return {"child": True}


def main(argv=None) -> int:
    return run_experiment(argv, description=__doc__.splitlines()[0], method="laplace_last_layer",
                          compute=compute_or_child, add_arguments=add_arguments, task_kind="segmentation",
                          table=lambda out: "" if out.get("child") else table(out))


if __name__ == "__main__":
    sys.exit(main())
