"""The task graph of a run grid: one task per MAP network the cells build on, one per cell.

A cell depends on the MAP tasks of the networks its method starts from
(:meth:`methods.base.Method.map_seeds`): each network is trained once, before the cells that need
it, never twice in parallel (the MAP cache's file lock also guards a concurrent run).
"""
from __future__ import annotations

from bench.config import RunPlan


def grid_cells(plan: RunPlan) -> list[tuple[str, str, dict, int]]:
    """(model, method, method config, seed) of every cell, in the order a local run does them; a
    (model, method config) pair refused when the run was planned (``plan.refused``) has none."""
    return [(model, method, cfg, seed) for model in plan.models
            for method, configs in plan.methods.items() for cfg in configs if plan.runs(model, method, cfg)
            for seed in plan.seeds]


def map_dependencies(plan: RunPlan, registry, pretrained: dict | None = None) -> dict[tuple, list[tuple[str, int]]]:
    """cell -> the (model, MAP seed) networks it builds on; none on a suite whose MAP network is
    pretrained (nothing to train)."""
    deps = {}
    for cell in grid_cells(plan):
        model, method, cfg, seed = cell
        if pretrained and model in pretrained:
            deps[_key(cell)] = []
            continue
        deps[_key(cell)] = [(model, s) for s in registry.get(method).map_seeds(cfg, seed)]
    return deps


def map_jobs(deps: dict) -> list[tuple[str, int]]:
    """Every (model, MAP seed) some cell needs, once, in first-needed order."""
    seen: dict[tuple[str, int], None] = {}
    for needs in deps.values():
        for job in needs:
            seen.setdefault(job, None)
    return list(seen)


def _key(cell) -> tuple:
    import json

    model, method, cfg, seed = cell
    return (model, method, json.dumps(cfg, sort_keys=True, default=str), seed)


cell_key = _key
