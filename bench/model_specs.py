"""Networks named on the command line that are not registered in :data:`bench.models.MODELS`.

``--set models=`` takes, besides a registered name (``lenet5``, ``resnet18``, ...):

* ``MODULE:FACTORY``: ``FACTORY`` (a function or an ``nn.Module`` class) of the importable module
  ``MODULE`` (a file of the working directory, an installed package), which returns an ``nn.Module``;
* ``timm:NAME``: timm's model ``NAME`` (``timm.create_model(NAME, num_classes=K, in_chans=C)``,
  never with downloaded weights: pretrained weights come from a local file, ``--set data.weights=FILE``
  on the suites whose MAP network is a pretrained one).

Records name such a model by its *canonical* name, the spec with ``:`` written ``.``
(``mynets.small_cnn``, ``timm.resnet18``): records' names become folder names, where ``:`` is
not allowed. Both spellings are accepted wherever a model is named.

How a factory is called (:func:`call_factory`): with the arguments it names among ``in_shape``
(the suite's input shape, e.g. ``(3, 32, 32)``), ``num_outputs`` / ``num_classes`` (the suite's
classes; 2 for regression: mean and raw variance) and ``dropout`` (MC dropout's rate); a factory
that names none of the first three but takes two positional arguments is called
``factory(in_shape, num_outputs)``, one that takes none ``factory()``. A factory that does not
name ``dropout`` never gets it: MC dropout then adds its own dropout layers.

A model's identity (:func:`spec_identity`) holds a hash of its source: the files that define the
factory and every module class of the network it builds, except files of installed packages
(versioned by the records' ``versions``), and timm's version for a timm model. Editing the factory
(or a class it uses) therefore makes new cells and retrains the MAP networks; the old records stay.

This module does not import :mod:`bench.models` (which imports it): callers pass the registered
names for the error messages.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import sysconfig
from pathlib import Path
from typing import Callable, Iterable

from torch import nn

from bench.errors import BenchError

TIMM = "timm"
#: what ``--set models=`` accepts, for error messages
FORMS = ("a registered name ({registered}), MODULE:FACTORY (FACTORY a callable of the importable module MODULE "
         "that returns an nn.Module; docs/your_model.md), or timm:NAME (a timm model, timm.list_models())")


def is_spec(name: str) -> bool:
    """Whether ``name`` is a model spec (registered names hold neither ``:`` nor ``.``)."""
    return ":" in name or "." in name


def canonical_name(name: str) -> str:
    """The name records and folders use: ``:`` written ``.`` (``timm:resnet18`` -> ``timm.resnet18``)."""
    return name.strip().replace(":", ".")


def forms(registered: Iterable[str]) -> str:
    return FORMS.format(registered=", ".join(sorted(registered)))


# ------------------------------------------------------------------------------ resolving


def resolve(name: str, registered: Iterable[str] = ()) -> tuple[Callable, str]:
    """``(factory, kind)`` of a spec, ``kind`` "timm" or "module"; the factory of a timm model
    takes ``(in_shape, num_outputs)``. BenchError naming what is valid when it does not resolve."""
    name = name.strip()
    head, sep, rest = name.partition(":") if ":" in name else name.partition(".")
    if head == TIMM and rest:
        return _timm_factory(rest), "timm"
    if not sep or not head or not rest:
        raise BenchError(f"model {name!r} is not a model; models are {forms(registered)}")
    module, attr = _split_module(name, registered)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            have = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise BenchError(f"model {name!r}: module {module.__name__} has no attribute {attr!r}; its callables: "
                             f"{', '.join(have) or 'none'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise BenchError(f"model {name!r}: {module.__name__}.{attr} is a {type(obj).__name__}, not a callable that "
                         f"returns an nn.Module")
    return obj, "module"


def _split_module(name: str, registered) -> tuple[object, str]:
    """The module of ``MODULE:ATTR`` or ``MODULE.ATTR`` (the longest importable prefix, as
    :func:`pkgutil.resolve_name` finds it) and the attribute path after it."""
    if ":" in name:
        mod, attr = name.split(":", 1)
        return _import(name, mod, registered), attr
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = ".".join(parts[:i])
        try:
            return importlib.import_module(mod), ".".join(parts[i:])
        except ModuleNotFoundError as exc:
            if exc.name is None or not (mod == exc.name or mod.startswith(exc.name + ".")):
                raise BenchError(f"model {name!r}: importing module {mod} failed ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
            raise BenchError(f"model {name!r}: importing module {mod} failed ({type(exc).__name__}: {exc})") from None
    raise BenchError(f"model {name!r}: no module {parts[0]} can be imported (MODULE must be importable from the "
                     f"working directory or sys.path); models are {forms(registered)}")


def _import(name: str, mod: str, registered):
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (mod == exc.name or mod.startswith(exc.name + ".")):
            raise BenchError(f"model {name!r}: module {mod} cannot be imported (no module named {exc.name!r}; MODULE "
                             f"must be importable from the working directory or sys.path); models are "
                             f"{forms(registered)}") from None
        raise BenchError(f"model {name!r}: importing module {mod} failed ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        raise BenchError(f"model {name!r}: importing module {mod} failed ({type(exc).__name__}: {exc})") from None


def _timm():
    try:
        import timm
    except ImportError:
        raise BenchError("timm models (timm:NAME) need timm: .venv/bin/pip install -e '.[timm]' (timm==1.0.31)") from None
    return timm


def _timm_factory(model: str) -> Callable:
    """``(in_shape, num_outputs) -> timm.create_model(model, ...)``, randomly initialised (never
    downloads: ``pretrained=False``); BenchError with the closest names for an unknown one."""
    import difflib

    timm = _timm()
    if not timm.is_model(model):
        names = timm.list_models()
        close = difflib.get_close_matches(model, names, n=5, cutoff=0.6)
        hint = f"; close: {', '.join(close)}" if close else ""
        raise BenchError(f"model timm:{model}: timm {timm.__version__} has no model {model!r}{hint} "
                         f"(timm.list_models() lists its {len(names)} names)")

    def build(in_shape, num_outputs):
        if len(in_shape) != 3:
            raise BenchError(f"model timm:{model} takes images (C, H, W); this suite's inputs are {tuple(in_shape)}")
        return timm.create_model(model, pretrained=False, num_classes=int(num_outputs), in_chans=int(in_shape[0]))

    build.__qualname__ = build.__name__ = f"timm:{model}"
    return build


# ------------------------------------------------------------------------------ calling


#: the arguments a factory may name (num_classes: torchvision's and timm's spelling of num_outputs)
NAMED = ("in_shape", "num_outputs", "num_classes")


def call_factory(factory: Callable, in_shape, num_outputs: int, dropout: float = 0.0, what: str = "model"):
    """``factory``'s network for inputs ``in_shape`` and ``num_outputs`` outputs (the calling rule of
    the module docstring); BenchError when it cannot be called so or returns no ``nn.Module``."""
    in_shape = tuple(int(s) for s in in_shape)
    values = {"in_shape": in_shape, "num_outputs": int(num_outputs), "num_classes": int(num_outputs)}
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: called as it is
        params = {}
    named_ok = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    kwargs = {k: values[k] for k in NAMED if k in params and params[k].kind in named_ok}
    if "dropout" in params and params["dropout"].kind in named_ok:
        kwargs["dropout"] = float(dropout)
    args = ()
    if not set(kwargs) - {"dropout"}:
        positional = [p for p in params.values() if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                               inspect.Parameter.POSITIONAL_OR_KEYWORD)
                      and p.name != "dropout"]
        varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params.values())
        if len(positional) >= 2 or varargs:
            args = (in_shape, int(num_outputs))
    try:
        net = factory(*args, **kwargs)
    except BenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's factory: say how it was called
        shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        raise BenchError(f"{what}: calling {getattr(factory, '__qualname__', factory)}({shown}) raised "
                         f"{type(exc).__name__}: {exc} (how factories are called: docs/your_model.md)") from None
    if not isinstance(net, nn.Module):
        raise BenchError(f"{what}: {getattr(factory, '__qualname__', factory)} returned an object of type "
                         f"{type(net).__name__}, not an nn.Module")
    return net


def build_spec(name: str, in_shape, num_outputs: int, dropout: float = 0.0, registered: Iterable[str] = ()):
    """A fresh network of the spec ``name`` (either spelling)."""
    factory, _ = resolve(name, registered)
    return call_factory(factory, in_shape, num_outputs, dropout, what=f"model {name!r}")


# ------------------------------------------------------------------------------ identity


@functools.lru_cache(maxsize=None)
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(str(Path(paths[k]).resolve()) for k in ("purelib", "platlib", "stdlib") if k in paths)


def source_files(*objs) -> list[Path]:
    """The source files defining ``objs`` (functions, classes) that are not part of an installed
    package or the standard library: the user's own code."""
    out = set()
    for obj in objs:
        if obj is None:
            continue
        try:
            f = inspect.getsourcefile(obj)
        except TypeError:  # builtins, C extensions
            f = None
        if f is None:
            continue
        p = Path(f).resolve()
        if p.is_file() and not any(str(p).startswith(root + "/") for root in _installed_roots()):
            out.add(p)
    return sorted(out)


def source_hash(name: str, factory: Callable | None, net: nn.Module, extra: str = "") -> str:
    """A hash of ``name``, ``extra`` and the contents of the user's files behind ``factory`` (None:
    none) and every module class of ``net`` (:func:`source_files`)."""
    target = getattr(factory, "func", factory)  # a functools.partial: its function's file
    return _hash_files(name, extra, source_files(target, *{type(m) for m in net.modules()}))


def _hash_files(name: str, extra: str, files) -> str:
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{name}\0{extra}\0".encode())
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _spec_sources(name: str, in_shape: tuple, num_outputs: int) -> tuple[tuple[Path, ...], str]:
    """The user's files behind the spec ``name`` (:func:`source_files` of its factory and of the
    classes of the network it builds: built once per process, under a forked random state, so
    that no draw of a run changes) and the extra text hashed with them (timm's version)."""
    import torch

    factory, kind = resolve(name)
    with torch.random.fork_rng(devices=[]):
        net = call_factory(factory, in_shape, num_outputs, what=f"model {name!r}")
    if kind == "timm":  # a timm model is its name and timm's version (the factory is this module's wrapper)
        return tuple(source_files(*{type(m) for m in net.modules()})), f"timm=={_timm().__version__}"
    return tuple(source_files(getattr(factory, "func", factory), *{type(m) for m in net.modules()})), ""


def spec_identity(name: str, in_shape: tuple, num_outputs: int) -> dict:
    """``{"model_source": hash}`` of the spec ``name``: its canonical name, timm's version for a timm
    model, and the contents of the user's files behind it, read now (an edited file is a new
    identity: new cells, retrained MAP networks), added to its cells' identity and its MAP
    networks' cache key."""
    files, extra = _spec_sources(name, tuple(in_shape), int(num_outputs))
    return {"model_source": _hash_files(canonical_name(name), extra, files)}


# ------------------------------------------------------------------------------ plan-time check


def expected_rows(task_kind: str, batch: int, in_shape) -> int:
    """Rows of output a network of the task gives for ``batch`` inputs: one per example, or one
    per pixel for segmentation (``bench.models.PixelRows``)."""
    if task_kind == "segmentation":
        return batch * int(in_shape[-2]) * int(in_shape[-1])
    return batch


def check_network(net: nn.Module, in_shape, task, what: str) -> None:
    """BenchError unless ``net`` maps a batch of 2 inputs of ``in_shape`` to the task's output:
    ``(2, K)`` logits (classification), ``(2, 2)`` mean and raw variance (regression), a row of
    ``K`` logits per pixel ``(2 H W, K)`` (segmentation). Run in eval mode under a forked random
    state, on zeros."""
    import torch

    rows = expected_rows(task.kind, 2, in_shape)
    want = (rows, int(task.num_outputs))
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        net.eval()
        try:
            out = net(torch.zeros(2, *in_shape))
        except Exception as exc:  # noqa: BLE001 - the network does not take this suite's inputs
            raise BenchError(f"{what}: a forward pass on a batch of shape {(2, *in_shape)} (the suite's inputs) raised "
                             f"{type(exc).__name__}: {str(exc)[:300]}") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        need = {"classification": f"one row of {want[1]} logits per example",
                "regression": "one row (mean, raw variance) per example",
                "segmentation": f"one row of {want[1]} logits per pixel (end with bench.models.PixelRows)",
                "multilabel": f"one row of {want[1]} logits (one per label) per example"}[task.kind]
        raise BenchError(f"{what}: outputs {got} for a batch of 2 inputs; a {task.kind} network of this suite must "
                         f"output {want}: {need}")
