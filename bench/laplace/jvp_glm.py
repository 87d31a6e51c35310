"""Monte Carlo of the linearised (GLM) predictive through Jacobian-vector products.

The GLM predictive of a Laplace posterior ``N(theta*, Sigma)`` is the softmax of logits
``f ~ N(f(x; theta*), J Sigma J^T)``. laplace-torch forms ``J Sigma J^T`` (K x K per example),
which needs the Jacobian's K rows: K backward passes per batch, hours per seed at 200 classes
(Tiny-ImageNet) and more at 1,000. A sample of the same Gaussian is

    f_s = f(x; theta*) + J (theta_s - theta*),     theta_s ~ N(theta*, Sigma),

and ``J d`` is one forward-mode pass (a Jacobian-vector product) whatever K is. S samples cost S
JVPs (~2-3 forward passes each) instead of K backward passes: the same predictive (logits drawn
from exactly ``N(f_mu, J Sigma J^T)``, as laplace-torch's ``link_approx="mc"``), a different
random stream. ``theta_s - theta*`` is the posterior's own ``sample`` (laplace-torch: a diagonal
scale, or the subnetwork's full-covariance Cholesky factor scattered into the full vector) with its
standard normals drawn on the caller's generator (:func:`posterior_offsets`).

Several samples go through the network in one pass (``per_pass``; ``torch.func.vmap`` over their
offsets): the primal pass ``f(x; theta*)`` is shared and the tangents of all of them run as one
batch, at the price of their tangent activations held together; :func:`samples_per_pass` bounds
those by ``JVP_PASS_FLOATS``. The draws and their order are those of one sample at a time.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, jvp, vmap


def trainable(model: nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """Names and tensors of the trainable parameters, in ``model.parameters()`` order (the order
    of laplace-torch's flat parameter vector)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [n for n, _ in named], [p for _, p in named]


#: the floats of tangent activations (samples x examples x activations per example) and of stacked
#: weight offsets (samples x weights) one pass of several samples may hold
JVP_PASS_FLOATS = 2**28


def samples_per_pass(n_samples: int, batch_activations: int, n_weights: int) -> int:
    """How many of ``n_samples`` samples :func:`glm_logit_samples` pushes through the network in one
    pass for a batch of ``batch_activations`` activation floats (every layer output of every
    example, :func:`bench.laplace.memory.activation_numel` x examples) and ``n_weights`` weights:
    as many as ``JVP_PASS_FLOATS`` holds, at least one."""
    per = max(1, int(batch_activations) + int(n_weights))
    return max(1, min(int(n_samples), JVP_PASS_FLOATS // per))


def _chunks(offsets, size: int):
    """The offsets (an ``(S, P)`` tensor or an iterable of ``P``-vectors) in stacked groups of ``size``."""
    if torch.is_tensor(offsets) and offsets.dim() == 2:
        yield from torch.split(offsets, size)
        return
    group = []
    for d in offsets:
        group.append(d)
        if len(group) == size:
            yield torch.stack(group)
            group = []
    if group:
        yield torch.stack(group)


@torch.no_grad()
def glm_logit_samples(model: nn.Module, x: torch.Tensor, offsets,
                      per_pass: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f_mu, f)``: the network's logits at its current weights ``(B, K)`` and the linearised
    logits ``f_mu + J d_s`` for each flat weight offset ``d_s`` (``P`` floats in
    ``model.parameters()`` order; ``offsets`` an ``(S, P)`` tensor or an iterable of them),
    ``(S, B, K)``. ``model`` must be in eval mode (batch norm with running statistics: a fixed
    function of the weights). ``per_pass`` samples share one pass (module docstring)."""
    names, params = trainable(model)
    sizes = [p.numel() for p in params]
    frozen = {n: t for n, t in model.named_parameters() if not t.requires_grad}
    buffers = dict(model.named_buffers())
    primals = tuple(p.detach() for p in params)

    def f(*ps):
        return functional_call(model, {**dict(zip(names, ps)), **frozen, **buffers}, (x,))

    def one(d):
        tangents = tuple(t.view_as(p) for t, p in zip(torch.split(d, sizes), primals))
        return jvp(f, primals, tangents)

    several = vmap(one, out_dims=(None, 0))  # the primal once, the tangents as one batch
    f_mu, out = None, []
    for group in _chunks(offsets, max(1, int(per_pass))):
        if group.shape[1:] != (sum(sizes),):
            raise ValueError(f"each offset must hold the {sum(sizes)} trainable weights, "
                             f"got {tuple(group.shape[1:])}")
        group = group.to(device=primals[0].device, dtype=primals[0].dtype)
        if len(group) == 1:
            mu, jd = one(group[0])
            jd = jd[None]
        else:
            mu, jd = several(group)
        f_mu = mu if f_mu is None else f_mu
        out.append(mu + jd)
    if f_mu is None:
        raise ValueError("no offsets given")
    return f_mu, torch.cat(out)


def sampled_size(la) -> int | None:
    """How many standard normals one draw of ``la``'s posterior takes (laplace-torch's ``sample``
    draws them on the posterior's device): the subnetwork's weights, or all of them, for a
    diagonal or a full covariance; None for another structure (a Kronecker one)."""
    from laplace.baselaplace import DiagLaplace, FullLaplace
    from laplace.subnetlaplace import SubnetLaplace

    if isinstance(la, SubnetLaplace):
        return int(la.n_params_subnet)
    if isinstance(la, (DiagLaplace, FullLaplace)):
        return int(la.n_params)
    return None


def posterior_offsets(la, n_samples: int, generator: torch.Generator):
    """``n_samples`` draws of ``theta_s - theta*`` (P floats each, one at a time: P can be tens of
    millions) from a laplace-torch posterior: its ``sample`` without the mean added and taken away
    (a diagonal scale times standard normals, the full covariance's factor times them, the
    subnetwork's scattered into the full vector with zeros elsewhere), the normals drawn on
    ``generator``'s device and moved to the posterior's. A CPU generator therefore gives the same
    weights on every device. A posterior of another structure (Kronecker) draws through its own
    ``sample`` on its device (a generator there, seeded from ``generator``)."""
    from laplace.baselaplace import DiagLaplace
    from laplace.subnetlaplace import SubnetLaplace

    mean = la.mean.detach().reshape(-1)
    size = sampled_size(la)
    if size is None:
        if generator.device != mean.device:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            generator = torch.Generator(device=mean.device).manual_seed(seed)
        for _ in range(int(n_samples)):
            yield la.sample(1, generator=generator)[0] - mean
        return
    scale = la.posterior_scale
    diagonal = isinstance(la, DiagLaplace)
    scale = scale.reshape(-1) if diagonal else scale
    index = la.backend.subnetwork_indices.to(mean.device) if isinstance(la, SubnetLaplace) else None
    for _ in range(int(n_samples)):
        eps = torch.randn(size, generator=generator, device=generator.device, dtype=mean.dtype).to(mean.device)
        d = eps * scale if diagonal else (scale @ eps.to(scale.dtype)).to(mean.dtype)  # a float64 scale: precision.py
        if index is not None:
            d = torch.zeros_like(mean).index_copy_(0, index, d)
        yield d
