"""Method plugins from outside the repository, where each method's source comes from, and the
parts of the plugin contract that can be checked without running a method (docs/plugins.md).

A method is found three ways:

* built in: a module of ``methods/`` (imported by ``methods/__init__.py``);
* a file: ``bench run|tune|list|check-plugin --plugin path/to/file.py`` (repeatable) executes the
  file as a module of its own; its ``@register_method`` classes join the registry;
* an installed distribution: the entry-point group :data:`GROUP` (``bench.methods``); each entry
  point names a module (imported: its decorators register) or a ``Method`` subclass (registered
  under the entry point's name unless its decorator did already).

A name that is taken (a built-in, or another plugin) or a plugin that fails to import is a
:class:`bench.errors.BenchError` (exit 2) naming both sources, or the file and the error.

Every record carries ``plugin_path`` and ``plugin_source_sha256`` (the SHA-256 of the file that
defines the method's class, as it was loaded). For a method outside the benchmark's own packages
the hash is also part of the cell's identity (:func:`identity_fields`), so that an edited plugin
makes new cells instead of being skipped as done; a built-in's identity is left alone (its kept
records and checkpoints stay valid; the commit says which code made them).
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError

#: the entry-point group of installed method plugins (pyproject: ``[project.entry-points."bench.methods"]``)
GROUP = "bench.methods"
#: what ``STARTS_FROM`` may be (methods.base.Method)
STARTS = ("map", "maps", "scratch")
#: task kinds a method may list in ``tasks``
TASK_KINDS = ("classification", "regression", "segmentation", "multilabel")


@dataclass(frozen=True)
class PluginSource:
    """Where a method class comes from: ``origin`` is ``builtin`` (a file of the benchmark's own
    packages), ``file`` (``--plugin``), ``entry_point`` or ``module`` (any other module, e.g. a
    class registered by a test or a notebook); ``path`` its source file (relative to the checkout
    for a built-in), ``sha256`` that file's hash (None when it has no file), ``where`` in words."""

    origin: str
    path: str | None
    sha256: str | None
    where: str

    @property
    def external(self) -> bool:
        return self.origin != "builtin"


_SOURCES: dict[type, PluginSource] = {}  # class -> its source (computed once per class object)
_FILES: dict[Path, tuple[str, list[str]]] = {}  # --plugin file -> (sha256 of what ran, names it registered)
_ENTRY_POINTS: dict[tuple[str, str], list[str]] = {}  # (name, value) -> names it registered


def _registry(registry=None):
    if registry is not None:
        return registry
    from methods import METHODS

    return METHODS


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_of(cls: type) -> PluginSource:
    """The :class:`PluginSource` of a method class (plugins loaded here know theirs; any other class
    is looked up from its source file once)."""
    if cls in _SOURCES:
        return _SOURCES[cls]
    from bench.provenance import CODE_PACKAGES, REPO

    try:
        f = inspect.getsourcefile(cls)
    except TypeError:
        f = None
    if f is None or not Path(f).is_file():
        src = PluginSource("module", None, None, f"module {cls.__module__} (no source file)")
    else:
        p = Path(f).resolve()
        sha = _sha256(p.read_bytes())
        if any(p.is_relative_to(REPO / pkg) for pkg in CODE_PACKAGES):
            rel = p.relative_to(REPO).as_posix()
            src = PluginSource("builtin", rel, sha, f"the built-in method in {rel}")
        else:
            src = PluginSource("module", str(p), sha, f"module {cls.__module__} ({p})")
    _SOURCES[cls] = src
    return src


def identity_fields(cls: type) -> dict:
    """What a method's source adds to its cells' identity (bench.harness.cell_identity): the source
    hash of a plugin, nothing for a built-in (whose config hashes must not change)."""
    src = source_of(cls)
    return {"plugin_source_sha256": src.sha256} if src.external and src.sha256 else {}


def record_fields(cls: type) -> dict:
    """Provenance every record of the method carries: ``plugin_path``, ``plugin_source_sha256``,
    ``plugin_origin``."""
    src = source_of(cls)
    return {"plugin_path": src.path, "plugin_source_sha256": src.sha256, "plugin_origin": src.origin}


def plugin_paths(method_names, registry=None) -> dict[str, str]:
    """``name -> source file`` of the methods among ``method_names`` that are not built in."""
    reg = _registry(registry)
    out = {}
    for n in method_names:
        if n in reg:
            src = source_of(reg.get(n))
            if src.external and src.path:
                out[n] = src.path
    return out


# -- loading -----------------------------------------------------------------------------------------
def _snapshot(registry) -> dict:
    return {n: registry.get(n) for n in registry.names()}


def _added(registry, before: dict) -> list[str]:
    return [n for n in registry.names() if before.get(n) is not registry.get(n)]


def _rollback(registry, before: dict) -> None:
    for n in _added(registry, before):
        registry.unregister(n)
        if n in before:
            registry.register(n)(before[n])


def _collision(exc, what: str) -> BenchError:
    existing = source_of(exc.existing).where if isinstance(exc.existing, type) else repr(exc.existing)
    return BenchError(f"method {exc.name!r} of {what} collides with {existing}: two methods cannot share a name; "
                      f"rename the plugin's (@register_method('another_name'))")


def _failure(exc: BaseException, what: str, path: str | None = None) -> BenchError:
    where = ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" (line {exc.lineno})"
    elif path is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
        if frames:
            where = f" (line {frames[-1].lineno}: {(frames[-1].line or '').strip()})"
        else:
            tb = traceback.extract_tb(exc.__traceback__)
            if tb:
                where = f" (in {tb[-1].filename}:{tb[-1].lineno})"
    return BenchError(f"{what}: importing it failed{where}: {type(exc).__name__}: {exc}")


def load_file(path, registry=None) -> list[str]:
    """Execute the plugin file ``path`` as a module of its own and return the names of the methods
    it registered. A file loaded before and unchanged is not executed again; an edited one is (its
    earlier classes are forgotten first). BenchError when the file is missing, fails to import, or
    registers a name that is taken."""
    from bench.registry import DuplicateNameError

    reg = _registry(registry)
    given = Path(path).expanduser()
    if not given.is_file():
        raise BenchError(f"--plugin {path}: no such file")
    p = given.resolve()
    data = p.read_bytes()
    sha = _sha256(data)
    prev = _FILES.get(p)
    if prev is not None and prev[0] == sha and all(n in reg for n in prev[1]):
        return list(prev[1])
    if prev is not None:  # edited since: its earlier classes make way for the new ones
        for n in prev[1]:
            if n in reg and source_of(reg.get(n)).path == str(p):
                reg.unregister(n)
    before = _snapshot(reg)
    modname = f"bench_plugin_{re.sub(r'[^0-9A-Za-z_]', '_', p.stem)}_{_sha256(str(p).encode())[:8]}"
    spec = importlib.util.spec_from_file_location(modname, p)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    what = f"--plugin {p}"
    try:
        exec(compile(data, str(p), "exec"), module.__dict__)  # the bytes hashed are the code that runs
    except DuplicateNameError as exc:
        sys.modules.pop(modname, None)
        _rollback(reg, before)
        raise _collision(exc, what) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import error of the plugin is the user's to see
        sys.modules.pop(modname, None)
        _rollback(reg, before)
        raise _failure(exc, what, str(p)) from None
    names = _added(reg, before)
    for n in names:
        _SOURCES[reg.get(n)] = PluginSource("file", str(p), sha, what)
        _register_space(n, reg.get(n))
    _FILES[p] = (sha, names)
    if not names:
        print(f"warning: {what} registered no method (decorate a Method subclass with "
              f"@register_method('name'), from methods.base)", file=sys.stderr)
    return names


def _entry_points():
    from importlib.metadata import entry_points

    return entry_points(group=GROUP)


def load_entry_points(registry=None) -> list[str]:
    """Load every entry point of :data:`GROUP` not loaded yet; returns the method names they added."""
    import types

    from bench.registry import DuplicateNameError
    from methods.base import Method

    reg = _registry(registry)
    out = []
    for ep in _entry_points():
        key = (ep.name, ep.value)
        if key in _ENTRY_POINTS:
            continue
        dist = getattr(ep, "dist", None)
        what = (f"entry point {ep.name} = {ep.value} (group {GROUP}"
                + (f", distribution {dist.name}" if dist is not None else "") + ")")
        before = _snapshot(reg)
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Method):
                if not any(obj is reg.get(n) for n in reg.names()):
                    reg.register_class(ep.name)(obj)
            elif not isinstance(obj, types.ModuleType):
                raise BenchError(f"{what} names a {type(obj).__name__}, not a module or a methods.base.Method "
                                 f"subclass")
        except DuplicateNameError as exc:
            _rollback(reg, before)
            raise _collision(exc, what) from None
        except BenchError:
            _rollback(reg, before)
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            _rollback(reg, before)
            raise _failure(exc, what) from None
        names = _added(reg, before)
        for n in names:
            cls = reg.get(n)
            base = source_of(cls)
            _SOURCES[cls] = PluginSource("entry_point", base.path, base.sha256, what)
            _register_space(n, cls)
        _ENTRY_POINTS[key] = names
        out += names
    return out


def entry_point_methods() -> list[str]:
    """The method names the entry-point plugins loaded in this process registered."""
    return [n for names in _ENTRY_POINTS.values() for n in names]


def load_plugins(files=(), *, entry_points: bool = True, registry=None) -> list[str]:
    """The installed entry-point plugins (once per process) and the ``--plugin`` files, in order;
    returns the method names they registered."""
    names = load_entry_points(registry) if entry_points else []
    for f in files or ():
        names += load_file(f, registry)
    return names


def reset(registry=None) -> None:
    """Forget every plugin loaded here (their names leave the registry): for tests."""
    from bench import tuning

    reg = _registry(registry)
    for names in [n for _, n in _FILES.values()] + list(_ENTRY_POINTS.values()):
        for n in names:
            reg.unregister(n)
    for n in _SPACES_ADDED:
        tuning.SPACES.pop(n, None)
    _SPACES_ADDED.clear()
    _FILES.clear()
    _ENTRY_POINTS.clear()
    _SOURCES.clear()


_SPACES_ADDED: set[str] = set()


def _register_space(name: str, cls: type) -> None:
    """A plugin's own tuning space (class attribute ``TUNING_SPACE``, option -> values) joins
    ``bench.tuning.SPACES`` so that ``bench tune --plugin FILE --methods NAME`` sweeps it."""
    space = getattr(cls, "TUNING_SPACE", None)
    if not space:
        return
    from bench import tuning

    if name not in tuning.SPACES or name in _SPACES_ADDED:
        tuning.SPACES[name] = {k: list(v) for k, v in dict(space).items()}
        _SPACES_ADDED.add(name)


# -- the contract, statically ----------------------------------------------------------------------------
def _declares(cls: type, attr: str) -> bool:
    """Whether ``cls`` or a base below methods.base.Method sets ``attr`` itself."""
    from methods.base import Method

    return any(attr in vars(k) for k in cls.__mro__ if k is not Method and issubclass(k, Method))


def _class_sources(cls: type) -> str:
    from methods.base import Method

    out = []
    for k in cls.__mro__:
        if k is Method or not issubclass(k, Method):
            continue
        try:
            out.append(inspect.getsource(k))
        except (OSError, TypeError):
            pass
    return "\n".join(out)


_INFERRED: dict[type, str] = {}


def inferred_starts_from(cls: type) -> str:
    """``STARTS_FROM`` of a class that does not declare it: ``"map"`` when its source (its own class
    and its bases below Method) uses ``map_cache`` (it starts from the seed's MAP network), else
    ``"scratch"``. ``bench run`` warns that it was inferred (:func:`static_contract_problems`)."""
    if cls not in _INFERRED:
        _INFERRED[cls] = "map" if re.search(r"\bmap_cache\b", _class_sources(cls)) else "scratch"
    return _INFERRED[cls]


def static_contract_problems(cls: type) -> list[str]:
    """The contract rules that can be checked without fitting (``tests/test_method_contract.py``
    asserts none for every registered method; ``bench run`` warns with them at plan time, and
    ``bench check-plugin`` prints them). Each entry says what is wrong and what to write instead."""
    from methods.base import Method

    out = []
    defaults = getattr(cls, "defaults", {})
    if not isinstance(defaults, dict) or not all(isinstance(k, str) for k in defaults):
        return [f"defaults must be a dict of option name -> default, got {defaults!r}"]
    if inspect.isabstract(cls):
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        out.append(f"does not implement {', '.join(missing)} (required: fit, predict, state_dict, load_state_dict, "
                   f"modules)")
    silent = sorted(k for k in Method.TRAIN_OVERRIDES if k in defaults and defaults[k] is not None
                    and k not in cls.OWN_BUDGET)
    if silent:
        own = ", ".join(f"{k!r}: 'why'" for k in silent)
        out.append(f"option(s) {silent} are named like training-budget fields and default to a value, so they "
                   f"replace the profile's budget (Method.train_config): default them to None (the profile's) or "
                   f"declare why in OWN_BUDGET = {{{own}}}")
    bad_why = sorted(k for k, why in cls.OWN_BUDGET.items() if not isinstance(why, str) or not why)
    if bad_why:
        out.append(f"OWN_BUDGET reasons of {bad_why} must be non-empty strings")
    po = cls.PREDICT_OPTIONS
    declared = [("LATER_OPTIONS", cls.LATER_OPTIONS), ("constraints", cls.constraints), ("OWN_BUDGET", cls.OWN_BUDGET)]
    if isinstance(po, str) or not isinstance(po, (tuple, list, set, frozenset)):
        out.append(f"PREDICT_OPTIONS must be a tuple of option names, e.g. ('samples',), not {po!r}")
    else:
        declared.insert(0, ("PREDICT_OPTIONS", po))
    for attr, keys in declared:
        unknown = sorted(str(k) for k in keys if k not in defaults)
        if unknown:
            out.append(f"{attr} names option(s) {unknown} that are not in defaults {sorted(defaults)}")
    controls = cls.CONTROLS
    if not isinstance(controls, dict) or not all(isinstance(v, dict) and v for v in controls.values()):
        out.append(f"CONTROLS must map a control's name to the option values that make it, e.g. "
                   f"{{'random subnetwork': {{'criterion': 'random'}}}}, not {controls!r}")
    else:
        unknown = sorted({str(k) for v in controls.values() for k in v if k not in defaults})
        if unknown:
            out.append(f"CONTROLS names option(s) {unknown} that are not in defaults {sorted(defaults)}")
    if isinstance(cls.tasks, str) or not set(cls.tasks) <= set(TASK_KINDS):
        out.append(f"tasks must be a tuple of {', '.join(TASK_KINDS)}, got {cls.tasks!r}")
    declared = cls.STARTS_FROM
    if declared is not None and declared not in STARTS:
        out.append(f"STARTS_FROM = {declared!r}: must be one of {', '.join(map(repr, STARTS))}")
    elif not (_declares(cls, "STARTS_FROM") or _declares(cls, "starts_from")) and inferred_starts_from(cls) == "map":
        out.append("uses ctx.map_cache but does not declare STARTS_FROM: taken as 'map' (it starts from the seed's "
                   "MAP network; on a pretrained-MAP suite it runs, and distributed runs train that network "
                   "first); declare STARTS_FROM = 'map', or 'maps' with map_seeds(config, seed) for several "
                   "networks, or override starts_from(config)")
    return out
