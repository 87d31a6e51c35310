"""Memory and time of a full-covariance subnetwork Laplace, per laplace-torch backend.

Side by side, on LeNet-300-100 (267k weights) and MNIST-shaped inputs:

* laplace-torch's own backends (BackPACK, ASDL) compute the Jacobian of ALL weights per
  example and then slice the subnet columns (``Js[:, :, subnetwork_indices]``);
* ``curvlinops+frozen``: the "disable requires_grad" route -- every parameter tensor without
  a subnet entry is frozen and the indices re-mapped, so laplace-torch's torch.func Jacobian
  (Curvlinops' subnet path) covers only the touched tensors (BackPACK / ASDL refuse frozen
  parameters). It saves nothing when the subnet touches the big first-layer matrix;
* ``subnet``: :class:`bench.laplace.subnet_jacobians.SubnetJacobianGGN`, a laplace-torch backend that
  builds only the s subnet columns.

Each configuration runs in its own subprocess so that its peak resident memory (sampled by
:class:`bench.cost.PeakMemory`) is not hidden by memory an earlier one left to the allocator.
The estimate of the memory guard (:func:`bench.laplace.memory.estimate_memory`) is printed
next to the measured peak.

    .venv/bin/python benchmarks/laplace_memory.py                 # s = 100, 1000; N = 256
    .venv/bin/python benchmarks/laplace_memory.py --sizes 300 --n 512 --curvlinops
    .venv/bin/python benchmarks/laplace_memory.py --jvp           # the JVP-sampled predictive
    .venv/bin/python benchmarks/laplace_memory.py --fit-cases     # the subnet backend at 200 classes
    .venv/bin/python benchmarks/laplace_memory.py --posterior --sizes 2000,4000  # the s x s posterior

``--jvp``: the linearised predictive drawn by Jacobian-vector products (``glm_sampler=jvp``, the
Tiny-ImageNet-C and ImageNet-C setting), measured on a chunk of images per network (random
weights and inputs: memory does not depend on the values) beside the guard's estimate for it and
the estimate of the Jacobian-forming predictive it replaces.

``--posterior``: the s x s posterior itself (GGN given, float64): the scale at one prior precision,
the functional variance of a batch of Jacobians and the log-determinant of the precision, by
laplace-torch's own full-covariance path (``invsqrt_precision``; the covariance ``L L^T`` formed at
each functional variance) beside :mod:`bench.laplace.precision`'s (``lower_scale``; ``(J L)(J L)^T``),
peaks in units of one s x s float64 matrix.

``--fit-cases``: the subnet backend's GGN fit on LeNet-5 and resnet_small up to 200 classes
(Tiny-ImageNet-C's setting), with the gradients at its hooked layer outputs kept a chunk of
outputs at a time (``OUTPUT_CHUNK_FLOATS``) beside all K outputs at once (the code before), and
the guard's estimate.
"""
from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from bench.checkpoints import load_torch  # noqa: E402
from bench.cost import PeakMemory  # noqa: E402
from bench.models import build_model  # noqa: E402

BATCH = 64


def network_and_data(n: int):
    """The cached MAP LeNet-300-100 (seed 0) and real MNIST when present, else a seeded
    random network and random images (memory and time do not depend on the values)."""
    torch.manual_seed(0)
    net = build_model("lenet_300_100", (1, 28, 28), 10)
    ckpt = sorted(glob.glob(str(ROOT / "results/mnist_rotated/checkpoints/map/lenet_300_100/*/seed0.pt")))
    source = "random init"
    if ckpt:
        net.load_state_dict(load_torch(ckpt[0])["model"])
        source = "cached MAP (seed 0)"
    net.eval()
    try:
        from datasets.mnist import load_mnist_like, normalize

        x, y = load_mnist_like(ROOT / "data", "MNIST", "train", False)
        x, y = normalize(x[:n]), y[:n]
        source += ", MNIST"
    except Exception:  # noqa: BLE001 - no data: random inputs of the same shape
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)
        source += ", random images"
    return net, x.float(), y, source


def subnet(net, x, y, kind: str, s: int) -> torch.Tensor:
    from bench.data import TensorLoader
    from bench.subnet.selection import make_criterion

    if kind == "random":
        return make_criterion("random", s, seed=0).select(net)
    loader = TensorLoader(x[:1024], y[:1024], 256, shuffle=False)  # the Wasserstein criterion on 1k images
    return make_criterion("largest_variance_diag_laplace", s, backend="backpack").select(net, loader)


def ggn_sample(la, s: int) -> list[float]:
    """About 4,096 evenly spaced entries of the fitted s x s GGN, to compare backends by."""
    return la.H.detach().double().flatten()[:: max(1, s * s // 4096)].tolist()


def relative_difference(h: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest entry-wise difference of two GGN samples, relative to the reference's largest entry."""
    return float((h - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def frozen_copy(net, idx: torch.Tensor):
    """Freeze every parameter tensor without a subnet entry; indices into the trainable vector."""
    import copy

    net = copy.deepcopy(net)
    new_idx, offset, new_offset = [], 0, 0
    for p in net.parameters():
        n = p.numel()
        inside = idx[(idx >= offset) & (idx < offset + n)]
        if inside.numel():
            new_idx.append(inside - offset + new_offset)
            new_offset += n
        else:
            p.requires_grad_(False)
        offset += n
    return net, torch.cat(new_idx).sort().values, new_offset


def run_one(backend: str, kind: str, s: int, n: int, threads: int = 1) -> dict:
    from torch.utils.data import DataLoader, TensorDataset

    from laplace import Laplace
    from bench.laplace.memory import activation_numel, estimate_memory
    from bench.laplace.subnet_jacobians import backend_class

    torch.set_num_threads(threads)
    net, x, y, source = network_and_data(n)
    idx = subnet(net, x, y, kind, s)
    n_params = sum(p.numel() for p in net.parameters())
    name = backend
    model, sub_idx, jac_params = net, idx, n_params
    if backend == "curvlinops+frozen":
        model, sub_idx, jac_params = frozen_copy(net, idx)
        backend = "curvlinops"
    la = Laplace(model, "classification", subset_of_weights="subnetwork", hessian_structure="full",
                 subnetwork_indices=sub_idx, backend=backend_class(backend), prior_precision=1.0)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    with PeakMemory("cpu") as mem:
        t0 = time.perf_counter()
        la.fit(loader)
        fit_s = time.perf_counter() - t0
    xt = x[:256]
    with PeakMemory("cpu") as pmem, torch.no_grad():
        t0 = time.perf_counter()
        probs = torch.cat([la(xt[i:i + BATCH], pred_type="glm", link_approx="probit")
                           for i in range(0, len(xt), BATCH)])
        pred_s = time.perf_counter() - t0
    est_backend = "curvlinops" if backend == "curvlinops" else backend
    est = estimate_memory(backend=est_backend, n_params=jac_params, s=s, n_outputs=10, batch_size=BATCH,
                          predict_batch=BATCH, activations=activation_numel(net, x[:1]))
    return {"backend": name, "subnet": kind, "s": s, "n": n, "jacobian_params": jac_params, "source": source,
            "fit_s_per_1k": 1000 * fit_s / n, "fit_peak_mb": mem.peak_mb,
            "est_fit_mb": (est["jacobian_fit"] + est["covariance"] + est["params"]) / 2**20,
            "pred_s_per_1k": 1000 * pred_s / len(xt), "pred_peak_mb": pmem.peak_mb,
            "est_pred_mb": (est["jacobian_predict"] + est["covariance"] + est["params"]) / 2**20,
            "H": ggn_sample(la, s), "probs": probs[:8].tolist()}


JVP_CASES = (("lenet5", (1, 28, 28), 10), ("resnet_small", (3, 32, 32), 10), ("resnet_small", (3, 64, 64), 200))


def run_jvp(model_name: str, shape: tuple, n_outputs: int, chunk: int, samples: int = 3) -> dict:
    from bench.laplace.jvp_glm import glm_logit_samples, samples_per_pass
    from bench.laplace.memory import activation_numel, estimate_memory

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = build_model(model_name, shape, n_outputs).eval()
    n_params = sum(p.numel() for p in net.parameters())
    x = torch.randn(chunk, *shape)
    acts = activation_numel(net, x[:1])
    offsets = [1e-3 * torch.randn(n_params) for _ in range(samples)]
    per_pass = samples_per_pass(samples, acts * chunk, n_params)  # as the methods draw them
    with PeakMemory("cpu") as mem:
        glm_logit_samples(net, x, offsets, per_pass)
    kw = dict(backend="subnet", n_params=n_params, s=1000, n_outputs=n_outputs, batch_size=BATCH,
              predict_batch=chunk, activations=acts)
    est = estimate_memory(glm_sampler="jvp", n_samples=samples, **kw)["jacobian_predict"]
    jac = estimate_memory(**kw)["jacobian_predict"]
    return {"model": model_name, "shape": "x".join(map(str, shape)), "K": n_outputs, "chunk": chunk,
            "per_pass": per_pass, "peak_mb": mem.peak_mb, "est_mb": est / 2**20, "jacobian_est_mb": jac / 2**20}


def jvp_table(chunks=(250, 1000)) -> None:
    print("JVP-sampled linearised predictive (3 samples, as many a pass as bench.laplace.jvp_glm.samples_per_pass "
          "allows: the 'a pass' column); peak = resident-memory growth "
          "(bench.cost.PeakMemory) in a fresh process; est = the memory guard's predict term for glm_sampler=jvp; "
          "Jacobian est = its term for the Jacobian-forming predictive (subnet backend, s = 1000)")
    print("| network | input | K | chunk | a pass | peak MB | est MB | est / peak | Jacobian est MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model_name, shape, k in JVP_CASES:
        for chunk in chunks:
            proc = subprocess.run([sys.executable, __file__, "--one-jvp", f"{model_name}:{'x'.join(map(str, shape))}:{k}:{chunk}"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"| {model_name} | {shape} | {k} | {chunk} | failed: {proc.stderr.strip()[-80:]} |")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"| {r['model']} | {r['shape']} | {r['K']} | {r['chunk']} | {r['per_pass']} | {r['peak_mb']:.0f} | "
                  f"{r['est_mb']:.0f} | "
                  f"{r['est_mb'] / r['peak_mb']:.2f} | {r['jacobian_est_mb']:.0f} |")


FIT_CASES = (("lenet5", (1, 28, 28), 10, 128), ("resnet_small", (3, 32, 32), 10, 128),
             ("resnet_small", (3, 64, 64), 200, 32), ("resnet_small", (3, 64, 64), 200, 128))


def run_fit(model_name: str, shape: tuple, n_outputs: int, batch: int, chunk_floats: int, s: int = 1000) -> dict:
    """The subnet backend's GGN (laplace-torch's ``fit``) over two batches of random images, its
    outputs' gradients kept for ``chunk_floats`` floats at a time (0: all K at once, as before)."""
    import bench.laplace.subnet_jacobians as sj
    from laplace import Laplace
    from torch.utils.data import DataLoader, TensorDataset

    from bench.laplace.memory import activation_numel, estimate_memory
    from bench.subnet.selection import candidate_indices

    sj.OUTPUT_CHUNK_FLOATS = chunk_floats or 2**62
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = build_model(model_name, shape, n_outputs).eval()
    n_params = sum(p.numel() for p in net.parameters())
    cand = candidate_indices(net)
    idx = cand[torch.randperm(cand.numel())[:s]].sort().values
    x, y = torch.randn(2 * batch, *shape), torch.randint(0, n_outputs, (2 * batch,))
    acts = activation_numel(net, x[:1])
    la = Laplace(net, "classification", subset_of_weights="subnetwork", hessian_structure="full",
                 subnetwork_indices=idx, backend=sj.subnet_jacobian_backend(), prior_precision=1.0)
    with PeakMemory("cpu") as mem:
        t0 = time.perf_counter()
        la.fit(DataLoader(TensorDataset(x, y), batch_size=batch))
        secs = time.perf_counter() - t0
    est = estimate_memory(backend="subnet", n_params=n_params, s=s, n_outputs=n_outputs, batch_size=batch,
                          predict_batch=batch, activations=acts)
    return {"model": model_name, "shape": "x".join(map(str, shape)), "K": n_outputs, "batch": batch,
            "peak_mb": mem.peak_mb, "s_per_batch": secs / 2,
            "est_mb": (est["jacobian_fit"] + est["covariance"] + est["params"]) / 2**20,
            "H": ggn_sample(la, s)}


def fit_table() -> None:
    print("Subnet-only Jacobian backend, GGN fit (laplace-torch fit over 2 batches of random images, s = 1000 "
          "random candidate weights); peak = resident-memory growth (bench.cost.PeakMemory) in a fresh process; "
          "chunked: the outputs' gradients kept OUTPUT_CHUNK_FLOATS at a time (now), all K: every output's at once "
          "(before); est = the memory guard's fit estimate (Jacobian term + s x s matrices + parameters)")
    print("| network | input | K | batch | peak MB, chunked | peak MB, all K | s/batch, chunked | s/batch, all K | "
          "est MB | est / peak | max rel dH |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    from bench.laplace.subnet_jacobians import OUTPUT_CHUNK_FLOATS

    for model_name, shape, k, batch in FIT_CASES:
        runs = []
        for chunk in (OUTPUT_CHUNK_FLOATS, 0):
            spec = f"{model_name}:{'x'.join(map(str, shape))}:{k}:{batch}:{chunk}"
            proc = subprocess.run([sys.executable, __file__, "--one-fit", spec], capture_output=True, text=True)
            if proc.returncode != 0:
                runs.append(None)
                print(f"  {spec} failed: {proc.stderr.strip()[-200:]}", file=sys.stderr)
                continue
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        new, old = runs
        if new is None or old is None:
            print(f"| {model_name} | {shape} | {k} | {batch} | failed |")
            continue
        dh = relative_difference(torch.tensor(new["H"]), torch.tensor(old["H"]))
        print(f"| {model_name} | {new['shape']} | {k} | {batch} | {new['peak_mb']:.0f} | {old['peak_mb']:.0f} | "
              f"{new['s_per_batch']:.2f} | {old['s_per_batch']:.2f} | {new['est_mb']:.0f} | "
              f"{new['est_mb'] / new['peak_mb']:.2f} | {dh:.1e} |")


def posterior_table(sizes) -> None:
    from bench.perf import posterior_agreement, posterior_peak_in_child

    rows = []
    for s in sizes:
        for path in ("laplace-torch", "bench"):
            try:
                rows.append(posterior_peak_in_child(path, s))
            except RuntimeError as exc:
                print(f"| {path} | {s} | failed: {str(exc).strip().splitlines()[-1][:80]} |")
    print("Posterior of an s-weight subnetwork in float64 (the GGN given); peak = resident-memory growth above the "
          "GGN (bench.cost.PeakMemory), in MB and in s x s float64 matrices; functional variance of 64 x 10 "
          "Jacobian rows; the two paths' largest difference of variances (relative to the largest) and of "
          "log-determinants")
    head = ("path", "s", "peak MB", "peak / s x s", "scale s", "f. variance s", "logdet s", "max rel. d f_var",
            "|d logdet|")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ref = {}
    for r in rows:
        dv, d_logdet = posterior_agreement(r, ref.setdefault(r["s"], r))
        print(f"| {r['path']} | {r['s']} | {r['peak_mb']:.0f} | {r['peak_mb'] / r['ss_mb']:.2f} | {r['scale_s']:.2f} | "
              f"{r['functional_variance_s']:.2f} | {r['logdet_s']:.2f} | {dv:.1e} | {d_logdet:.1e} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--n", type=int, default=256, help="training examples for the GGN (batches of 64)")
    ap.add_argument("--subnets", default="largest_variance,random")
    ap.add_argument("--backends", default="subnet,backpack,asdl,curvlinops+frozen")
    ap.add_argument("--curvlinops", action="store_true", help="also laplace-torch's Curvlinops subnet path (slow)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per run (default 1: on a shared machine two OpenMP threads make small "
                         "ops up to 100x slower whenever a core is taken by another process)")
    ap.add_argument("--jvp", action="store_true", help="only the JVP-sampled predictive's table")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fit-cases", action="store_true",
                    help="only the subnet backend's GGN fit on LeNet-5 / resnet_small up to 200 classes, its outputs "
                         "chunked (now) and all at once (before)")
    ap.add_argument("--one-jvp", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--one-fit", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--posterior", action="store_true", help="only the s x s posterior's table (--sizes)")
    args = ap.parse_args(argv)
    if args.posterior:
        posterior_table([int(v) for v in args.sizes.split(",")])
        return 0
    if args.one_jvp:
        model_name, shape, k, chunk = args.one_jvp.split(":")
        print(json.dumps(run_jvp(model_name, tuple(int(v) for v in shape.split("x")), int(k), int(chunk))))
        return 0
    if args.jvp:
        jvp_table()
        return 0
    if args.one_fit:
        model_name, shape, k, batch, chunk = args.one_fit.split(":")
        print(json.dumps(run_fit(model_name, tuple(int(v) for v in shape.split("x")), int(k), int(batch), int(chunk))))
        return 0
    if args.fit_cases:
        fit_table()
        return 0
    if args.one:
        backend, kind, s = args.one.split(":")
        print(json.dumps(run_one(backend, kind, int(s), args.n, args.threads)))
        return 0
    backends = args.backends.split(",") + (["curvlinops"] if args.curvlinops else [])
    rows = []
    for kind in args.subnets.split(","):
        for s in [int(v) for v in args.sizes.split(",")]:
            ref = None
            for b in backends:
                proc = subprocess.run([sys.executable, __file__, "--one", f"{b}:{kind}:{s}", "--n", str(args.n),
                                       "--threads", str(args.threads)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
                    rows.append({"backend": b, "subnet": kind, "s": s, "error": tail[:80]})
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                h, p = torch.tensor(r.pop("H")), torch.tensor(r.pop("probs"))
                if ref is None:
                    ref = (h, p)
                r["max_dH_rel"] = relative_difference(h, ref[0])
                r["max_dprobs"] = float((p - ref[1]).abs().max())
                rows.append(r)
                print(f"  done {b} {kind} s={s}", file=sys.stderr, flush=True)
    src = next((r["source"] for r in rows if "source" in r), "?")
    print(f"LeNet-300-100 ({src}); {args.threads} torch thread(s); GGN on {args.n} images in batches of {BATCH}; predictive on min(256, n) images "
          f"(glm, probit) in chunks of {BATCH}; peak = resident-memory growth (bench.cost.PeakMemory), "
          f"est = the memory guard's estimate for that phase (Jacobian term + s x s matrices + parameters)")
    head = ("backend", "subnet", "s", "Jac. params", "fit s/1k", "fit peak MB", "est MB", "pred s/1k",
            "pred peak MB", "est MB", "max rel dH", "max d probs")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        if "error" in r:
            print(f"| {r['backend']} | {r['subnet']} | {r['s']} | failed: {r['error']} |")
            continue
        print(f"| {r['backend']} | {r['subnet']} | {r['s']} | {r['jacobian_params']:,} | {r['fit_s_per_1k']:.1f} | "
              f"{r['fit_peak_mb']:.0f} | {r['est_fit_mb']:.0f} | {r['pred_s_per_1k']:.1f} | {r['pred_peak_mb']:.0f} | "
              f"{r['est_pred_mb']:.0f} | {r['max_dH_rel']:.1e} | {r['max_dprobs']:.1e} |")
    print("max rel dH / max d probs: difference to the first backend's GGN and predictive (same subnet)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
