"""Tidy the flat record DataFrame from ``bench.store.load_records`` for the report.

Everything downstream (tables, plots) works on the frame returned by :func:`prepare`:
one row per record, a ``label`` column to group by (the record's ``method_label``,
made unique per configuration), numeric ``seed``/``severity``/``metrics.*``/``cost.*``.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.measurement import HOST_KEYS, USAGE_KEYS

#: the classification columns; segmentation records (per-pixel metrics) add Dice (binary tasks), mIoU, pixel accuracy and
#: how well the entropy finds misclassified pixels (columns show only where records have them)
#: (multilabel records add the mean per-label AUROC, mean average precision and subset accuracy)
CLASSIFICATION_METRICS = ["accuracy", "auroc_mean", "mean_average_precision", "subset_accuracy", "dice", "miou",
                          "pixel_accuracy", "nll", "brier", "ece", "error_auroc"]
REGRESSION_METRICS = ["rmse", "nll", "mean_std", "coverage_3sigma"]
OOD_METRICS = ["auroc", "aupr"]

_TEXT_COLUMNS = ["status", "suite", "profile", "task", "method", "method_label", "model",
                 "kind", "shift", "config_hash", "error", "eval_note", "device", "git_commit",
                 "started_at", "finished_at"]


def natural_key(text) -> tuple:
    """Sort key that orders embedded numbers numerically ("pbn[r=0.01]" < "pbn[r=0.1]")."""
    parts = re.split(r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", str(text))
    key = []
    for i, part in enumerate(parts):
        if i % 2:
            key.append((1, float(part), ""))
        elif part:
            key.append((0, 0.0, part.lower()))
    return tuple(key)


#: cost fields that name how a figure was measured (text, not numbers)
_TEXT_COST_COLUMNS = ("cost.peak_memory_probe", "cost.timed_on", "cost.allocator", "cost.cpu_model")
#: what bench.cost.host_context records beside a timing: the machine's state, not a cost of the method
_HOST_COST_COLUMNS = tuple(f"cost.{key}" for key in HOST_KEYS + USAGE_KEYS)


def _numbers(v, n: int | None = None) -> bool:
    return (isinstance(v, list) and (n is None or len(v) == n)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))


def _grid(v) -> tuple | None:
    """The shape of a 2-D numeric nested list, else None."""
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return None
    return a.shape if a.ndim == 2 else None


def curves_problem(curves) -> str | None:
    """What in a record's ``curves`` the report's figures cannot read (None: nothing). Checked:
    ``reliability`` (``edges`` B+1 numbers; ``count``, ``confidence_sum``, ``correct_sum`` B each),
    ``entropy_hist`` (``edges`` B+1, ``counts`` B), ``band`` (``x``, ``mean``, ``std``, ``truth``
    as many numbers; ``train_x``, ``train_y`` alike) and ``maps`` (a list of {``pred``,
    ``entropy``, ``mi``}: 2-D grids of one shape). A part that is absent or null is fine."""
    if curves is None or (isinstance(curves, float) and math.isnan(curves)):
        return None
    if not isinstance(curves, dict):
        return f"a {type(curves).__name__}, not an object"
    bins = {"reliability": ("count", "confidence_sum", "correct_sum"), "entropy_hist": ("counts",)}
    for key, parts in bins.items():
        c = curves.get(key)
        if c is None:
            continue
        if not isinstance(c, dict):
            return f"{key} is a {type(c).__name__}, not an object"
        edges = c.get("edges")
        if edges is not None and not (_numbers(edges) and len(edges) >= 2):
            return f"{key}.edges is not a list of at least 2 numbers"
        for part in parts:
            if c.get(part) is not None and not _numbers(c[part], len(edges) - 1 if edges is not None else None):
                return f"{key}.{part} is not a list of numbers, one per bin"
    band = curves.get("band")
    if band is not None:
        if not isinstance(band, dict):
            return f"band is a {type(band).__name__}, not an object"
        for group in (("x", "mean", "std", "truth"), ("train_x", "train_y")):
            present = [band[k] for k in group if band.get(k) is not None]
            if any(not _numbers(v, len(present[0])) for v in present):
                return f"band {'/'.join(group)} are not lists of numbers of one length"
    maps = curves.get("maps")
    if maps is not None:
        if not isinstance(maps, list) or not all(isinstance(m, dict) for m in maps):
            return "maps is not a list of objects"
        for m in maps:
            shapes = {k: _grid(m[k]) for k in ("pred", "entropy", "mi") if m.get(k) is not None}
            if "pred" not in shapes or None in shapes.values() or len(set(shapes.values())) > 1:
                return "maps: pred / entropy / mi are not 2-D grids of numbers of one shape"
    return None


def _drop_bad_curves(df: pd.DataFrame) -> None:
    """Set the ``curves`` of a record that :func:`curves_problem` rejects to None, with a warning
    naming the record: its figures lose that record, the report still builds."""
    import logging

    bad = []
    for i, curves in df["curves"].items():
        problem = curves_problem(curves)
        if problem is not None:
            r = df.loc[i]
            who = " ".join(f"{k} {r.get(k)}" for k in ("suite", "model", "method_label", "seed", "kind", "shift",
                                                       "severity") if k in df.columns)
            logging.getLogger(__name__).warning("record (%s): its curves are left out of the figures: %s", who, problem)
            bad.append(i)
    if bad:
        df["curves"] = df["curves"].astype(object)
        df.loc[bad, "curves"] = None


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``df`` with the columns the report relies on, typed and filled in (a record's
    ``curves`` that the figures cannot read are dropped with a warning: :func:`curves_problem`)."""
    df = df.copy()
    for col in _TEXT_COLUMNS:
        if col not in df.columns:
            df[col] = None
    for col in ("seed", "severity", "n"):
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    for col in df.columns:
        if col.startswith(("metrics.", "cost.")) and col not in _TEXT_COST_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    if "curves" not in df.columns:
        df["curves"] = None
    _drop_bad_curves(df)
    if "method_config" not in df.columns:
        df["method_config"] = None

    df["status"] = df["status"].where(df["status"].notna(), "ok").astype(object)
    df["method"] = df["method"].where(df["method"].notna(), "?").astype(object)
    df["model"] = df["model"].where(df["model"].notna(), "?").astype(object)
    df["suite"] = df["suite"].where(df["suite"].notna(), "?").astype(object)
    df["method_label"] = df["method_label"].where(df["method_label"].notna(), df["method"]).astype(object)
    df["label"] = unique_labels(df)
    from bench.validity import attach_validity

    return attach_validity(df)


def _config_differences(rows: pd.DataFrame) -> dict[str, str]:
    """``config_hash -> "train.lr=0.05,data.size=[64, 80]"``: the training and data settings in
    which the configurations of ``rows`` (one method label) differ, each hash's own values."""
    import json

    def text(v):
        return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)

    flat: dict[str, dict[str, str]] = {}
    for _, r in rows.drop_duplicates("config_hash").iterrows():
        vals = {}
        for prefix, col in (("train", "train_config"), ("data", "data_config")):
            cfg = r.get(col) if col in rows.columns else None
            for k, v in (cfg.items() if isinstance(cfg, dict) else ()):
                vals[f"{prefix}.{k}"] = text(v)
        flat[r["config_hash"]] = vals
    keys = sorted({k for v in flat.values() for k in v})
    # a record's data_config holds the settings its profile and --set gave; one it does not name ran
    # at the suite's default (a record made before the option existed: its earlier behaviour)
    defaults = _suite_data_defaults(rows["suite"].iloc[0] if "suite" in rows.columns and len(rows) else None)
    for vals in flat.values():
        for k in keys:
            if k not in vals and k.startswith("data.") and k[5:] in defaults:
                vals[k] = text(defaults[k[5:]])
    differing = [k for k in keys if len({v.get(k, "–") for v in flat.values()}) > 1]
    return {h: ",".join(f"{k}={v.get(k, '–')}" for k in differing) for h, v in flat.items()}


def _suite_data_defaults(suite: str | None) -> dict:
    """The registered suite's ``DEFAULT_DATA`` ({} for an unknown or user suite)."""
    from bench.suites import SUITES

    return dict(getattr(SUITES.get(suite), "DEFAULT_DATA", {}) or {}) if suite in SUITES else {}


def unique_labels(df: pd.DataFrame) -> pd.Series:
    """``method_label``, made distinct when one label covers several configs of the same suite,
    profile and model (those would otherwise be averaged together): by the training and data
    settings they differ in (``deterministic [train.lr=0.05]``), else by the config hash."""
    label = df["method_label"].astype(str)
    hashes = df["config_hash"].astype(object)
    out = label.copy()
    keys = [df["suite"].astype(str), df["profile"].astype(str), df["model"].astype(str), label]
    for _, idx in df.groupby(keys, dropna=False).groups.items():
        distinct = sorted({h for h in hashes.loc[idx] if isinstance(h, str) and h})
        if len(distinct) > 1:
            rows = df.loc[idx]
            diffs = _config_differences(rows[rows["config_hash"].isin(distinct)])
            named = [diffs.get(h, "") for h in distinct]
            usable = all(named) and len(set(named)) == len(named)
            out.loc[idx] = [(f"{lab} [{diffs[h]}]" if usable else f"{lab}#{h[:6]}") if isinstance(h, str) and h
                            else lab for lab, h in zip(label.loc[idx], hashes.loc[idx])]
    return out


def model_identities(df: pd.DataFrame) -> pd.Series:
    """Per record, the network's identity beyond its name: ``key=value`` of its ``model_identity``
    fields (a backbone file's digest, a model spec's source hash), ``;``-joined; "" for none."""
    out = pd.Series("", index=df.index, dtype=object)
    for c in sorted(c for c in df.columns if c.startswith("model_identity.")):
        has = df[c].map(lambda v: isinstance(v, str) and bool(v)).astype(bool)
        piece = (c.split(".", 1)[1] + "=" + df[c].astype(str)).where(has, "")
        out = (out + ";").where((out != "") & has, out) + piece
    return out


class MapNetwork(tuple):
    """``(digest, curve)`` of :func:`map_network`, compared and paired as that pair; ``fit`` says
    where the network was trained (torch threads and CPU, from its training log; None where the
    record does not say), for the notes that tell a reader why two fits of one seed differ."""

    def __new__(cls, sha: str | None, curve: str | None, fit: str | None = None):
        out = super().__new__(cls, (sha, curve))
        out.fit = fit
        return out

    def __reduce__(self):  # pickled (a process pool, a cache) with its fit
        return MapNetwork, (self[0], self[1], self.fit)


def map_fit(log) -> str | None:
    """Where a MAP network was trained, from its training log: "2 torch thread(s) on <CPU>"."""
    if not isinstance(log, dict) or not log.get("cpu"):
        return None
    threads = log.get("torch_threads")
    return (f"{threads} torch thread(s) on " if threads else "") + str(log["cpu"])


def map_network(diag) -> tuple[str | None, str | None]:
    """The MAP network a run started from, by the two names its records give it (``diag``: the run's
    ``diagnostics``): the weights' digest (``map_training.network_sha``) and its training's
    validation-NLL curve as text (a :class:`MapNetwork`, which also says where it was trained).
    Records of earlier code lack the digest, those of methods that start elsewhere (a random
    initialisation) both: None."""
    log = diag.get("map_training") if isinstance(diag, dict) else None
    if not isinstance(log, dict):
        return None, None
    sha = log.get("network_sha")
    vals = log.get("val_nll")
    curve = ",".join(f"{float(v):.8g}" for v in vals) if isinstance(vals, (list, tuple)) and vals else None
    return MapNetwork(sha if isinstance(sha, str) and sha else None, curve, map_fit(log))


def same_map_network(a, b) -> bool:
    """Whether two runs (their :func:`map_network`) can stand on one MAP network: False only when
    both carry a name of one kind and the names differ (two fits of one seed on different machines
    or code versions), so that seeds are paired only where each side improves on the same network."""
    a, b = (tuple(x) if isinstance(x, (tuple, list)) else (None, None) for x in (a, b))
    return not any(isinstance(x, str) and isinstance(y, str) and x != y for x, y in zip(a, b))


def starts_from_map(method, config) -> bool:
    """Whether a run of ``method`` at ``config`` starts from its seed's shared MAP network (the
    method's ``starts_from``): a network trained its own way (MC dropout, a deterministic network of
    its own recipe) also records its training as ``map_training``, but it is not that network.
    False for a method this version does not know."""
    try:
        from methods import METHODS

        cls = METHODS.get(str(method))
        return cls.starts_from({**cls.defaults, **(config if isinstance(config, dict) else {})}) == "map"
    except Exception:  # noqa: BLE001 - records of a method this version does not know
        return False


def built_on_map_network(method, config, diag) -> tuple[str | None, str | None]:
    """:func:`map_network` of a run of ``method`` at ``config`` that starts from its seed's MAP network
    (:func:`starts_from_map`); (None, None), which pairs with any, for one that does not."""
    return map_network(diag) if starts_from_map(method, config) else (None, None)


def run_map_networks(df: pd.DataFrame) -> pd.Series:
    """(label, seed) -> :func:`built_on_map_network` of each run, from its id record (else its first)."""
    cols = ["diagnostics", "method", "method_config"]
    if df.empty or not set(cols) <= set(df.columns):
        idx = pd.MultiIndex.from_arrays([[], []], names=["label", "seed"])
        return pd.Series([], index=idx, dtype=object)
    runs = per_run_first(df, cols)
    return pd.Series([built_on_map_network(r.method, r.method_config, r.diagnostics) for r in runs.itertuples()],
                     index=runs.index, dtype=object)


def ok_records(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "ok") & (df["kind"] != "fit")]


def failed_records(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] != "ok") | (df["kind"] == "fit")]


def labels_in_order(df: pd.DataFrame) -> list[str]:
    return sorted(df["label"].dropna().unique(), key=natural_key)


def metric_columns(df: pd.DataFrame, names) -> list[str]:
    """``metrics.<name>`` columns that exist and hold at least one number."""
    cols = []
    for name in names:
        col = f"metrics.{name}"
        if col in df.columns and df[col].notna().any():
            cols.append(col)
    return cols


def cost_columns(df: pd.DataFrame) -> list[str]:
    """The numeric cost columns with a value (not the text naming how one was measured, nor the
    machine's load beside the timing)."""
    return [c for c in df.columns if c.startswith("cost.") and c not in _TEXT_COST_COLUMNS
            and c not in _HOST_COST_COLUMNS and df[c].notna().any()]


def distinct(values) -> list:
    """Distinct non-missing values, in natural order."""
    seen = set()
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        seen.add(v)
    return sorted(seen, key=natural_key)


@dataclass
class SectionData:
    title: str       # e.g. "lenet5" or "lenet5 (quick profile)"
    slug: str        # file-name friendly key used for figure names
    model: str
    task: str
    records: pd.DataFrame  # ok records of this section
    failed: pd.DataFrame


def slugify(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "x"


def split_sections(suite_df: pd.DataFrame) -> list[SectionData]:
    """One section per model; also per profile / task when a suite mixes them.

    Mixing profiles in one leaderboard would average results that are not comparable,
    so a results directory holding e.g. smoke and quick runs of a suite gets one section each.
    """
    ok = ok_records(suite_df)
    failed = failed_records(suite_df)
    profiles = distinct(suite_df["profile"])
    tasks = distinct(ok["task"])
    keys = []
    for _, row in suite_df[["profile", "model", "task"]].drop_duplicates().iterrows():
        key = (row["profile"] if len(profiles) > 1 else None, row["model"],
               row["task"] if len(tasks) > 1 else None)
        if key not in keys:
            keys.append(key)
    keys.sort(key=lambda k: tuple(natural_key(x if x is not None else "") for x in k))

    sections = []
    for profile, model, task in keys:
        def pick(frame, profile=profile, model=model, task=task):
            m = frame["model"] == model
            if profile is not None:
                m &= frame["profile"] == profile
            if task is not None:
                m &= frame["task"] == task
            return frame[m]

        recs, fails = pick(ok), pick(failed)
        if recs.empty and fails.empty:
            continue
        sec_task = task or (distinct(recs["task"]) or ["classification"])[0]
        title = str(model)
        extra = [f"{profile} profile" if profile else None, task]
        extra = [e for e in extra if e]
        if extra:
            title += f" ({', '.join(extra)})"
        slug = slugify("-".join(str(x) for x in (profile, model, task) if x is not None))
        sections.append(SectionData(title, slug, str(model), sec_task, recs, fails))
    # a section made only of failed fits (no task known) is folded into the failure list only
    return sections


def seed_summary(per_seed: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Mean, std (ddof=1, NaN for one seed) and count over seeds.

    ``per_seed`` is indexed by (label, seed) with one numeric column per quantity.
    """
    g = per_seed.groupby(level=0, sort=False)
    return g.mean(), g.std(ddof=1), g.count()


def per_seed_mean(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Average ``cols`` over the records of each (label, seed)."""
    if df.empty or not cols:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=["label", "seed"]))
    return df.groupby(["label", "seed"], sort=False)[cols].mean()


def per_run_first(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``cols`` of one record per (label, seed) run: its id record when it has one, else its first
    (cost and diagnostics are the same in every record of a run)."""
    order = df.assign(_rank=(df["kind"] != "id").astype(int)).sort_values("_rank", kind="stable")
    return order.groupby(["label", "seed"], sort=False)[cols].first()


def shift_frame(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """id + shift records as a long frame with ``family`` and ``severity`` (id -> 0)."""
    d = df[df["kind"].isin(["id", "shift"])].copy()
    if d.empty:
        return d
    is_id = d["kind"] == "id"
    d["severity"] = d["severity"].where(~(is_id & d["severity"].isna()), 0.0)
    d["family"] = d["shift"].astype(object).where(~is_id, "clean")
    d["family"] = d["family"].where(d["family"].notna(), "?")
    return d[["label", "seed", "family", "severity", "kind"] + cols]


def shift_families(df: pd.DataFrame) -> list[str]:
    return distinct(df.loc[df["kind"] == "shift", "shift"])


def severity_axis_label(families: list[str]) -> str:
    if len(families) == 1 and str(families[0]).lower().startswith("rotat"):
        return "rotation (degrees)"
    return "corruption severity"


# ------------------------------------------------------------------------ sweeps, diagnostics


def _is_number(v) -> bool:
    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            and math.isfinite(float(v)))


@dataclass
class Sweep:
    """Configurations of one plugin that differ in exactly one option: numeric (a sweep,
    plotted against the value) or categorical (an ablation, e.g. a selection criterion)."""

    method: str                 # plugin name, e.g. "pbn"
    option: str                 # the swept ``method_config`` key, e.g. "r_bayes"
    values: dict                # label -> option value, in increasing value order
    numeric: bool = True

    @property
    def labels(self) -> list[str]:
        return list(self.values)

    @property
    def log_x(self) -> bool:
        """Log axis when the (positive) values span more than one decade."""
        v = [float(x) for x in self.values.values()]
        return min(v) > 0 and max(v) / min(v) > 10


def label_configs(df: pd.DataFrame) -> dict:
    """label -> (plugin, method_config dict) from the first record of each label that has one."""
    out = {}
    for lab, method, cfg in zip(df["label"], df["method"], df["method_config"]):
        if lab not in out and isinstance(cfg, dict):
            out[lab] = (method, cfg)
    return out


def find_sweeps(df: pd.DataFrame, numeric: bool = True) -> list[Sweep]:
    """Every group of >= 2 configurations of a plugin that agree on all options but one
    numeric one (``pbn[r_bayes=...]``); ordered by plugin, option, then first label. With
    ``numeric=False``: the same for one string option (``ssvi[criterion=...]``), in label order."""
    configs = label_configs(df)
    sweeps = []
    for method in distinct(m for m, _ in configs.values()):
        labs = [lab for lab, (m, _) in configs.items() if m == method]
        if len(labs) < 2:
            continue
        keys = sorted({k for lab in labs for k in configs[lab][1]})
        for key in keys:
            groups: dict[str, dict] = {}
            for lab in sorted(labs, key=natural_key):
                cfg = configs[lab][1]
                v = cfg.get(key)
                if not (_is_number(v) if numeric else isinstance(v, str)):
                    continue
                rest = json.dumps({k: cfg[k] for k in cfg if k != key}, sort_keys=True, default=str)
                group = groups.setdefault(rest, {})
                value = float(v) if numeric else v
                if value not in group.values():  # identical configs: keep the first label
                    group[lab] = value
            for group in groups.values():
                if len(group) >= 2:
                    ordered = dict(sorted(group.items(), key=lambda kv: kv[1])) if numeric else group
                    sweeps.append(Sweep(str(method), str(key), ordered, numeric))
    return sweeps


def find_ablations(df: pd.DataFrame) -> list[Sweep]:
    """Configurations of a plugin that differ in one categorical (string) option."""
    return find_sweeps(df, numeric=False)


def diagnostics_by_label(df: pd.DataFrame) -> dict:
    """label -> [(seed, diagnostics dict)] in seed order, one per run (its id record when it
    has one), for the runs whose records carry non-empty ``diagnostics``."""
    if "diagnostics" not in df.columns:
        return {}
    d = df[df["diagnostics"].map(lambda x: isinstance(x, dict) and bool(x))]
    if d.empty:
        return {}
    d = d.assign(_rank=(d["kind"] != "id").astype(int)).sort_values(["_rank"], kind="stable")
    out: dict = {}
    for (lab, seed), grp in d.groupby(["label", "seed"], sort=False, dropna=False):
        out.setdefault(lab, []).append((seed, grp["diagnostics"].iloc[0]))
    return {lab: sorted(v, key=lambda sv: (math.inf if pd.isna(sv[0]) else sv[0]))
            for lab, v in sorted(out.items(), key=lambda kv: natural_key(kv[0]))}


def sweep_order(labels, sweeps: list[Sweep]) -> list[str]:
    """``labels`` with those of each sweep first (by swept value), then the rest naturally."""
    labels = list(labels)
    out = []
    for sw in sweeps:
        out += [lab for lab in sw.labels if lab in labels and lab not in out]
    out += [lab for lab in sorted(labels, key=natural_key) if lab not in out]
    return out


def scoped_metrics_per_seed(df: pd.DataFrame, metrics: list[str],
                            ood_metrics: list[str] = OOD_METRICS) -> pd.DataFrame:
    """Per (label, seed): ``id.<m>`` and ``shift.<m>`` (mean over that seed's records of the
    kind, i.e. over all shift families and severities) and ``ood.<set>.<m>`` per OOD set."""
    parts = []
    for kind in ("id", "shift"):
        sub = df[df["kind"] == kind]
        ps = per_seed_mean(sub, metric_columns(sub, metrics))
        ps.columns = [f"{kind}.{c.split('.', 1)[1]}" for c in ps.columns]
        parts.append(ps)
    ood = df[df["kind"] == "ood"]
    for name in distinct(ood["shift"]):
        sub = ood[ood["shift"] == name]
        ps = per_seed_mean(sub, metric_columns(sub, ood_metrics))
        ps.columns = [f"ood.{name}.{c.split('.', 1)[1]}" for c in ps.columns]
        parts.append(ps)
    parts = [p for p in parts if not p.empty]
    if not parts:
        return per_seed_mean(df.iloc[:0], [])
    return pd.concat(parts, axis=1)
