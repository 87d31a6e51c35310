"""The tuning protocol: every method's deciding options swept over the same number of
configurations, chosen on the validation split by one procedure (``python -m bench tune``).

Each method with options that decide its regime gets a search space of exactly
:data:`CONFIGS_PER_METHOD` configurations (:data:`SPACES`; the product of the listed values). A
suite may replace a method's space with its own (``Suite.tuning_spaces``: the range that decides a
regime differs between tasks, e.g. a KL weight over decades where a per-image KL meets thousands of
pixels), and a space key may tie several options to one value (``"beta_start+beta_end"``: a static
KL weight), so the swept configuration still counts once.
``bench tune`` runs every space as a sweep of the suite's profile (the harness resumes, so a
tune that stopped goes on where it stopped), then chooses with :func:`bench.selection.select`:
the lowest validation NLL averaged over the seeds every candidate shares, among the candidates
whose validity verdict is ok (``bench.validity``); nothing looks at a test set. The choices are
written beside the records (``<results>/<suite>/selections/``) and gathered in
``<results>/<suite>/tuning/<profile>.json`` with the space, every candidate's score and verdict.

Methods without an outer space tune inside their fit on the same validation split
(:data:`TUNED_INSIDE`): Laplace's prior precision over a validation grid, temperature scaling's
temperature. MAP and deep ensembles take the profile's training recipe, which is the baseline every
method shares.
"""
from __future__ import annotations

import itertools
from pathlib import Path

from bench.errors import BenchError
from bench.store import _safe, atomic_write_json

#: configurations every tuned method gets
CONFIGS_PER_METHOD = 4

#: the evaluation kinds ``bench tune --validation-first`` scores every candidate on (``bench run --only-sets``)
VALIDATION_FIRST_KINDS = ("val", "id")
#: what ``bench tune --validation-first`` evaluated, in its stored entries ("evaluated")
VALIDATION_FIRST = ("validation first: every candidate on the validation and clean test sets (the choice and the "
                    "validity verdicts read only these), the chosen one on every set")


def validation_first(entry: dict) -> bool:
    """Whether a stored tuning entry was swept with ``bench tune --validation-first`` (by the first words of
    its ``evaluated``, so that an entry stored before that text was reworded still counts)."""
    return str(entry.get("evaluated", "")).startswith("validation first")

#: per method, the options that decide it and the values swept (their product has
#: CONFIGS_PER_METHOD members). VI: whether sigma reaches the optimum of the final objective is
#: set by the rate of its optimiser and, for PBN and mean-field VI, by the KL weight's annealing
#: (bench.validity: vi_rate_limit, vi_stationarity): the first rotated-MNIST tuning swept their prior
#: scale (0.1, 1) instead and no configuration came to rest, whatever the prior (docs/validity.md).
#: PBN's sigma rates are 0.05 and 0.1 since the 15-epoch quick profile: at 0.01 its sigma never came
#: to rest (the KL wants larger sigmas, at 10 and at 15 epochs), at 0.05 it missed on one seed in the
#: same direction, at 0.1 it comes to rest on every seed (docs/validity.md);
#: VDP++: the KL weight; MC dropout: the rate.
SPACES: dict[str, dict[str, list]] = {
    "mc_dropout": {"p": [0.05, 0.1, 0.2, 0.3]},
    "pbn": {"beta_start": [0.01, 0.2], "rho_lr": [0.05, 0.1]},
    "mfvi": {"beta_start": [0.01, 0.2], "rho_lr": [0.01, 0.05]},
    "ssvi": {"prior_scale": [0.005, 0.05], "rho_lr": [0.01, 0.05]},
    "vdp": {"kl_weight": [1e-4, 1e-3, 1e-2, 1e-1]},
}

_PRIOR_GRID = ("prior precision: validation-NLL grid ({grid_size} points over 10^{grid_min:g}..10^{grid_max:g}, "
               "extended by {grid_extend_decades:g} decades at an edge, at most {grid_max_extensions} times)")
#: methods that choose on the validation split inside their fit, and what (formatted with the
#: method's option defaults)
TUNED_INSIDE: dict[str, str] = {
    "laplace_diag": _PRIOR_GRID,
    "laplace_last_layer": _PRIOR_GRID,
    "subnet_laplace": _PRIOR_GRID,
    "temperature_scaling": "temperature: L-BFGS on the validation NLL",
}


def tuned_inside(method: str) -> str:
    """What ``method`` tunes inside its fit, with its default options filled in."""
    from methods import METHODS

    return TUNED_INSIDE[method].format(**METHODS.get(method).defaults)


#: joins the options of a space key that one value sets together ("beta_start+beta_end")
TIE = "+"


def options_of(key: str) -> list[str]:
    """The method options a space key sets: one, or several tied to one value."""
    return key.split(TIE)


def tuned_options(space: dict[str, list]) -> list[str]:
    """Every method option a space sets, tied ones each by name (the options a choice compares)."""
    return [o for k in space for o in options_of(k)]


def configurations(space: dict[str, list]) -> list[dict]:
    """The configurations of a space: the product of its values, in order (keyed as the space is)."""
    keys = list(space)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(space[k] for k in keys))]


def space_of(method: str, suite=None) -> dict[str, list] | None:
    """``method``'s space: ``suite``'s own (its ``tuning_spaces``) where it has one, else :data:`SPACES`'s."""
    own = getattr(suite, "tuning_spaces", None) or {}
    return own.get(method) or SPACES.get(method)


def entry_key(method: str, fixed: dict | None = None) -> str:
    """The key of a tuning entry in ``<results>/<suite>/tuning/<profile>.json``: the method's name, or,
    for a tune of another objective (method options held fixed away from the profile's by ``bench tune
    --set``, e.g. ``pbn.class_weights=median_frequency``), ``method[option=value,...]``, so that each
    objective keeps its own choice and neither overwrites the other."""
    if not fixed:
        return method
    return f"{method}[" + ",".join(f"{k}={v}" for k, v in sorted(fixed.items())) + "]"


def entry_method(key: str, entry: dict) -> str:
    """The method of a stored tuning entry (entries written before objectives had their own: the key)."""
    return entry.get("method") or key


def fixed_options(method: str, sets: list[str], profile_options: dict) -> dict:
    """The options of ``method`` that ``bench tune``'s ``--set`` list holds at a value other than the
    profile's (``profile_options``: the method's configuration at the profile without those sets): the
    objective the tune chooses for, when it is not the profile's."""
    from bench.config import parse_sets

    out = {}
    for key, values in parse_sets(list(sets)).items():
        if key.startswith(f"{method}."):
            option, value = key.split(".", 1)[1], values[0] if len(values) == 1 else values
            if profile_options.get(option, _MISSING) != value:
                out[option] = value
    return out


def _values(vals) -> str:
    return ",".join(repr(v) if isinstance(v, str) else f"{v:g}" for v in vals)


def sweep_sets(method: str, space: dict[str, list] | None = None) -> list[str]:
    """The ``--set`` arguments of one ``bench run`` that sweeps ``method``'s space (default: the global
    one); a space with tied options needs one run per tied value (:func:`sweep_runs`)."""
    space = SPACES[method] if space is None else space
    if any(TIE in k for k in space):
        raise BenchError(f"the space of {method} ties options ({', '.join(k for k in space if TIE in k)}): "
                         "one run per tied value, see sweep_runs")
    return [f"{method}.{k}=" + _values(vals) for k, vals in space.items()]


def sweep_runs(method: str, space: dict[str, list]) -> list[list[str]]:
    """The ``--set`` arguments of the ``bench run`` calls that sweep ``space``: one call whose
    ``--set`` lists are the space (a product), or, where options are tied, one call per combination
    of the tied values (each option set to it) with the untied ones as lists."""
    tied = [k for k in space if TIE in k]
    free = [f"{method}.{k}=" + _values(vals) for k, vals in space.items() if k not in tied]
    if not tied:
        return [free]
    return [[f"{method}.{o}=" + _values([v]) for k, v in zip(tied, combo) for o in options_of(k)] + free
            for combo in itertools.product(*(space[k] for k in tied))]


def _numbers(vals) -> list:
    """The swept values of a space key that are numbers (not bools), in increasing order."""
    return sorted(v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool))


def at_edge(space: dict[str, list], chosen: dict) -> list[str]:
    """Space keys whose chosen value is the smallest or largest of three or more swept numbers: the
    optimum may lie outside the space (with two values every choice is an edge, so none is named)."""
    out = []
    for k, vals in space.items():
        nums = _numbers(vals)
        opt = options_of(k)[0]
        if len(nums) >= 3 and opt in chosen and chosen[opt] in (min(nums), max(nums)):
            out.append(k)
    return out


def edge_probes(space: dict[str, list], chosen: dict) -> list[dict]:
    """The edge probes of a choice: for every space key whose chosen value is an end of its swept numbers
    (two or more; with two, every choice is at an end), that key one step past the end, the other options
    at the choice. The step is the ratio of the end to its neighbour where every value is positive (the
    spaces are geometric), else their difference. Each probe: ``{"key", "end": "smallest" | "largest",
    "values": {option: value}}`` (a tied key sets each of its options)."""
    out = []
    for k, vals in space.items():
        nums = _numbers(vals)
        value = chosen.get(options_of(k)[0], _MISSING)
        if len(nums) < 2 or len(nums) != len(vals) or value not in (nums[0], nums[-1]):
            continue
        low = value == nums[0]
        end, neighbour = (nums[0], nums[1]) if low else (nums[-1], nums[-2])
        past = end * (end / neighbour) if nums[0] > 0 else end + (end - neighbour)
        past = float(f"{past:.12g}")
        if isinstance(value, int) and past.is_integer():
            past = int(past)
        out.append({"key": k, "end": "smallest" if low else "largest",
                    "values": {o: past for o in options_of(k)}})
    return out


def probe_sets(method: str, chosen: dict, probe: dict | None) -> list[str]:
    """The ``--set`` arguments of the fit of ``probe`` (:func:`edge_probes`), or of the choice with None."""
    return [f"{method}.{o}=" + _values([v]) for o, v in {**chosen, **(probe or {}).get("values", {})}.items()]


def refit_root(results) -> Path:
    """The results store beside ``results`` where ``bench tune --probe-edges`` fits the edge probes of a
    method built on the MAP network when the networks its choice stood on are not kept: there the probes and
    the choice, fitted again, stand on the same MAP networks, trained there. It is a store of its own beside
    ``results``, not inside it: a reading of every suite under ``results`` would take its records for the
    tune's."""
    results = Path(results).resolve()
    return results.with_name(f"{results.name}-edge-probes")


def score_edge_probes(df, method: str, tuned: list[str], choice: dict, probes: list[dict], configs: list[dict],
                      missing: str = "", refit: str = "", **only) -> list[dict]:
    """Each of ``probes`` beside ``choice`` as the protocol would weigh them: ``configs`` the full method
    configurations of the choice and of each probe (in that order), ``df`` the records with their verdicts
    (``attach_validity``), ``only`` :func:`bench.selection.choose_on_validation`'s restrictions. A scored
    probe adds ``config_hash``, ``per_seed``, ``score`` and ``validity`` and the choice's ``choice_score``
    over the same seeds, the ``p_value`` of a two-sided paired t-test of the two over those seeds (the
    boards' test of a best row, :mod:`bench.leaderboard.stats`; None with one seed), and ``beats_choice``:
    it passes its validity checks and its mean validation NLL is lower, beyond the seed noise where there
    are two seeds or more (p below the boards' ``ALPHA``); with one seed, lower as the choice was made. A
    probe as good as the choice within the seed noise does not make it an edge: the validation NLL is flat
    there, not falling past the end. A probe that cannot be weighed says why (``not_scored``): no records
    (``missing``, when given, says why it has none), or not on the choice's fit of the MAP network. ``refit``:
    ``df`` holds the choice fitted again beside the probes, not the fit it was chosen on; a weighed probe
    keeps the reason (``choice_refit``)."""
    import math

    from bench.leaderboard.stats import ALPHA, paired_p_value
    from bench.selection import choose_on_validation
    from bench.validity import OK

    out = []
    for probe, cfg in zip(probes, configs[1:]):
        if df.empty:
            out.append({**probe, "not_scored": missing or "no records"})
            continue
        try:
            (c,) = [c for c in choose_on_validation(df, method, tuned, model=choice["model"],
                                                    configs=[configs[0], cfg], **only)]
        except (BenchError, ValueError) as exc:
            out.append({**probe, "not_scored": missing or f"no validation records of the probe and the choice ({exc})"})
            continue
        rows = {_values_key(r["values"]): r for r in c["candidates"]}
        mine = rows.get(_values_key({**choice["chosen"], **probe["values"]}))
        theirs = rows.get(_values_key(choice["chosen"]))
        if mine is None or theirs is None:  # one_network kept one of the two (c["other_networks"]), or one has none
            why = ("the probe and the choice stand on different fits of the MAP network" if c.get("other_networks")
                   else missing or "no validation records of the probe" if mine is None
                   else "no validation records of the choice beside the probe's")
            out.append({**probe, "not_scored": why})
            continue
        p_value = paired_p_value([mine["per_seed"][s] - theirs["per_seed"][s] for s in sorted(mine["per_seed"])])
        separated = p_value < ALPHA if math.isfinite(p_value) else True  # one seed: as the choice was made
        out.append({**probe, "config_hash": mine["config_hash"], "seeds": sorted(mine["per_seed"]),
                    "per_seed": mine["per_seed"], "score": mine["score"], "validity": mine["validity"],
                    "choice_score": theirs["score"], "p_value": p_value if math.isfinite(p_value) else None,
                    "beats_choice": bool(mine["validity"] == OK and mine["score"] < theirs["score"] and separated),
                    **({"choice_refit": refit} if refit else {})})
    return out


def _values_key(values: dict) -> str:
    import json

    return json.dumps(values, sort_keys=True, default=str)


def carry_edge_probes(choices: list[dict], entry: dict | None) -> None:
    """Give each of ``choices`` the edge probes its stored entry holds for the same choice (model and
    configuration hash): a tune that chooses again without probing keeps what the probes found."""
    stored = {(c["model"], c.get("chosen_config_hash")): c["edge_probes"]
              for c in (entry or {}).get("choices", []) if c.get("edge_probes") is not None}
    for c in choices:
        probes = stored.get((c["model"], c.get("chosen_config_hash")))
        if probes is not None and "edge_probes" not in c:
            c["edge_probes"] = probes


def _seed_test(p: dict) -> str:
    """The seed test of a weighed edge probe, e.g. "paired t-test p 0.96 over 3 seeds"; "" with one seed."""
    return f"paired t-test p {p['p_value']:.2g} over {len(p['seeds'])} seeds" if p.get("p_value") is not None else ""


def _probe_outcome(p: dict) -> str:
    """How a weighed edge probe came out, in words (its seed test where it has one)."""
    from bench.selection import probe_outcome

    test = f" ({_seed_test(p)})" if _seed_test(p) else ""
    return {"better": "passes its checks: better" + test, "fails": f"fails its checks ({p['validity']})",
            "tied": "passes its checks: tied within the seed noise" + test, "worse": "no better"}[probe_outcome(p)]


def probe_text(choice: dict) -> str:
    """What the edge probes of a stored choice found, e.g. "probed one step past its edges: prior_scale
    0.0005 scores 0.0512 (the choice 0.0501), no better; rho_lr 0.25 fails its checks"; "" when unprobed."""
    parts = []
    for p in choice.get("edge_probes") or []:
        v = next(iter(p["values"].values()))
        name = f"{p['key'].replace(TIE, ' = ')} {v:g}"
        if "not_scored" in p:
            parts.append(f"{name} not weighed ({p['not_scored']})")
        else:
            whose = "the refitted choice's" if p.get("choice_refit") else "the choice's"
            parts.append(f"{name} scores {p['score']:.4g} against {whose} {p['choice_score']:.4g}, "
                         + _probe_outcome(p))
    refits = sorted({p["choice_refit"] for p in choice.get("edge_probes") or [] if p.get("choice_refit")})
    return ("probed one step past its edges: " + "; ".join(parts) + "".join(f" ({r})" for r in refits)) if parts else ""


def check_spaces(spaces: dict[str, dict[str, list]] = SPACES, n: int = CONFIGS_PER_METHOD) -> None:
    """Every space has exactly ``n`` distinct configurations (the protocol's fairness rule), and no
    option is swept twice (alone and tied, or in two ties)."""
    for m, space in spaces.items():
        opts = tuned_options(space)
        twice = sorted({o for o in opts if opts.count(o) > 1})
        if twice:
            raise BenchError(f"tuning space of {m} sets {', '.join(twice)} more than once")
        cfgs = configurations(space)
        distinct = {tuple(sorted(c.items())) for c in cfgs}
        if len(cfgs) != n or len(distinct) != n:
            raise BenchError(f"tuning space of {m} has {len(distinct)} distinct configurations, the protocol "
                             f"gives every method {n}")


def summarize(method: str, choices: list[dict], space: dict[str, list] | None = None) -> dict:
    """The tuning entry of one method: its space (default: the global one) and, per model, the
    choice with every candidate."""
    space = SPACES[method] if space is None else space
    n = len(configurations(space))

    def entry(c):
        missing = n - len(c["candidates"])
        why = "; ".join(([f"{missing} of {n} configurations have no records on every seed: chosen among the "
                          "others"] if missing > 0 else []) + ([c["why"]] if c.get("why") else []))
        return {"model": c["model"], "chosen": c["chosen"], "chosen_config_hash": c["chosen_config_hash"],
                "seeds": c["seeds"], "metric": c["metric"], "at_edge": at_edge(space, c["chosen"]),
                "chosen_among_valid": c.get("chosen_among_valid", True), **({"why": why} if why else {}),
                "candidates": c["candidates"],
                **({"edge_probes": c["edge_probes"]} if c.get("edge_probes") is not None else {})}

    return {"space": space, "configurations": n, "choices": [entry(c) for c in choices]}


def tuning_path(results: str | Path, suite: str, profile: str) -> Path:
    return Path(results) / _safe(suite) / "tuning" / f"{_safe(profile)}.json"


def write_tuning(results: str | Path, suite: str, profile: str, entries: dict, failed: dict,
                 sets: list[str] = ()) -> Path:
    """Store this run's choices in ``<results>/<suite>/tuning/<profile>.json``, beside the entries of
    methods an earlier run tuned (a suite's methods are often tuned one run at a time); each entry
    keeps the ``--set`` options its sweep ran with."""
    path = tuning_path(results, suite, profile)
    kept, kept_failed = {}, {}
    if path.is_file():
        old = read_tuning(path)
        for m, e in (old.get("methods") or {}).items():
            if m not in entries and m not in failed:
                kept[m] = {**e, "sets": entry_sets(old, e)}
        kept_failed = {m: why for m, why in (old.get("not_chosen") or {}).items()
                       if m not in entries and m not in failed}
    methods = {**kept, **{m: {**e, "sets": list(sets)} for m, e in entries.items()}}
    atomic_write_json(path, {"suite": suite, "profile": profile, "configs_per_method": CONFIGS_PER_METHOD,
                             "protocol": "lowest mean validation NLL over the shared seeds, among candidates "
                                         "whose validity verdict is ok (bench.selection)",
                             "methods": dict(sorted(methods.items())), "not_chosen": {**kept_failed, **failed},
                             "tuned_inside_the_fit": {m: tuned_inside(m) for m in sorted(TUNED_INSIDE)}})
    return path


def spaces_markdown(suite=None) -> str:
    """The protocol itself as markdown: every method's space (``suite``'s own where it has one, said
    so), or what it tunes inside its fit."""
    from methods import METHODS

    own = getattr(suite, "tuning_spaces", None) or {}
    lines = [f"| method | swept ({CONFIGS_PER_METHOD} configurations each) |", "| --- | --- |"]
    for m in METHODS.names():
        space = space_of(m, suite)
        if space:
            what = " x ".join(f"{k.replace(TIE, ' = ')} {', '.join(f'{v:g}' for v in vals)}" for k, vals in space.items())
            what += f" ({suite.name}'s own space)" if m in own else ""
        elif m in TUNED_INSIDE:
            what = "nothing outside the fit; inside it, on validation: " + tuned_inside(m)
        else:
            what = "nothing: the profile's recipe"
        lines.append(f"| {m} | {what} |")
    return "\n".join(lines)


def tuning_markdown(doc: dict) -> str:
    """The stored tuning of a suite as markdown: per method and model, the space and the choice."""
    lines = [f"| method | model | swept ({doc['configs_per_method']} configurations) | chosen | seeds | "
             "candidates with a verdict of ok | note |",
             "| --- | --- | --- | --- | --- | ---: | --- |"]
    for m in sorted(doc["methods"]):
        e = doc["methods"][m]
        swept = "; ".join(f"{k.replace(TIE, ' = ')} {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in vals)}"
                          for k, vals in e["space"].items())
        now = space_now(doc, m, e)
        stale = (f"the suite gives {entry_method(m, e)} another space now ({_space_text(now) or 'none'}): not the "
                 "protocol's choice until the tune runs again" if now is not None else "")
        for c in e["choices"]:
            ok = sum(1 for r in c["candidates"] if r.get("validity", "ok") == "ok")
            chosen = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in c["chosen"].items()) \
                if c["chosen"] else "none"
            edges = edge_keys(e["space"], c)
            note = "; ".join(filter(None, [
                "" if c.get("chosen_among_valid", True) else "no candidate passes its validity checks: chosen "
                                                               "among all, not method evidence",
                stale, f"at the edge: {', '.join(edges)}" if edges and not stale else "", probe_text(c),
                c.get("why", ""), "validation first" if validation_first(e) else ""]))
            lines.append(f"| {m} | {c['model']} | {swept} | {chosen} | {','.join(map(str, c['seeds']))} | "
                         f"{ok}/{len(c['candidates'])} | {note} |")
    for m, why in sorted(doc.get("not_chosen", {}).items()):
        lines.append(f"| {m} | | | not chosen | | | {why} |")
    return "\n".join(lines)


def read_tuning(path: Path) -> dict:
    """The stored tuning at ``path``; BenchError (exit 2) naming the file when it is not one."""
    import json

    from bench.errors import BenchError

    try:
        doc = json.loads(Path(path).read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("methods") or {}, dict):
            raise ValueError("not a JSON object with a 'methods' object")
        for entry in (doc.get("methods") or {}).values():
            for c in entry.get("choices", []):
                c["model"], c["chosen_config_hash"]  # noqa: B018 - the fields every reader needs
        if (doc.get("methods") or {}) and not (doc.get("suite") and doc.get("profile")):
            raise ValueError("no suite or profile")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError) as exc:
        raise BenchError(f"{path} is not a stored tuning ({type(exc).__name__}: {exc}); delete it or rerun "
                         f"python -m bench tune to write it again") from None
    return doc


def stored_entry(results: str | Path, suite: str, profile: str, method: str) -> dict:
    """The stored tuning's entry of ``method`` (``<results>/<suite>/tuning/<profile>.json``: its space,
    choices, ``sets`` and training budget); empty when there is no stored tuning or no such entry."""
    path = tuning_path(results, suite, profile)
    return ((read_tuning(path).get("methods") or {}).get(method) or {}) if path.is_file() else {}


def entry_sets(doc: dict, entry: dict) -> list[str]:
    """The ``--set`` options a stored tuning ``doc``'s ``entry`` was swept with (an entry of earlier
    code, which did not keep its own: the tuning's)."""
    return list(entry.get("sets", doc.get("sets", [])))


def stored_sets(results: str | Path, suite: str, profile: str, key: str) -> list[str] | None:
    """:func:`entry_sets` of the stored entry ``key`` (a method, or ``method[objective]``); None when
    there is no such entry."""
    path = tuning_path(results, suite, profile)
    if not path.is_file():
        return None
    doc = read_tuning(path)
    entry = (doc.get("methods") or {}).get(key)
    return None if entry is None else entry_sets(doc, entry)


def stored_choice(results: str | Path, suite: str, profile: str, method: str, model: str) -> dict | None:
    """The choice the stored tuning (``<results>/<suite>/tuning/<profile>.json``) made for ``method`` on
    ``model`` (``chosen``, ``chosen_among_valid``, the candidates); None when there is no stored tuning
    or it has no such choice."""
    entry = stored_entry(results, suite, profile, method)
    return next((c for c in entry.get("choices", []) if c["model"] == model), None)


def valid_choice(results: str | Path, suite: str, profile: str, method: str, model: str) -> dict:
    """The options of :func:`stored_choice` when they were chosen among fits that pass their
    validity checks; ``{}`` otherwise (no stored choice, or none of its candidates passed): the
    configuration a table takes a method's rows at, on top of the method's defaults."""
    c = stored_choice(results, suite, profile, method, model)
    return dict(c["chosen"]) if c is not None and c.get("chosen_among_valid", True) else {}


def stored_objectives(results: str | Path, suite: str, profile: str, method: str) -> list[dict]:
    """The options each stored tune of another objective of ``method`` held fixed (``bench tune --set
    ssvi.epochs=60``: ``{"epochs": 60}``), one dict per objective, in the order of their keys."""
    path = tuning_path(results, suite, profile)
    if not path.is_file():
        return []
    entries = (read_tuning(path).get("methods") or {}).items()
    return [dict(e["fixed"]) for k, e in sorted(entries) if entry_method(k, e) == method and e.get("fixed")]


def objective_pins(results: str | Path, suite: str, profile: str, method: str, fixed: dict | None = None) -> dict:
    """The options that tell one objective's fits of ``method`` from another's. With ``fixed`` (a tune of
    another objective, e.g. ``{"epochs": 60}``): those. Without: for every option a stored tune of
    another objective held fixed, the profile's value of it, so that a table of the profile's objective
    never takes e.g. a 60-epoch fit for one of its own."""
    if fixed:
        return dict(fixed)
    others = stored_objectives(results, suite, profile, method)
    if not others:
        return {}
    from bench.config import resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    # the method's configuration at the profile, as `bench tune` judges which options an objective fixes
    profile_cfg = resolve_plan(SUITES.get(suite)(), profile, [method], {}, method_registry=METHODS).methods[method][0]
    return {o: profile_cfg.get(o) for f in others for o in f}


def objective_options(results: str | Path, suite: str, profile: str, method: str, model: str,
                      fixed: dict | None = None) -> dict:
    """The configuration a table takes ``method``'s rows at for one objective: :func:`objective_pins`
    plus that objective's :func:`valid_choice` (the profile's without ``fixed``; ``method[epochs=60]``'s
    with ``fixed={"epochs": 60}``)."""
    return {**objective_pins(results, suite, profile, method, fixed),
            **valid_choice(results, suite, profile, entry_key(method, fixed), model)}


def parse_objective(items: list[str] | None, results: str | Path, suite: str, profile: str) -> dict[str, dict]:
    """``--objective ssvi.epochs=60`` (a table's command line) as ``{"ssvi": {"epochs": 60}}``: the options
    a stored tune of another objective held fixed, as ``bench tune --set`` gave them. An option with
    several values, or an objective no stored tune has, raises BenchError naming the stored ones."""
    from bench.config import parse_sets

    out: dict[str, dict] = {}
    for key, values in parse_sets(items).items():
        method, _, option = key.partition(".")
        if not option or len(values) != 1:
            raise BenchError(f"--objective takes METHOD.OPTION=VALUE (one value), got {key}={values}")
        out.setdefault(method, {})[option] = values[0]
    for method, fixed in out.items():
        stored = stored_objectives(results, suite, profile, method)
        if fixed not in stored:
            names = ", ".join(entry_key(method, f) for f in stored) or "none"
            raise BenchError(f"no stored tune of the objective {entry_key(method, fixed)} in "
                             f"{tuning_path(results, suite, profile)}; stored objectives of {method}: {names}")
    return out


def budget_difference(results: str | Path, suite: str, profile: str, method: str, sets=()) -> str | None:
    """How the training budget the stored choice of ``method`` was made at differs from the one
    ``profile`` (with ``sets``) trains at now, e.g. ``"epochs 10 (the profile now: 15)"``; None when
    they are the same. A choice at another budget is not this budget's: rerun ``bench tune``.
    Entries of earlier code, which did not store the budget, are judged by the training options
    their sweeps set (``train.*`` in their ``sets``)."""
    from bench.config import parse_sets, resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    entry = stored_entry(results, suite, profile, method)
    if not entry:
        return None
    now = resolve_plan(SUITES.get(suite)(), profile, [entry_method(method, entry)], parse_sets(list(sets)),
                       method_registry=METHODS).train.to_dict()
    then = entry.get("train")
    if not isinstance(then, dict):
        then = dict(now)
        for key, values in parse_sets(entry.get("sets") or []).items():
            if key.startswith("train.") and len(values) == 1:
                then[key.split(".", 1)[1]] = values[0]
    diff = [f"{k} {then.get(k)!r} (the profile now: {v!r})" for k, v in now.items() if then.get(k, v) != v]
    return "; ".join(diff) or None


def _stored_entries(results_dirs):
    """``(doc, key, entry)`` of every method entry (``key``: the method, or ``method[objective]``) of
    every stored tuning (``<results>/<suite>/tuning/<profile>.json``) under ``results_dirs``, in order
    (files by path, entries by key, as :func:`write_tuning` stores them)."""
    for d in results_dirs:
        for path in sorted(Path(d).glob("*/tuning/*.json")):
            doc = read_tuning(path)
            for key, entry in sorted((doc.get("methods") or {}).items()):
                yield doc, key, entry


def _stored_choices(results_dirs, objectives: bool = False):
    """``((suite, profile, model, method), choice, fixed)`` of every choice a stored tuning
    (``<results>/<suite>/tuning/<profile>.json``) made for the profile's objective (``fixed`` empty), or,
    with ``objectives``, for every objective (``fixed``: the options its tune held away from the
    profile's, :func:`fixed_options`); a later directory's choice replaces an earlier's."""
    for doc, key, entry in _stored_entries(results_dirs):
        fixed = dict(entry.get("fixed") or {})
        if fixed and not objectives:
            continue
        for c in entry.get("choices", []):
            yield (doc["suite"], doc["profile"], c["model"], entry_method(key, entry)), c, fixed


def _latest_per_objective(results_dirs) -> dict:
    """``{(suite, profile, model, method): {objective: (fixed, choice)}}`` over every stored tuning, the
    objective named by its fixed options (:func:`entry_key`; the profile's: no fixed option); a later
    directory's choice of an objective replaces an earlier's."""
    out: dict = {}
    for key, c, fixed in _stored_choices(results_dirs, objectives=True):
        out.setdefault(key, {})[entry_key("", fixed)] = (fixed, c)
    return out


def chosen_configs(results_dirs) -> dict[tuple[str, str, str, str], set[str]]:
    """``(suite, profile, model, method) -> {config_hash, ...}``: the configurations the stored tunings
    chose, one per objective tuned (the profile's, and e.g. the class-weighted ELBO's)."""
    return {key: {c["chosen_config_hash"] for _, c in per.values()}
            for key, per in _latest_per_objective(results_dirs).items()}


def chosen_options(results_dirs) -> dict[tuple[str, str, str, str], dict]:
    """``(suite, profile, model, method) -> {option: value}``: the tuned options a stored tuning chose for
    the profile's objective (only the swept ones; the rest are the profile's)."""
    return {key: dict(c["chosen"]) for key, c, _ in _stored_choices(results_dirs)}


def objective_choices(results_dirs) -> dict[tuple[str, str, str, str], list[tuple[dict, dict]]]:
    """``(suite, profile, model, method) -> [(fixed, chosen), ...]``: the choices of the tunes of other
    objectives (``bench tune --set <method>.<option>=...``): the options each held fixed and the tuned
    options it chose for them."""
    out = {key: [(fixed, dict(c["chosen"])) for fixed, c in per.values() if fixed]
           for key, per in _latest_per_objective(results_dirs).items()}
    return {key: v for key, v in out.items() if v}


def choice_networks(choice: dict, df) -> dict[str, list[str]]:
    """``{network: [config_hash, ...]}`` of a stored choice's candidates, by the network identity of
    their records in ``df`` (:func:`bench.reporting.data.model_identities`), when they stand on more
    than one (a choice stored before :func:`bench.selection.one_network` kept them apart), else by the
    fit of a seed's MAP network they are built on, when they stand on more than one
    (:func:`bench.selection.map_fit_groups`); ``{}`` when they share one network (a choice that left
    other networks' candidates out, ``other_networks``, compared one network's)."""
    from bench.reporting.data import model_identities
    from bench.selection import fits_text, map_fit_groups, map_fits

    hashes = [r["config_hash"] for r in choice.get("candidates", [])]
    sub = df[df["config_hash"].isin(hashes)] if "config_hash" in df.columns else df.iloc[:0]
    nets: dict[str, list[str]] = {}
    for h, net in zip(sub["config_hash"], model_identities(sub)):
        if h not in nets.get(net or "none", []):
            nets.setdefault(net or "none", []).append(h)
    if len(nets) > 1:
        return nets
    # one identity: the candidates may still stand on different fits of a seed's MAP network
    fits = map_fits(sub, str(choice.get("method", "")), choice.get("model"))
    groups = map_fit_groups([(h, None, None) for h in dict.fromkeys(sub["config_hash"])], fits)
    if len(groups) < 2:
        return {}
    name = next(iter(nets), "none")
    return {f"{name}, MAP network fit {i + 1} ({fits_text(g, fits)})": [h for h, _, _ in g]
            for i, g in enumerate(groups)}


def mixed_network_notes(results_dirs, df) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` for every stored choice of the profile's objective whose
    candidates stand on more than one network (:func:`choice_networks`): its validation scores compare
    networks as well as options, so a row at that choice is not chosen by the protocol."""
    out = {}
    for key, c, _ in _stored_choices(results_dirs):
        nets = choice_networks(c, df)
        if nets:
            where = "; ".join(f"{len(hs)} on {net}" for net, hs in sorted(nets.items()))
            out[key] = (f"its stored `bench tune` choice compared candidates on {len(nets)} different networks "
                        f"({where}): the scores may differ by network as well as by option, so the "
                        f"choice is not the protocol's; rerun the tune on one network")
    return out


def stale_space_notes(results_dirs) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` for every stored choice of the profile's objective made
    over another space than the one the suite gives the method now (:func:`space_of`; e.g. a suite that
    since gave the method its own space): its candidates are not the protocol's, so a row at that
    choice is not chosen by it until the tune runs again over the space of now."""
    def why(doc, key, entry, method):
        now = space_now(doc, key, entry)
        return None if now is None else (
            f"its stored `bench tune` choice was made over another space than the suite gives {method} now "
            f"({_space_text(entry['space'])}; now {_space_text(now) or 'none'}): {_rerun(doc, method)}")

    return _profile_choice_notes(results_dirs, why)


def _profile_choice_notes(results_dirs, why) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why(doc, key, entry, method)`` for every choice of a stored
    tune of the profile's objective (another objective's left out) where ``why`` gives a reason."""
    out = {}
    for doc, key, entry in _stored_entries(results_dirs):
        method = entry_method(key, entry)
        reason = None if entry.get("fixed") else why(doc, key, entry, method)
        for c in entry.get("choices", []) if reason else []:
            out[(doc["suite"], doc["profile"], c["model"], method)] = reason
    return out


def _rerun(doc: dict, method: str) -> str:
    return f"rerun the tune (`python -m bench tune --suite {doc['suite']} --profile {doc['profile']} --methods {method}`)"


def other_split_notes(results_dirs) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` for every stored choice of the profile's objective made
    on another validation split than the profile gives now (``data.val_sequences``: the entry's
    ``data``, or its ``--set`` list for a tune stored before entries kept their data): its validation
    scores are another split's, so a row at that choice is not chosen by the protocol on this one."""
    def why(doc, key, entry, method):
        then, now = entry_val_split(entry), profile_val_split(doc.get("suite"), doc.get("profile"))
        return None if now is None or then == now else (
            f"its stored `bench tune` choice was made on another validation split ({_split_text(then)}) than "
            f"the profile's now ({_split_text(now)}): {_rerun(doc, method)}")

    return _profile_choice_notes(results_dirs, why)


def entry_val_split(entry: dict) -> tuple:
    """The validation split a stored tuning entry's sweeps ran on: its ``data.val_sequences`` (from the
    entry's ``data``, else from its ``--set`` list), ``()`` for the suite's own."""
    import json

    from bench.validation_split import val_split_of

    if isinstance(entry.get("data"), dict):
        return val_split_of(entry["data"])
    for item in entry.get("sets") or []:
        k, _, v = str(item).partition("=")
        if k.strip() == "data.val_sequences":
            try:
                return tuple(json.loads(v))
            except ValueError:
                return (v,)
    return ()


def profile_val_split(suite: str | None, profile: str | None) -> tuple | None:
    """The validation split ``suite``'s ``profile`` gives now (``data.val_sequences``; ``()`` for the
    suite's own), None for a suite or profile not registered here."""
    from bench.suites import SUITES
    from bench.validation_split import val_split_of

    if suite not in SUITES or profile not in SUITES.get(suite).profiles:
        return None
    return val_split_of(SUITES.get(suite).profiles[profile].get("data", {}))


def _split_text(split: tuple) -> str:
    return f"data.val_sequences={list(split)}" if split else "the suite's own"


def space_now(doc: dict, key: str, entry: dict) -> dict | None:
    """The space the suite of stored tuning ``doc`` gives the method of its entry ``key`` now
    (:func:`space_of`; ``{}`` for none) where that is another than the entry was swept over; None where
    it is the same, or the suite is not registered here or the entry stored no space."""
    from bench.suites import SUITES

    then = entry.get("space")
    if doc.get("suite") not in SUITES or not isinstance(then, dict) or not then:
        return None
    now = space_of(entry_method(key, entry), SUITES.get(doc["suite"])) or {}
    same = {k: list(v) for k, v in then.items()} == {k: list(v) for k, v in now.items()}
    return None if same else now


def _space_text(space: dict) -> str:
    return "; ".join(f"{k.replace(TIE, ' = ')} {', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in vals)}"
                     for k, vals in space.items())


def edge_choice_notes(results_dirs) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` for every stored choice of the profile's objective at an
    end of a swept range (:func:`at_edge`; a later directory's choice replaces an earlier's): the protocol
    chose it, but a value beyond the space may do better, so a row at it is the best of this space only,
    not the method's (as a Laplace prior at the edge of its grid)."""
    out = {}
    for doc, key, entry, c, edge in _choice_edges(results_dirs):
        if entry.get("fixed"):
            continue  # another objective's tune
        method = entry_method(key, entry)
        k = (doc["suite"], doc["profile"], c["model"], method)
        out.pop(k, None)
        if edge:
            out[k] = (f"its stored `bench tune` choice is at the edge of the swept range ({edge}): a value "
                      f"beyond it may do better, so the row is the best of this space, not the method's; "
                      f"move {method}'s space past that end (the suite's `tuning_spaces`) and {_rerun(doc, method)}")
    return out


def chooses_on_validation(method: str, suite: str) -> bool:
    """Whether ``method``'s rows on ``suite`` stand at options chosen on the validation split: it has a
    ``bench tune`` space there, or tunes on validation inside its fit."""
    from bench.suites import SUITES

    return method in TUNED_INSIDE or bool(space_of(method, SUITES.get(suite) if suite in SUITES else None))


def _shifted_split_methods(df):
    """``((suite, profile, model), split, shift, methods)`` for every group of ``df`` whose validation
    split is unlike its test split (:func:`bench.validation_split.validation_shifts`), ``methods`` those
    with records on that split that choose options on validation (:func:`chooses_on_validation`)."""
    from bench.validation_split import split_keys, validation_shifts

    keys = split_keys(df)
    for (suite, profile, model, split), shift in validation_shifts(df).items():
        if not shift.shifted:
            continue
        mine = (df["suite"] == suite) & (df["profile"] == profile) & (df["model"] == model) & (keys == split)
        yield (suite, profile, model), split, shift, [m for m in sorted(set(df.loc[mine, "method"].dropna()))
                                                      if chooses_on_validation(m, suite)]


def split_shift_notes(df) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` for every method with records whose rows stand at
    options chosen on a validation split unlike the test split (:func:`_shifted_split_methods`)."""
    from bench.validation_split import why_text

    return {(*where, method): (f"{why_text(shift, split)}, so the row compares {method} at options the test may not "
                               "reward; a test-like validation split is the remedy")
            for where, split, shift, methods in _shifted_split_methods(df) for method in methods}


def board_split_note(df, suite: str, profile: str, model: str) -> list[str]:
    """The notes of a board (the records ``df`` of one suite, profile and model) whose validation split
    (each split its rows tuned on) is unlike its test split, naming its methods whose options were
    chosen there; [] where none is."""
    from bench.validation_split import why_text

    return [f"{', '.join(methods)}: {why_text(shift, split)} (bench tune's choices, the temperature and the Laplace "
            "prior precision alike): their rows are no verdict on the methods, which other options may serve better "
            "on the test; a test-like validation split is the remedy (docs/validity.md)"
            for where, split, shift, methods in _shifted_split_methods(df)
            if where == (suite, profile, model) and methods]


def verdict_notes(results_dirs, df) -> dict[tuple[str, str, str, str], str]:
    """``(suite, profile, model, method) -> why`` a row at a stored choice of the profile's objective is no
    verdict on the method: the choice is not the tuning protocol's, made over another space than the
    suite's now (:func:`stale_space_notes`) or comparing candidates on more than one network
    (:func:`mixed_network_notes`), or it sits at the edge of its space (:func:`edge_choice_notes`; not
    named for a stale choice, whose space is no longer the suite's), or was made on another validation
    split than the profile's now (:func:`other_split_notes`); or the method chooses its options
    on a validation split unlike the test split (:func:`split_shift_notes`, from
    the MAP rows of ``df``, tuned by ``bench tune`` or inside the fit); every reason that holds."""
    stale, mixed, edges = (stale_space_notes(results_dirs), mixed_network_notes(results_dirs, df),
                           edge_choice_notes(results_dirs))
    edges = {k: n for k, n in edges.items() if k not in stale}
    split, other = split_shift_notes(df), other_split_notes(results_dirs)
    return {k: "; ".join(n for n in (split.get(k), other.get(k), stale.get(k), mixed.get(k), edges.get(k)) if n)
            for k in {**split, **other, **stale, **mixed, **edges}}


def _choice_edges(results_dirs):
    """``(doc, key, entry, choice, edge)`` of every choice of every stored tuning (:func:`_stored_entries`),
    ``edge`` the ends of swept ranges it sits at (:func:`_edge_text`; "" when none)."""
    for doc, key, entry in _stored_entries(results_dirs):
        for c in entry.get("choices", []):
            yield doc, key, entry, c, _edge_text(entry.get("space") or {}, c)


def _weighed_probes(choice: dict) -> dict[str, dict]:
    """Space key -> the edge probe of a stored choice that was weighed against it (not ``not_scored``)."""
    return {p["key"]: p for p in choice.get("edge_probes") or [] if "not_scored" not in p}


def edge_keys(space: dict, choice: dict) -> list[str]:
    """The space keys a stored choice sits at the edge of: those its edge probe past the end beats
    (:func:`score_edge_probes`), and, unprobed, those :func:`at_edge` names (three or more values); a key
    whose probe the choice holds against is not an edge whatever its count of values."""
    probes = _weighed_probes(choice)
    named = choice.get("at_edge") or []
    return [k for k in space if (probes[k]["beats_choice"] if k in probes else k in named)]


def unprobed_ends(space: dict, choice: dict) -> list[str]:
    """The keys of ``space`` with two numeric values (too few for :func:`at_edge`) at an end of which a
    choice made among valid fits sits with no weighed edge probe past it: e.g. "rho_lr = 0.05, the
    larger of 0.01, 0.05"; [] for a choice made among all (nothing to defend)."""
    if not choice.get("chosen_among_valid", True):
        return []
    probed = _weighed_probes(choice)
    out = []
    for k, vals in space.items():
        nums = _numbers(vals)
        value = choice["chosen"].get(options_of(k)[0])
        if len(nums) == 2 == len(vals) and value in nums and k not in probed:
            out.append(f"{k.replace(TIE, ' = ')} = {value:g}, the {'smaller' if value == nums[0] else 'larger'} of "
                       f"{nums[0]:g}, {nums[1]:g}")
    return out


def _edge_text(space: dict, choice: dict) -> str:
    """Which end of which swept range ``choice`` (a stored choice with its ``at_edge`` keys and edge probes)
    sits at (:func:`edge_keys`), e.g. "kl_weight = 0.0001, the smallest of 0.0001, 0.001, 0.01, 0.1"; with
    the probe that beat it; "" when none."""
    probes = _weighed_probes(choice)
    parts = []
    for k in edge_keys(space, choice):
        vals = _numbers(space.get(k, []))
        value = choice["chosen"].get(options_of(k)[0])
        end = "smallest" if value == vals[0] else "largest"
        text = f"{k.replace(TIE, ' = ')} = {value:g}, the {end} of {', '.join(f'{v:g}' for v in vals)}"
        if k in probes:
            p = probes[k]
            test = _seed_test(p)
            text += (f"; one step past it, {next(iter(p['values'].values())):g} passes its checks at a lower "
                     f"validation NLL ({p['score']:.4g} against {p['choice_score']:.4g}{', ' + test if test else ''})")
        parts.append(text)
    return "; ".join(parts)


def choice_notes(results_dirs, df=None) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """``(suite, profile, model) -> [(method, note), ...]`` naming each tuned method whose stored choice a
    board's reader must not take as the protocol's last word on it: made over another space than the
    suite gives the method now (:func:`stale_space_notes`) or on another validation split than the
    profile's (:func:`other_split_notes`), comparing candidates on more than one network
    (:func:`mixed_network_notes`; only with ``df``, the records the candidates are among), or sitting at
    an end of a swept range (:func:`edge_keys`: a value beyond the space may do better, so the comparison
    holds for this space only; not said of a stale choice), or at an end of a two-value range no probe has
    weighed (:func:`unprobed_ends`). ``method`` is the registered method (an
    objective's entry, ``pbn[class_weights=...]``, gives ``pbn``)."""
    stale = stale_space_notes(results_dirs)
    mixed = mixed_network_notes(results_dirs, df) if df is not None else {}
    out: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for (suite, profile, model, method), why in [*stale.items(), *other_split_notes(results_dirs).items(),
                                                 *mixed.items()]:
        out.setdefault((suite, profile, model), []).append((method, f"{method}: {why}"))
    for doc, entry_name, entry, c, edge in _choice_edges(results_dirs):  # entry_name: method, or method[objective]
        method = entry_method(entry_name, entry)
        where = (doc["suite"], doc["profile"], c["model"])
        if edge and not (where + (method,) in stale and not entry.get("fixed")):
            out.setdefault(where, []).append((
                method, f"{entry_name}: its tuning chose the edge of the swept range ({edge}): "
                        "a value beyond it may do better; the row is the best of this space"))
        unprobed = unprobed_ends(entry.get("space") or {}, c)
        if unprobed and not edge and not (where + (method,) in stale and not entry.get("fixed")):
            out.setdefault(where, []).append((
                method, f"{entry_name}: its choice is an end of a two-value range ({', '.join(unprobed)}), which "
                        "the protocol cannot call an edge, and no probe past it has been weighed (bench tune "
                        "--probe-edges): whether a value beyond does better is untested"))
        if validation_first(entry):
            out.setdefault(where, []).append((
                method, f"{entry_name}: tuned validation first (bench tune --validation-first): a candidate it "
                        "did not choose was scored on the validation and clean test sets only (no shift or OOD "
                        "columns) unless an earlier run had scored it on every set"))
    return out


def board_choice_notes(notes, board) -> list[str]:
    """The notes of :func:`choice_notes` that concern ``board`` (a :class:`bench.leaderboard.board.Board`):
    its suite, profile and model, and a method with rows on it."""
    return [note for method, note in notes.get((board.suite, board.profile, board.model), [])
            if method in board.methods]


def not_chosen(df, chosen: dict):
    """Boolean mask of the records ``--chosen-only`` leaves out (``chosen``: :func:`chosen_configs`): every
    configuration of a method that a stored tuning covers (same suite, profile and model) other than the
    ones it chose (one per objective tuned) -- the
    candidates it rejected, and configurations outside its space (an earlier space's sweep)."""
    import pandas as pd

    if not chosen or df.empty:
        return pd.Series(False, index=df.index)
    keys = zip(df["suite"], df["profile"], df["model"], df["method"], df["config_hash"])
    return pd.Series([(s, p, m, meth) in chosen and h not in chosen[(s, p, m, meth)] for s, p, m, meth, h in keys],
                     index=df.index)



def _same_options(a: dict, b: dict, later: dict) -> bool:
    """Two method configurations equal, an option missing from one (a record made before the
    option existed) counting as its value in ``later`` (``Method.LATER_OPTIONS``)."""
    return all(a.get(k, later.get(k, _MISSING)) == b.get(k, later.get(k, _MISSING)) for k in set(a) | set(b))


_MISSING = object()


def control_rows(df, kept):
    """The controls of the configurations ``kept`` (a boolean mask over ``df``) leaves in a board:
    records of the same suite, profile, model, method, training and data configuration whose method
    options are a kept configuration's with one of the method's ``CONTROLS`` applied (e.g. PBN's
    chosen options with a random subnetwork). Returns ``(mask, notes)``: the control records, and
    per ``(suite, profile, model)`` one note per control naming the configuration it controls and
    what it switches off."""
    import json

    import pandas as pd

    from methods import METHODS

    mask = pd.Series(False, index=df.index)
    notes: dict[tuple[str, str, str], list[str]] = {}
    if df.empty or not kept.any():
        return mask, notes

    def blob(v):
        return json.dumps(v, sort_keys=True, default=str)

    firsts = df.drop_duplicates(["suite", "profile", "model", "method", "config_hash"])
    for _, base in firsts[kept.loc[firsts.index]].iterrows():
        if base["method"] not in METHODS.names():
            continue
        cls = METHODS.get(base["method"])
        if not cls.CONTROLS or not isinstance(base["method_config"], dict):
            continue
        same = firsts[(firsts["suite"] == base["suite"]) & (firsts["profile"] == base["profile"])
                      & (firsts["model"] == base["model"]) & (firsts["method"] == base["method"])
                      & (firsts["config_hash"] != base["config_hash"])]
        for name, over in cls.CONTROLS.items():
            target = {**base["method_config"], **over}
            if _same_options(target, base["method_config"], cls.LATER_OPTIONS):
                continue
            for _, cand in same.iterrows():
                if not (isinstance(cand["method_config"], dict)
                        and _same_options(cand["method_config"], target, cls.LATER_OPTIONS)
                        and blob(cand["train_config"]) == blob(base["train_config"])
                        and blob(cand["data_config"]) == blob(base["data_config"])):
                    continue
                mask |= ((df["suite"] == cand["suite"]) & (df["profile"] == cand["profile"])
                         & (df["model"] == cand["model"]) & (df["method"] == cand["method"])
                         & (df["config_hash"] == cand["config_hash"]))
                what = ", ".join(f"{k}={v}" for k, v in sorted(over.items()))
                notes.setdefault((base["suite"], base["profile"], base["model"]), []).append(
                    f"{cand['method_label']}: control of {base['method_label']}: {name} ({what}), everything else "
                    "the same; it separates what the method's mechanism does from what its set-up does")
    return mask, notes
