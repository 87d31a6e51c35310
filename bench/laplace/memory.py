"""Memory estimate and guard of a full-covariance (subnetwork) Laplace approximation.

Before fitting, the memory a configuration needs (Jacobian batch, the s x s GGN, Cholesky
factor and scale, prediction chunks) is estimated per backend and the fit is refused
with :class:`MemoryGuardError` when it exceeds the limit (default 25 % of the available
memory, 80 % of a GPU's: :data:`DEFAULT_MEMORY_FRACTION`), naming a subnet size that fits.
benchmarks/laplace_memory.py prints the estimate beside the measured peak.
"""
from __future__ import annotations

import torch
from torch import nn

from bench.errors import BenchError
from bench.laplace.jvp_glm import samples_per_pass
from bench.laplace.precision import scale_block_columns
from bench.laplace.subnet_jacobians import DENSE_PAIRS_FACTOR, DENSE_PRODUCT_FLOATS, OUTPUT_CHUNK_FLOATS, forward_one

FLOAT_BYTES = 4
#: an entry of the subnetwork posterior's s x s matrices: float64 (bench/laplace/precision.py)
COVARIANCE_BYTES = 8


class MemoryGuardError(BenchError):
    """A Laplace configuration would need more memory than the configured limit."""


def activation_numel(model: nn.Module, x1: torch.Tensor) -> int:
    """Floats of every module output for one example (what a backward pass keeps alive).

    The network runs on one example, so every output is that example's whole: a layer that sees
    several rows per example (a classifier over pixel rows, shape ``(H * W, C)``) counts all of
    them, not its first row."""
    total = [0]

    def hook(_m, _i, out):
        if isinstance(out, torch.Tensor):
            total[0] += out.numel()

    forward_one(model, x1, [m for m in model.modules() if not list(m.children())], hook)
    return int(total[0]) + int(x1[:1].numel())


def estimate_memory(*, backend: str, n_params: int, s: int, n_outputs: int, batch_size: int, predict_batch: int,
                    activations: int, pred_type: str = "glm", glm_sampler: str = "moments", n_samples: int = 1,
                    gathered: int | None = None, positions_per_weight: int = 0,
                    dtype_bytes: int = FLOAT_BYTES) -> dict:
    """Bytes a full-covariance subnet Laplace needs at its peak, by term.

    Calibrated on LeNet-300-100, and for the subnet backend on LeNet-5 and resnet_small up to
    200 classes (benchmarks/laplace_memory.py, its ``--fit-cases`` and ``--jvp``, prints estimate
    and measured peak side by side); the ``sampled`` segmentation backend against the CamVid grid's
    measured peaks, docs/segmentation.md). laplace-torch's backends materialise per-example gradients of all
    P weights and slice: BackPACK / ASDL per output (B x P, x3 / x3.5 for gradient,
    concatenation and slice), the torch.func path (Curvlinops; ASDL's predictive falls back to it) all K
    outputs at once (B x K x P, x3). SubnetJacobianGGN needs ~8 B x K x s plus activations, plus
    the gradients at its hooked layer outputs for a chunk of the K outputs (at most
    ``OUTPUT_CHUNK_FLOATS`` floats, or one output's, and their stacked copy), plus the layer inputs'
    entries the subnet multiplies, gathered once per batch (``gathered`` floats per example:
    :func:`bench.laplace.subnet_jacobians.gathered_floats`, once the subnet is known; before, at most
    ``s x positions_per_weight``), plus its batched (rows x columns) product, at most
    ``DENSE_PAIRS_FACTOR`` x B x K x s floats and taken in chunks of ``DENSE_PRODUCT_FLOATS``.
    The s x s terms: the GGN H, the Cholesky factor of the posterior precision and the scale
    (3 s^2 while the scale forms, then 2) plus the scale's column blocks
    (:mod:`bench.laplace.precision`; benchmarks/laplace_memory.py ``--posterior`` measured 2.2-2.9
    s^2 above the GGN at s = 2,000-6,000), in float64 (8 bytes each), and the subnet backend's
    float64 copy of a batch's Jacobians for its GGN (2 B x K x s floats more). The linearised
    predictive drawn by Jacobian-vector products
    (``glm_sampler="jvp"``, :mod:`bench.laplace.jvp_glm`) forms no Jacobian whatever the backend:
    one pass of :func:`bench.laplace.jvp_glm.samples_per_pass` samples at a time (the primal's
    activations, each sample's tangents and offsets, ~2 + samples per layer output at the peak) plus
    the ``n_samples`` logit draws; the fit still builds the backend's Jacobians for the GGN.
    """
    B, Bp, K, P = int(batch_size), int(predict_batch), int(n_outputs), int(n_params)
    act = 3 * activations  # forward activations + the gradients at the layer outputs

    def jac(b: int, phase: str) -> int:
        if backend == "sampled":  # one image at a time: its gradient (P), the kept rows; predict: JVPs
            return 2 * P + b * s + act if phase == "fit" else 3 * b * act
        if backend == "subnet":  # J, the gathered g and a entries, their product, GGN intermediates,
            # and the gradients at the hooked layer outputs for a chunk of outputs, stacked per layer
            return (8 * b * K * s + b * act + 2 * min(K * b * activations, max(b * activations, OUTPUT_CHUNK_FLOATS))
                    + b * (int(gathered) if gathered is not None else s * int(positions_per_weight))
                    + min(DENSE_PAIRS_FACTOR * b * K * s, DENSE_PRODUCT_FLOATS))
        if backend == "backpack":
            return 3 * b * P + 2 * b * K * s + b * act
        if backend == "asdl" and phase == "fit":
            return int(3.5 * b * P) + 2 * b * K * s + b * act
        return 3 * b * K * P + 2 * b * K * s + b * act  # torch.func (curvlinops; asdl predictive)

    fit = jac(B, "fit")
    if pred_type != "glm":
        predict = Bp * act * 2
    elif glm_sampler == "jvp":  # the primal and, per sample of one pass, its tangent activations
        c = samples_per_pass(int(n_samples), Bp * activations, P)
        predict = (2 + c) * Bp * activations + c * P + (int(n_samples) + 1) * Bp * K
    else:
        predict = jac(Bp, "predict")
    cov = 3 * s * s + 3 * s * scale_block_columns(s, COVARIANCE_BYTES)  # GGN, Cholesky factor, scale; blocks
    terms = {"jacobian_fit": fit * dtype_bytes, "jacobian_predict": predict * dtype_bytes,
             "covariance": cov * COVARIANCE_BYTES, "params": 3 * P * dtype_bytes}
    terms["total"] = max(terms["jacobian_fit"], terms["jacobian_predict"]) + terms["covariance"] + terms["params"]
    return terms


#: the guard's default limit, a fraction of the memory the process can still get: on the CPU a quarter
#: of the host's available memory (shared with other jobs and workers); on a GPU, whose memory this
#: process has to itself, most of what the driver has free plus what torch's caching allocator holds
#: unused (an earlier cell's blocks, reusable here). At the subnetwork-Laplace paper's 42,000 weights
#: the estimate is about 45 GB: within the CUDA default on an 80 GB H100, never within a quarter of it.
DEFAULT_MEMORY_FRACTION = {"cpu": 0.25, "cuda": 0.8}


def default_memory_limit(device: torch.device, fraction: float | None = None) -> int:
    device = torch.device(device)
    if fraction is None:
        fraction = DEFAULT_MEMORY_FRACTION.get(device.type, DEFAULT_MEMORY_FRACTION["cpu"])
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(fraction * (free + cached))
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
        f"(memory_limit_gb; default 25% of available memory, 80% of a GPU's); {hint}.")
