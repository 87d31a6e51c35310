"""Is a profile's training budget long enough? The guard on every row trained at it.

``map_converged`` (:mod:`bench.validity`) reads one network's validation curve; over a tail of two or
three epochs it has little power against a slow, steady gain, and a decaying rate flattens the
curve at whatever budget it is given. A budget trial answers the question directly: the same
recipe trained for longer, seed by seed (``bench run --methods deterministic --set
train.epochs=E``). Where the records hold MAP networks of one recipe at several budgets, a budget
is **short** when some longer budget ends, on every seed trained at both (at least
:data:`MIN_SEEDS`), with a validation NLL after its last epoch lower by more than the limit
``map_converged`` allows a gain (2 %, or on a noisier curve the noise of a difference of two
epochs, :func:`bench.validity.plateau_limit`): a longer budget gives a better network, beyond the
spread the budget itself makes. Then every row trained at the short budget (the same suite,
profile, model, training recipe and training data) measures a network short of its training, and
the check ``map_budget`` makes it no verdict in every table that reads those records.

A seed trained twice at one budget (two machines) counts with its best network at the shorter
budget and its worst at the longer one: the budget must win against the fit-to-fit spread too.
On CamVid's binary suite no longer budget won beyond that spread; on the multi-class one and on
CIFAR-10-C the quick profile's 12 epochs lose to every longer budget tried (docs/validity.md).

The trials this project ran are kept with bench (``budget_trials.json``, written by ``python -m
bench.budget --write`` from the kept records: docs/validity.md), so that a researcher's own results
folder, which holds no trial, is judged by them too: a run of a kept recipe at a budget the kept
trial found short fails ``map_budget`` wherever it is tabulated. A trial in the table's own
records adds to the kept ones: per recipe the strongest speaks (:func:`trial_rank`: the one that
finds the budget short by the most, else the one over the most seeds), as among the kept folders,
so a folder's shorter trial never hides a kept one that finds its budget short by more.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from bench.curves import curve_noise, gain_limit

#: the kept trials (``python -m bench.budget --write``)
KEPT = Path(__file__).with_name("budget_trials.json")
#: the kept records the kept trials are read from (relative to the repository)
KEPT_FROM = ("docs/records", "docs/tuning", "docs/tuning-augmented", "docs/ablations", "docs/budget-trials")

#: a budget is judged short only on at least this many seeds trained at both budgets, each beyond
#: its limit (one seed beyond one standard deviation of the noise happens one time in six by chance)
MIN_SEEDS = 2


@dataclass(frozen=True)
class BudgetTrial:
    """One budget of a recipe against a longer one: per common seed, the relative gain of the longer
    budget's validation NLL after its last epoch, and the limit a gain must pass."""

    epochs: int
    longer: int
    seeds: tuple
    gains: tuple
    limits: tuple

    @property
    def judges(self) -> bool:
        """Whether the trial has seeds enough to judge the budget either way (:data:`MIN_SEEDS`)."""
        return len(self.seeds) >= MIN_SEEDS

    @property
    def short(self) -> bool:
        return self.judges and all(g > lim for g, lim in zip(self.gains, self.limits))

    def _gains(self) -> str:
        lo, hi = min(self.gains), max(self.gains)
        return f"{lo:.1%}" if len(self.gains) == 1 else f"{lo:.1%} to {hi:.1%}"

    def summary(self) -> str:
        """The gains in a phrase: ``20 epochs end 17.2% to 24.1% lower (seeds 0, 1)``."""
        return f"{self.longer} epochs end {self._gains()} lower (seeds {', '.join(map(str, self.seeds))})"

    def text(self, subject: str = "the MAP networks of this recipe", what: str = "network") -> str:
        """The trial in a sentence; ``subject`` names the fits compared (a method's phase: :func:`phase_trials`)."""
        seeds = ", ".join(map(str, self.seeds))
        limit = f"{max(self.limits):.1%}"
        if self.short:
            return (f"{self.epochs} epochs are short: {subject} trained for {self.longer} end "
                    f"with a validation NLL {self._gains()} lower (seeds {seeds}), beyond the limit {limit} (2 %, "
                    f"or the curves' noise): a longer budget gives a better {what}, so every {what} trained for "
                    f"{self.epochs} epochs stops short of its training (bench.budget)")
        changes = ", ".join(f"{-g:+.1%}" for g in self.gains)
        few = (f"; {len(self.seeds)} seed(s), at least {MIN_SEEDS} needed to judge"
               if not self.judges else "")
        return (f"trained for {self.longer} epochs, {subject} end with a validation NLL "
                f"{changes} on {self.epochs} epochs' (seeds {seeds}): not lower beyond the limit {limit} on every "
                f"seed{few}")


def training_data(suite: str, data_config) -> dict:
    """The data options that shape a trained network: the suite's defaults overridden by the run's
    (a record keeps the profile's and the command line's), its evaluation-only options left out."""
    data = dict(data_config) if isinstance(data_config, dict) else {}
    try:
        from bench.suites import SUITES

        s = SUITES.get(str(suite))()
    except Exception:  # noqa: BLE001 - a plugin suite that is not installed here
        return data
    return s.fit_data({**(s.DEFAULT_DATA or {}), **data})


def recipe_key(suite, profile, model, train_config, data_config) -> str | None:
    """What two runs must share for one's budget trial to speak for the other: suite, profile,
    model, the training options but the epochs, and the training data. None without a training
    configuration."""
    if not isinstance(train_config, dict) or "epochs" not in train_config:
        return None
    train = {k: v for k, v in train_config.items() if k != "epochs"}
    return json.dumps([str(suite), str(profile), str(model), train, training_data(suite, data_config)],
                      sort_keys=True, default=str)


def epochs_of(train_config) -> int | None:
    try:
        return int(train_config["epochs"])
    except (TypeError, KeyError, ValueError):
        return None


def trained_by_the_recipe(method, method_label, method_config, diagnostics) -> bool:
    """Whether a run's network was trained the way the budget trial's MAP networks were: the MAP
    row itself at its default configuration, every method that starts from the seed's MAP network
    or networks (``Method.starts_from``: temperature scaling, the Laplace family, PBN, the
    ensemble), and every method whose record carries the training log of a network of the suite's
    training loop (``diagnostics.map_training``: MC dropout's network). A method that trains its
    own network with its own optimiser (the VI methods from scratch), or the MAP network under
    other options (an Adam-trained control), is not: the trial does not measure its budget."""
    if method == "deterministic":
        return str(method_label or "deterministic") == "deterministic"
    return (method_starts_from(method, method_config) in ("map", "maps")  # a plugin not installed: its record decides
            or (isinstance(diagnostics, dict) and bool(diagnostics.get("map_training"))))


def method_starts_from(method, method_config=None) -> str | None:
    """``Method.starts_from`` of the method at this configuration; None for a method not installed here."""
    try:
        from methods import METHODS

        return METHODS.get(str(method)).starts_from(method_config if isinstance(method_config, dict) else {})
    except Exception:  # noqa: BLE001 - a plugin that is not installed here
        return None


def _ok_runs(m):
    """``m``'s ok records, the columns that name a run, and ``run -> validation NLL`` of its validation records."""
    if "status" in m.columns:
        m = m[m["status"].fillna("ok") == "ok"]
    run = [c for c in ("suite", "profile", "model", "config_hash", "seed") if c in m.columns]
    val_nll = {tuple(r[c] for c in run): float(r["metrics.nll"]) for _, r in m[m["kind"] == "val"].iterrows()}
    return m, run, val_nll


def map_networks(df) -> dict[str, dict[int, dict[int, list[tuple[float, float | None]]]]]:
    """``recipe -> epochs -> seed -> [(validation NLL after the last epoch, its relative noise)]``
    of the MAP rows (method ``deterministic`` at its default configuration): the end of the
    validation curve its clean-test record carries, with the curve's noise; a record made before
    the curves were (no curve) gives its validation record's NLL, the same number, and no noise.
    Each network once."""
    out: dict = {}
    if df is None or df.empty or not {"method", "kind", "train_config", "metrics.nll"} <= set(df.columns):
        return out
    m = df[df["method"] == "deterministic"]
    if "method_label" in m.columns:
        m = m[m["method_label"].fillna("deterministic") == "deterministic"]
    m, run, val_nll = _ok_runs(m)
    seen = set()
    for _, r in m[m["kind"] == "id"].iterrows():
        diag = r.get("diagnostics") if isinstance(r.get("diagnostics"), dict) else {}
        log = diag.get("map_training")
        curve = tuple((log or {}).get("val_nll") or ()) if isinstance(log, dict) else ()
        if curve and all(v is not None and math.isfinite(float(v)) for v in curve):
            final, noise = float(curve[-1]), curve_noise(curve)
            network = curve
        else:  # no curve: the validation record of the same fit
            final, noise = val_nll.get(tuple(r[c] for c in run), math.nan), None
            network = (r.get("config_hash"), final)
        key = recipe_key(r.get("suite"), r.get("profile"), r.get("model"), r["train_config"], r.get("data_config"))
        epochs = epochs_of(r["train_config"])
        if key is None or epochs is None or not math.isfinite(final) or (key, int(r["seed"]), network) in seen:
            continue
        seen.add((key, int(r["seed"]), network))
        rel = None if noise is None else noise / max(abs(final), 1e-12)
        out.setdefault(key, {}).setdefault(epochs, {}).setdefault(int(r["seed"]), []).append((final, rel))
    return out


def compare(shorter: dict, longer: dict, epochs: int, longer_epochs: int) -> BudgetTrial | None:
    """``shorter``, ``longer``: seed -> [(final validation NLL, relative noise)]. None without a seed
    trained at both."""
    seeds = tuple(sorted(set(shorter) & set(longer)))
    if not seeds:
        return None
    gains, limits = [], []
    for s in seeds:
        best_short = min(v for v, _ in shorter[s])
        worst_long = max(v for v, _ in longer[s])
        gains.append((best_short - worst_long) / max(abs(best_short), 1e-12))
        noises = [n for _, n in shorter[s] + longer[s] if n is not None]
        limits.append(gain_limit(max(noises) if noises else None))
    return BudgetTrial(epochs, longer_epochs, seeds, tuple(gains), tuple(limits))


def budget_trials(df) -> dict[tuple[str, int], BudgetTrial]:
    """``(recipe, epochs) -> BudgetTrial`` for every budget of a recipe that some longer budget of it
    was trained at on a common seed: the longer budget that beats it by the most (its smallest gain
    over the seeds) where one beats it beyond the limit, else the longest one compared."""
    return _trials(map_networks(df))


def _trials(networks: dict) -> dict[tuple[str, int], BudgetTrial]:
    """:func:`budget_trials` of ``key -> epochs -> seed -> [(final validation NLL, relative noise)]``."""
    out = {}
    for key, by_epochs in networks.items():
        budgets = sorted(by_epochs)
        for i, e in enumerate(budgets):
            trials = [t for e2 in budgets[i + 1:] if (t := compare(by_epochs[e], by_epochs[e2], e, e2))]
            if not trials:
                continue
            short = [t for t in trials if t.short]
            out[(key, e)] = max(short, key=lambda t: min(t.gains)) if short else trials[-1]
    return out


# -- a method's own training phase (PBN's VI phase): the same trial over the phase's epochs ---------------
def phase_epochs(diagnostics) -> int | None:
    """The epochs of a method's own training phase, as its record logs them (``diagnostics.train.epochs``:
    PBN's VI phase, the VI methods' training); None for a method without one."""
    train = diagnostics.get("train") if isinstance(diagnostics, dict) else None
    try:
        return int(train["epochs"]) if isinstance(train, dict) and train.get("epochs") is not None else None
    except (TypeError, ValueError):
        return None


def phase_key(recipe: str | None, train_config, method) -> str | None:
    """What two runs of a method must share for one's longer phase to speak for the other's: the MAP
    recipe (:func:`recipe_key`) with its epochs (the network a phase starts from) and the method. Not
    the method's other options: like the MAP trial for every method on its network, a phase trial
    judges the profile's phase budget for every configuration of the method (tuning candidates and
    controls alike, so no candidate is chosen for having a trial)."""
    return None if recipe is None or method == "deterministic" else json.dumps(
        [recipe, epochs_of(train_config), str(method)], default=str)


def _options_but_epochs(method_config) -> str:
    return json.dumps({k: v for k, v in (method_config or {}).items() if k != "epochs"}, sort_keys=True, default=str)


def phase_fits(df) -> dict[str, dict[int, dict[int, list[tuple[float, None]]]]]:
    """``[phase key, options] -> phase epochs -> seed -> [(validation NLL, None)]`` of the ok runs of
    every method with a logged phase, keyed per configuration (:func:`phase_key` and the options but the
    epochs, as JSON): a trial compares a configuration with itself only. The validation record's NLL
    after the phase (no per-epoch curve, so the limit is :func:`bench.curves.gain_limit`'s 2 %)."""
    out: dict = {}
    need = {"method", "kind", "train_config", "metrics.nll", "seed"}
    if df is None or df.empty or not need <= set(df.columns):
        return out
    m, run, val_nll = _ok_runs(df[(df["method"] != "deterministic") & df["kind"].isin(["id", "val"])])
    for _, r in m[m["kind"] == "id"].iterrows():
        epochs = phase_epochs(r.get("diagnostics"))
        key = phase_key(recipe_key(r.get("suite"), r.get("profile"), r.get("model"), r["train_config"],
                                   r.get("data_config")), r["train_config"], r.get("method"))
        final = val_nll.get(tuple(r[c] for c in run), math.nan)
        if key is None or epochs is None or not math.isfinite(final):
            continue
        key = json.dumps([key, _options_but_epochs(r.get("method_config"))])
        out.setdefault(key, {}).setdefault(epochs, {}).setdefault(int(r["seed"]), []).append((final, None))
    return out


def trial_rank(t: BudgetTrial) -> tuple:
    """How strongly a trial speaks: one that finds the budget short by the most first, else the one over
    the most seeds."""
    return t.short, min(t.gains) if t.short else len(t.seeds)


def phase_trials(df) -> dict[tuple[str, int], BudgetTrial]:
    """``(phase key, phase epochs) -> BudgetTrial``: per configuration, its phase against its longer
    phases (:func:`budget_trials`' rule); per phase key the strongest (:func:`trial_rank`)."""
    out: dict = {}
    for (cfg_key, epochs), t in _trials(phase_fits(df)).items():
        key = (json.loads(cfg_key)[0], epochs)
        if key not in out or trial_rank(t) > trial_rank(out[key]):
            out[key] = t
    return out


def strongest(*found: dict) -> dict:
    """Per key, the strongest trial (:func:`trial_rank`) of several sources, e.g. the kept phase trials
    and those a table's records hold: records a table reads beside the kept ones add evidence, never
    hide a kept trial that speaks more strongly (the first source's wins a tie)."""
    out: dict = {}
    for trials in found:
        for key, t in trials.items():
            if key not in out or trial_rank(t) > trial_rank(out[key]):
                out[key] = t
    return out


def paper_epochs(method, model) -> int | None:
    """The paper's training epochs for this method on this network (``Method.PAPER_EPOCHS``), where known."""
    try:
        from methods import METHODS

        return (getattr(METHODS.get(str(method)), "PAPER_EPOCHS", None) or {}).get(str(model))
    except Exception:  # noqa: BLE001 - a plugin that is not installed here
        return None


def starts_from_map(method, method_config=None) -> bool:
    """Whether the method's phase starts from the seed's MAP network(s) (PBN) rather than from a random
    initialisation (the VI methods trained from scratch); True for a method not installed here."""
    return method_starts_from(method, method_config) in (None, "map", "maps")


@lru_cache(maxsize=1)
def kept_trials() -> dict[tuple[str, int], BudgetTrial]:
    """The trials kept with bench (:data:`KEPT`), as :func:`budget_trials` gives them; {} without the file."""
    return _kept("trials")


@lru_cache(maxsize=1)
def kept_phase_trials() -> dict[tuple[str, int], BudgetTrial]:
    """The phase trials kept with bench (:data:`KEPT`), as :func:`phase_trials` gives them; {} without them."""
    return _kept("phase_trials")


def _kept(section: str) -> dict[tuple[str, int], BudgetTrial]:
    try:
        entries = json.loads(KEPT.read_text())[section]
    except (OSError, ValueError, KeyError):
        return {}
    return {(e["recipe"], int(e["epochs"])): BudgetTrial(int(e["epochs"]), int(e["longer"]), tuple(e["seeds"]),
                                                         tuple(e["gains"]), tuple(e["limits"])) for e in entries}


def trials_document(dirs, root: Path) -> dict:
    """What :data:`KEPT` holds: every trial of the kept records under ``root / dir`` for ``dirs`` (each
    suite's records of every folder pooled), sorted."""
    suites = sorted({p.name for d in dirs if (root / d).is_dir() for p in (root / d).iterdir() if p.is_dir()})
    out, phases = [], []
    for suite in suites:
        df = _pooled(dirs, root, suite)
        if df is None:
            continue
        for found, into in ((budget_trials(df), out), (phase_trials(df), phases)):
            for (recipe, epochs), t in found.items():
                into.append({"recipe": recipe, "epochs": epochs,
                             **{k: v for k, v in asdict(t).items() if k != "epochs"}, "short": t.short})
    for entries in (out, phases):
        entries.sort(key=lambda e: (e["recipe"], e["epochs"]))
    return {"written_by": "python -m bench.budget --write", "from": list(dirs), "trials": out, "phase_trials": phases}


def _pooled(dirs, root: Path, suite: str):
    """The suite's records of every folder of ``dirs`` under ``root``, pooled; None without any."""
    import pandas as pd

    from bench.store import load_records

    frames = [load_records(root / d, suite) for d in dirs if (root / d / suite).is_dir()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else None


def phase_fits_markdown(df, method: str, match: dict[str, str] | None = None) -> str:
    """Every kept fit of ``method`` with a logged phase (:func:`phase_fits`) as a markdown table: per
    network and configuration (the options that differ between the configurations shown), each phase
    length with its validation NLL after the phase, per seed: the fits the phase trials compare, at
    every configuration (the trials table keeps one trial per phase key). ``match``: only the
    configurations whose options (or ``model``, ``profile``, ``profile_epochs``) read as these strings
    (ValueError naming the valid keys for a key no fit of the method has).
    A fit kept in two folders (a tuning's and an ablation's) is one fit: shown once."""
    rows, keys = [], set()
    for cfg_key, by_epochs in phase_fits(df).items():
        key, options = json.loads(cfg_key)
        recipe, map_epochs, m = json.loads(key)
        _, profile, model, _, _ = json.loads(recipe)
        opts = json.loads(options)
        named = {**{k: str(v) for k, v in opts.items()}, "model": model, "profile": profile,
                 "profile_epochs": str(map_epochs)}
        if m != method:
            continue
        keys.update(named)
        if any(named.get(k) != v for k, v in (match or {}).items()):
            continue
        for epochs, seeds in sorted(by_epochs.items()):
            rows.append((model, profile, map_epochs, opts, epochs,
                         {seed: sorted(set(fits)) for seed, fits in seeds.items()}))
    unknown = sorted(set(match or {}) - keys)
    if unknown and keys:
        raise ValueError(f"no fit of {method} has {', '.join(unknown)}; valid keys: {', '.join(sorted(keys))}")
    varying = sorted({k for *_, opts, _, _ in rows for k in opts
                      if len({json.dumps(o.get(k), sort_keys=True) for *_, o, _, _ in rows}) > 1})
    lines = ["| model | profile | profile epochs | options | phase epochs | validation NLL after the phase, per seed |",
             "| --- | --- | ---: | --- | ---: | --- |"]
    for model, profile, map_epochs, opts, epochs, seeds in sorted(
            rows, key=lambda r: (r[0], r[1], r[2], json.dumps([r[3].get(k) for k in varying], default=str), r[4])):
        shown = ", ".join(f"{k}={opts.get(k)}" for k in varying) or "–"
        nll = ", ".join(f"{seed}: {v:.4f}" for seed, fits in sorted(seeds.items()) for v, _ in fits)
        lines.append(f"| {model} | {profile} | {map_epochs} | {shown} | {epochs} | {nll} |")
    return "\n".join(lines)


def phase_markdown(entries) -> str:
    """The phase trials (``trials_document``'s ``phase_trials``) as a markdown table: per suite, profile,
    network, MAP epochs and method, each phase against the longer one that judges it."""
    lines = ["| suite | profile | model | training data (options beside the suite's defaults) | MAP epochs | method | "
             "phase epochs | longer phase | seeds | change of the validation NLL with the longer phase, per seed | "
             "limit | phase short |",
             "| --- | --- | --- | --- | ---: | --- | ---: | ---: | --- | --- | ---: | --- |"]
    for e in entries:
        base, map_epochs, method = json.loads(e["recipe"])
        suite, profile, model, _, data = json.loads(base)
        default = training_data(suite, {})
        options = ", ".join(f"{k}={v}" for k, v in sorted(data.items()) if default.get(k) != v) or "–"
        changes = ", ".join(f"{-g:+.1%}" for g in e["gains"])
        lines.append(f"| {suite} | {profile} | {model} | {options} | {map_epochs} | {method} | {e['epochs']} | "
                     f"{e['longer']} | "
                     f"{', '.join(map(str, e['seeds']))} | {changes} | {max(e['limits']):.1%} | "
                     f"{'**short**' if e['short'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="the budget trials of the kept records (bench/budget_trials.json)")
    ap.add_argument("--write", action="store_true", help=f"write {KEPT.name} (else print it)")
    ap.add_argument("--phases", action="store_true", help="print the kept phase trials as a markdown table")
    ap.add_argument("--fits", nargs=2, metavar=("SUITE", "METHOD"),
                    help="print every kept fit of METHOD on SUITE with its phase length and final validation NLL")
    ap.add_argument("--match", default="", metavar="KEY=VALUE[,KEY=VALUE]",
                    help="with --fits: only the configurations with these options (or model, profile, "
                         "profile_epochs)")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the repository (default: "
                                                                                      "this checkout)")
    a = ap.parse_args(argv)
    if a.fits:
        df = _pooled(KEPT_FROM, Path(a.root), a.fits[0])
        if df is None:
            print(f"bench.budget: no kept records of {a.fits[0]} under {', '.join(KEPT_FROM)}", file=sys.stderr)
            return 2
        try:
            match = dict(kv.split("=", 1) for kv in a.match.split(",") if kv)
        except ValueError:
            print(f"bench.budget: --match takes KEY=VALUE[,KEY=VALUE], got {a.match!r}", file=sys.stderr)
            return 2
        try:
            print(phase_fits_markdown(df, a.fits[1], match))
        except ValueError as exc:
            print(f"bench.budget: --match: {exc}", file=sys.stderr)
            return 2
        return 0
    found = trials_document(KEPT_FROM, Path(a.root))
    if a.phases:
        print(phase_markdown(found["phase_trials"]))
        return 0
    doc = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if not a.write:
        print(doc, end="")
        return 0
    from bench.store import atomic_write_bytes

    atomic_write_bytes(KEPT, doc.encode())
    kept_trials.cache_clear()
    kept_phase_trials.cache_clear()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
