"""The one tuning protocol of the benchmark: hyperparameters are chosen on the validation split.

Every evaluation cell also scores the held-out validation split (records of kind ``val``,
written by the harness). To tune options of a method, run them as a sweep
(``--set pbn.lr=0.05,0.005``) and choose with :func:`choose_on_validation` (or
``python -m bench select``): among the configurations of one method on one model that differ
only in the tuned options, the one with the lowest validation NLL averaged over the seeds all
candidates share wins (ties: the first in sorted order of the tuned values). The same
procedure applies to every method and every option (learning rate of a fine-tuning phase,
sigma0, prior scale, KL weight, temperature); nothing looks at a test set. The choice is
written beside the records (``<results>/<suite>/selections/``) with every candidate's score.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.store import _safe, atomic_write_json, load_records
from bench.validity import OK, SYMBOLS, attach_validity, worst_status

#: the validation objective of the protocol (lower is better)
SELECTION_METRIC = "metrics.nll"


def _key(cfg: dict, tuned: tuple[str, ...]) -> str:
    return json.dumps({k: v for k, v in sorted((cfg or {}).items()) if k not in tuned}, sort_keys=True, default=str)


def _matches(cfg, configs: list[dict], later: dict | None = None) -> bool:
    """Whether a record's method configuration is one of ``configs``: every option of it, with its
    value as the sweep writes it (compared as JSON, so an earlier sweep's ``prior_scale=1`` is not
    this one's default ``1.0``; a record made before an option existed does not name it): an
    earlier sweep's records are not candidates of this one. ``later``: the method's options added
    after records were made (``Method.LATER_OPTIONS``: option -> the behaviour before it); a record
    without such an option matches a configuration that sets it to that value."""
    cfg, later = cfg or {}, later or {}

    def same(a, b):
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)

    def has(k, v):
        return same(cfg[k], v) if k in cfg else (k in later and same(later[k], v))

    return any(all(has(k, v) for k, v in c.items()) for c in configs)


def choose_on_validation(df: pd.DataFrame, method: str, tuned: tuple[str, ...] | list[str], *,
                         model: str | None = None, metric: str = SELECTION_METRIC,
                         configs: list[dict] | None = None, profile: str | None = None,
                         later: dict | None = None, plugin_sha: str | None = None,
                         val_split: tuple | None = None) -> list[dict]:
    """One choice per (model, configuration of the untuned options) of ``method``; with ``configs``
    (full method configurations) and ``profile`` only the records of those configurations and that
    profile are candidates (``bench tune``: the space it swept, not an earlier sweep's records;
    ``later``: see :func:`_matches`; ``plugin_sha``: a plugin's records made from this source only,
    bench.plugins; ``val_split``: only the records validated on that split, ``data.val_sequences``,
    ``()`` for the suite's own, so that two splits' scores are never compared).

    Each choice: ``{"model", "method", "tuned", "chosen": {option: value}, "chosen_config_hash",
    "metric", "seeds", "candidates": [{"values", "config_hash", "score", "per_seed"}]}``.
    """
    tuned = tuple(tuned)
    if not tuned:
        raise BenchError("choose_on_validation needs at least one tuned option")
    d = df[(df.get("kind") == "val") & (df.get("status") == "ok") & (df.get("method") == method)]
    if model is not None:
        d = d[d["model"] == model]
    if profile is not None:
        d = d[d["profile"] == profile]
    if configs is not None:
        d = d[[_matches(c, configs, later) for c in d["method_config"]]]
    if val_split is not None and "data_config" in d.columns:
        from bench.validation_split import val_split_of

        d = d[[val_split_of(c) == tuple(val_split) for c in d["data_config"]]]
    if plugin_sha is not None:  # an edited plugin's earlier records are other candidates' (another source)
        d = d[d["plugin_source_sha256"] == plugin_sha] if "plugin_source_sha256" in d.columns else d.iloc[:0]
    if d.empty:
        raise BenchError(f"no validation records for method {method!r}"
                         + (f" on model {model!r}" if model else "") + "; run the sweep first")
    if later is None:  # the method's options added after records were made (Method.LATER_OPTIONS)
        from methods import METHODS

        later = getattr(METHODS.get(method), "LATER_OPTIONS", {}) if method in METHODS else {}
    out = []
    for mdl, dm in d.groupby("model"):
        fits = map_fits(df, method, mdl, profile)
        groups: dict[str, list] = {}
        for h, g in dm.groupby("config_hash"):
            cfg = g["method_config"].iloc[0] or {}
            missing = [t for t in tuned if t not in cfg]
            if missing:
                raise BenchError(f"{method} has no option(s) {missing}")
            # a record made before a later option existed is grouped with those at its earlier
            # behaviour (an earlier candidate of the same sweep, not a sweep of its own)
            groups.setdefault(_key({**later, **cfg}, tuned), []).append((h, cfg, g))
        for _, cands in sorted(groups.items()):
            cands, left_out = one_network(cands, fits)
            seeds = set.intersection(*(set(int(s) for s in g["seed"]) for _, _, g in cands))
            if not seeds:
                continue
            rows = []
            for h, cfg, g in cands:
                per_seed = {int(s): float(v) for s, v in zip(g["seed"], g[metric]) if int(s) in seeds}
                score = sum(per_seed.values()) / len(per_seed)
                rows.append({"values": {t: cfg[t] for t in tuned}, "config_hash": h,
                             "score": score if math.isfinite(score) else float("inf"),
                             "per_seed": dict(sorted(per_seed.items())),
                             "validity": worst_status(g["validity.status"]) if "validity.status" in g.columns
                             else OK})
            rows.sort(key=lambda r: (r["score"], json.dumps(r["values"], sort_keys=True, default=str)))
            # the lowest validation score among the candidates whose fits pass their validity checks
            # (bench.validity): a fit that did not converge is not a choice; none passing: among all
            valid = [r for r in rows if r["validity"] == OK]
            best = (valid or rows)[0]
            network = network_of(cands[0][2])
            out.append({"model": mdl, "method": method, "tuned": list(tuned), "chosen": best["values"],
                        "chosen_config_hash": best["config_hash"], "metric": f"validation {metric.split('.')[-1]}",
                        "seeds": sorted(seeds), "candidates": rows, "chosen_among_valid": bool(valid),
                        **({"network": network} if network else {}),
                        **({"other_networks": left_out} if left_out else {})})
    return out


def network_of(records: pd.DataFrame) -> str:
    """The network identity of a candidate's records beyond the model's name (a backbone file's digest:
    :func:`bench.reporting.data.model_identities`); "" for none."""
    from bench.reporting.data import model_identities

    return ";".join(sorted(set(model_identities(records))))


def one_network(cands: list, fits: dict | None = None) -> tuple[list, dict[str, list[str]]]:
    """The candidates ``[(config_hash, config, records), ...]`` that stand on one network, and the
    config hashes of the others by their network: candidates on two networks of one name (a backbone
    file trained twice) are not compared, nor, with ``fits`` (:func:`map_fits`), candidates built on
    different fits of a seed's MAP network (:func:`bench.reporting.data.same_map_network`). The
    network kept is the one with the most candidates, then the most recently finished record's (a
    sweep rerun on a new network, its old candidates left)."""
    nets: dict[str, list] = {}
    for c in cands:
        nets.setdefault(network_of(c[2]), []).append(c)

    def latest(cs):
        return max((str(v) for _, _, g in cs for v in g.get("finished_at", pd.Series(dtype=object)).dropna()),
                   default="")

    left: dict[str, list[str]] = {}
    if len(nets) > 1:
        keep = max(nets, key=lambda n: (len(nets[n]), latest(nets[n])))
        left = {n or "none": [h for h, _, _ in cs] for n, cs in sorted(nets.items()) if n != keep}
        cands = nets[keep]
    groups = map_fit_groups(cands, fits or {})
    if len(groups) > 1:
        groups.sort(key=lambda cs: (len(cs), latest(cs)), reverse=True)
        name = network_of(cands[0][2]) or "none"
        for cs in groups[1:]:
            left[f"{name}, another fit of the MAP network ({fits_text(cs, fits)})"] = [h for h, _, _ in cs]
        cands = groups[0]
    return cands, left


def map_fits(df: pd.DataFrame, method: str, model: str | None = None,
             profile: str | None = None) -> dict[tuple[str, int], tuple]:
    """``(config_hash, seed) -> built_on_map_network`` of the runs of ``method`` in ``df`` (on ``model`` and
    ``profile`` where given: a configuration's hash is the same on another), from their id records
    (validation records do not carry the MAP network's training)."""
    from bench.reporting.data import built_on_map_network

    if df.empty or not {"kind", "method", "config_hash", "seed", "diagnostics"} <= set(df.columns):
        return {}
    ids = df[(df["kind"] == "id") & (df["method"] == method)]
    for col, want in (("model", model), ("profile", profile)):
        if want is not None and col in ids.columns:
            ids = ids[ids[col] == want]
    return {(h, int(seed)): built_on_map_network(method, cfg, diag) for h, seed, diag, cfg
            in zip(ids["config_hash"], ids["seed"], ids["diagnostics"], ids.get("method_config", [None] * len(ids)))}


def map_fit_groups(cands: list, fits: dict) -> list[list]:
    """``cands`` (``[(config_hash, config, records), ...]``) in groups whose runs can stand on one fit of
    each seed's MAP network (``fits``: :func:`map_fits`): each candidate joins the first group every
    member of which it agrees with on every shared seed; a candidate whose runs name no fit (earlier
    code, or a method not built on the MAP network) agrees with any and joins the largest."""
    from bench.reporting.data import same_map_network

    by_hash: dict[str, dict] = {}
    for (h, seed), net in fits.items():
        by_hash.setdefault(h, {})[seed] = net

    def agree(a, b):
        fa, fb = by_hash.get(a[0], {}), by_hash.get(b[0], {})
        return all(same_map_network(net, fb[seed]) for seed, net in fa.items() if seed in fb)

    def known(c):
        return any(sha or curve for sha, curve in by_hash.get(c[0], {}).values())

    groups: list[list] = []
    flagged = [(c, known(c)) for c in cands]
    for c, named in sorted(flagged, key=lambda ck: not ck[1]):  # those naming a fit first (a stable sort)
        fitting = [g for g in groups if all(agree(c, m) for m in g)]
        if not fitting:
            groups.append([c])
        else:  # a candidate that names no fit joins the largest group
            (fitting[0] if named else max(fitting, key=len)).append(c)
    return groups


def fits_text(cs: list, fits: dict) -> str:
    """The MAP network fits a group of candidates stands on, by seed: its digest, else its curve's end."""
    seen = {}
    for h, _, _ in cs:
        for (hh, seed), (sha, curve) in sorted(fits.items()):
            if hh == h and (sha or curve):
                seen.setdefault(seed, f"network {sha[:8]}" if sha else f"validation curve ending {curve.split(',')[-1]}")
    return "; ".join(f"seed {s}: {t}" for s, t in sorted(seen.items())) or "no digest"


def write_selection(results: str | Path, suite: str, choice: dict, fixed_tag: str = "") -> Path:
    """Store a choice beside the records: ``<results>/<suite>/selections/<model>/<method>-<tuned>.json``
    (``<method>-<tuned>-<fixed_tag>.json`` where one method has several sweeps that differ in the
    options held fixed, so that one does not overwrite another)."""
    name = f"{_safe(choice['method'])}-{_safe('+'.join(choice['tuned']))}" + (f"-{_safe(fixed_tag)}" if fixed_tag else "")
    path = Path(results) / _safe(suite) / "selections" / _safe(choice["model"]) / f"{name}.json"
    atomic_write_json(path, choice)
    return path


def flat_options(choice: dict) -> list[str]:
    """The tuned options that every candidate of a choice holds at one value (nothing was swept)."""
    return [t for t in choice["tuned"]
            if len({json.dumps(r["values"][t], default=str) for r in choice["candidates"]}) < 2]


def _fixed_tag(choice: dict) -> str:
    """A short, stable name for the options a sweep held fixed (its chosen configuration without the tuned
    ones), from the chosen record's configuration hash."""
    return str(choice["chosen_config_hash"])[:10]


def choose_from_store(results: str | Path, suite: str, method: str, tuned: list[str],
                      model: str | None = None, **only) -> list[dict]:
    """:func:`choose_on_validation` over the records stored under ``results`` (nothing written);
    ``only``: its ``configs`` / ``profile`` restriction."""
    df = load_records(results, suite)
    if df.empty:
        raise BenchError(f"no records for suite {suite!r} under {results}")
    return choose_on_validation(attach_validity(df), method, tuned, model=model, **only)


def select(results: str | Path, suite: str, method: str, tuned: list[str], model: str | None = None,
           swept_only: bool = False, objective: str = "", **only) -> list[dict]:
    """Choose on validation from the stored records and write the choices; returns them.
    ``swept_only``: a group of configurations in which a tuned option holds one value (a later run at
    the chosen value, say) is not a sweep and is left out; a model with no sweep at all leaves nothing
    to choose: BenchError (exit 2) naming the value and how to sweep, nothing written (``bench select``;
    ``bench tune`` chooses among the configurations it has and says so). Where one model has several
    sweeps (other options held at different values), each is written to its own file; ``objective``
    (``bench tune`` of another objective: its options held fixed, :func:`bench.tuning.entry_key`) names
    the file of its choices, which then never replace the profile objective's."""
    choices = choose_from_store(results, suite, method, tuned, model=model, **only)
    if swept_only:
        swept = [c for c in choices if not flat_options(c)]
        for mdl in dict.fromkeys(c["model"] for c in choices):
            if not any(c["model"] == mdl for c in swept):
                c = next(c for c in choices if c["model"] == mdl)
                flat = flat_options(c)
                raise BenchError(f"nothing to choose for {method} on {mdl}: every validation record has "
                                 + ", ".join(f"{t}={c['candidates'][0]['values'][t]!r}" for t in flat)
                                 + f"; sweep it first (e.g. --set {method}.{flat[0]}=A,B) or leave it out of --tune")
        choices = swept
    per_model = Counter(c["model"] for c in choices)
    for c in choices:
        tag = objective or (_fixed_tag(c) if per_model[c["model"]] > 1 else "")
        c["path"] = str(write_selection(results, suite, c, tag))
    return choices


def selection_markdown(choices: list[dict]) -> str:
    """Choices as markdown: per model, one row per candidate (tuned values, the validation score
    of each seed and their mean), the chosen one marked."""
    out = []
    for c in choices:
        seeds = c["seeds"]
        among = ("among the candidates that pass their validity checks" if c.get("chosen_among_valid", True)
                 else "no candidate passes its validity checks (bench.validity), so the choice is not method "
                      "evidence")
        others = "; ".join(f"{len(hs)} on {net}" for net, hs in sorted((c.get("other_networks") or {}).items()))
        out.append(f"**{c['model']} / {c['method']}**: {c['metric']} over seeds {', '.join(map(str, seeds))}, "
                   f"lowest mean chosen; {among}"
                   + (f"; candidates on another network than {c.get('network') or 'these'}'s left out ({others})"
                      if others else ""))
        out.append("")
        out.append("| " + " | ".join([*c["tuned"], *(f"seed {s}" for s in seeds), "mean", "validity", "chosen"]) + " |")
        out.append("|" + " --- |" * (len(c["tuned"]) + len(seeds) + 3))
        for r in c["candidates"]:
            cells = [str(r["values"][t]) for t in c["tuned"]] + [f"{r['per_seed'][s]:.4f}" for s in seeds]
            status = r.get("validity", OK)
            mark = f"{SYMBOLS[status]} {status}" if status in SYMBOLS else status
            cells += [f"{r['score']:.4f}", mark,
                      "**chosen**" if r["config_hash"] == c["chosen_config_hash"] else ""]
            out.append("| " + " | ".join(cells) + " |")
        out += [_probe_row(c, probe, seeds) for probe in c.get("edge_probes") or []]
        out.append("")
    return "\n".join(out).rstrip("\n")


def _probe_row(choice: dict, probe: dict, seeds) -> str:
    """A row of :func:`selection_markdown` for an edge probe of the choice (``bench tune --probe-edges``,
    :func:`bench.tuning.score_edge_probes`): not a candidate, its last column says which end it probes and
    whether the protocol would have chosen it."""
    values = {**choice["chosen"], **probe["values"]}
    where = f"probe past the {probe['end']} {probe['key']} (not a candidate)"
    if "not_scored" in probe:
        cells = [*(str(values[t]) for t in choice["tuned"]), *("" for _ in seeds), "", "",
                 f"{where}: not weighed, {probe['not_scored']}"]
    else:
        per_seed = {int(k): v for k, v in probe["per_seed"].items()}
        status = probe["validity"]
        cells = [*(str(values[t]) for t in choice["tuned"]),
                 *(f"{per_seed[s]:.4f}" if s in per_seed else "" for s in seeds), f"{probe['score']:.4f}",
                 f"{SYMBOLS[status]} {status}" if status in SYMBOLS else status,
                 f"{where}: " + {"better": "better beyond the seed noise, the choice is an edge",
                                 "fails": "fails its checks, no choice", "tied": "tied within the seed noise",
                                 "worse": "no better"}[probe_outcome(probe)]
                 + (f"; weighed against the choice fitted again beside it, {probe['choice_score']:.4f} "
                    f"({probe['choice_refit']})" if probe.get("choice_refit") else "")]
    return "| " + " | ".join(cells) + " |"


def probe_outcome(probe: dict) -> str:
    """How a weighed edge probe (:func:`bench.tuning.score_edge_probes`) came out against its choice:
    "better" (it beats the choice), "fails" (it fails its validity checks), "tied" (a lower mean validation
    NLL within the seed noise) or "worse"."""
    if probe["beats_choice"]:
        return "better"
    if probe["validity"] != OK:
        return "fails"
    return "tied" if probe["score"] < probe["choice_score"] else "worse"
