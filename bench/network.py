"""What the methods need of a network, for any ``nn.Module`` (a user's own included).

* **The head** (:func:`split_head`, exposed as ``ctx.split_head(model, x)``): the last layer that
  last-layer methods make Bayesian and before which MC dropout inserts its dropout. A network
  declares it, first found first used:

  1. a method ``bench_split_head()`` returning ``(features, head)``: ``features`` a callable
     (usually an ``nn.Module``) from the input to the head's input, ``head`` a submodule;
  2. an attribute ``bench_head``: the qualified name of the head submodule (``"classifier.fc"``)
     or the submodule itself;

  else it is inferred: the **last** ``nn.Linear`` whose forward runs in a forward pass (forward
  hooks on a probe batch), its input captured there (an ``nn.Sequential`` whose last child is the
  head is split as ``model[:-1]``, ``model[-1]``). Either way the split is accepted only if
  ``head(features(x))`` reproduces ``model(x)`` on a probe batch in eval mode, so a forward that
  does something after the head (``return self.fc(h) * 2``) or calls it twice is refused with a
  :class:`BenchError` naming the module and saying how to declare the split.
* **Dropout before the head** (:func:`insert_dropout_before_head`): MC dropout on a network
  without dropout layers.
* **Stochastic-parameter eligibility** (:data:`ELIGIBLE_LAYERS`, :func:`functional_layers`,
  :func:`uncalled_layers`): the parameters subnetwork / mean-field methods may make stochastic are
  the weights and biases of ``nn.Linear`` and ``nn.Conv1d/2d/3d`` layers (grouped and depthwise
  convolutions included) whose forward the network calls; normalisation affine parameters (batch,
  group, layer norm), embeddings and every other parameter stay deterministic. The layers inside
  an ``nn.MultiheadAttention`` are not eligible (it reads its ``out_proj`` weights without calling
  it); a network that reads another layer's weights without calling it is refused, naming it.
* **Plan-time checks** (:func:`check_plan_networks`): ``bench run`` builds each user network
  (model specs, ``bench.evaluate``'s networks; the registered ones are known to work) and asks
  every method's :meth:`methods.base.Method.check_network` whether it can run on it, before any
  data is read or anything trained; a refused pair is skipped with its reason, the other cells run.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch
from torch import nn

from bench.errors import BenchError

#: examples in a probe batch (random inputs of the suite's shape, drawn from a fixed generator)
PROBE_EXAMPLES = 4
#: layers whose weights and biases subnetwork / mean-field methods may make stochastic
ELIGIBLE_LAYERS: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
#: how a user declares the head (the error messages say it)
DECLARE = ("declare the split: give the network a method bench_split_head() returning (features, head), with "
           "head a submodule and head(features(x)) == model(x), or an attribute bench_head = '<qualified name of "
           "the head module>' (docs/plugins.md, 'Your network: what each method needs')")


def probe_batch(in_shape, n: int = PROBE_EXAMPLES, device=None) -> torch.Tensor:
    """``n`` standard-normal inputs of shape ``in_shape`` from a fixed generator (no global draw)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, *tuple(int(s) for s in in_shape), generator=gen)
    return x if device is None else x.to(device)


def module_name(model: nn.Module, module: nn.Module) -> str | None:
    """The qualified name of ``module`` in ``model`` ("" for the model itself), None if absent."""
    for name, m in model.named_modules():
        if m is module:
            return name
    return None


class _eval_state:
    """Eval mode (no dropout, running batch-norm statistics) inside, every module's mode restored after."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self):
        self.modes = [(m, m.training) for m in self.model.modules()]
        self.model.eval()
        return self

    def __exit__(self, *exc):
        for m, mode in self.modes:
            m.training = mode
        return False


def call_order(model: nn.Module, x: torch.Tensor) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every module in the order its forward *finished* in one eval-mode
    forward pass of ``x`` (a module called twice appears twice). BenchError if the forward fails."""
    order: list[tuple[str, nn.Module]] = []
    handles = [m.register_forward_hook(lambda mod, i, o, name=name: order.append((name, mod)))
               for name, m in model.named_modules()]
    try:
        with _eval_state(model), torch.no_grad():
            model(x)
    except Exception as exc:  # noqa: BLE001 - the user's forward: say what failed
        raise BenchError(f"{type(model).__name__}: a forward pass on a probe batch of shape {tuple(x.shape)} raised "
                         f"{type(exc).__name__}: {str(exc)[:300]}") from None
    finally:
        for h in handles:
            h.remove()
    return order


class _Stop(Exception):
    pass


class CapturedFeatures(nn.Module):
    """``x -> the input of head`` for a network whose forward is not a plain chain: runs ``model``
    until ``head`` is called (a forward pre-hook takes its first input and stops the pass there).
    Holds references to the network, not submodules (its parameters are the network's)."""

    def __init__(self, model: nn.Module, head: nn.Module):
        super().__init__()
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_head", head)

    def forward(self, x):
        box = []

        def grab(module, args):
            box.append(args[0])
            raise _Stop

        handle = self._head.register_forward_pre_hook(grab)
        try:
            self._model(x)
        except _Stop:
            pass
        finally:
            handle.remove()
        if not box:
            raise BenchError(f"the head ({type(self._head).__name__}) was not called in the forward pass")
        return box[0]


class HeadSplit:
    """A network split at its head: ``features(x)`` is the head's input, ``head(features(x))`` the
    network's output; ``head_name`` is the head's qualified name, ``how`` how it was found. Unpacks
    as ``features, head = split``."""

    def __init__(self, features: Callable, head: nn.Module, head_name: str, how: str):
        self.features, self.head, self.head_name, self.how = features, head, head_name, how

    def __iter__(self):
        yield self.features
        yield self.head

    def __repr__(self):
        return f"HeadSplit(head={self.head_name!r} ({type(self.head).__name__}), {self.how})"


def _declared(model: nn.Module) -> HeadSplit | None:
    what = type(model).__name__
    fn = getattr(model, "bench_split_head", None)
    if callable(fn):
        try:
            pair = fn()
            features, head = pair
        except Exception as exc:  # noqa: BLE001 - the user's method
            raise BenchError(f"{what}.bench_split_head() must return (features, head); it gave "
                             f"{type(exc).__name__}: {exc}") from None
        if not isinstance(head, nn.Module) or not callable(features):
            raise BenchError(f"{what}.bench_split_head() must return (features, head): a callable and an nn.Module, "
                             f"got ({type(features).__name__}, {type(head).__name__})")
        name = module_name(model, head)
        if name is None or name == "":
            raise BenchError(f"{what}.bench_split_head(): the head ({type(head).__name__}) must be a submodule of the "
                             f"network (it is not one of model.named_modules())")
        return HeadSplit(features, head, name, "declared by bench_split_head()")
    decl = getattr(model, "bench_head", None)
    if decl is None:
        return None
    if isinstance(decl, str):
        try:
            head = model.get_submodule(decl)
        except AttributeError:
            have = [n for n, m in model.named_modules() if n and not list(m.children())]
            raise BenchError(f"{what}.bench_head = {decl!r} names no submodule; its layers: "
                             f"{', '.join(have[-8:])}") from None
        name = decl
    elif isinstance(decl, nn.Module):
        head, name = decl, module_name(model, decl)
        if not name:
            raise BenchError(f"{what}.bench_head ({type(decl).__name__}) is not a submodule of the network")
    else:
        raise BenchError(f"{what}.bench_head must be a submodule's qualified name or the submodule, "
                         f"got a {type(decl).__name__}")
    return HeadSplit(CapturedFeatures(model, head), head, name, "declared by bench_head")


def _inferred(model: nn.Module, x: torch.Tensor) -> HeadSplit:
    what = type(model).__name__
    order = call_order(model, x)
    linears = [(n, m) for n, m in order if isinstance(m, nn.Linear)]
    if not linears:
        raise BenchError(f"{what}: no nn.Linear runs in its forward pass, so it has no head to find (the rule: the "
                         f"last nn.Linear called); {DECLARE}")
    name, head = linears[-1]
    if isinstance(model, nn.Sequential) and len(model) and model[-1] is head:
        return HeadSplit(model[:-1], head, name, "inferred: the last nn.Linear, the Sequential's last child")
    return HeadSplit(CapturedFeatures(model, head), head, name, "inferred: the last nn.Linear called in the forward")


def check_split(model: nn.Module, split: HeadSplit, x: torch.Tensor, atol: float = 1e-4) -> None:
    """BenchError unless ``split.head(split.features(x))`` equals ``model(x)`` (eval mode)."""
    what = f"{type(model).__name__}: the head {split.head_name!r} ({type(split.head).__name__}; {split.how})"
    try:
        with _eval_state(model), torch.no_grad():
            out = model(x)
            rebuilt = split.head(split.features(x))
    except BenchError as exc:
        raise BenchError(f"{what}: {exc}; {DECLARE}") from None
    except Exception as exc:  # noqa: BLE001 - the user's modules
        raise BenchError(f"{what}: head(features(x)) raised {type(exc).__name__}: {str(exc)[:300]}; {DECLARE}") from None
    if not isinstance(out, torch.Tensor) or not isinstance(rebuilt, torch.Tensor) or out.shape != rebuilt.shape:
        shape = lambda t: tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__  # noqa: E731
        raise BenchError(f"{what} does not reproduce the network's output: head(features(x)) has shape "
                         f"{shape(rebuilt)}, model(x) {shape(out)}; {DECLARE}")
    if not torch.allclose(out, rebuilt, atol=atol, rtol=atol):
        err = float((out - rebuilt).abs().max())
        raise BenchError(f"{what} does not reproduce the network's output: head(features(x)) differs from model(x) "
                         f"by up to {err:.3g} on a probe batch -- the forward does something after the head (e.g. "
                         f"scales or adds to its output) or calls it more than once; {DECLARE}")


def split_head(model: nn.Module, x: torch.Tensor, *, check: bool = True) -> HeadSplit:
    """``model`` split at its head (the module docstring's rule), checked on the probe batch ``x``
    (on the model's device) unless ``check=False``. BenchError naming the network and the module
    when no head is found or the split does not reproduce the output."""
    split = _declared(model) or _inferred(model, x)
    if check:
        check_split(model, split, x)
    return split


# ---------------------------------------------------------------------------------- dropout


def dropout_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The network's dropout layers (``nn.Dropout``, ``Dropout1d/2d/3d``, alpha dropout)."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.modules.dropout._DropoutNd)]


#: the name of the dropout layer inserted into an ``nn.Sequential`` before its head
INSERTED_DROPOUT = "bench_dropout"


def insert_dropout_before(model: nn.Module, head_name: str, p: float) -> str:
    """Insert ``nn.Dropout(p)`` before the submodule ``head_name`` of ``model``; returns where.

    In an ``nn.Sequential`` parent the dropout becomes the child before the head, named
    :data:`INSERTED_DROPOUT` (the other children keep their names, so their parameters keep their
    state-dict keys); elsewhere the head is replaced by ``nn.Sequential(dropout, head)`` with the
    children ``dropout`` and ``head``. Deterministic: the same call on a fresh network rebuilds the
    same structure (``load_state_dict``)."""
    if not head_name:
        raise BenchError(f"{type(model).__name__}: the network itself is its head; MC dropout cannot insert a dropout "
                         f"layer before it (wrap it in nn.Sequential)")
    parent_name, _, child = head_name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    head = getattr(parent, child)
    if isinstance(parent, nn.Sequential):
        name = INSERTED_DROPOUT
        while name in parent._modules:
            name = "_" + name
        items = list(parent._modules.items())
        parent._modules.clear()
        for k, v in items:
            if k == child:
                parent._modules[name] = nn.Dropout(p)
            parent._modules[k] = v
        return f"{parent_name + '.' if parent_name else ''}{name}"
    setattr(parent, child, nn.Sequential(OrderedDict([("dropout", nn.Dropout(p)), ("head", head)])))
    return f"{head_name}.dropout"


# ---------------------------------------------------------------------------------- eligibility


def functional_layers(model: nn.Module) -> set[str]:
    """Eligible-typed layers whose weights the network reads without calling them: those inside an
    ``nn.MultiheadAttention`` (its ``out_proj``). Not eligible: making them stochastic would
    change nothing (partial VI) or break the network (SSVI replaces the module)."""
    out = set()
    for name, m in model.named_modules():
        if isinstance(m, nn.MultiheadAttention):
            out.update(f"{name}.{n}" if name else n for n, _ in m.named_modules() if n)
    return out


def eligible_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, layer)`` of the layers whose weights and biases may be stochastic (module order)."""
    skip = functional_layers(model)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, ELIGIBLE_LAYERS) and n not in skip]


def uncalled_layers(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Eligible layers (``name (type)``) whose forward does not run in a forward pass of ``x``."""
    called = {id(m) for _, m in call_order(model, x)}
    return [f"{n} ({type(m).__name__})" for n, m in eligible_layers(model) if id(m) not in called]


def check_stochastic_layers(model: nn.Module, x: torch.Tensor, method: str) -> None:
    """BenchError when ``model`` has no eligible layer, or one whose weights it uses without
    calling it (a method would sample weights the forward never reads)."""
    if not eligible_layers(model):
        raise BenchError(f"{method}: {type(model).__name__} has no nn.Linear / nn.Conv1d/2d/3d layer whose weights "
                         f"could be stochastic")
    bad = uncalled_layers(model, x)
    if bad:
        raise BenchError(f"{method}: the layer(s) {', '.join(bad[:5])} of {type(model).__name__} never run their own "
                         f"forward (their weights are read directly, or they are unused); {method} samples a layer's "
                         f"weights inside its forward, so it cannot make them stochastic. Remove the unused layers or "
                         f"call them as modules")


def try_on_probe(fn: Callable[[], object], what: str) -> None:
    """Run ``fn`` (a method's forward on a probe batch) without autograd; any failure becomes a
    BenchError saying ``what`` failed and why (a method that cannot handle a module of the network)."""
    try:
        with torch.no_grad():
            fn()
    except BenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the method's machinery on the user's modules
        raise BenchError(f"{what} fails on this network: {type(exc).__name__}: {str(exc)[:300]}") from None


# ---------------------------------------------------------------------------------- plan-time checks


def check_plan_networks(suite, data: dict, models, methods: dict) -> list[dict]:
    """Every (method, model) pair of a plan for the user networks among ``models`` (names not in
    :data:`bench.models.MODELS`): ``cls.check_network(build, x, task, config)`` for each
    configuration, before anything is trained. Returns the refusals, ``{model, method, config,
    reason}`` each (the BenchError's message; empty: every pair can run); the plan skips their
    cells and runs the others (:func:`bench.config.resolve_plan`). ``methods``: ``{name: (cls, [configs])}``."""
    from bench.models import MODELS

    task = suite.task
    refused = []
    for model in models:
        if model in MODELS:
            continue
        built: dict[float, nn.Module] = {}

        def build(dropout: float = 0.0, model=model, built=built):
            import copy

            key = float(dropout)
            if key not in built:
                with torch.random.fork_rng(devices=[]):
                    built[key] = suite.build_model(model, data, dropout=key)
            return copy.deepcopy(built[key])

        x = probe_batch(suite.input_shape(data))
        for name, (cls, configs) in methods.items():
            check = getattr(cls, "check_network", None)
            if check is None:
                continue
            for cfg in configs:
                try:
                    with torch.random.fork_rng(devices=[]):
                        check(build, x, task, cfg)
                except BenchError as exc:
                    refused.append({"model": model, "method": name, "config": cfg, "reason": str(exc)})
    return refused
