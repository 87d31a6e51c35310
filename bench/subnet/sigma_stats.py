"""Summaries of learned posterior standard deviations, stored in every VI record.

``sigma_init`` (right after initialisation) and ``sigma_final`` (after training) are the
evidence that a variational method learned its variances: a sigma that never leaves its
initial value is noise injection, not VI.
"""
from __future__ import annotations

import torch


def _stats(t: torch.Tensor) -> dict:
    t = t.detach().double().cpu().reshape(-1)
    if t.numel() == 0:
        return {"n": 0}
    return {"n": int(t.numel()), "mean": float(t.mean()), "median": float(t.median()),
            "min": float(t.min()), "max": float(t.max())}


def sigma_summary(named: dict[str, torch.Tensor]) -> dict:
    """``{"n", "mean", "median", "min", "max", "per_layer": {tensor name: same}}`` over the
    sigma of every stochastic entry; ``named`` maps a parameter tensor's name to its sigmas."""
    named = {k: v for k, v in named.items() if v is not None and v.numel()}
    if not named:
        return {"n": 0, "per_layer": {}}
    out = _stats(torch.cat([v.detach().reshape(-1).cpu() for v in named.values()]))
    out["per_layer"] = {k: _stats(v) for k, v in named.items()}
    return out


def sigma_change(init: dict, final: dict) -> dict:
    """Relative change of the mean and median sigma from ``init`` to ``final`` summaries."""
    out = {}
    for key in ("mean", "median"):
        a, b = init.get(key), final.get(key)
        if a is not None and b is not None and a > 0:
            out[f"{key}_ratio"] = b / a
    return out


def last_rel_change(stats: list[dict], key: str) -> float | None:
    """|x_E - x_{E-1}| / |x_{E-1}| of a per-epoch statistic (has it converged?); None if < 2 epochs."""
    vals = [d.get(key) for d in stats if d.get(key) is not None]
    if len(vals) < 2 or not vals[-2]:
        return None
    return abs(vals[-1] - vals[-2]) / abs(vals[-2])


def adam_travel_ratio(rho_init: torch.Tensor | float, rho_final: torch.Tensor, lr: float, cfg, steps_per_epoch: int) -> float:
    """Median ``|rho_final - rho_init|`` over the largest distance Adam could have moved rho:
    ``lr x sum_t lr_factor(t)`` (Adam's step is at most ~lr per step). Near 1: rho moved at full
    speed in one direction for the whole training, so the final sigma is set by the optimiser's
    budget, not by the ELBO (it has not converged); well below 1: it settled. Under a decaying
    schedule the last epoch's relative change is small either way, so this is the better test."""
    from bench.training import lr_factor

    total = int(cfg.epochs) * int(steps_per_epoch)
    bound = float(lr) * sum(lr_factor(cfg, t, steps_per_epoch) for t in range(total))
    if bound <= 0:
        return float("nan")
    travel = (rho_final.detach().double().cpu() - torch.as_tensor(rho_init, dtype=torch.float64)).abs()
    return float(travel.median()) / bound
