"""Resolving a run's configuration: suite profile < method defaults < ``--set`` overrides.

``--set`` takes ``key=value[,value...]``; several values make a sweep (the cartesian
product over keys). Keys:

* ``<method>.<option>`` (e.g. ``pbn.r_bayes=0.01,0.05``, ``mc_dropout.p=0.2``)
* ``train.<field>`` (a :class:`bench.training.TrainConfig` field, e.g. ``train.epochs=3``)
* ``data.<field>`` (suite data options, e.g. ``data.n_train=5000``)
* ``models=a,b`` (registered names, ``MODULE:FACTORY`` or ``timm:NAME``: :mod:`bench.model_specs`) and ``seeds=0,1``
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field

from bench.errors import BenchError
from bench.training import TrainConfig


def parse_value(text: str):
    text = text.strip()
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if text.startswith("[") and text.endswith("]"):  # [fog,snow]: a list of bare words
            return [parse_value(v) for v in split_values(text[1:-1])]
        return text


def split_values(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [v for v in (s.strip() for s in out) if v != ""]


def parse_sets(items: list[str] | None) -> dict[str, list]:
    parsed: dict[str, list] = {}
    for item in items or []:
        if "=" not in item:
            raise BenchError(f"--set expects key=value[,value...], got {item!r}")
        key, _, value = item.partition("=")
        values = [parse_value(v) for v in split_values(value)]
        if not values:
            raise BenchError(f"--set {key}= has no value")
        parsed[key.strip()] = values
    return parsed


@dataclass
class RunPlan:
    suite: str
    profile: str
    models: list[str]
    seeds: list[int]
    train: TrainConfig
    data: dict
    methods: dict[str, list[dict]] = field(default_factory=dict)  # method -> list of configs (sweep)
    note: str = ""
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why the suite cannot run it
    # the (model, method configuration) pairs a method refused at plan time (Method.check_network
    # on a user's network): {model, method, label, config, reason} each; their cells are not run
    # (bench.executors.grid.grid_cells), the other cells are, and the records carry the list (not_run)
    refused: list[dict] = field(default_factory=list)
    # a method's configurations per model, for the methods a profile gives options of their own on
    # some model (the profile's ``model_methods``): {model: {method: [configs]}}, every model of the
    # plan listed; ``methods`` holds the union. The other methods run every configuration on every model
    model_configs: dict[str, dict[str, list[dict]]] = field(default_factory=dict)

    def runs(self, model: str, method: str, config: dict) -> bool:
        """Whether the cell (model, method, config) is planned: a configuration of the method on that
        model, not refused at plan time."""
        own = self.model_configs.get(model, {}).get(method)
        if own is not None and config not in own:
            return False
        return not any(r["model"] == model and r["method"] == method and r["config"] == config
                       for r in self.refused)

    def not_run(self) -> list[dict]:
        """What the records of this plan say was not run, and why: {model, method, label, reason}."""
        return [{k: r[k] for k in ("model", "method", "label", "reason")} for r in self.refused]


def resolve_plan(suite, profile: str, methods: list[str], sets: dict[str, list],
                 seeds: list[int] | None = None, method_registry=None) -> RunPlan:
    if profile not in suite.profiles:
        raise BenchError(f"unknown profile {profile!r} for suite {suite.name!r}; valid profiles: "
                         f"{', '.join(suite.profiles)}")
    prof = suite.profiles[profile]
    train = dict(prof["train"])
    data = dict(prof.get("data", {}))
    models = list(prof["models"])
    plan_seeds = list(seeds) if seeds is not None else list(prof["seeds"])
    method_sets: dict[str, dict[str, list]] = {}
    for key, values in sets.items():
        if key == "models":
            models = [str(v) for v in values]
        elif key == "seeds":
            plan_seeds = list(values)
        elif key.startswith("train.") or key.startswith("data."):
            if (len(values) > 1 and key.startswith("data.")
                    and isinstance(suite.DEFAULT_DATA.get(key.split(".", 1)[1]), (list, tuple))):
                values = [values]  # a list-valued data option: data.severities=1,3,5 is the list [1, 3, 5]
            if len(values) != 1:
                raise BenchError(f"--set {key}: sweeps are only supported for method options")
            (train if key.startswith("train.") else data)[key.split(".", 1)[1]] = values[0]
        elif "." in key:
            m, opt = key.split(".", 1)
            if m not in methods:
                raise BenchError(f"--set {key}: method {m!r} is not in this run (--methods {','.join(methods)})")
            method_sets.setdefault(m, {})[opt] = values
        else:
            raise BenchError(f"--set {key}: keys are <method>.<option>, train.<field>, data.<field>, models or seeds")
    train_cfg = TrainConfig.from_dict(train).check()
    suite.data_cfg(data)  # unknown or invalid data options: an error before anything is loaded
    if not models:
        raise BenchError("no model to run (--set models= is empty)")
    if not plan_seeds:
        raise BenchError("no seed to run (--seeds / --set seeds= is empty)")
    if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in plan_seeds):
        raise BenchError(f"--seeds / --set seeds= expects non-negative integers, got {plan_seeds}")
    # a registered name, or a model spec (MODULE:FACTORY, timm:NAME) built and checked now, by the
    # canonical name its records carry (bench.model_specs)
    models = [suite.check_model(str(m), data) for m in models]
    for what, values in (("--seeds / --set seeds=", plan_seeds), ("--set models=", models), ("--methods", methods)):
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:  # a cell twice would run once and be counted twice (e.g. a seed's mean and std)
            raise BenchError(f"{what} names {', '.join(twice)} more than once ({','.join(map(str, values))}); "
                             "give each once")
    if not methods:
        raise BenchError("no method to run (--methods is empty)")
    plan = RunPlan(suite.name, profile, models, plan_seeds, train_cfg, data, note=prof.get("note", ""))
    # options of a method on one model only (the profile's model_methods, e.g. a subnetwork size that
    # a paper gives its own network): beneath --set, above the profile's methods
    model_methods = prof.get("model_methods", {})
    stray = sorted(set(model_methods) - set(prof["models"]))
    if stray:
        raise BenchError(f"profile {profile!r} of suite {suite.name!r}: model_methods names {', '.join(stray)}, not "
                         f"one of its models ({', '.join(prof['models'])})")
    unsupported: dict[str, str] = {}  # method -> why it does not support the suite's task
    for name in methods:
        cls = method_registry.get(name)
        base = {**cls.profile_defaults.get(profile, {}), **prof.get("methods", {}).get(name, {})}
        sweep = method_sets.get(name, {})
        own = {m: model_methods[m][name] for m in models if name in model_methods.get(m, {})}
        unknown = (set(base) | set(sweep) | {k for o in own.values() for k in o}) - set(cls.defaults)
        if unknown:
            raise BenchError(f"unknown option(s) {sorted(unknown)} for method {name!r}; valid: {sorted(cls.defaults) or 'none'}")
        supported = suite.task.kind in cls.tasks
        keys = list(sweep)
        configs: list[dict] = []  # every model's, each once
        per_model: dict[str, list[dict]] = {m: [] for m in models}
        for combo in itertools.product(*(sweep[k] for k in keys)) if keys else [()]:
            for m in models:
                overrides = {**base, **own.get(m, {}), **dict(zip(keys, combo))}
                cfg = {**cls.defaults, **overrides}
                if cfg not in configs:
                    cls.check_config(overrides)  # a bad option is bad input (exit 2), even for a method skipped below
                    check_task = getattr(cls, "check_task_config", None)
                    if check_task is not None and supported:  # options that depend on the task (one weight a class)
                        check_task(suite.task, overrides)
                    configs.append(cfg)
                if cfg not in per_model[m]:
                    per_model[m].append(cfg)
        if any(per_model[m] != configs for m in models):  # some model runs other configurations than the rest
            for m in models:
                plan.model_configs.setdefault(m, {})[name] = per_model[m]
        if not supported:  # skipped with its reason, the other methods run (exit 2 only when none can)
            why = cls.UNSUPPORTED.get(suite.task.kind)
            unsupported[name] = (f"method {name!r} does not support {suite.task.kind} tasks (suite {suite.name})"
                                 + (f": {why}" if why else "") + f"; it supports: {', '.join(cls.tasks)}")
            continue
        if getattr(suite, "pretrained_map", False):
            # the MAP network is a published pretrained one: a method that trains its own network(s)
            # from scratch would need the whole training set (e.g. ImageNet's 1.28 M images)
            kept = [c for c in configs if cls.starts_from(c) == "map"]
            if len(kept) < len(configs):
                plan.skipped[name] = ("trains from scratch; this suite's MAP network is pretrained and its "
                                      "training set is not streamed for training")
            if not kept:
                continue
            configs = kept
        plan.methods[name] = configs
    pretrained_skips = list(plan.skipped)
    # a user's network (not a registered one): every method says now whether it can run on it
    # (Method.check_network; bench.network), before any data is read or anything trained. A refused
    # (model, method configuration) pair is skipped with its reason (printed, kept in the records,
    # listed in the report); the other cells run
    from bench.network import check_plan_networks

    for r in check_plan_networks(suite, suite.data_cfg(data), plan.models,
                                 {n: (method_registry.get(n), cs) for n, cs in plan.methods.items()}):
        if plan.runs(r["model"], r["method"], r["config"]):  # a configuration another model runs is no refusal
            plan.refused.append({**r, "label": method_label(r["method"], r["config"],
                                                            method_registry.get(r["method"]).defaults)})
    for name in list(plan.methods):  # a configuration refused on every model: out of the plan
        plan.methods[name] = [c for c in plan.methods[name] if any(plan.runs(m, name, c) for m in plan.models)]
        if not plan.methods[name]:
            del plan.methods[name]
            for per_method in plan.model_configs.values():
                per_method.pop(name, None)
    plan.skipped.update(unsupported)
    if not plan.methods:  # nothing can run: bad input (exit 2), nothing written
        reasons = [f"{m}: {why}" for m, why in plan.skipped.items()]
        if plan.refused:
            reasons.append("these methods cannot run on these networks (leave them out of --methods, or change the "
                           "network):\n  " + "\n  ".join(f"{r['label']} on {r['model']}: {r['reason']}"
                                                           for r in plan.refused))
        raise BenchError(f"no method of --methods {','.join(methods)} can run on suite {suite.name}"
                         + (f" with --set models={','.join(plan.models)}" if plan.refused else "") + ":\n"
                         + "\n".join(reasons))
    if pretrained_skips:
        line = "skipped: " + ", ".join(pretrained_skips) + " (they train from scratch; the MAP network is pretrained)"
        plan.note = "; ".join(filter(None, [plan.note, line]))
    return plan


def method_label(name: str, config: dict, defaults: dict) -> str:
    diff = [f"{k}={config[k]}" for k in sorted(config) if config[k] != defaults.get(k)]
    return f"{name}[{','.join(diff)}]" if diff else name
