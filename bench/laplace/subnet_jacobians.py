"""A laplace-torch curvature backend whose Jacobians cover only the subnetwork.

laplace-torch's own backends compute the Jacobian of ALL weights per example and then slice
out the subnetwork (``Js[:, :, subnetwork_indices]``): B x P floats per output (or B x K x P
at once) for a subnet of s << P weights. :class:`SubnetJacobianGGN` (built lazily by
:func:`subnet_jacobian_backend`: importing laplace-torch is slow) is a ``GGNInterface`` that
builds only the s subnet columns, from each layer's input and the gradient at its output
(Linear and Conv2d layers), so memory scales with s, not P. tests/test_subnet_laplace.py checks
that the GGN and the predictive equal BackPACK's / ASDL's; benchmarks/laplace_memory.py measures
time and peak memory per backend beside the guard's estimate (no measured table is kept in the
docs: rerun it for current figures). :func:`bernoulli_subnet_backend` is its multi-label variant:
the GGN of independent Bernoulli (sigmoid) likelihoods, ``sum_n J_n^T diag(p_n (1 - p_n)) J_n``
(tests/test_subnet_laplace_multilabel.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError
from bench.subnet.selection import laplace_backend

#: backends a subnetwork Laplace accepts (``auto``: the subnet-only Jacobians when every subnet
#: weight sits in a supported layer, else BackPACK, else ASDL; Curvlinops only on request; a
#: segmentation network: ``sampled``, the only one that takes its pixels as observations)
SUBNET_BACKENDS = ("auto", "subnet", "backpack", "asdl", "curvlinops", "sampled")


#: a Conv2d's subnet columns come from the product over all (row, column) pairs the subnet
#: touches when there are at most this many times as many pairs as subnet weights (a BLAS product,
#: ~10x faster than the pairwise gather on LeNet-5's concentrated subnets), else pairwise
DENSE_PAIRS_FACTOR = 64

#: the batched (rows x columns) product is taken a chunk of the touched rows at a time, at most this
#: many floats (a random subnet of 5,000 on LeNet-300-100 touches 300 x ~780 pairs of its first layer:
#: in one product, 600 MB for batches of 64, twice the memory guard's estimate,
#: benchmarks/laplace_memory.py, 2026-12-05)
DENSE_PRODUCT_FLOATS = 2**24

#: the gradients at the hooked layers' outputs are kept for a chunk of the K outputs at a time,
#: at most this many floats (K x B x the hooked outputs at once was 7.6 GB for resnet_small at
#: 64 x 64 with 200 classes and batches of 128; benchmarks/laplace_memory.py --fit-cases)
OUTPUT_CHUNK_FLOATS = 2**24


def _ggn_interface():
    from bench.laplace import import_laplace

    import_laplace()  # first, without its dependencies' torch.jit FutureWarnings
    from laplace.curvature import GGNInterface

    return GGNInterface


class _LayerPlan:
    """The subnet entries of one Linear / Conv2d layer: where they go in the Jacobian."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.w_pos, self.w_row, self.w_col = [], [], []
        self.b_pos, self.b_row = [], []

    def finish(self, device):
        t = lambda v: torch.as_tensor(v, dtype=torch.long, device=device)  # noqa: E731
        self.w_pos, self.w_row, self.w_col = t(self.w_pos), t(self.w_row), t(self.w_col)
        self.b_pos, self.b_row = t(self.b_pos), t(self.b_row)
        self.row_chunk_cache: dict[int, list] = {}  # row_chunks' index chunks per chunk size
        # the distinct rows (output channels) and columns (input channel x tap) the subnet touches:
        # a Conv2d's columns come from one (rows x columns) batched product over positions
        self.rows_u, self.row_inv = torch.unique(self.w_row, return_inverse=True)
        self.cols_u, self.col_inv = torch.unique(self.w_col, return_inverse=True)
        if isinstance(self.module, nn.Conv2d):  # unfold's row c * kh * kw + u * kw + v: channel c, tap (u, v)
            kh, kw = self.module.kernel_size
            self.col_c, self.col_u, self.col_v = self.cols_u // (kh * kw), self.cols_u % (kh * kw) // kw, self.cols_u % kw
        return self

    def columns(self, a: torch.Tensor, B: int) -> torch.Tensor | None:
        """The entries of the layer input ``a`` that the subnet's weights multiply, for the
        ``cols_u`` columns only (gathered once per batch; every chunk of outputs reuses them):
        Linear, ``(B, T, C)`` (T rows per example); Conv2d, the rows ``cols_u`` of ``F.unfold(a)``,
        ``(B, C, L)``, read from the padded input without building the whole unfold (C x kh x kw
        rows at every position: hundreds of megabytes for a full-resolution UNet layer). None
        when the subnet holds none of the layer's weights."""
        if not self.w_pos.numel():
            return None
        m = self.module
        if isinstance(m, nn.Linear):
            return a.reshape(B, -1, a.shape[-1])[..., self.cols_u]
        (kh, kw), (dh, dw), (sh, sw) = m.kernel_size, m.dilation, m.stride
        ph, pw = (0, 0) if isinstance(m.padding, str) else m.padding  # "valid": the only string supported
        Ho = (a.shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        Wo = (a.shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        ap = F.pad(a, (pw, pw, ph, ph)) if ph or pw else a
        rows = (self.col_u * dh)[:, None, None] + (torch.arange(Ho, device=a.device) * sh)[None, :, None]
        cols = (self.col_v * dw)[:, None, None] + (torch.arange(Wo, device=a.device) * sw)[None, None, :]
        return ap[:, self.col_c[:, None, None], rows, cols].reshape(a.shape[0], -1, Ho * Wo)

    def row_chunks(self, floats_per_row: int) -> list[tuple]:
        """``(r0, r1, pos, row, col)`` over the touched rows ``rows_u[r0:r1]``, as many at a time as keep
        the batched product within :data:`DENSE_PRODUCT_FLOATS` (``floats_per_row``: B x K x C), at least
        one: ``pos`` the Jacobian columns of those rows' subnet weights, ``row`` their row within the
        chunk, ``col`` their column among ``cols_u``. Made once per chunk size and kept, so a batch does
        no index arithmetic (and on CUDA reads nothing back from the device)."""
        R = self.rows_u.numel()
        step = min(R, max(1, DENSE_PRODUCT_FLOATS // max(1, floats_per_row)))
        if step not in self.row_chunk_cache:
            chunks = [(0, R, self.w_pos, self.row_inv, self.col_inv)]  # every row at once
            if step < R:
                chunks = []
                for r0 in range(0, R, step):
                    sel = ((self.row_inv >= r0) & (self.row_inv < r0 + step)).nonzero().squeeze(1)
                    chunks.append((r0, min(R, r0 + step), self.w_pos[sel], self.row_inv[sel] - r0, self.col_inv[sel]))
            self.row_chunk_cache[step] = chunks
        return self.row_chunk_cache[step]

    def accumulate(self, out: torch.Tensor, cols: torch.Tensor | None, g: torch.Tensor) -> None:
        """Add this call's Jacobian columns to ``out`` (B, K, s); ``g`` = (K, B, *z.shape[1:])
        holds df_k/dz for every output k, ``cols`` the layer input's entries :meth:`columns` gives.

        Linear: df_k/dW[i, j] = g_ki a_j (summed over extra leading dims, and over the rows of one
        example where the layer sees several rows per example, e.g. a UNet's pixel rows pooled into
        per-image outputs: ``(B T, n)``, each example's T rows contiguous);
        Conv2d: df_k/dW[o, c, u, v] = sum_l g_k[o, l] unfold(a)[(c, u, v), l]; biases: sum of g.
        Where the subnet touches few enough (row, column) pairs (:data:`DENSE_PAIRS_FACTOR`), a
        batched product over rows (positions) gives every pair, a chunk of rows at a time
        (:data:`DENSE_PRODUCT_FLOATS`), and the subnet's are picked out; else the pairs are multiplied
        one by one, in chunks.
        """
        m, K, B = self.module, g.shape[0], out.shape[0]  # B: the network's examples (out: (B, K, s))
        if isinstance(m, nn.Linear):
            g = g.reshape(K, B, -1, g.shape[-1])  # (K, B, T, out)
            if self.w_pos.numel():
                n, T = self.w_pos.numel(), g.shape[2]
                R, C = self.rows_u.numel(), self.cols_u.numel()
                if R * C <= DENSE_PAIRS_FACTOR * n:  # (B, K r, T) @ (B, T, C), r rows at a time
                    for r0, r1, pos, row, col in self.row_chunks(B * K * C):
                        gr = g[..., self.rows_u[r0:r1]].permute(1, 0, 3, 2).reshape(B, K * (r1 - r0), T)
                        out[:, :, pos] += torch.bmm(gr, cols).view(B, K, r1 - r0, C)[:, :, row, col]
                else:
                    a = cols[..., self.col_inv].unsqueeze(0)  # (1, B, T, n)
                    out[:, :, self.w_pos] += (g[..., self.w_row] * a).sum(2).transpose(0, 1)
            if self.b_pos.numel():
                out[:, :, self.b_pos] += g[..., self.b_row].sum(2).transpose(0, 1)
        else:  # Conv2d (a grouped one's columns index its group's channels of the full unfold)
            g = g.reshape(K, B, g.shape[2], -1)  # (K, B, O, L)
            if self.w_pos.numel():
                n, L = self.w_pos.numel(), g.shape[-1]
                R, C = self.rows_u.numel(), self.cols_u.numel()
                if R * C <= DENSE_PAIRS_FACTOR * n:  # (B, K r, L) @ (B, L, C), r rows at a time
                    for r0, r1, pos, row, col in self.row_chunks(B * K * C):
                        gr = g[:, :, self.rows_u[r0:r1], :].transpose(0, 1).reshape(B, K * (r1 - r0), L)
                        out[:, :, pos] += torch.bmm(gr, cols.transpose(1, 2)).view(B, K, r1 - r0, C)[:, :, row, col]
                else:  # scattered over many rows and columns: pairwise, in chunks of <= 2^24 floats
                    step = max(1, (1 << 24) // max(1, K * B * L))
                    for i in range(0, n, step):
                        sl = slice(i, i + step)
                        c = cols[:, self.col_inv[sl], :].unsqueeze(0)  # (1, B, n_i, L)
                        out[:, :, self.w_pos[sl]] += (g[:, :, self.w_row[sl], :] * c).sum(-1).transpose(0, 1)
            if self.b_pos.numel():
                out[:, :, self.b_pos] += g[:, :, self.b_row, :].sum(-1).transpose(0, 1)


def layer_plans(model: nn.Module, indices: torch.Tensor) -> list[_LayerPlan]:
    """A :class:`_LayerPlan` per Linear / Conv2d layer holding subnet weights; ``indices`` index the
    vector of the model's trainable parameters (``parameters_to_vector``, as laplace-torch's)."""
    idx_cpu = torch.as_tensor(indices).cpu()
    order = torch.argsort(idx_cpu)
    sorted_idx = idx_cpu[order]
    plans: dict[int, _LayerPlan] = {}
    offset = 0
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        mod_name, _, pname = name.rpartition(".")
        module = model.get_submodule(mod_name) if mod_name else model
        lo = int(torch.searchsorted(sorted_idx, offset))
        hi = int(torch.searchsorted(sorted_idx, offset + p.numel()))
        if lo < hi:
            local = sorted_idx[lo:hi] - offset
            pos = order[lo:hi]
            plan = plans.setdefault(id(module), _LayerPlan(module))
            if pname == "weight":
                per_row = p[0].numel()
                rows, cols = local // per_row, local % per_row
                if isinstance(module, nn.Conv2d) and module.groups > 1:
                    # a grouped (e.g. depthwise) convolution: row o reads only its group's input
                    # channels, i.e. the unfolded columns from group(o) x (C / groups) x kh x kw on
                    cols = cols + rows // (module.out_channels // module.groups) * per_row
                plan.w_pos += pos.tolist()
                plan.w_row += rows.tolist()
                plan.w_col += cols.tolist()
            else:
                plan.b_pos += pos.tolist()
                plan.b_row += local.tolist()
        offset += p.numel()
    device = next(model.parameters()).device
    return [pl.finish(device) for pl in plans.values()]


def gathered_floats(model: nn.Module, indices: torch.Tensor, x1: torch.Tensor) -> int:
    """Floats per example of the layer inputs' entries the subnet multiplies (:meth:`_LayerPlan.columns`),
    which the subnet backend gathers once per batch and keeps for every chunk of outputs: measured
    on one example ``x1[:1]`` by gathering them (for the memory guard, bench.laplace.memory)."""
    plans = [pl for pl in layer_plans(model, indices) if pl.w_pos.numel()]
    by_module = {id(pl.module): pl for pl in plans}
    total = [0]

    def hook(module, inputs, _out):
        total[0] += by_module[id(module)].columns(inputs[0].detach(), 1).numel()

    forward_one(model, x1, [pl.module for pl in plans], hook)
    return int(total[0])


def positions_per_weight(model: nn.Module, x1: torch.Tensor) -> int:
    """The most input entries one subnet weight can make the subnet backend gather per example: the
    positions (rows of a Linear, output pixels of a Conv2d) of the widest supported layer, on
    ``x1[:1]``; times s it bounds :func:`gathered_floats` before the subnet is chosen."""
    most = [0]

    def hook(module, _inputs, out):
        per = out.shape[-2] * out.shape[-1] if isinstance(module, nn.Conv2d) else out.numel() // max(1, out.shape[-1])
        most[0] = max(most[0], int(per))

    forward_one(model, x1, [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))], hook)
    return most[0]


def forward_one(model: nn.Module, x1: torch.Tensor, modules, hook) -> None:
    """Run ``model`` in eval mode without gradients on the first example of ``x1`` with the forward
    ``hook`` on each of ``modules`` (removed after, the training mode restored)."""
    handles = [m.register_forward_hook(hook) for m in modules]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x1[:1])
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()


def output_chunk(n_outputs: int, hooked_floats: int) -> int:
    """Outputs whose gradients (``hooked_floats`` each: the batch's hooked layer outputs) are
    kept at once: as many as :data:`OUTPUT_CHUNK_FLOATS` allows, at least one."""
    return max(1, min(int(n_outputs), OUTPUT_CHUNK_FLOATS // max(1, int(hooked_floats))))


def _supported_layer(m: nn.Module) -> str | None:
    """None if :class:`SubnetJacobianGGN` can differentiate w.r.t. ``m``'s parameters, else why not."""
    if isinstance(m, nn.Linear):
        return None
    if isinstance(m, nn.Conv2d):
        if m.padding_mode != "zeros" or isinstance(m.padding, str) and m.padding != "valid":
            return f"Conv2d padding {m.padding!r} / {m.padding_mode!r}"
        return None
    return type(m).__name__


def _build_subnet_jacobian_backend():
    GGNInterface = _ggn_interface()

    class SubnetJacobianGGN(GGNInterface):
        """laplace-torch GGN backend that computes Jacobians of the subnetwork weights only.

        laplace-torch's SubnetLaplace calls ``backend.jacobians(x)`` both for the GGN
        (``GGNInterface.full``: ``sum_n J_n^T Lambda_n J_n`` over the subnet columns) and for
        the linearised predictive; its own backends build the (B, K, P) Jacobian of every
        weight and slice it. Here forward hooks keep each subnet layer's input ``a`` and
        output ``z``; per output k one ``autograd.grad`` gives ``g = df_k/dz`` for all layers
        at once (per example, as the network is in eval mode; a chunk of outputs at a time,
        :func:`output_chunk`), and the subnet columns are products of ``g`` and ``a`` entries:
        memory O(B K s + activations), not O(B K P).
        """

        def __init__(self, model, likelihood, last_layer=False, subnetwork_indices=None,
                     dict_key_x="input_ids", dict_key_y="labels", stochastic=False):
            if last_layer:
                raise ValueError("SubnetJacobianGGN is for subnetwork Laplace, not last-layer Laplace")
            super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y,
                             stochastic=stochastic)
            self._plan_key = None
            self._plan: list[_LayerPlan] = []

        @classmethod
        def unsupported(cls, model: nn.Module, indices: torch.Tensor) -> list[str]:
            """Reasons this backend cannot serve ``indices`` of ``model`` (empty = it can)."""
            idx = torch.as_tensor(indices).cpu()
            out, offset = [], 0
            for name, p in model.named_parameters():
                if not p.requires_grad:
                    continue
                n = p.numel()
                hit = bool(((idx >= offset) & (idx < offset + n)).any())
                if hit:
                    mod_name, _, pname = name.rpartition(".")
                    m = model.get_submodule(mod_name) if mod_name else model
                    why = _supported_layer(m)
                    if why is None and pname not in ("weight", "bias"):
                        why = f"parameter {pname!r}"
                    if why is not None:
                        out.append(f"{name} ({why})")
                offset += n
            return out

        def _get_plan(self) -> list[_LayerPlan]:
            idx = self.subnetwork_indices
            if idx is None:
                raise ValueError("SubnetJacobianGGN needs subnetwork_indices")
            key = (idx.data_ptr(), idx.numel())
            if self._plan_key == key:
                return self._plan
            bad = self.unsupported(self.model, idx)
            if bad:
                raise NotImplementedError(f"SubnetJacobianGGN does not support {bad}")
            self._plan = layer_plans(self.model, idx)
            self._plan_key = key
            return self._plan

        def jacobians(self, x, enable_backprop: bool = False):
            """Jacobians ``(batch, outputs, subnet)`` of the subnet weights, and outputs ``f``."""
            plan = self._get_plan()
            calls: list[tuple[_LayerPlan, torch.Tensor, torch.Tensor]] = []
            by_module = {id(pl.module): pl for pl in plan}

            def hook(module, inputs, output):
                calls.append((by_module[id(module)], inputs[0], output))

            handles = [pl.module.register_forward_hook(hook) for pl in plan]
            try:
                with torch.enable_grad():
                    f = self.model(x)
            finally:
                for h in handles:
                    h.remove()
            if f.dim() != 2:
                raise ValueError(f"SubnetJacobianGGN expects (batch, outputs) model outputs, got {tuple(f.shape)}")
            B, K = f.shape
            s = int(self.subnetwork_indices.numel())
            J = f.new_zeros(B, K, s)
            zs = [z for _, _, z in calls]
            # one backward pass per output k: g[k] = d f_k / d z for every hooked layer output
            # (a plain loop: autograd's is_grads_batched vmap is ~4x slower here, as BatchNorm's
            # backward has no batching rule), for a chunk of outputs at a time: K x B x the
            # hooked outputs at once is gigabytes at hundreds of classes
            step = output_chunk(K, sum(z.numel() for z in zs))
            with torch.no_grad():  # each layer's input entries once, for every chunk of outputs
                inputs = [pl.columns(a.detach(), B) for pl, a, _ in calls]
            for k0 in range(0, K, step):
                k1 = min(K, k0 + step)
                per_k = []
                for k in range(k0, k1):
                    with torch.enable_grad():
                        per_k.append(torch.autograd.grad(f[:, k].sum(), zs, retain_graph=k < K - 1 or enable_backprop,
                                                         allow_unused=True))
                with torch.no_grad():
                    for i, (pl, _, z) in enumerate(calls):
                        g = torch.stack([gk[i] if gk[i] is not None else torch.zeros_like(z) for gk in per_k])
                        pl.accumulate(J[:, k0:k1], inputs[i], g)
                per_k = g = None  # this chunk's gradients go before the next chunk's come
            return (J, f) if enable_backprop else (J.detach(), f.detach())

        def full(self, x, y, **kwargs):
            """``(loss, H)``: laplace-torch's GGN ``sum_n J_n^T (diag(p_n) - p_n p_n^T) J_n`` of the
            softmax, formed in float64 from the float32 Jacobians (bench/laplace/precision.py)."""
            if self.stochastic:
                return super().full(x, y, **kwargs)
            Js, f = self.jacobians(x)
            p = torch.softmax(f.detach().double(), dim=-1)
            J = Js.double()
            # the likelihood's Hessian per example first (small K x K entries kept, as laplace-torch does)
            H_lik = torch.diag_embed(p) - torch.einsum("bk,bc->bkc", p, p)
            H = torch.einsum("bcp,bck,bkq->pq", J, H_lik, J)
            return (self.factor * self.lossfunc(f, y)).detach(), H.detach()

        def gradients(self, x, y):  # the empirical Fisher is not offered for subnetworks here
            raise NotImplementedError("SubnetJacobianGGN provides the GGN only")

    return SubnetJacobianGGN


def _build_bernoulli_subnet_backend():
    SubnetJacobianGGN = subnet_jacobian_backend()

    class BernoulliSubnetJacobianGGN(SubnetJacobianGGN):
        """:class:`SubnetJacobianGGN` for multi-label networks (task kind ``multilabel``): L
        independent Bernoulli likelihoods, one sigmoid per output logit, instead of
        laplace-torch's softmax (its only classification likelihood).

        The log-likelihood's Hessian in the logits is ``-diag(p (1 - p))`` with ``p = sigmoid(f)``
        (the labels are independent given f), so the GGN over the subnet is
        ``H = sum_n J_n^T diag(p_n (1 - p_n)) J_n`` -- the Hessian, in the subnet weights, of the
        summed binary cross-entropy of the network linearised at the MAP. The loss laplace-torch
        accumulates (``la.loss``, its log likelihood ``-la.loss``) is the summed binary
        cross-entropy with logits over examples and labels (times ``factor``, 1 as for the
        softmax). laplace-torch's ``Laplace(model, "classification", ...)`` is used as it is:
        its likelihood string only chooses the loss / GGN of the backend here, ``sigma_noise`` 1
        and the log likelihood ``-loss``; the predictive (probit / Monte Carlo of sigmoids) is
        the method's own (:mod:`bench.laplace.multilabel`).
        """

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.stochastic:
                raise NotImplementedError("BernoulliSubnetJacobianGGN computes the exact GGN only")
            self.lossfunc = bernoulli_loss
            self.factor = 1.0

        def _get_functional_hessian(self, f: torch.Tensor) -> torch.Tensor:
            p = torch.sigmoid(f)
            return torch.diag_embed(p * (1 - p))

        def full(self, x, y, **kwargs):
            """``(loss, H)``: the summed BCE and ``sum_n J_n^T diag(p_n (1 - p_n)) J_n``."""
            return self._loss_and_ggn(x, y, "bcp,bc,bcq->pq")

        def diag(self, x, y, **kwargs):
            """``(loss, diag H)``: the diagonal of :meth:`full`'s GGN."""
            return self._loss_and_ggn(x, y, "bcp,bc,bcp->p")

        def _loss_and_ggn(self, x, y, contraction: str):
            Js, f = self.jacobians(x)
            p = torch.sigmoid(f.detach().double())
            J = Js.double()  # the batch's GGN in float64 (bench/laplace/precision.py)
            H = torch.einsum(contraction, J, p * (1 - p), J)
            return (self.factor * self.lossfunc(f, y)).detach(), H.detach()

    return BernoulliSubnetJacobianGGN


def bernoulli_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The summed negative log-likelihood of 0/1 targets ``y`` (B, L) under independent
    Bernoullis with logits ``f``: binary cross-entropy with logits, summed over examples and labels."""
    return F.binary_cross_entropy_with_logits(f, y.to(f.dtype), reduction="sum")


_SUBNET_BACKEND = None
_BERNOULLI_BACKEND = None


def subnet_jacobian_backend():
    """The :class:`SubnetJacobianGGN` class (built lazily: importing laplace-torch is slow)."""
    global _SUBNET_BACKEND
    if _SUBNET_BACKEND is None:
        _SUBNET_BACKEND = _build_subnet_jacobian_backend()
    return _SUBNET_BACKEND


def bernoulli_subnet_backend():
    """The :class:`BernoulliSubnetJacobianGGN` class: the subnet-only Jacobians with the GGN of
    independent Bernoulli (sigmoid) likelihoods, for multi-label networks."""
    global _BERNOULLI_BACKEND
    if _BERNOULLI_BACKEND is None:
        _BERNOULLI_BACKEND = _build_bernoulli_subnet_backend()
    return _BERNOULLI_BACKEND


#: the only backend with a Bernoulli (sigmoid) GGN: laplace-torch's BackPACK / ASDL / Curvlinops
#: backends (and this project's sampled one) have the softmax's only
MULTILABEL_BACKENDS = ("subnet",)


def backend_class(name: str, task_kind: str = "classification"):
    """The laplace-torch curvature backend class ``name`` for a network of task ``task_kind``:
    on ``multilabel`` only ``"subnet"``, as :func:`bernoulli_subnet_backend` (a BenchError for
    any other)."""
    if task_kind == "multilabel":
        if name not in MULTILABEL_BACKENDS:
            raise BenchError(f"backend {name!r} has only the softmax GGN; a multi-label (Bernoulli) GGN needs "
                             f"backend 'subnet'")
        return bernoulli_subnet_backend()
    if name == "sampled":  # segmentation networks: the sampled-label GGN (bench/laplace/sampled_ggn.py)
        from bench.laplace.sampled_ggn import sampled_ggn_backend

        return sampled_ggn_backend()
    return subnet_jacobian_backend() if name == "subnet" else laplace_backend(name)
