"""Partial mean-field variational inference over a chosen subset of a network's weights.

:class:`PartialVI` wraps an *unchanged* network built from Linear / Conv layers (any other
modules -- BatchNorm, pooling, activations, residual additions -- stay deterministic and
untouched) and makes the entries at a set of flat parameter indices Gaussian:

* ``mu`` is the wrapped network's own parameters (all of them; PBN paper, Algorithm 1
  line 9: ``mu_{b,d} = theta_d``, initialised from the MAP network or randomly);
* ``sigma = softplus(rho)`` exists only for the ``k`` selected entries: ``rho`` is a 1-D
  tensor of length ``k`` next to the sorted flat ``indices`` (an int32 buffer), so the stored
  parameters are ``theta + k = (1 + r_bayes) theta`` (PBN paper, Appendix B) instead of the
  ``2 theta`` of a dense ``rho`` (plus ``k`` indices). Deterministic entries have ``sigma_d = 0`` exactly
  (Algorithm 1 line 9): they get no noise, no ``rho``, no gradient to a ``rho`` and no KL --
  the paper obtains the same effect with a dense ``rho`` whose deterministic entries are
  frozen through sparse gradients (Sec. 3, "Sparse Gradient Updates"; Appendix I).
* ``rho`` is initialised from ``N(rho_init_mean, rho_init_std^2)`` (Algorithm 1 line 9:
  ``rho_b ~ N(mu_init, sigma_init)``); the prior is ``N(0, prior_scale^2)`` per selected
  entry (``N(0, I)`` in the paper, Sec. 3 "Notation") and the KL is in closed form.

Sampling: ``forward(x, n_samples=S)`` returns ``(S, N, ...)`` outputs of S posterior draws
in one batched pass -- the input batch is folded to ``S*N`` rows and every stochastic
Linear / Conv layer applies its own weights to each block of ``N`` rows (batched matmul,
one convolution per sample or one grouped convolution). Two estimators:

* weight sampling (the reparameterisation trick, as in the paper, Sec. 3 "Training the
  PBN"): one weight draw per sample, shared by the batch; optionally with given ``eps``;
* the local reparameterisation trick (Kingma, Salimans & Welling 2015): per Linear / Conv
  output ``N(x mu^T, x^2 sigma^2^T)`` is sampled directly, a fresh draw per example (for
  convolutions this ignores the correlation between spatial positions that share a weight;
  the marginal of every output is exact).

For ``nn.Sequential`` networks, layers before the first one with a stochastic entry are
computed once for all samples, and the first stochastic layer reads that shared input
without copying it S times (one matmul / convolution against the S weight draws side by
side). Per-sample weights are materialised densely (``mu`` repeated, plus ``sigma * eps`` at
the k selected entries): a sparse correction ``x mu^T + x Delta_s^T`` was measured to save
little on CPU at r_bayes = 1 % and nothing above a few per cent, so it is not used.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bench.class_weights import weighted_nll
from bench.errors import BenchError
from bench.subnet.selection import SUPPORTED_LAYERS, all_params_filter, param_layout


def expand_samples(h: torch.Tensor, samples: int) -> torch.Tensor:
    """(N, ...) -> (S*N, ...): S stacked copies of the batch (sample-major)."""
    return h.unsqueeze(0).expand(samples, *h.shape).reshape(samples * h.shape[0], *h.shape[1:])


def _randn(shape, generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    if generator is None or generator.device == like.device:
        return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)
    return torch.randn(shape, generator=generator, device=generator.device, dtype=like.dtype).to(like.device)


def _conv(module: nn.Module, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[h.dim() - 2]
    padding = module.padding
    if module.padding_mode != "zeros":
        h = F.pad(h, module._reversed_padding_repeated_twice, mode=module.padding_mode)
        padding = 0
    return conv(h, weight, bias, module.stride, padding, module.dilation, groups)


def _layer_op(module: nn.Module, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    if isinstance(module, nn.Linear):
        return F.linear(h, weight, bias)
    return _conv(module, h, weight, bias, module.groups)


@dataclass
class _Draw:
    """One parameter tensor for one forward: its mean and (if stochastic) S sparse offsets."""

    mu: torch.Tensor
    local: torch.Tensor | None = None  # flat positions of the stochastic entries in this tensor
    delta: torch.Tensor | None = None  # (S, k_p): sigma * eps for those entries
    full: bool = False  # every entry stochastic (sorted unique indices: the offsets are 0..numel-1)

    @property
    def stochastic(self) -> bool:
        return self.full or self.local is not None

    def dense(self, samples: int) -> torch.Tensor:
        """(S, *shape) sampled tensor, or the mean tensor itself when deterministic."""
        if not self.stochastic:
            return self.mu
        if self.full:  # the dense path of full mean-field VI: no index arithmetic at all
            return self.mu.unsqueeze(0) + self.delta.view(samples, *self.mu.shape)
        flat = self.mu.reshape(1, -1).repeat(samples, 1).index_add_(1, self.local, self.delta)
        return flat.view(samples, *self.mu.shape)


def _per_sample(d: _Draw | None, samples: int) -> torch.Tensor | None:
    """(S, *shape): the sampled tensor, or the mean broadcast over samples."""
    if d is None:
        return None
    return d.dense(samples) if d.stochastic else d.mu.expand(samples, *d.mu.shape)


def _sampled_linear(h, samples, shared, wd: _Draw, bd: _Draw | None):
    """Linear layer with S weight draws; ``h`` is (N, ..., in) if ``shared`` else (S*N, ..., in)."""
    S = samples
    if not wd.stochastic and (bd is None or not bd.stochastic):
        y = F.linear(h, wd.mu, None if bd is None else bd.mu)
        return expand_samples(y, S) if shared else y
    W, b = _per_sample(wd, S), _per_sample(bd, S)  # (S, out, in), (S, out)
    out_f, in_f = W.shape[1], W.shape[2]
    if S == 1:  # one draw: a plain addmm (a batched matmul of one is slower on CPU)
        return F.linear(h, W[0], None if b is None else b[0])
    if shared:  # one matmul against the S weight sets side by side
        y = F.linear(h, W.reshape(S * out_f, in_f), None if b is None else b.reshape(-1))  # (N, ..., S*out)
        y = y.reshape(*h.shape[:-1], S, out_f).movedim(-2, 0)
        return y.reshape(S * h.shape[0], *h.shape[1:-1], out_f)
    hs = h.reshape(S, -1, in_f)
    y = torch.bmm(hs, W.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), hs, W.transpose(1, 2))
    return y.reshape(*h.shape[:-1], out_f)


#: up to this many samples, a convolution with S weight draws is S calls on contiguous row
#: blocks (on CPU ~2x faster than one grouped convolution over S*C channels, and copy-free);
#: beyond it, one grouped convolution (many samples of few inputs, e.g. Monte Carlo checks)
MAX_CONV_LOOP = 8


def _sampled_conv(module, h, samples, shared, wd: _Draw, bd: _Draw | None):
    """Convolution with S weight draws; ``h`` is (N, C, ...) if ``shared`` else (S*N, C, ...)."""
    S = samples
    if not wd.stochastic and (bd is None or not bd.stochastic):
        y = _conv(module, h, wd.mu, None if bd is None else bd.mu, module.groups)
        return expand_samples(y, S) if shared else y
    W, b = _per_sample(wd, S), _per_sample(bd, S)
    if S <= MAX_CONV_LOOP:
        n = h.shape[0] if shared else h.shape[0] // S
        return torch.cat([_conv(module, h if shared else h[s * n:(s + 1) * n], W[s], None if b is None else b[s],
                                module.groups) for s in range(S)])
    if shared:
        h = expand_samples(h, S)
    n, out_c = h.shape[0] // S, W.shape[1]
    hg = h.reshape(S, n, *h.shape[1:]).transpose(0, 1).reshape(n, S * h.shape[1], *h.shape[2:])
    y = _conv(module, hg, W.reshape(S * out_c, *W.shape[2:]), None if b is None else b.reshape(-1),
              module.groups * S)  # sample s, group j <- input channels of sample s, group j
    return y.reshape(n, S, out_c, *y.shape[2:]).transpose(0, 1).reshape(S * n, out_c, *y.shape[2:])


def _lrt_forward(module, h, samples, shared, s2w, s2b, generator):
    """Local reparameterisation: sample each output from N(mean, var) given the input."""
    mean = _layer_op(module, h, module.weight, module.bias)
    if s2w is None:
        channel = -1 if isinstance(module, nn.Linear) else 1
        shape = [1] * mean.dim()
        shape[channel] = -1
        var = s2b.view(shape).expand_as(mean)
    else:
        var = _layer_op(module, h * h, s2w, s2b)
    # sqrt has an infinite derivative at 0: outputs without stochastic inputs get exactly 0 noise
    std = torch.where(var > 0, var.clamp_min(1e-30).sqrt(), torch.zeros_like(var))
    if shared:
        mean, std = expand_samples(mean, samples), expand_samples(std, samples)
    return mean + std * _randn(mean.shape, generator, mean)


@dataclass
class _Slot:
    """A parameter tensor with at least one stochastic entry."""

    name: str
    module_name: str
    param_name: str
    offset: int  # position of the tensor in the flat parameter vector
    numel: int
    start: int  # its entries are indices[start:end] / rho[start:end]
    end: int

    @property
    def full(self) -> bool:
        """Every entry of the tensor is stochastic (full mean-field VI on it: the dense path)."""
        return self.end - self.start == self.numel


class PartialVI(nn.Module):
    """A network whose parameters at flat ``indices`` are Gaussian, the rest point masses.

    ``net``'s parameters are the means and stay where they are (so ``net`` keeps working as
    the posterior-mean network); ``rho`` (length ``k``) and ``indices`` are added.
    """

    def __init__(self, net: nn.Module, indices: torch.Tensor, *, prior_scale: float = 1.0,
                 rho_init_mean: float = -3.0, rho_init_std: float = 0.1, generator: torch.Generator | None = None):
        super().__init__()
        self.net = net
        layout = param_layout(net, all_params_filter)
        n_params = layout[-1].end if layout else 0
        idx = torch.as_tensor(indices, dtype=torch.long).flatten().cpu()
        if idx.numel():
            if idx.min() < 0 or idx.max() >= n_params:
                raise BenchError(f"subnetwork index out of range [0, {n_params})")
            if torch.unique(idx).numel() != idx.numel():
                raise BenchError("subnetwork indices are not unique")
        idx = idx.sort().values
        self.n_params = n_params
        self.prior_scale = float(prior_scale)
        if not self.prior_scale > 0:
            raise BenchError(f"prior_scale must be positive, got {prior_scale}")
        device = next(net.parameters()).device if n_params else torch.device("cpu")
        # int32 indices where they fit: the variational state is k floats + k int32 next to the
        # theta means, (1 + 2 r) theta words in all, instead of the 2 theta of a dense rho
        self.register_buffer("indices", idx.to(device, torch.int32 if n_params < 2 ** 31 else torch.long))
        rho = torch.randn(idx.numel(), generator=generator) * float(rho_init_std) + float(rho_init_mean)
        self.rho = nn.Parameter(rho.to(device))
        self._index_layout()

    # -- structure --------------------------------------------------------------------------
    def _index_layout(self) -> None:
        """Which parameter tensors hold the (sorted) ``indices``; run again when they change."""
        idx = self.indices.cpu()
        self._slots: list[_Slot] = []
        for s in param_layout(self.net, all_params_filter):
            start, end = int(torch.searchsorted(idx, s.offset)), int(torch.searchsorted(idx, s.end))
            if end == start:
                continue
            module = self.net.get_submodule(s.module_name) if s.module_name else self.net
            if not isinstance(module, SUPPORTED_LAYERS) or s.param_name not in ("weight", "bias"):
                layers = ", ".join(t.__name__ for t in SUPPORTED_LAYERS)
                raise BenchError(f"parameter {s.name} ({type(module).__name__}) cannot be stochastic: "
                                 f"partial VI supports the weights and biases of {layers}")
            self._slots.append(_Slot(s.name, s.module_name, s.param_name, s.offset, s.numel, start, end))
        self.stochastic_modules: list[str] = list(dict.fromkeys(s.module_name for s in self._slots))
        self._chain = self._find_chain()

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """As nn.Module's (``indices`` must have the same length k), then re-index the layout."""
        idx = state_dict.get("indices")
        if idx is not None:
            idx = torch.as_tensor(idx)
            if idx.numel() > 1 and not bool((idx[1:] > idx[:-1]).all()):
                raise BenchError("state_dict indices are not sorted and unique")
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._index_layout()
        return result

    @classmethod
    def from_state_dict(cls, net: nn.Module, state_dict: dict, **kwargs) -> "PartialVI":
        """Rebuild around a fresh ``net`` of the same architecture from a saved state."""
        vi = cls(net, state_dict["indices"].cpu(), **kwargs)
        vi.load_state_dict(state_dict)
        return vi

    def _find_chain(self):
        """For nn.Sequential: (index of the first child holding a stochastic layer, its name if
        that child *is* the stochastic layer) -- the children before it form the shared prefix."""
        if not isinstance(self.net, nn.Sequential):
            return None
        names = [n for n, _ in self.net.named_children()]
        for i, cname in enumerate(names):
            hits = [m for m in self.stochastic_modules if m == cname or m.startswith(cname + ".")]
            if hits:
                return i, (cname if hits == [cname] else None)
        return len(names), None

    @property
    def num_stochastic(self) -> int:
        return int(self.indices.numel())

    def sigma(self) -> torch.Tensor:
        """Posterior standard deviations of the selected entries (length k)."""
        return F.softplus(self.rho)

    def _local(self, slot: _Slot) -> torch.Tensor:
        return self.indices[slot.start:slot.end] - slot.offset

    def _locals(self) -> list[torch.Tensor | None]:
        """Per slot, its entries' flat positions in the tensor (None where the tensor is full)."""
        return [None if s.full else self._local(s) for s in self._slots]

    def _param(self, slot: _Slot) -> torch.Tensor:
        return self.net.get_parameter(slot.name)

    def mu_selected(self) -> torch.Tensor:
        """Posterior means of the selected entries (length k, aligned with ``rho``)."""
        if not self._slots:
            return self.rho.new_zeros(0)
        return torch.cat([self._param(s).reshape(-1) if s.full else self._param(s).reshape(-1)[self._local(s)]
                          for s in self._slots])

    def named_sigmas(self) -> dict[str, torch.Tensor]:
        """``{parameter name: sigma of its stochastic entries}`` (for per-layer summaries)."""
        sig = self.sigma().detach()
        return {s.name: sig[s.start:s.end] for s in self._slots}

    def sigma_flat(self) -> torch.Tensor:
        """Standard deviations of every parameter entry (0 where deterministic), flat order."""
        out = self.rho.new_zeros(self.n_params)
        return out.index_put((self.indices,), self.sigma())

    def sigma_of(self, param_name: str) -> torch.Tensor:
        """Standard deviations shaped like the named parameter of ``net`` (0 where deterministic)."""
        p = self.net.get_parameter(param_name)
        out = torch.zeros(p.numel(), device=p.device, dtype=p.dtype)
        for s in self._slots:
            if s.name == param_name:
                out[self._local(s)] = self.sigma()[s.start:s.end].detach()
        return out.view(p.shape)

    # -- KL ---------------------------------------------------------------------------------
    def kl(self) -> torch.Tensor:
        """KL(q || p) summed over the selected entries, closed form:
        log(s / sigma) + (sigma^2 + mu^2) / (2 s^2) - 1/2 for q = N(mu, sigma^2), p = N(0, s^2)."""
        if self.num_stochastic == 0:
            return self.rho.new_zeros(())
        sigma, mu, s2 = self.sigma(), self.mu_selected(), self.prior_scale ** 2
        return (math.log(self.prior_scale) - torch.log(sigma) + (sigma.square() + mu.square()) / (2 * s2) - 0.5).sum()

    # -- sampling ---------------------------------------------------------------------------
    def sample_eps(self, samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Standard-normal noise (S, k) for ``samples`` weight draws."""
        return _randn((int(samples), self.num_stochastic), generator, self.rho.detach())

    def _delta(self, samples: int, eps: torch.Tensor) -> list[torch.Tensor]:
        """sigma * eps per slot, each (S, k_slot): the offsets of the selected entries from their
        means. Split, not sliced: the backward of a split concatenates the slots' gradients,
        where S slices of one (S, k) tensor would each allocate and zero an (S, k) gradient."""
        if eps.shape != (samples, self.num_stochastic):
            raise BenchError(f"eps has shape {tuple(eps.shape)}, expected {(samples, self.num_stochastic)}")
        sizes = [s.end - s.start for s in self._slots]
        eps = eps.to(self.rho.device, self.rho.dtype)
        return [sig.unsqueeze(0) * e for sig, e in zip(self.sigma().split(sizes), eps.split(sizes, dim=1))]

    def _draws(self, delta: list[torch.Tensor], local: list[torch.Tensor | None]) -> dict[str, dict[str, _Draw]]:
        """Per stochastic module, its weight / bias as mean + sparse offsets (per slot (S, k_slot))."""
        draws: dict[str, dict[str, _Draw]] = {}
        for s, loc, d in zip(self._slots, local, delta):
            draws.setdefault(s.module_name, {})[s.param_name] = _Draw(self._param(s), loc, d, full=s.full)
        for name, d in draws.items():
            module = self.net.get_submodule(name)
            d.setdefault("weight", _Draw(module.weight))
            if module.bias is not None:
                d.setdefault("bias", _Draw(module.bias))
        return draws

    def sample_params(self, samples: int, eps: torch.Tensor | None = None,
                      generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """``{param name: (S, *shape)}`` for every parameter of ``net`` (deterministic ones repeat mu)."""
        eps = self.sample_eps(samples, generator) if eps is None else eps
        draws = self._draws(self._delta(samples, eps), self._locals())
        sampled = {f"{m}.{p}" if m else p: d.dense(samples) for m, ds in draws.items() for p, d in ds.items()
                   if d.stochastic}
        return {name: sampled.get(name, p.unsqueeze(0).expand(samples, *p.shape))
                for name, p in self.net.named_parameters()}

    def _lrt_variances(self) -> dict[str, dict[str, torch.Tensor]]:
        """Per stochastic module, dense sigma^2 tensors of its stochastic weight / bias."""
        sigma2 = self.sigma().square()
        out: dict[str, dict[str, torch.Tensor]] = {}
        for s in self._slots:
            p = self._param(s)
            dense = (sigma2[s.start:s.end] if s.full
                     else p.new_zeros(p.numel()).index_put((self._local(s),), sigma2[s.start:s.end]))
            out.setdefault(s.module_name, {})[s.param_name] = dense.view(p.shape)
        return out

    def _module_fns(self, samples: int, draws=None, variances=None, generator=None) -> dict[str, Callable]:
        """Sampling forward of every stochastic module, for ``samples`` draws."""
        fns = {}
        if variances is not None:
            for name, d in variances.items():
                fns[name] = partial(_lrt_forward, self.net.get_submodule(name), samples=samples,
                                    s2w=d.get("weight"), s2b=d.get("bias"), generator=generator)
            return fns
        for name, d in draws.items():
            module = self.net.get_submodule(name)
            if isinstance(module, nn.Linear):
                fns[name] = partial(_sampled_linear, samples=samples, wd=d["weight"], bd=d.get("bias"))
            else:
                fns[name] = partial(_sampled_conv, module, samples=samples, wd=d["weight"], bd=d.get("bias"))
        return fns

    @contextlib.contextmanager
    def _patched(self, fns: dict[str, Callable]):
        """Temporarily route the stochastic layers' forward through the sampling functions."""
        patched = []
        try:
            for name, fn in fns.items():
                module = self.net.get_submodule(name)
                module.forward = partial(fn, shared=False)  # instance attribute shadows the method
                patched.append(module)
            yield
        finally:
            for module in patched:
                del module.forward

    def forward(self, x: torch.Tensor, n_samples: int = 1, *, eps: torch.Tensor | None = None,
                generator: torch.Generator | None = None, local_reparam: bool = False,
                chunk: int | None = None) -> torch.Tensor:
        """Outputs (S, N, ...) of ``n_samples`` posterior draws for the batch ``x``.

        ``eps`` (S, k) fixes the weight noise (weight sampling only); otherwise it is drawn
        from ``generator`` (or the global RNG). ``local_reparam`` samples layer outputs instead.
        ``chunk``: run the layers after the shared prefix for at most this many samples at a
        time (same draws, same outputs when no layer mixes examples, e.g. eval-mode batch
        norm; on a CPU, S passes over N rows are faster than one over S*N rows).
        """
        S = int(n_samples)
        if S < 1:
            raise BenchError(f"n_samples must be >= 1, got {n_samples}")
        if local_reparam and eps is not None:
            raise BenchError("eps fixes weight draws; it has no meaning with local_reparam")
        if self.num_stochastic == 0 and S > 1:
            # no stochastic weight (PBN's fine-tuning-only control): every draw is the network at its
            # means, so one pass stands for the S (the same outputs, losses and gradients; a batch-norm
            # layer in training mode sees the batch once instead of S identical copies, the same mean
            # and biased variance) at 1/S of the cost
            if eps is not None and eps.shape != (S, 0):
                raise BenchError(f"eps has shape {tuple(eps.shape)}, expected {(S, 0)}")
            one = self.forward(x, 1, local_reparam=local_reparam, chunk=chunk)
            return one.expand(S, *one.shape[1:])
        if not local_reparam and eps is None:
            eps = self.sample_eps(S, generator)
        h, i0 = x, None
        if self._chain is not None:
            i0 = self._chain[0]
            for m in list(self.net.children())[:i0]:  # deterministic prefix: once for all samples
                h = m(h)
        chunk = S if chunk is None else max(1, min(int(chunk), S))
        if local_reparam:
            variances = self._lrt_variances()
        else:  # sigma and the per-tensor index offsets once, for every chunk
            delta, local = self._delta(S, eps), self._locals()
        outs = []
        for c0 in range(0, S, chunk):
            c = min(chunk, S - c0)
            if local_reparam:
                fns = self._module_fns(c, variances=variances, generator=generator)
            else:
                part = delta if c == S else [d[c0:c0 + c] for d in delta]  # (a full-range slice would still
                fns = self._module_fns(c, draws=self._draws(part, local))  # zero-fill its gradient)
            outs.append(self._rest(h, i0, c, fns))
        out = outs[0] if len(outs) == 1 else torch.cat(outs)  # sample-major (S*N, ...)
        # N rows per sample: the batch's examples, or its B H W pixels (segmentation networks)
        return out.reshape(S, out.shape[0] // S, *out.shape[1:])

    def _rest(self, h: torch.Tensor, i0: int | None, samples: int, fns: dict[str, Callable]) -> torch.Tensor:
        """The network after the prefix (from child ``i0``; the whole net if None) for S draws."""
        with self._patched(fns):
            if i0 is None:
                return self.net(expand_samples(h, samples))
            children = list(self.net.children())
            if i0 == len(children):
                return expand_samples(h, samples)
            direct = self._chain[1]
            h = fns[direct](h, shared=True) if direct is not None else children[i0](expand_samples(h, samples))
            for m in children[i0 + 1:]:
                h = m(h)
            return h

    def mean_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network at the posterior means."""
        return self.net(x)


# -- the ELBO objective --------------------------------------------------------------------------
def beta_schedule(fraction_done: float, beta_start: float, beta_end: float) -> float:
    """KL weight annealed linearly from ``beta_start`` to ``beta_end`` over training.

    PBN paper, Appendix H.6 / Sec. 3: "transitioning smoothly from an initial value [0.2] to a
    desired target value [0.01]" so that the KL is minimised in the first epochs and the task
    loss afterwards. (The printed formula ``beta_i = beta_target - (beta_target - beta_init)
    x epoch_i / epoch_total`` would run from beta_target at epoch 0 to beta_init at the last,
    contrary to the text; we follow the text.) ``fraction_done`` is step / total steps: beta moves
    every step, not once per epoch. beta_start = beta_end gives a constant beta.
    """
    t = min(max(float(fraction_done), 0.0), 1.0)
    return float(beta_start) + (float(beta_end) - float(beta_start)) * t


def elbo_loss(task, num_train: int, *, samples: int = 5, beta_start: float = 0.2, beta_end: float = 0.01,
              local_reparam: bool = False, weight_decay: float = 0.0, log: dict | None = None,
              class_weights: torch.Tensor | None = None):
    """``loss_fn(model, x, y, fraction_done)`` for :func:`bench.training.train_model`:

    negative ELBO per example = mean over S samples and the batch of the NLL
    + beta * KL / num_train (the paper's ``sum_i L + beta KL``, Algorithm 1 line 10, divided by
    the number of training examples) + optional L2 ``weight_decay / 2 * ||mu||^2`` on the
    means (the optimiser runs without weight decay so that ``rho`` is not decayed).
    ``class_weights`` (K, normalised by :func:`bench.class_weights.normalise`): the NLL term is
    sum_b w_{y_b} NLL_b / B instead (:func:`bench.class_weights.weighted_nll`); None: the task's loss.
    """
    if num_train <= 0:
        raise BenchError("the ELBO needs the number of training examples (num_train)")

    def fn(model: PartialVI, x, y, fraction_done):
        out = model(x, n_samples=samples, local_reparam=local_reparam)  # (S, N, ...)
        ys = y.unsqueeze(0).expand(samples, *y.shape).reshape(samples * y.shape[0], *y.shape[1:])
        rows = out.reshape(-1, *out.shape[2:])  # rows: sample-major, as ys
        nll = task.loss(rows, ys) if class_weights is None else weighted_nll(task, rows, ys, class_weights)
        beta = beta_schedule(fraction_done, beta_start, beta_end)
        kl = model.kl()
        loss = nll + beta * kl / num_train
        if weight_decay:
            loss = loss + 0.5 * weight_decay * sum(p.square().sum() for p in model.net.parameters())
        if log is not None:  # tensors: the caller reads them when it needs them, not at every step
            log["nll"], log["kl"], log["beta"] = nll.detach(), kl.detach(), beta
        return loss

    return fn


def forward_flops(net: nn.Module, example: torch.Tensor) -> float:
    """FLOPs of one deterministic forward per example (``f_d`` of PBN paper, Appendix C)."""
    from bench.cost import flops_per_example

    was_training = net.training
    net.eval()
    try:
        return float(flops_per_example(net, example))
    finally:
        net.train(was_training)
