"""Sparse subspace variational inference (SSVI; Li, Miao, Qiu & Zhang, ICLR 2024).

The machinery behind ``methods/ssvi.py``; section numbers refer to the paper
(``../shared/papers/ssvi-sparse-subspace-vi.txt``), "official code" to its release
(github.com/ljb121002/SSVI: ``train_cifar.py``, ``rigl_torch/RigL.py``).

* :class:`SparseBayesLayer` replaces a Linear / Conv layer. Its weight posterior is
  ``N(mu, sigma^2)`` on a set of ``k`` active flat positions and a point mass at exactly 0
  elsewhere (eq. 3: ``mu = mu * gamma``, ``sigma^2 = sigma^2 * gamma``). Only the active
  entries are stored: ``w_mu`` and ``w_rho`` are 1-D parameters of length ``k`` next to the
  sorted int32 positions ``w_idx`` -- the variational state is ``k`` floats + ``k`` floats +
  ``k`` indices, proportional to the density; no dense ``mu`` / ``sigma`` tensor is kept.
  Biases (and the first convolution, as in the official code) are dense and stochastic.
  The dense weight is materialised for each forward (a scatter into zeros), which on a CPU
  is faster than ``torch.sparse`` at every density tried (``benchmarks/ssvi_sparse_ops.py``).
* Training forward: the local reparameterisation trick (Sec. 3.2 eq. 4, Appendix A), one
  mean pass and one variance pass per layer, fresh noise per example and output.
* :meth:`SSVINet.drop_and_grow`: the subspace update of Algorithm 1 lines 10-11 -- remove
  the lowest-scoring active entries per layer by a removal criterion of Sec. 3.3.1, add the
  same number back by the gradient magnitude of the loss with respect to the dense means
  (Sec. 3.3.2 eq. 9), new entries with ``mu = 0`` and ``sigma`` initialised as in Sec. 3.2.
* :func:`removal_scores`: the six criteria in closed form (eqs. 6-8, Appendix B), evaluated
  in float64 in forms that do not cancel catastrophically.
"""
from __future__ import annotations

import math
from itertools import combinations

import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import BenchError

SPARSE_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)

#: Sec. 3.3.1, in the paper's order; the official code's names in brackets:
#: |mu| [mean], SNR(theta) [snr], E|theta| [E_mean_abs], SNR(|theta|) [SNR_mean_abs],
#: E exp(lambda|theta|) [E_exp_mean_abs], SNR(exp(lambda|theta|)) [SNR_exp_mean_abs]
CRITERIA = ("mu_abs", "snr", "e_abs", "snr_abs", "e_exp", "snr_exp")
CRITERION_LABELS = {"mu_abs": "|mu|", "snr": "SNR(theta)", "e_abs": "E|theta|", "snr_abs": "SNR(|theta|)",
                    "e_exp": "E exp(lambda|theta|)", "snr_exp": "SNR(exp(lambda|theta|))"}
GROW_MODES = ("grad", "grad_mean")


# -- closed forms of the removal criteria (Sec. 3.3.1, Appendix B) --------------------------------
def _phi_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * torch.erfc(-x / math.sqrt(2.0))


def folded_normal_mean(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """E|theta| for theta ~ N(mu, sigma^2), eq. (6):
    ``mu (2 Phi(mu/sigma) - 1) + 2 sigma / sqrt(2 pi) exp(-mu^2 / (2 sigma^2))``.

    (Appendix B's eq. (15) prints ``exp(-mu^2/sigma^2)``; the main text's eq. (6) and the
    official code have the correct ``/(2 sigma^2)``.) Written as ``|mu| + sigma g(r)`` with
    ``r = |mu|/sigma`` and ``g(r) = 2 phi(r) - 2 r Phi(-r) >= 0``, the excess over |mu|.
    """
    mu, sigma = mu.double().abs(), sigma.double()
    return mu + sigma * _excess(mu / sigma)


def _excess(r: torch.Tensor) -> torch.Tensor:
    """g(r) = (E|theta| - |mu|) / sigma = 2 phi(r) - 2 r Phi(-r), r >= 0 (float64)."""
    return 2.0 * torch.exp(-0.5 * r * r) / math.sqrt(2 * math.pi) - 2.0 * r * _phi_cdf(-r)


def folded_normal_snr(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """SNR(|theta|) = E|theta| / sd(|theta|), eq. (7), with
    Var|theta| = sigma^2 + mu^2 - (E|theta|)^2 = sigma^2 (1 - 2 r g - g^2): the form on the
    right has no cancellation when |mu| >> sigma (the left one loses every digit in float32)."""
    mu, sigma = mu.double().abs(), sigma.double()
    r = mu / sigma
    g = _excess(r)
    var_ratio = (1.0 - 2.0 * r * g - g * g).clamp_min(1e-300)  # >= 1 - 2/pi at r = 0
    return (r + g) / var_ratio.sqrt()


def _log_e_exp(mu_abs: torch.Tensor, sigma: torch.Tensor, lam: float) -> torch.Tensor:
    """log E exp(lam |theta|) (eq. 8 / Appendix B eq. 16) in log space:
    lam^2 sigma^2 / 2 + lam |mu| + log[Phi(r + lam sigma) + Phi(lam sigma - r) exp(-2 lam |mu|)]."""
    r = mu_abs / sigma
    ls = lam * sigma
    inner = _phi_cdf(r + ls) + _phi_cdf(ls - r) * torch.exp(-2.0 * lam * mu_abs)
    return 0.5 * ls * ls + lam * mu_abs + torch.log(inner)


def exp_abs_mean(mu: torch.Tensor, sigma: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """E exp(lambda |theta|), eq. (8) (first line)."""
    if not lam > 0:
        raise BenchError(f"lambda must be positive, got {lam}")
    return torch.exp(_log_e_exp(mu.double().abs(), sigma.double(), float(lam)))


def exp_abs_snr(mu: torch.Tensor, sigma: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """SNR(exp(lambda |theta|)) = E / sqrt(E_{2 lambda} - E^2) (eq. 8, second line):
    ``1 / sqrt(expm1(log E_{2 lambda} - 2 log E_lambda))``, the difference of logs taken with
    the ``lambda |mu|`` terms cancelled analytically."""
    if not lam > 0:
        raise BenchError(f"lambda must be positive, got {lam}")
    m, s, lam = mu.double().abs(), sigma.double(), float(lam)
    r = m / s

    def log_inner(l):
        return torch.log(_phi_cdf(r + l * s) + _phi_cdf(l * s - r) * torch.exp(-2.0 * l * m))

    # log E_{2l} - 2 log E_l = [2 l^2 s^2 + 2 l m + li(2l)] - [l^2 s^2 + 2 l m + 2 li(l)]
    d = (lam * s) ** 2 + log_inner(2 * lam) - 2.0 * log_inner(lam)
    return 1.0 / torch.expm1(d).clamp_min(1e-300).sqrt()


def removal_scores(criterion: str, mu: torch.Tensor, sigma: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """Importance of each active entry (higher = keep); Sec. 3.3.1 criteria 1-6 (float64)."""
    mu, sigma = mu.detach().double(), sigma.detach().double().clamp_min(1e-30)
    if criterion == "mu_abs":
        return mu.abs()
    if criterion == "snr":
        return mu.abs() / sigma
    if criterion == "e_abs":
        return folded_normal_mean(mu, sigma)
    if criterion == "snr_abs":
        return folded_normal_snr(mu, sigma)
    if criterion == "e_exp":
        return exp_abs_mean(mu, sigma, lam)
    if criterion == "snr_exp":
        return exp_abs_snr(mu, sigma, lam)
    raise BenchError(f"unknown SSVI removal criterion {criterion!r}; valid: {', '.join(CRITERIA)}")


def kl_warmup_beta(step: int, total: int, beta_max: float, warmup: float) -> float:
    """KL weight at ``step`` of ``total``: a linear ramp from 0 to ``beta_max`` over the first
    ``warmup`` fraction of training, then ``beta_max`` (Sec. 4.1 "KL warm-up"; the official code
    ramps per epoch, kl_scale x min(2 epoch / epochs, 1), i.e. ``warmup = 0.5``)."""
    if warmup <= 0:
        return float(beta_max)
    return float(beta_max) * min(1.0, (step / max(1, total)) / float(warmup))


def update_fraction(step: int, t_end: int, alpha: float) -> float:
    """Fraction of each layer's active entries replaced at ``step``: alpha/2 (1 + cos(pi t / T_end))
    (the official code's cosine schedule of RigL, Evci et al. 2020); 0 from T_end on."""
    if t_end <= 0 or step >= t_end:
        return 0.0
    return float(alpha) / 2.0 * (1.0 + math.cos(math.pi * step / t_end))


def softplus_inv(sigma: torch.Tensor) -> torch.Tensor:
    """rho with softplus(rho) = sigma (stable for small and large sigma)."""
    sigma = torch.as_tensor(sigma, dtype=torch.float64)
    return torch.where(sigma > 20, sigma, torch.log(torch.expm1(sigma.clamp_min(1e-30))))


def kl_normal(mu: torch.Tensor, sigma: torch.Tensor, prior_scale: float) -> torch.Tensor:
    """Sum of KL(N(mu, sigma^2) || N(0, s^2)) = log(s/sigma) + (sigma^2 + mu^2)/(2 s^2) - 1/2."""
    s2 = prior_scale ** 2
    return (math.log(prior_scale) - torch.log(sigma) + (sigma.square() + mu.square()) / (2 * s2) - 0.5).sum()


# -- the layer ----------------------------------------------------------------------------------
class SparseBayesLayer(nn.Module):
    """A Linear / Conv layer with a sparse (or dense) Gaussian mean-field weight posterior."""

    def __init__(self, layer: nn.Module, idx: torch.Tensor | None, w_mu: torch.Tensor, w_rho: torch.Tensor,
                 b_rho: torch.Tensor | None):
        super().__init__()
        if not isinstance(layer, SPARSE_LAYERS):
            raise BenchError(f"SSVI supports {', '.join(t.__name__ for t in SPARSE_LAYERS)}, not {type(layer).__name__}")
        self.kind = "linear" if isinstance(layer, nn.Linear) else "conv"
        self.shape = tuple(layer.weight.shape)
        self.numel = layer.weight.numel()
        if self.kind == "conv":
            self.conv_args = dict(stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                                  groups=layer.groups)
            self.padding_mode = layer.padding_mode
            self._rpad = layer._reversed_padding_repeated_twice
            self.conv_fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(self.shape) - 2]
        self.sparse = idx is not None
        if self.sparse:
            dtype = torch.int32 if self.numel < 2 ** 31 else torch.long
            self.register_buffer("w_idx", idx.to(torch.long).sort().values.to(dtype))
        self.w_mu = nn.Parameter(w_mu.detach().clone().float().reshape(-1))
        self.w_rho = nn.Parameter(w_rho.detach().clone().float().reshape(-1))
        if layer.bias is not None:
            self.b_mu = nn.Parameter(layer.bias.detach().clone())
            self.b_rho = nn.Parameter(b_rho.detach().clone().float())
        else:
            self.b_mu = self.b_rho = None
        self.mode = "lrt"  # "lrt" (training) | "mean" | "sample" (fixed weight noise, prediction)
        self.eps: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.capture_grad = False  # materialise a dense leaf to read dL/dW_mu (Sec. 3.3.2)
        self.grad_leaf: torch.Tensor | None = None

    # -- state ------------------------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.w_mu.numel()

    def w_sigma(self) -> torch.Tensor:
        return F.softplus(self.w_rho)

    def b_sigma(self) -> torch.Tensor | None:
        return None if self.b_rho is None else F.softplus(self.b_rho)

    def active_positions(self) -> torch.Tensor:
        """Flat positions (long) of the stored weight entries."""
        if self.sparse:
            return self.w_idx.long()
        return torch.arange(self.numel, device=self.w_mu.device)

    def dense(self, values: torch.Tensor) -> torch.Tensor:
        """The weight-shaped tensor with ``values`` at the active positions and exact 0 elsewhere."""
        if not self.sparse:
            return values.view(self.shape)
        out = values.new_zeros(self.numel).index_put((self.w_idx.long(),), values)
        return out.view(self.shape)

    # -- forward ----------------------------------------------------------------------------
    def _op(self, x, w, b):
        if self.kind == "linear":
            return F.linear(x, w, b)
        if self.padding_mode != "zeros":
            x = F.pad(x, self._rpad, mode=self.padding_mode)
            return self.conv_fn(x, w, b, **{**self.conv_args, "padding": 0})
        return self.conv_fn(x, w, b, **self.conv_args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_mu = self.dense(self.w_mu)
        if self.capture_grad:
            self.grad_leaf = torch.zeros(self.shape, device=w_mu.device, dtype=w_mu.dtype, requires_grad=True)
            w_mu = w_mu + self.grad_leaf
        if self.mode == "mean":
            return self._op(x, w_mu, self.b_mu)
        if self.mode == "sample":  # weight sampling with fixed noise (Sec. 2 reparameterisation)
            eps_w, eps_b = self.eps
            w = w_mu + self.dense(self.w_sigma() * eps_w)
            b = None if self.b_mu is None else self.b_mu + self.b_sigma() * eps_b
            return self._op(x, w, b)
        # local reparameterisation (Sec. 3.2 eq. 4, Appendix A eq. 12):
        # y = mu . x + sqrt((sigma o sigma) . (x o x)) o eps, fresh eps per example and output
        mean = self._op(x, w_mu, self.b_mu)
        b2 = None if self.b_rho is None else self.b_sigma().square()
        var = self._op(x * x, self.dense(self.w_sigma().square()), b2)
        return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)

    def extra_repr(self) -> str:
        return f"{self.kind}, shape={self.shape}, active={self.k}/{self.numel}"


# -- the network --------------------------------------------------------------------------------
def layer_plan(net: nn.Module, dense_first: str) -> list[tuple[str, nn.Module, bool]]:
    """(name, layer, sparse?) for every Linear / Conv layer in module order.

    ``dense_first``: "conv" -- the first layer stays dense when it is a convolution (the
    official code keeps the first layer of its uniform allocation dense; that layer is
    ResNet-18's first conv. Applied to an MLP the rule would keep 88 % of LeNet-300-100's
    weights dense, so by default it only applies to convolutions); "always"; "never".
    """
    if dense_first not in ("conv", "always", "never"):
        raise BenchError(f"ssvi: dense_first must be 'conv', 'always' or 'never', got {dense_first!r}")
    from bench.network import functional_layers

    skip = functional_layers(net)  # inside nn.MultiheadAttention: read as weights, never called
    layers = [(n, m) for n, m in net.named_modules() if isinstance(m, SPARSE_LAYERS) and n not in skip]
    plan = []
    for i, (n, m) in enumerate(layers):
        first_dense = i == 0 and len(layers) > 1 and (
            dense_first == "always" or (dense_first == "conv" and not isinstance(m, nn.Linear)))
        plan.append((n, m, not first_dense))
    return plan


def active_count(numel: int, density: float) -> int:
    """Active entries of a layer at ``density``: numel - int((1 - density) numel), as the
    official code (``s = int(S n)`` zeros); at least one."""
    return max(1, numel - int((1.0 - density) * numel))


class SSVINet(nn.Module):
    """``net`` with every Linear / Conv layer replaced by a :class:`SparseBayesLayer`.

    Random initial subspace at ``density`` per sparse layer (Sec. 3.1.1: "randomly selecting a
    subset I^0"; Algorithm 1 line 1), uniform over the layers as in the official code.
    Means start from ``net``'s initial weights (``mu_init=None``) or N(0, mu_init^2) (the
    official code's N(0, 0.01^2)); ``rho`` from N(rho_init_mean, rho_init_std^2) or, with
    ``sigma_init_mean``, ``sigma = |N(sigma_init_mean, sigma_init_std^2)|`` (official code).
    """

    def __init__(self, net: nn.Module, density: float, *, dense_first: str = "conv", prior_scale: float = 1.0,
                 rho_init_mean: float = -3.0, rho_init_std: float = 0.1, sigma_init_mean: float | None = None,
                 sigma_init_std: float = 0.0005, mu_init: float | None = None,
                 generator: torch.Generator | None = None):
        super().__init__()
        if not 0.0 < float(density) <= 1.0:
            raise BenchError(f"ssvi: density must be in (0, 1], got {density}")
        if not prior_scale > 0:
            raise BenchError(f"ssvi: prior_scale must be positive, got {prior_scale}")
        self.density = float(density)
        self.prior_scale = float(prior_scale)
        gen = generator if generator is not None else torch.Generator().manual_seed(0)

        def rho_init(n):
            if sigma_init_mean is None:
                return torch.randn(n, generator=gen) * float(rho_init_std) + float(rho_init_mean)
            sig = (torch.randn(n, generator=gen, dtype=torch.float64) * float(sigma_init_std)
                   + float(sigma_init_mean)).abs().clamp_min(1e-8)
            return softplus_inv(sig).float()

        self.layer_names: list[str] = []
        for name, layer, sparse in layer_plan(net, dense_first):
            w = layer.weight.detach().cpu().reshape(-1)
            if mu_init is not None:
                w = torch.randn(w.numel(), generator=gen) * float(mu_init)
            if sparse:
                k = active_count(w.numel(), self.density)
                idx = torch.randperm(w.numel(), generator=gen)[:k].sort().values
                new = SparseBayesLayer(layer, idx, w[idx], rho_init(k),
                                       None if layer.bias is None else rho_init(layer.bias.numel()))
            else:
                new = SparseBayesLayer(layer, None, w, rho_init(w.numel()),
                                       None if layer.bias is None else rho_init(layer.bias.numel()))
            new = new.to(layer.weight.device)
            if name:
                parent_name, _, child = name.rpartition(".")
                setattr(net.get_submodule(parent_name) if parent_name else net, child, new)
            else:
                raise BenchError("ssvi: the network itself is a single layer; wrap it in nn.Sequential")
            self.layer_names.append(name)
        if not self.layer_names:
            raise BenchError("ssvi: the network has no Linear / Conv layer")
        self.net = net

    # -- structure --------------------------------------------------------------------------
    def layers(self) -> list[tuple[str, SparseBayesLayer]]:
        return [(n, self.net.get_submodule(n)) for n in self.layer_names]

    def sparse_layers(self) -> list[tuple[str, SparseBayesLayer]]:
        return [(n, m) for n, m in self.layers() if m.sparse]

    def mean_params(self) -> list[nn.Parameter]:
        """Means (``w_mu``, ``b_mu``) and the deterministic parameters (batch norm)."""
        rho = {id(p) for p in self.rho_params()}
        return [p for p in self.parameters() if id(p) not in rho]

    def rho_params(self) -> list[nn.Parameter]:
        return [p for _, m in self.layers() for p in (m.w_rho, m.b_rho) if p is not None]

    def set_mode(self, mode: str) -> None:
        for _, m in self.layers():
            m.mode = mode

    def active_counts(self) -> dict[str, int]:
        """Active (stored, unique) weight entries per layer."""
        return {n: int(torch.unique(m.active_positions()).numel()) for n, m in self.layers()}

    def num_weights(self) -> dict[str, int]:
        return {n: m.numel for n, m in self.layers()}

    @property
    def num_stochastic(self) -> int:
        return sum(m.k + (0 if m.b_mu is None else m.b_mu.numel()) for _, m in self.layers())

    def state_bytes(self) -> int:
        """Bytes of the variational state: mu, rho (and int32 positions) of the stored entries."""
        total = 0
        for _, m in self.layers():
            for t in (m.w_mu, m.w_rho, m.b_mu, m.b_rho, getattr(m, "w_idx", None)):
                if t is not None:
                    total += t.numel() * t.element_size()
        return total

    # -- objective --------------------------------------------------------------------------
    def kl(self) -> torch.Tensor:
        """KL(q || p) over the active entries only (eq. 3: sum_i gamma_i KL(q(theta_i) || p(theta_i)));
        the inactive entries are point masses at 0 that the formulation leaves out of the KL."""
        total = None
        for _, m in self.layers():
            t = kl_normal(m.w_mu, m.w_sigma(), self.prior_scale)
            if m.b_mu is not None:
                t = t + kl_normal(m.b_mu, m.b_sigma(), self.prior_scale)
            total = t if total is None else total + t
        return total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    # -- subspace update (Algorithm 1 lines 10-11) --------------------------------------------
    @torch.no_grad()
    def drop_and_grow(self, fraction: float, criterion: str, *, lam: float = 1.0, grow_sigma="mean",
                      optimizer: torch.optim.Optimizer | None = None, compare: tuple[str, ...] = ()) -> dict:
        """Replace ``int(fraction k_l)`` active entries of every sparse layer.

        Needs the dense mean gradients of the last backward (``capture_grad``). Removal: the
        lowest ``criterion`` scores (Sec. 3.3.1). Addition: the largest |dL/dW_mu| among the
        entries not kept (Sec. 3.3.2, eq. 9 with one Monte Carlo step); as in the official code
        (RigL), an entry dropped and re-added in the same step keeps its state. New entries get
        ``mu = 0`` and ``sigma`` = the mean sigma of the layer's kept active entries (Sec. 3.2
        default, ``grow_sigma="mean"``), softplus of their mean rho (``"mean_rho"``, the official
        code), or a constant (a float). Optimiser state (momentum) follows the kept entries and
        is zero for new ones. ``compare``: criteria whose removal sets are compared by IoU.
        Returns per-layer counts and the IoUs.
        """
        out = {"fraction": float(fraction), "layers": {}, "iou": {}}
        inter = {p: 0 for p in combinations(compare, 2)}
        union = {p: 0 for p in combinations(compare, 2)}
        for name, m in self.sparse_layers():
            if m.grad_leaf is None or m.grad_leaf.grad is None:
                raise BenchError(f"ssvi: no dense gradient for layer {name}; run a backward with capture_grad")
            k = m.k
            n_drop = int(k * float(fraction))
            if n_drop <= 0:
                out["layers"][name] = {"active": k, "dropped": 0, "new": 0}
                continue
            sigma = m.w_sigma()
            scores = removal_scores(criterion, m.w_mu, sigma, lam)
            order = torch.sort(scores, descending=True, stable=True).indices
            keep_pos = order[:k - n_drop]
            if compare:
                dropped_sets = {}
                for c in compare:
                    sc = scores if c == criterion else removal_scores(c, m.w_mu, sigma, lam)
                    dropped = torch.zeros(k, dtype=torch.bool, device=sc.device)
                    dropped[torch.sort(sc, descending=True, stable=True).indices[k - n_drop:]] = True
                    dropped_sets[c] = dropped
                for a, b in inter:
                    inter[(a, b)] += int((dropped_sets[a] & dropped_sets[b]).sum())
                    union[(a, b)] += int((dropped_sets[a] | dropped_sets[b]).sum())
            old_idx = m.w_idx.long()
            kept_idx = old_idx[keep_pos]
            grow_score = m.grad_leaf.grad.detach().abs().reshape(-1).double().clone()
            grow_score[kept_idx] = -1.0  # below every |gradient|: only entries not kept can grow
            grown = torch.topk(grow_score, n_drop).indices
            new_idx = torch.cat([kept_idx, grown]).sort().values
            # carry state: position of each new entry in the old arrays (if it was there)
            pos = torch.searchsorted(old_idx, new_idx).clamp_max(k - 1)
            was_active = old_idx[pos] == new_idx
            kept_sigma = sigma[keep_pos]
            if grow_sigma == "mean":
                rho_new = softplus_inv(kept_sigma.double().mean()).float()
            elif grow_sigma == "mean_rho":
                rho_new = m.w_rho[keep_pos].mean()
            else:
                rho_new = softplus_inv(torch.tensor(float(grow_sigma))).float()
            for p, fill in ((m.w_mu, 0.0), (m.w_rho, rho_new)):
                new_vals = torch.where(was_active, p.data[pos], torch.as_tensor(fill, dtype=p.dtype, device=p.device))
                p.data.copy_(new_vals)
                if optimizer is not None:
                    for key, st in optimizer.state.get(p, {}).items():
                        if torch.is_tensor(st) and st.shape == p.shape:
                            st.copy_(torch.where(was_active, st[pos], torch.zeros_like(st[pos])))
            m.w_idx.copy_(new_idx.to(m.w_idx.dtype))
            out["layers"][name] = {"active": int(torch.unique(new_idx).numel()), "dropped": n_drop,
                                   "new": int((~was_active).sum()), "grow_sigma": float(F.softplus(rho_new))}
        for (a, b), u in union.items():
            out["iou"][f"{a}|{b}"] = (inter[(a, b)] / u) if u else 1.0
        return out


def as_float(sigma) -> float | str:
    """``grow_sigma`` option: "mean", "mean_rho" or a positive number."""
    if sigma in ("mean", "mean_rho"):
        return sigma
    try:
        v = float(sigma)
    except (TypeError, ValueError):
        raise BenchError(f"ssvi: grow_sigma must be 'mean', 'mean_rho' or a positive number, got {sigma!r}") from None
    if not v > 0:
        raise BenchError(f"ssvi: grow_sigma must be positive, got {v}")
    return v
