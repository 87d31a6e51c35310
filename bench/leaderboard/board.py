"""One leaderboard per (suite, model, profile): quality and cost of every method configuration.

A seed contributes one value per quality column: the mean over its records of the kind (ID:
the clean test set; shift: every shifted set; OOD: the named set). A seed whose shifted sets
are incomplete (an interrupted run) contributes no shift value, so that shift averages are
always over the same sets. Differences against the MAP network (the ``deterministic``
configuration at its defaults) are paired over the seeds both have, and, for rows built on the
seed's MAP network, only where both stand on the same fit of it (``map_training``'s digest).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.measurement import (LEGACY_CPU_PROBE, PAUSED_LIMIT, RUN_DELAY_LIMIT, SHARED_LOAD, loaded_machine,
                               stopped_too_long, waited_too_long)
from bench.validity import board_num_classes, reference_row, row_validity
from bench.reporting.data import (distinct, metric_columns, model_identities, natural_key,
                                  per_run_first, per_seed_mean, run_map_networks, same_map_network, unique_labels)
from bench.reporting.tables import HIGHER_IS_BETTER as HIGHER
from bench.reporting.tables import METRIC_TITLES as TITLES

from .stats import nets_of, paired, rank_marks

#: quality metrics per task kind, shown for the clean (ID) and the shifted test sets
QUALITY = {
    "classification": ["accuracy", "nll", "brier", "ece"],
    "segmentation": ["dice", "miou", "pixel_accuracy", "nll", "ece"],  # dice: binary tasks only
    "regression": ["rmse", "nll", "coverage_3sigma"],
    "multilabel": ["auroc_mean", "accuracy", "nll", "brier", "ece"],  # accuracy: Hamming (per label)
}
#: (key, title, scale, integers): the cost columns, from each run's ID record
COST = [("stochastic_params", "stoch. params", 1.0, True),
        ("train_time_s", "train s", 1.0, False),
        ("predict_time_per_example_s", "predict ms/ex", 1e3, False),
        ("flops_per_example", "MFLOP/ex", 1e-6, False),
        ("peak_memory_mb", "train peak MiB", 1.0, False)]
MAP_LABEL = "deterministic"


@dataclass
class Column:
    key: str            # "shift.nll", "ood.fashion_mnist.auroc", "cost.train_time_s"
    title: str
    better: str | None  # "max", "min" or None (cost columns are not ranked)
    scale: float = 1.0
    integers: bool = False


@dataclass
class Board:
    suite: str
    model: str
    profile: str
    task: str
    metric: str                          # the ranking column
    columns: list[Column]
    rows: list[str]                      # labels in rank order
    per_seed: pd.DataFrame               # index (label, seed), one column per Column.key
    marks: dict = field(default_factory=dict)   # key -> (best rows, tied rows)
    delta: pd.DataFrame | None = None    # label -> mean, std, n of the ranking metric minus MAP's
    map_label: str | None = None
    provenance: dict = field(default_factory=dict)   # label -> {field: text}
    notes: list[str] = field(default_factory=list)
    #: label -> (status, [reason texts]): bench.validity's verdict over the row's seeds ("fail" if
    #: any seed fails, "unverified" if any could not be checked, else "ok")
    validity: dict = field(default_factory=dict)
    #: column key -> the value of a uniform predictor over K classes (NLL ln K, Brier 1 - 1/K, ...)
    reference: dict = field(default_factory=dict)
    reference_name: str = "reference"
    num_classes: int | None = None
    #: the registered methods whose records make the rows
    methods: set = field(default_factory=set)
    #: the network's identity beyond its name (``model_identity``, e.g. a backbone file's digest) when
    #: the records of (suite, model, profile) stand on more than one: one board each, named by it
    variant: str | None = None
    #: (label, seed) -> the MAP network the run started from (``bench.reporting.data.map_network``):
    #: two rows' seeds are paired only where both can stand on the same one
    map_networks: pd.Series | None = None
    #: the rows whose train times are upper bounds or taken on another CPU than other rows' (the timing
    #: notes: :func:`timing_flags`, :func:`cpu_model_notes`): a time comparison with them is no verdict
    unsure_times: set = field(default_factory=set)

    @property
    def model_title(self) -> str:
        """The model as tables and sections name it: with its identity when the board has a variant."""
        return f"{self.model} [{self.variant}]" if self.variant else self.model

    @property
    def model_slug(self) -> str:
        """The model in the names of the board's tables, figures and anchors: with its variant when it has one."""
        return f"{self.model}-{self.variant.replace('=', '-').replace(';', '-')}" if self.variant else self.model

    def status(self, label) -> str:
        """The row's verdict: ok, fail or unverified (rows of records without a verdict: ok)."""
        return self.validity.get(label, ("ok", []))[0]

    def is_evidence(self, label) -> bool:
        """Whether a row passed its validity checks."""
        return self.status(label) == "ok"

    @property
    def evidence_rows(self) -> list[str]:
        return [r for r in self.rows if self.is_evidence(r)]

    def mean(self) -> pd.DataFrame:
        return self.per_seed.groupby(level=0).mean().reindex(self.rows)

    def std(self) -> pd.DataFrame:
        return self.per_seed.groupby(level=0).std(ddof=1).reindex(self.rows)

    def seeds(self, label) -> list[int]:
        return sorted(int(s) for s in self.per_seed.loc[label].index)

    def column(self, key) -> Column:
        return next(c for c in self.columns if c.key == key)

    def paired(self, label, other, key) -> np.ndarray:
        """Column ``key`` of row ``label`` minus row ``other``'s over the seeds both have, where both
        runs of a seed can stand on one MAP network."""
        return paired(self.per_seed.loc[label, key], self.per_seed.loc[other, key],
                      nets_of(self.map_networks, label), nets_of(self.map_networks, other))


def metric_direction(metric: str) -> str:
    return "max" if metric.rsplit(".", 1)[-1] in HIGHER else "min"


def build_boards(df: pd.DataFrame, metric: str = "shift.nll") -> list[Board]:
    """A :class:`Board` per (suite, model, profile) of the ok evaluation records ``df``, and per
    network identity within it (:func:`model_identities`): rows on two different networks of one
    name (e.g. ``unet_presence`` on two backbone files) are not compared, so they get a board each,
    the MAP network's first. Boards that cannot be ranked by ``metric`` at all are left out
    (BenchError when none can)."""
    boards, missing = [], []
    df = df.assign(_identity=model_identities(df))
    groups = df.groupby(["suite", "model", "profile"], sort=False)
    for (suite, model, profile), sub in sorted(groups, key=lambda kv: tuple(natural_key(k) for k in kv[0])):
        parts = list(sub.groupby("_identity", sort=False))
        if len(parts) > 1:  # the MAP network's identity first, then the most records
            parts.sort(key=lambda kv: (map_label(kv[1]) is None, -len(kv[1]), kv[0]))
        for ident, part in parts:
            part = part.drop(columns="_identity")
            if len(parts) > 1:  # labels made distinct only by the network (deterministic#726ea7) need not be here
                part = part.assign(label=unique_labels(part))
            try:
                board = build_ranked_board(part, str(suite), str(model), str(profile), metric)
            except BenchError as exc:
                missing.append(str(exc))
                continue
            if len(parts) > 1:
                board.variant = ident or "no model identity"
                others = [i or "none" for i, _ in parts if i != ident]
                board.notes.insert(0, f"{model} here is the network of {board.variant}; records of the same "
                                      f"suite, model and profile on another ({', '.join(others)}) have a board "
                                      f"of their own: rows on networks of different identity are not compared")
            boards.append(board)
    if not boards:
        raise BenchError("; ".join(missing))
    return boards


def build_ranked_board(df: pd.DataFrame, suite: str, model: str, profile: str, metric: str) -> Board:
    """:func:`build_board`; a board without the metric's scope (e.g. a suite with no shifted sets)
    falls back to the same metric on the clean test set and says so in its notes. BenchError
    (the requested metric's message) when neither is there."""
    try:
        return build_board(df, suite, model, profile, metric)
    except BenchError as exc:
        if not metric.startswith("shift."):
            raise
        first = exc
    fallback = f"id.{metric.split('.', 1)[1]}"
    try:
        board = build_board(df, suite, model, profile, fallback)
    except BenchError:
        raise first from None
    board.notes.insert(0, f"ranked by {fallback}: these records have no {metric}")
    return board


def build_board(df: pd.DataFrame, suite: str, model: str, profile: str, metric: str) -> Board:
    task = (distinct(df["task"]) or ["classification"])[0]
    per_seed, columns, notes = _quality(df, task)
    cost = _cost(df)
    from bench.tuning import board_split_note

    notes += _untrimmed_peak_notes(df) + shared_machine_notes(df) + cpu_model_notes(df) + \
        board_split_note(df, suite, profile, model)
    per_seed = per_seed.join(cost, how="outer") if not cost.empty else per_seed
    columns += [Column(f"cost.{k}", t, None, s, i) for k, t, s, i in COST if f"cost.{k}" in per_seed.columns]
    if metric not in per_seed.columns:
        have = [c.key for c in columns if c.better]
        raise BenchError(f"ranking metric {metric!r} is not in the {suite} / {model} records; "
                         f"metrics there: {', '.join(have)}")
    better = metric_direction(metric)
    labels = sorted(per_seed.index.get_level_values(0).unique(), key=natural_key)
    mlabel = map_label(df)
    nets = run_map_networks(df)
    delta = paired_delta(per_seed[metric], mlabel, labels, nets)
    notes += other_map_fit_notes(nets, mlabel, labels)
    ident = model_identities(df)
    elsewhere = other_network_labels(ident, df["label"], mlabel, labels)
    if elsewhere:  # rows on another network than the MAP row's: no difference to it, never marked best
        delta.loc[elsewhere, ["mean", "std"]], delta.loc[elsewhere, "n"] = np.nan, 0
        notes.append(f"{', '.join(elsewhere)}: on another network than the MAP row's (model identity "
                     f"{elsewhere_identity_text(ident, df['label'], mlabel)}): not compared with it (no Δ vs MAP) "
                     f"and never marked best; bench leaderboard gives each network its own board")
    score = ranking_score(per_seed[metric], delta, mlabel)
    order = sorted(labels, key=lambda lab: (not np.isfinite(score.get(lab, np.nan)),
                                            -score.get(lab, 0) if better == "max" else score.get(lab, 0)))
    board = Board(suite, model, profile, task, metric, columns, order, per_seed, notes=notes)
    board.validity = row_validity(df, order)
    valid = [lab for lab in labels if board.is_evidence(lab) and lab not in elsewhere]
    for c in columns:
        if c.better:  # best / tied only among the rows that are method evidence
            col_score = ranking_score(per_seed[c.key], paired_delta(per_seed[c.key], mlabel, labels, nets), mlabel)
            table = per_seed[c.key].unstack(level=1).reindex(valid)
            board.marks[c.key] = rank_marks(table, c.better, col_score, nets=nets) if valid else (set(), set())
    board.num_classes = board_num_classes(df, suite)
    board.reference_name, board.reference = reference_row(task, board.num_classes, [c.key for c in columns], df)
    board.map_label, board.delta = mlabel, delta.reindex(order) if delta is not None else None
    board.provenance = {lab: provenance(df[df["label"] == lab]) for lab in order}
    board.methods = set(distinct(df["method"]))
    board.map_networks = nets
    board.unsure_times = set().union(*timing_flags(df).values()) | (set(order) if cpu_model_notes(df) else set())
    return board


def other_network_labels(ident: pd.Series, label: pd.Series, mlabel: str | None, labels) -> list[str]:
    """The labels whose records stand on another network identity (``ident``, per record:
    :func:`model_identities`; ``label``, per record) than the MAP row's; [] when the board has one
    identity or no MAP row."""
    if mlabel is None or ident.nunique() < 2:
        return []
    of = ident.groupby(label).agg(lambda v: ";".join(sorted(set(v))))
    return [lab for lab in labels if of.get(lab) != of.get(mlabel)]


def elsewhere_identity_text(ident: pd.Series, label: pd.Series, mlabel: str) -> str:
    """``the MAP row's X; the others' Y, Z`` of a board with several network identities (``ident``
    and ``label`` per record)."""
    mine = sorted(set(ident[label == mlabel]))
    others = sorted(set(ident) - set(mine))
    return f"the MAP row's {', '.join(i or 'none' for i in mine)}; the others' {', '.join(i or 'none' for i in others)}"


def paired_delta(values: pd.Series, mlabel: str | None, labels, nets: pd.Series | None = None) -> pd.DataFrame | None:
    """label -> mean, std, n of ``values`` (indexed (label, seed)) minus MAP's, paired over seeds
    (with ``nets``, (label, seed) -> MAP network: over the seeds whose run started from the MAP
    row's network of that seed, or cannot be told apart from it)."""
    if mlabel is None:
        return None
    base = values.loc[mlabel]
    rows = {}
    for lab in labels:
        d = paired(values.loc[lab], base, nets_of(nets, lab), nets_of(nets, mlabel))
        rows[lab] = {"mean": d.mean() if len(d) else np.nan, "std": d.std(ddof=1) if len(d) > 1 else np.nan,
                     "n": len(d)}
    return pd.DataFrame.from_dict(rows, orient="index")


def other_map_fit_notes(nets: pd.Series, mlabel: str | None, labels) -> list[str]:
    """A note per row with seeds that started from another MAP network than the MAP row's of the
    same seed (another fit: a different weights' digest or validation curve), which are therefore
    not paired with it."""
    if mlabel is None or nets is None or nets.empty or mlabel not in nets.index.get_level_values(0):
        return []
    base = nets.xs(mlabel, level=0)
    out = []
    for lab in labels:
        if lab == mlabel or lab not in nets.index.get_level_values(0):
            continue
        mine = nets.xs(lab, level=0)
        seeds = [s for s in mine.index if s in base.index and not same_map_network(mine[s], base[s])]
        if seeds:
            what = "; ".join(f"seed {int(s)}: {_nets_text(mine[s], base[s])}" for s in seeds)
            out.append(f"{lab}: stands on another fit of its seed's MAP network than the MAP row's ({what}): "
                       f"{'that seed is' if len(seeds) == 1 else 'those seeds are'} not compared with MAP or paired "
                       f"with rows on the MAP row's network (Δ vs MAP and the marks use the other seeds)")
    return out


def _nets_text(mine: tuple, base: tuple) -> str:
    """How two runs' MAP networks (``map_network``) differ: by digest where both have one, else by
    the last value of their validation curves."""
    if mine[0] and base[0] and mine[0] != base[0]:
        fits = [getattr(n, "fit", None) for n in (mine, base)]
        if not any(fits):
            return f"network {mine[0][:8]} vs the MAP row's {base[0][:8]}"
        mine_fit, base_fit = (f" (trained at {f})" if f else " (where trained not recorded)" for f in fits)
        return f"network {mine[0][:8]}{mine_fit} vs the MAP row's {base[0][:8]}{base_fit}"
    return f"validation NLL curve ending {mine[1].split(',')[-1]} vs the MAP row's {base[1].split(',')[-1]}"


def ranking_score(values: pd.Series, delta: pd.DataFrame | None, mlabel: str | None) -> pd.Series:
    """The value a row is ranked by: its mean on the MAP network's seeds, estimated as MAP's mean
    plus the row's paired difference to MAP, so that rows evaluated on different seeds (one
    interrupted, one with extra seeds) are compared on the same seeds; a row sharing no seed with
    MAP (or a board without MAP) is ranked by its own mean."""
    means = values.groupby(level=0).mean()
    if delta is None or mlabel is None:
        return means
    adjusted = means[mlabel] + delta["mean"]
    return adjusted.where(delta["n"] > 0, means.reindex(adjusted.index))


def map_label(df: pd.DataFrame) -> str | None:
    """The label of the MAP network: the ``deterministic`` configuration at its defaults (label
    ``deterministic``; when several configurations have it (records of several code versions, a
    budget trial's longer trainings), the one trained the way most of the other methods' records
    were (their ``train_config``: the network they stand on), then the one with the most seeds,
    then the most recent)."""
    cand = df[(df["method"] == MAP_LABEL) & (df["method_label"] == MAP_LABEL)]
    if cand.empty:
        return None
    stats = cand.groupby("label").agg(seeds=("seed", "nunique"), last=("finished_at", "max"))
    stats["stood_on"] = 0
    if "train_config" in df.columns and stats.shape[0] > 1:
        as_text = lambda c: json.dumps(c, sort_keys=True, default=str) if isinstance(c, dict) else ""  # noqa: E731
        counts = df.loc[df["method"] != MAP_LABEL, "train_config"].map(as_text).value_counts()
        first = cand.groupby("label")["train_config"].first().map(as_text)
        stats["stood_on"] = [int(counts.get(first.get(lab, ""), 0)) if first.get(lab) else 0 for lab in stats.index]
    return str(stats.sort_values(["stood_on", "seeds", "last"], ascending=False).index[0])


def _quality(df: pd.DataFrame, task: str) -> tuple[pd.DataFrame, list[Column], list[str]]:
    """Per (label, seed) quality values and their columns; notes on incomplete seeds."""
    parts, columns, notes = [], [], []
    for kind, scope in (("id", "ID"), ("shift", "shift")):
        sub = df[df["kind"] == kind]
        wanted = QUALITY.get(task, QUALITY["classification"])
        if kind == "id" and task == "segmentation":
            wanted = wanted + ["error_auroc"]
        cols = metric_columns(sub, wanted)
        if sub.empty or not cols:
            continue
        names = [c.split(".", 1)[1] for c in cols]
        if kind == "shift":
            sub, dropped = _complete_seeds(sub)
            notes += dropped
        ps = per_seed_mean(sub, cols)
        ps.columns = [f"{kind}.{m}" for m in names]
        parts.append(ps)
        titles = {**TITLES, "accuracy": "Hamming acc"} if task == "multilabel" else TITLES
        columns += [Column(f"{kind}.{m}", f"{scope} {titles.get(m, m)}", "max" if m in HIGHER else "min")
                    for m in names if m != "coverage_3sigma"]
    ood = df[df["kind"] == "ood"]
    for name in distinct(ood["shift"]):
        sub = ood[ood["shift"] == name]
        if metric_columns(sub, ["auroc"]):
            ps = per_seed_mean(sub, ["metrics.auroc"])
            ps.columns = [f"ood.{name}.auroc"]
            parts.append(ps)
            columns.append(Column(f"ood.{name}.auroc", f"OOD AUROC ({name})", "max"))
    frame = pd.concat(parts, axis=1) if parts else pd.DataFrame(
        index=pd.MultiIndex.from_arrays([[], []], names=["label", "seed"]))
    return frame, columns, notes


def _complete_seeds(shift: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The shift records of the (label, seed) runs that have every shifted set of the board."""
    sets = shift["shift"].astype(str) + "@" + shift["severity"].astype(str)
    expected = set(sets)
    keep, notes = pd.Series(False, index=shift.index), []
    for (lab, seed), idx in shift.groupby(["label", "seed"]).groups.items():
        have = set(sets.loc[idx])
        if have == expected:
            keep.loc[idx] = True
        else:
            notes.append(f"{lab}, seed {int(seed)}: {len(have)} of {len(expected)} shifted sets evaluated; "
                         f"its shift columns are left out")
    return shift[keep], notes


def _cost(df: pd.DataFrame) -> pd.DataFrame:
    """Per (label, seed): the cost of the run, from its ID record (else its first record)."""
    cols = [f"cost.{k}" for k, *_ in COST if f"cost.{k}" in df.columns and df[f"cost.{k}"].notna().any()]
    return per_run_first(df, cols) if cols else pd.DataFrame()


def _untrimmed_peak_notes(df: pd.DataFrame) -> list[str]:
    """A note naming the configurations whose CPU train peak was measured above an untrimmed
    starting level (records made before bench.cost trimmed the allocator): an underestimate when
    an earlier cell of the same process had freed memory that the allocator kept."""
    if "cost.peak_memory_mb" not in df.columns:
        return []
    runs = per_run_first(df, ["cost.peak_memory_mb"] + [c for c in ("cost.peak_memory_probe", "device")
                                                         if c in df.columns])
    probe = runs.get("cost.peak_memory_probe", pd.Series(np.nan, index=runs.index))
    on_cpu = runs.get("device", pd.Series("cpu", index=runs.index)).astype(str).str.startswith("cpu")
    legacy = on_cpu & runs["cost.peak_memory_mb"].notna() & (probe.isna() | (probe == LEGACY_CPU_PROBE))
    labels = sorted({str(lab) for lab, _ in runs.index[legacy]}, key=natural_key)
    if not labels:
        return []
    return [f"train peak MiB of {', '.join(labels)}: measured above an untrimmed start (records made "
            f"before the probe released freed memory first): it can read low when an earlier cell of "
            f"the same process freed memory its fit then reused"]


def timing_flags(df: pd.DataFrame) -> dict[str, set]:
    """The configurations whose train times are upper bounds, not speeds (``python -m bench perf``
    gives controlled ratios), by kind, each from what bench.harness records beside a
    fit and the MAP cache beside a MAP network's training (bench.measurement.ThreadUsage), in at
    least one seed:

    - paused: the process did not run at all (stopped, suspended) for more than PAUSED_LIMIT of the
      wall time of the fit or of a MAP network it is built from (any device);
    - shared (CPU): the training thread waited for a core for more than RUN_DELAY_LIMIT of the time,
      or the 1-minute load average at the fit's start or end was SHARED_LOAD or more above the fit's
      threads;
    - not checked (CPU): records made before bench recorded the load or the pauses."""
    flags = {"paused": set(), "shared": set(), "unknown": set()}
    if "cost.train_time_s" not in df.columns:
        return flags
    usage = [f"cost.{p}_{k}" for p in ("fit", "upstream") for k in ("paused_fraction", "run_delay_fraction")]
    cols = [c for c in ["cost.host_load_1m", "cost.torch_threads", "cost.timed_on", "device",
                        "cost.upstream_train_time_s"] + usage if c in df.columns]
    runs = per_run_first(df, ["cost.train_time_s"] + cols)

    def number(r, key):
        try:
            v = float(r.get(key))
        except (TypeError, ValueError):
            return None
        return v if v == v else None

    paused, shared, unknown = flags["paused"], flags["shared"], flags["unknown"]
    for (lab, _), r in runs.iterrows():
        lab = str(lab)
        parts = ["fit"] + (["upstream"] if (number(r, "cost.upstream_train_time_s") or 0.0) > 0 else [])
        stops = [number(r, f"cost.{p}_paused_fraction") for p in parts]
        if any(stopped_too_long(v) for v in stops):
            paused.add(lab)
        if not str(r.get("device", "cpu")).startswith("cpu"):
            continue  # a GPU fit's speed is not the CPU's: its load is not judged
        load, threads = number(r, "cost.host_load_1m"), number(r, "cost.torch_threads")
        delay = [number(r, f"cost.{p}_run_delay_fraction") for p in parts]
        if load is None or threads is None or any(v is None for v in stops):
            unknown.add(lab)
        if loaded_machine(load, threads) or any(waited_too_long(v) for v in delay):
            shared.add(lab)

    return flags


def shared_machine_notes(df: pd.DataFrame) -> list[str]:
    """A note per kind of :func:`timing_flags`, naming its configurations."""
    flags = timing_flags(df)
    paused, shared, unknown = flags["paused"], flags["shared"], flags["unknown"]

    def names(labels):
        return ", ".join(sorted(labels, key=natural_key))

    notes = []
    if paused:
        notes.append(f"train s of {names(paused)}: the process was stopped (did not run at all) for more than "
                     f"{PAUSED_LIMIT:.0%} of the training time in a seed: upper bounds of the compute time")
    if shared:
        notes.append(f"train s of {names(shared)}: fitted while other work loaded the machine (the training "
                     f"thread waited for a core more than {RUN_DELAY_LIMIT:.0%} of the time, or the 1-minute "
                     f"load average was at least {SHARED_LOAD:g} above the fit's threads, in a seed): upper "
                     f"bounds, not speeds; python -m bench perf gives controlled ratios")
    if unknown:
        notes.append(f"train s of {names(unknown)}: the records do not say how loaded the machine was or whether "
                     f"the process was stopped meanwhile (made before bench recorded them): compare them, and "
                     f"their predict ms/ex, as upper bounds")
    return notes + predict_timing_notes(df)


def predict_timing_notes(df: pd.DataFrame) -> list[str]:
    """A note naming the configurations whose predict time (the id record's, as the boards show it)
    was taken across a stop (any device) or, on a CPU, while its thread waited for a core, in a seed:
    upper bounds (the limits of :func:`timing_flags`)."""
    cols = ["cost.predict_time_per_example_s", "cost.predict_paused_fraction", "cost.predict_run_delay_fraction"]
    if not all(c in df.columns for c in cols):
        return []
    runs = per_run_first(df, cols + [c for c in ("device",) if c in df.columns])
    flagged = set()
    for (lab, _), r in runs.iterrows():
        paused, delay = r.get("cost.predict_paused_fraction"), r.get("cost.predict_run_delay_fraction")
        on_cpu = str(r.get("device", "cpu")).startswith("cpu")
        if stopped_too_long(paused) or (on_cpu and waited_too_long(delay)):
            flagged.add(str(lab))
    if not flagged:
        return []
    return [f"predict ms/ex of {', '.join(sorted(flagged, key=natural_key))}: measured while the process was "
            f"stopped more than {PAUSED_LIMIT:.0%} of the time or its thread waited for a core more than "
            f"{RUN_DELAY_LIMIT:.0%}, in a seed: upper bounds"]


def cpu_model_notes(df: pd.DataFrame) -> list[str]:
    """A note when the board's train times come from more than one CPU model (the records'
    ``cost.cpu_model``, bench.provenance.cpu_model; records made before it was kept say none): a
    time ratio across CPUs measures the machines as much as the methods."""
    if "cost.cpu_model" not in df.columns or "cost.train_time_s" not in df.columns:
        return []
    runs = per_run_first(df, ["cost.train_time_s", "cost.cpu_model"])
    by_cpu: dict[str, set] = {}
    for (lab, _), r in runs.iterrows():
        model = r.get("cost.cpu_model")
        by_cpu.setdefault(str(model) if isinstance(model, str) and model else "not recorded", set()).add(str(lab))
    if len([m for m in by_cpu if m != "not recorded"]) < 2:
        return []
    parts = "; ".join(f"{m}: {', '.join(sorted(labs, key=natural_key))}" for m, labs in sorted(by_cpu.items()))
    return [f"train s measured on different CPUs ({parts}): compare times within one CPU"]


# --------------------------------------------------------------------------- provenance


def provenance(recs: pd.DataFrame) -> dict:
    """What a configuration's numbers came from: commits, versions, device, seeds, data and the
    training setup actually used (the profile's, with the method's own overrides)."""
    first = recs.iloc[0]
    versions = sorted({f"torch {v}" for v in recs.get("versions.torch", pd.Series(dtype=object)).dropna()}
                      | {f"bench {v}" for v in recs.get("versions.bench", pd.Series(dtype=object)).dropna()})
    data = distinct(recs["data_fingerprint"]) if "data_fingerprint" in recs.columns else []
    return {
        "method": str(first["method"]),
        "config": _config_text(first.get("method_config")),
        "commits": ", ".join(str(c)[:10] + ("+dirty" if str(c).endswith("+dirty") else "")
                             for c in distinct(recs["git_commit"])) or "–",
        "versions": ", ".join(versions) or "–",
        "devices": (", ".join(map(str, distinct(recs["device"]))) or "–") + (
            f" (CPU: {', '.join(map(str, distinct(recs['cost.cpu_model'])))})"
            if "cost.cpu_model" in recs.columns and recs["cost.cpu_model"].notna().any() else ""),
        "seeds": ", ".join(str(int(s)) for s in sorted(recs["seed"].dropna().unique())),
        "data": ", ".join(map(str, data)) or "as built by the suite (no file-backed shifted sets)",
        "training": training_setup(first.get("method"), first.get("method_config"), first.get("train_config")),
        "results": ", ".join(distinct(recs["results_dir"])) if "results_dir" in recs.columns else "–",
    }


def _config_text(cfg) -> str:
    if not isinstance(cfg, dict) or not cfg:
        return "defaults"
    return ", ".join(f"{k}={v}" for k, v in sorted(cfg.items()))


def training_setup(method, method_config, train_config) -> str:
    """``starts from ...; <optimiser> lr .. <schedule>, .. epochs, batch .., weight decay ..``."""
    cfg = dict(train_config) if isinstance(train_config, dict) else {}
    mc = method_config if isinstance(method_config, dict) else {}
    start = "?"
    try:
        from methods import METHODS

        cls = METHODS.get(str(method))
        cfg.update(cls.train_overrides(mc))
        start = {"map": "the seed's MAP network", "maps": "independently trained MAP networks",
                 "scratch": "a random initialisation"}.get(cls.starts_from(mc), cls.starts_from(mc))
    except Exception:  # noqa: BLE001 - records of a method this version does not know
        pass
    if not cfg:
        return f"starts from {start}"
    parts = [f"{cfg.get('optimizer', '?')} lr {cfg.get('lr', '?')}", f"{cfg.get('schedule', '?')} schedule",
             f"{cfg.get('epochs', '?')} epochs", f"batch {cfg.get('batch_size', '?')}",
             f"weight decay {cfg.get('weight_decay', '?')}"]
    return f"starts from {start}; " + ", ".join(parts)
