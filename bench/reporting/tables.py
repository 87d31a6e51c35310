"""Report tables computed from the prepared record frame (see ``data.prepare``).

A :class:`Table` holds numbers (mean, std and seed count per row and column) and which
cells are best; ``render`` turns it into HTML or markdown. A :class:`TextTable` holds
plain strings (failed runs, method configurations).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .data import (CLASSIFICATION_METRICS, REGRESSION_METRICS, Sweep, cost_columns, per_run_first, run_map_networks,
                   distinct, labels_in_order, metric_columns, natural_key, per_seed_mean,
                   scoped_metrics_per_seed, seed_summary)

METRIC_TITLES = {
    "accuracy": "acc", "nll": "NLL", "brier": "Brier", "ece": "ECE", "entropy": "entropy",
    "mutual_information": "MI", "auroc": "AUROC", "aupr": "AUPR", "rmse": "RMSE",
    "mean_std": "mean std", "coverage_3sigma": "3σ coverage", "miou": "mIoU", "pixel_accuracy": "pixel acc",
    "error_auroc": "error AUROC (entropy)", "fpr_at_95_tpr": "FPR@95%TPR", "auroc_mi": "AUROC (MI)",
    "aurc": "AURC", "dice": "Dice", "dice_per_image": "Dice per image",
    "auroc_mean": "AUROC (label mean)", "mean_average_precision": "mAP", "subset_accuracy": "subset acc",
}
HIGHER_IS_BETTER = {"accuracy", "auroc", "aupr", "miou", "pixel_accuracy", "error_auroc", "auroc_mi", "dice",
                    "dice_per_image", "auroc_mean", "mean_average_precision", "subset_accuracy"}
LOWER_IS_BETTER = {"nll", "brier", "ece", "rmse", "fpr_at_95_tpr", "aurc"}
TARGETS = {"coverage_3sigma": 0.9973}  # best = closest to the Gaussian 3-sigma mass


@dataclass
class Column:
    key: str                    # column name in Table.mean / Table.std
    title: str
    better: str | None = None   # "max", "min", "target" or None (not ranked)
    target: float | None = None
    integers: bool = False      # show integral values as integers (counts, parameters)


@dataclass
class Table:
    name: str
    columns: list[Column]
    mean: pd.DataFrame          # index: row labels, columns: Column.key
    std: pd.DataFrame
    count: pd.DataFrame
    index_title: str = "method"
    caption: str = ""
    #: (row, key) -> cell text, replacing the default ``mean ± std`` formatting
    texts: dict = field(default_factory=dict)
    #: key -> (best rows, tied rows), replacing the default "best = the top mean" marking
    marks: dict = field(default_factory=dict)
    #: one line per marked row (why it is not method evidence), shown as a list under the table
    notes: list = field(default_factory=list)

    @property
    def rows(self) -> list[str]:
        return list(self.mean.index)

    def tied_rows(self, key: str) -> set:
        """Rows that cannot be told apart from the top row of column ``key`` (``marks`` only)."""
        return set(self.marks[key][1]) if key in self.marks else set()

    def best_rows(self, key: str) -> set:
        """Row labels holding the best value of column ``key`` (ties all count)."""
        if key in self.marks:
            return set(self.marks[key][0])
        col = next(c for c in self.columns if c.key == key)
        if col.better is None:
            return set()
        values = self.mean[key].astype(float)
        values = values[np.isfinite(values)]
        if len(values) < 2:
            return set()
        if col.better == "max":
            score = values
        elif col.better == "min":
            score = -values
        else:
            score = -(values - col.target).abs()
        top = score.max()
        return {r for r, s in score.items() if np.isclose(s, top, rtol=1e-12, atol=0.0)}

    def is_best(self, row, key) -> bool:
        return row in self.best_rows(key)

    def column(self, key: str) -> Column:
        return next(c for c in self.columns if c.key == key)

    def cell_text(self, row, key) -> str:
        if (row, key) in self.texts:
            return self.texts[(row, key)]
        ints = self.column(key).integers
        return format_mean_std(self.mean.at[row, key], self.std.at[row, key], integers=ints)


@dataclass
class TextTable:
    name: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""
    code_columns: tuple = ()    # indices rendered as code / pre-wrapped (errors, configs)


def format_number(x, integers: bool = False) -> str:
    """Compact, stable number format shared by HTML and markdown.

    Metrics get 4 decimals (``0.9812``), large values thousands separators, tiny values
    scientific notation; with ``integers`` integral values print as integers.
    """
    if x is None:
        return "–"
    x = float(x)
    if not math.isfinite(x):
        return "–" if math.isnan(x) else ("∞" if x > 0 else "-∞")
    ax = abs(x)
    if x.is_integer() and (integers or ax >= 1e4) and ax < 1e15:
        return f"{int(x):,}"
    if ax >= 1e6:
        return f"{x:.3e}"
    if ax >= 100:
        return f"{x:,.1f}"
    if ax >= 1e-3 or ax == 0:
        return f"{x:.4f}"
    return f"{x:.2e}"


def format_mean_std(mean, std=None, integers: bool = False) -> str:
    """``mean ± std`` rounded to what the std supports, as the leaderboard prints it
    (:func:`bench.leaderboard.stats.format_value`: the std to two significant digits, the mean to the
    same decimals, at most four significant digits), so that a report's tables and the leaderboard
    read alike; just ``mean`` (:func:`format_number`) when the std is missing (one seed)."""
    m = format_number(mean, integers)
    if m == "–" or std is None or not np.isfinite(float(std)):
        return m
    from bench.leaderboard.stats import format_value

    return format_value(float(mean), float(std), integers=integers)


def mean_std_text(values, fmt: str = "{:.4f}", empty: str = "-") -> str:
    """``mean ± std`` over seeds of raw values with a ``str.format`` pattern, as the experiment
    scripts of ``benchmarks/`` print their tables: missing values (None, NaN) left out, one value
    printed alone, none as ``empty``."""
    import statistics

    v = [float(x) for x in values if x is not None and float(x) == float(x)]
    if not v:
        return empty
    return fmt.format(v[0]) if len(v) == 1 else f"{fmt.format(statistics.mean(v))} ± {fmt.format(statistics.stdev(v))}"


def _metric_column(prefix_key: str, metric: str, scope: str) -> Column:
    title = f"{scope} {METRIC_TITLES.get(metric, metric)}".strip()
    if metric in HIGHER_IS_BETTER:
        return Column(prefix_key, title + " ↑", "max")
    if metric in LOWER_IS_BETTER:
        return Column(prefix_key, title + " ↓", "min")
    if metric in TARGETS:
        return Column(prefix_key, title + f" (→{TARGETS[metric]:g})", "target", TARGETS[metric])
    return Column(prefix_key, title, None)


def _assemble(name, per_seed: list[pd.DataFrame], columns: list[Column], labels, caption,
              seeds_from: pd.DataFrame | None = None) -> Table | None:
    columns = [c for c in columns if any(c.key in p.columns for p in per_seed)]
    if not columns:
        return None
    frame = pd.concat([p for p in per_seed if not p.empty], axis=1) if any(
        not p.empty for p in per_seed) else pd.DataFrame()
    if frame.empty:
        return None
    mean, std, count = seed_summary(frame)
    rows = [lab for lab in labels if lab in mean.index]
    keys = [c.key for c in columns]
    mean, std, count = (t.reindex(index=rows, columns=keys) for t in (mean, std, count))
    if seeds_from is not None:
        seeds = seeds_from.groupby("label")["seed"].nunique().reindex(rows).fillna(0).astype(int)
        mean.insert(0, "seeds", seeds.astype(float))
        std.insert(0, "seeds", np.nan)
        count.insert(0, "seeds", seeds)
        columns = [Column("seeds", "seeds", integers=True)] + columns
    return Table(name, columns, mean, std, count, caption=caption)


def paired_marks(table: Table | None, per_seed: list[pd.DataFrame], df: pd.DataFrame | None = None,
                 reference: bool = False) -> Table | None:
    """Mark a table's ranked columns by the leaderboard's rule: bold only where the top row beats
    every other row beyond the seed noise (paired t-test over common seeds), italic for the rows
    tied with the top (``bench.leaderboard.stats.rank_marks``). With the records ``df``: only
    the rows that passed their validity checks (:mod:`bench.validity`) are marked, the others
    carry the symbol of their verdict (✗ fail, ? unverified) and the caption says why; with
    ``reference`` a uniform predictor's row is added (NLL ln K, Brier 1 - 1/K, accuracy 1/K)."""
    if table is None:
        return None
    from bench.leaderboard.stats import rank_marks

    validity = {}
    if df is not None and "validity.status" in df.columns:
        from bench.validity import row_validity

        validity = row_validity(df, table.rows)
    ranked = [r for r in table.rows if validity.get(r, ("ok",))[0] == "ok"]
    frame = pd.concat([p for p in per_seed if not p.empty], axis=1)
    nets = run_map_networks(df) if df is not None and "label" in df.columns else None  # pairs on one MAP fit
    for c in table.columns:
        if c.better in ("max", "min") and c.key in frame.columns:
            table.marks[c.key] = (rank_marks(frame[c.key].unstack(level=1).reindex(ranked), c.better, nets=nets)
                                  if ranked else (set(), set()))
    if validity:
        _mark_rows(table, validity)
    if reference and df is not None and len(df):
        _reference_row(table, df)
    return table


def _mark_rows(table: Table, validity: dict) -> None:
    """Rows that are not method evidence get their verdict's symbol; the caption lists why."""
    from bench.validity import OK, marked_label

    shown, notes = {}, []
    for r in table.rows:
        status, reasons = validity.get(r, (OK, []))
        shown[r] = marked_label(r, status)
        if status != OK:
            notes.append(f"{shown[r]}: {'; '.join(reasons)}")
    if not notes:
        return
    for frame in (table.mean, table.std, table.count):
        frame.index = [shown[r] for r in frame.index]
    table.texts = {(shown.get(r, r), k): v for (r, k), v in table.texts.items()}
    table.marks = {k: ({shown[r] for r in b}, {shown[r] for r in t}) for k, (b, t) in table.marks.items()}
    table.caption = (table.caption + " ✗: fails its validity checks, ?: could not be checked (bench.validity): not "
                     "method evidence, never marked; the reasons are listed under the table.")
    table.notes = notes


def _reference_row(table: Table, df: pd.DataFrame) -> None:
    from bench.validity import board_num_classes, reference_row

    task = str((distinct(df["task"]) or ["classification"])[0]) if "task" in df.columns else "classification"
    k = board_num_classes(df, str(df["suite"].iloc[0]))
    row, ref = reference_row(task, k, [c.key for c in table.columns], df)
    if not ref:
        return
    for frame in (table.mean, table.std, table.count):
        frame.loc[row] = np.nan
    for c in table.columns:
        table.texts[(row, c.key)] = format_number(ref[c.key]) if c.key in ref else "–"


def leaderboard(df: pd.DataFrame) -> Table | None:
    """Classification leaderboard: id, shift-averaged and per-OOD-set metrics per method.

    Each seed contributes one value per column (shift columns: the mean over every shift
    record of that seed, i.e. over shift families and severities); cells are the mean and
    std of those per-seed values.
    """
    labels = labels_in_order(df)
    per_seed, columns = [], []
    for kind, scope in (("id", "ID"), ("shift", "shift")):
        sub = df[df["kind"] == kind]
        cols = metric_columns(sub, CLASSIFICATION_METRICS)
        ps = per_seed_mean(sub, cols)
        ps.columns = [f"{kind}.{c.split('.', 1)[1]}" for c in ps.columns]
        per_seed.append(ps)
        columns += [_metric_column(f"{kind}.{c.split('.', 1)[1]}", c.split(".", 1)[1], scope) for c in cols]
    ood = df[df["kind"] == "ood"]
    for name in distinct(ood["shift"]):
        sub = ood[ood["shift"] == name]
        cols = metric_columns(sub, ["auroc"])       # AUPR, entropy and MI: the uncertainty table
        ps = per_seed_mean(sub, cols)
        ps.columns = [f"ood.{name}.{c.split('.', 1)[1]}" for c in ps.columns]
        per_seed.append(ps)
        columns += [_metric_column(f"ood.{name}.{c.split('.', 1)[1]}", c.split(".", 1)[1], f"OOD {name}")
                    for c in cols]
    if "task" in df.columns and "multilabel" in distinct(df["task"]):  # accuracy per (example, label) pair
        for c in columns:
            c.title = c.title.replace(" acc ", " Hamming acc ") if c.key.endswith(".accuracy") else c.title
    caption = ("Mean ± std over seeds (just the mean for one seed). ID: clean test set. "
               "Shift: per seed, the mean over every shifted test set (all shift families and "
               "severities), then mean ± std over seeds. "
               + ("OOD: detection of the named data set from predictive entropy (AUROC). " if not ood.empty else "")
               + "Bold: better than every other row beyond the seed noise (two-sided paired t-test over the "
                 "common seeds, 5 %); italic: the rows the top one cannot be told apart from (with one seed, "
                 "nothing is marked); ↑ higher is better, ↓ lower is better.")
    return paired_marks(_assemble("Leaderboard", per_seed, columns, labels, caption, seeds_from=df), per_seed, df,
                        reference=True)


def uncertainty_table(df: pd.DataFrame) -> Table | None:
    """Predictive entropy and mutual information (the epistemic part) on the clean, shifted and
    OOD sets, and OOD detection's AUPR; mutual information only for methods that sample."""
    labels = labels_in_order(df)
    per_seed, columns = [], []
    for kind, scope in (("id", "ID"), ("shift", "shift"), ("ood", "OOD")):
        sub = df[df["kind"] == kind]
        cols = metric_columns(sub, ["entropy", "mutual_information"]
                              + (["aupr", "fpr_at_95_tpr", "auroc_mi"] if kind == "ood" else ["aurc"]))
        if not cols:
            continue
        ps = per_seed_mean(sub, cols)
        ps.columns = [f"u.{kind}.{c.split('.', 1)[1]}" for c in ps.columns]
        per_seed.append(ps)
        columns += [_metric_column(f"u.{kind}.{c.split('.', 1)[1]}", c.split(".", 1)[1], scope) for c in cols]
    if not any(k in c.key for c in columns for k in ("mutual_information", "aupr", "aurc")):
        return None
    caption = ("Mean ± std over seeds of the per-set means: predictive entropy H[p̄] and mutual information "
               "(its epistemic part; '–' for methods that do not sample) on the clean (ID), shifted (mean over "
               "every shifted set) and OOD sets (mean over OOD sets); AURC: area under the risk-coverage curve "
               "(selective prediction by confidence); OOD detection by entropy (AUPR, FPR at 95 % TPR) and by "
               "mutual information (AUROC (MI)). Records written before a metric existed show '–'. Higher "
               "uncertainty on shifted and OOD data than on clean data is what a method should show.")
    return paired_marks(_assemble("Predictive uncertainty", per_seed, columns, labels, caption, seeds_from=df),
                        per_seed, df)


def corruption_error_table(df: pd.DataFrame, reference: str | None) -> Table | None:
    """mCE and relative mCE per method (Hendrycks & Dietterich 2019), and each corruption's CE:
    normalised by AlexNet's published errors (``reference="alexnet"``, ImageNet-C) or, without a
    reference network, the unnormalised mean error (Tiny-ImageNet-C)."""
    from bench.mce import corruption_error_frame

    per_seed = corruption_error_frame(df, reference)
    if per_seed.empty or not np.isfinite(per_seed["mce"].astype(float)).any():
        return None
    corr = [c for c in per_seed.columns if c.startswith("ce.")]
    normalised = reference == "alexnet"
    columns = [Column("mce", "mCE ↓" if normalised else "mean corruption error ↓", "min"),
               Column("relative_mce", "relative mCE ↓" if normalised else "mean error increase ↓", "min"),
               Column("n_corruptions", "corruptions", integers=True)]
    # each corruption's CE: per_corruption_error_table (transposed, so that it fits the page)
    if normalised:
        caption = ("Corruption errors (Hendrycks & Dietterich 2019): per corruption, CE = the top-1 error summed over "
                   "severities 1-5 divided by AlexNet's published errors; relative CE uses the errors minus the clean "
                   "error. mCE / relative mCE: their means over the standard corruptions with all five severities "
                   "(column 'corruptions'; the published figures use 15). Lower is better; AlexNet = 1.")
    else:
        caption = ("No reference network exists for Tiny-ImageNet-C: per corruption the top-1 error averaged over "
                   "severities 1-5 (unnormalised CE), its mean over corruptions, and the mean increase over the clean "
                   "error. Lower is better.")
    return _assemble("Corruption errors", [per_seed[[c.key for c in columns]]], columns,
                     labels_in_order(df), caption, seeds_from=df)


def per_corruption_error_table(df: pd.DataFrame, reference: str | None) -> Table | None:
    """Each corruption's CE (see :func:`corruption_error_table`), transposed: one row per corruption,
    one column per method, the mean over seeds only (their spread is in the summary table), lowest
    per row in bold, so that nineteen corruptions fit the page."""
    from bench.mce import corruption_error_frame

    per_seed = corruption_error_frame(df, reference)
    corr = [c for c in per_seed.columns if c.startswith("ce.")]
    if per_seed.empty or not corr:
        return None
    labels = [lab for lab in labels_in_order(df) if lab in per_seed.index.get_level_values(0)]
    mean = per_seed[corr].astype(float).groupby(level=0, sort=False).mean().reindex(labels).T
    mean.index = [c[3:] for c in mean.index]
    keys = [f"m{i}" for i in range(len(labels))]
    mean.columns = keys
    validity = {}
    if "validity.status" in df.columns:
        from bench.validity import row_validity

        validity = row_validity(df, labels)
    from bench.validity import OK, marked_label

    status = {k: validity.get(lab, (OK,))[0] for k, lab in zip(keys, labels)}
    columns = [Column(k, marked_label(str(lab), status[k]), None) for k, lab in zip(keys, labels)]
    texts = {(r, k): "–" if pd.isna(mean.at[r, k]) else f"{mean.at[r, k]:.3f}" for r in mean.index for k in keys}
    evidence = [k for k in keys if status[k] == OK]
    marks = {k: (set(), set()) for k in keys}
    if len(evidence) >= 2:   # the lowest of each row among the columns that are method evidence
        best = mean[evidence].idxmin(axis=1, skipna=True)
        for r, k in best.dropna().items():
            marks[k][0].add(r)
    table = Table("Corruption errors per corruption", columns, mean, mean * np.nan, mean.notna().astype(int),
                  index_title="corruption", texts=texts, marks=marks,
                  caption="CE per corruption (as above), mean over seeds (the spread over seeds is in the summary "
                          "table); bold: the lowest of its row among the methods that pass their validity checks "
                          "(✗ / ? in a column title: not method evidence, never bold).")
    return table


def regression_tables(df: pd.DataFrame) -> list[Table]:
    """One table per evaluation kind (id, shift, ood) with rmse / nll / mean std / coverage."""
    labels = labels_in_order(df)
    tables = []
    for kind, scope in (("id", "in-distribution"), ("shift", "shifted (mean over shifts)"),
                        ("ood", "out-of-distribution")):
        sub = df[df["kind"] == kind]
        if sub.empty:
            continue
        cols = metric_columns(sub, REGRESSION_METRICS)
        ps = per_seed_mean(sub, cols)
        ps.columns = [c.split(".", 1)[1] for c in ps.columns]
        columns = [_metric_column(c, c, "") for c in ps.columns]
        caption = (f"Regression metrics on the {scope} evaluation; mean ± std over seeds. "
                   "Best in bold (coverage: closest to 0.9973, the mass of a Gaussian within ±3σ).")
        table = _assemble(f"Regression: {kind}", [ps], columns, labels, caption, seeds_from=sub)
        if table is not None:
            tables.append(table)
    return tables


#: cost keys every method reports (bench.cost / harness); the main cost table shows these first
def is_paper_cost_key(key: str) -> bool:
    """Cost keys of the PBN paper's cost model (Appendix B / C), not measurements."""
    return (key.endswith("_paper") or key.startswith(("variational_", "param_ratio"))
            or key in ("mean_params", "forward_flops_deterministic"))


def _per_run_cost(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """One row per (label, seed) run (:func:`~bench.reporting.data.per_run_first`), ``cost.`` dropped."""
    per_run = per_run_first(df, cols)
    per_run.columns = [c.split(".", 1)[1] for c in cols]
    return per_run


def _cost_columns(per_run: pd.DataFrame, titles: dict | None = None) -> list[Column]:
    # counts (parameters, FLOPs, bytes) print as integers; times, memory and ratios keep their decimals
    titles = titles or {}
    return [Column(c, titles.get(c, c), integers=not c.endswith(("_s", "_ms", "_mb", "_gb"))
                   and bool(np.all(np.mod(per_run[c].dropna(), 1) == 0)))
            for c in per_run.columns]


#: key -> (title, scale): the measured cost columns every method has, with units
COST_TITLES = {"total_params": ("parameters", 1.0), "stochastic_params": ("stochastic params", 1.0),
               "train_time_s": ("train time (s)", 1.0), "upstream_train_time_s": ("of which MAP networks (s)", 1.0),
               "fit_time_s": ("own fit (s)", 1.0), "predict_time_per_example_s": ("predict (ms / example)", 1e3),
               "flops_per_example": ("MFLOPs / example", 1e-6), "peak_memory_mb": ("train peak memory (MiB)", 1.0),
               "predict_peak_memory_mb": ("predict peak memory (MiB)", 1.0), "state_mb": ("state (MiB)", 1.0)}
COST_ORDER = ["stochastic_params", "total_params", "train_time_s", "upstream_train_time_s", "fit_time_s",
              "predict_time_per_example_s", "flops_per_example", "peak_memory_mb", "predict_peak_memory_mb",
              "state_mb"]


def readable_cost_title(key: str) -> str:
    """``vi_train_time_s`` -> ``vi train time (s)``, ``covariance_bytes`` -> ``covariance (bytes)``."""
    for suffix, unit in (("_s", "s"), ("_mb", "MiB"), ("_bytes", "bytes"), ("_gb", "GiB")):
        if key.endswith(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} ({unit})"
    return key.replace("_", " ")


def _is_count(key: str) -> bool:
    """A cost key that counts things (parameters, bytes, subnetwork entries): printed as an integer."""
    return key.endswith(("params", "_bytes", "subnet_size")) or key.startswith("n_")


def _means_table(name, per_run: pd.DataFrame, keys: list[str], titles: dict, labels, caption) -> Table | None:
    """Means over seeds, three significant digits, counts as integers, columns empty for every
    row dropped, rows without any value dropped."""
    from bench.leaderboard.stats import format_value

    mean = per_run.groupby(level=0, sort=False).mean()
    keys = [k for k in keys if k in mean.columns and mean[k].notna().any()]
    rows = [lab for lab in labels if lab in mean.index and mean.loc[lab, keys].notna().any()]
    if not keys or not rows:
        return None
    mean = mean.reindex(index=rows, columns=keys)
    texts, columns = {}, []
    for k in keys:
        title, scale = titles.get(k, (readable_cost_title(k), 1.0))
        counts = _is_count(k)
        columns.append(Column(k, title, integers=counts))
        for lab in rows:
            v = mean.at[lab, k]
            texts[(lab, k)] = "0" if v == 0 else format_value(v, None, scale, integers=counts)
    nan = mean * np.nan
    return Table(name, columns, mean, nan, mean.notna().astype(int), caption=caption, texts=texts)


def cost_table(df: pd.DataFrame) -> Table | None:
    """Measured cost per method: mean over seeds of the cost keys every method has, with units, from
    each run's id record. Method-specific keys go to :func:`method_cost_table`, the paper-formula
    keys to :func:`paper_cost_table`."""
    cols = [c for c in cost_columns(df) if c.split(".", 1)[1] in COST_TITLES]
    if not cols:
        return None
    per_run = _per_run_cost(df, cols)
    devices = ", ".join(str(d) for d in distinct(df["device"])) if "device" in df.columns else "?"
    caption = ("Measured cost, mean over seeds (three significant digits), from the in-distribution record of each "
               f"run; measured on: {devices} (device, architecture, threads). Train time includes the MAP networks a "
               "method is built from (ensemble members, PBN's start: 'of which MAP networks'); own fit = the method's "
               "own fitting. Timings are wall-clock on that machine and are upper bounds when other jobs shared it. "
               "Peak memory: on CUDA the peak allocated memory; on a CPU the growth of the process's resident set, an "
               "estimate that under-reports when freed memory is reused (small values are noise). MFLOPs / example: "
               "torch.utils.flop_counter on one prediction (all samples / members). State: bytes of the fitted "
               "method's state (exact).")
    return _means_table("Cost", per_run, COST_ORDER, COST_TITLES, labels_in_order(df), caption)


def method_cost_table(df: pd.DataFrame) -> TextTable | None:
    """The cost keys only some methods record (e.g. a Laplace's curvature time, SSVI's sparse
    FLOPs), the paper-formula keys excluded: one row per method listing the quantities it recorded
    (``title: mean over seeds``), so that a table of twenty mostly empty columns stays one page wide."""
    from bench.leaderboard.stats import format_value

    cols = [c for c in cost_columns(df) if c.split(".", 1)[1] not in COST_TITLES
            and not is_paper_cost_key(c.split(".", 1)[1])]
    if not cols:
        return None
    per_run = _per_run_cost(df, cols)
    mean = per_run.groupby(level=0, sort=False).mean()
    rows = []
    for lab in labels_in_order(df):
        if lab not in mean.index:
            continue
        items = []
        for k in mean.columns:
            v = mean.at[lab, k]
            if pd.isna(v):
                continue
            counts = _is_count(k)
            items.append(f"{readable_cost_title(k)}: {'0' if v == 0 else format_value(v, None, 1.0, integers=counts)}")
        if items:
            rows.append([str(lab), " · ".join(items)])
    if not rows:
        return None
    return TextTable("Method-specific cost", ["method", "quantities recorded (mean over seeds)"], rows,
                     caption="Cost quantities that only some methods record, mean over seeds (three significant "
                             "digits); a method that records none has no row.")


PAPER_COST_ORDER = ["mean_params", "variational_params", "param_ratio_vs_deterministic",
                    "variational_state_bytes", "variational_state_bytes_dense_rho",
                    "forward_flops_deterministic", "predict_flops_per_example_paper",
                    "train_flops_per_example_step_paper", "pretrain_flops_paper", "train_flops_paper"]
PAPER_COST_TITLES = {"mean_params": "mean_params (θ)", "variational_params": "variational_params (k = rθ)",
                     "param_ratio_vs_deterministic": "param_ratio_vs_deterministic (1 + r)",
                     "forward_flops_deterministic": "forward_flops_deterministic (f_d)"}
PAPER_COST_CAPTION = (
    "Cost model of the PBN paper (Appendix B, Table 1; Appendix C), evaluated for each run with "
    "θ = mean_params (every parameter of the network), k = variational_params (the stochastic entries), "
    "r = k / θ, N = the number of posterior samples (predict_samples for prediction, train_samples for "
    "training) and f_d = forward_flops_deterministic (FLOPs of one deterministic forward pass per example). "
    "Stored parameters: (1 + r) θ, i.e. param_ratio_vs_deterministic = 1 + r (full VI: 2θ). "
    "Prediction FLOPs per example: (1 + r) N f_d. "
    "PBN training FLOPs per example and step: (1 + r)(N + 2) f_d, plus 3 f_d per example and epoch of "
    "deterministic pre-training (pretrain_flops_paper; train_flops_paper = per-step cost × training "
    "examples × epochs + pre-training). Full VI: 2 (N + 2) f_d per example and step. "
    "variational_state_bytes: bytes of ρ plus the indices of the stochastic entries "
    "(variational_state_bytes_dense_rho: a dense ρ over all θ, for scale). These are formulas, not "
    "measurements: measured times, memory and FLOPs (torch flop counter) are in the main cost table.")


def paper_cost_table(df: pd.DataFrame) -> Table | None:
    """The PBN paper's cost formulas (``*_paper``, ``variational_*``, ``param_ratio*`` ...), for the
    methods that report them; mean over seeds."""
    cols = [c for c in cost_columns(df) if is_paper_cost_key(c.split(".", 1)[1])]
    if not cols:
        return None
    rank = {k: i for i, k in enumerate(PAPER_COST_ORDER)}
    cols.sort(key=lambda c: rank.get(c.split(".", 1)[1], len(rank)))
    has = df[df[cols].notna().any(axis=1)]
    per_run = _per_run_cost(df[df["label"].isin(set(has["label"]))], cols)
    table = _assemble("Paper cost model", [per_run], _cost_columns(per_run, PAPER_COST_TITLES),
                      labels_in_order(has), PAPER_COST_CAPTION)
    if table is not None:
        table.std.loc[:, :] = np.nan
    return table


# ----------------------------------------------------------------------- sweeps, subnetworks

#: metrics of the sweep table / figure (PBN paper Fig. 4a-d), in this order when present
SWEEP_KEYS = {
    "classification": ["id.accuracy", "id.nll", "id.brier", "shift.nll", "shift.brier", "ood.*.auroc"],
    "regression": ["id.rmse", "id.nll", "id.coverage_3sigma", "ood.*.nll", "ood.*.mean_std"],
}


def sweep_metrics_per_seed(df: pd.DataFrame, task: str = "classification") -> pd.DataFrame:
    """Per (label, seed), the sweep metrics in display order (``ood.*`` expanded per OOD set)."""
    if task == "regression":
        ps = scoped_metrics_per_seed(df, REGRESSION_METRICS, ood_metrics=REGRESSION_METRICS)
    else:
        ps = scoped_metrics_per_seed(df, CLASSIFICATION_METRICS)
    keys = []
    for pattern in SWEEP_KEYS.get(task, SWEEP_KEYS["classification"]):
        if pattern.startswith("ood.*."):
            metric = pattern.split(".", 2)[2]
            keys += [c for c in ps.columns if c.startswith("ood.") and c.rsplit(".", 1)[1] == metric
                     and c not in keys]
        elif pattern in ps.columns:
            keys.append(pattern)
    return ps[[k for k in keys if ps[k].notna().any()]]


def scoped_column(key: str) -> Column:
    """Column for ``id.<m>``, ``shift.<m>`` or ``ood.<set>.<m>`` (leaderboard titles)."""
    kind, rest = key.split(".", 1)
    if kind == "ood":
        name, metric = rest.rsplit(".", 1)
        return _metric_column(key, metric, f"OOD {name}")
    return _metric_column(key, rest, {"id": "ID", "shift": "shift"}.get(kind, kind))


def format_option(value) -> str:
    return value if isinstance(value, str) else f"{float(value):g}"


#: marks the row of a sweep table that the validation protocol (bench.selection) chooses
CHOSEN_MARK = " ◂ validation's choice"


def sweep_table(df: pd.DataFrame, sweep: Sweep, task: str = "classification") -> Table | None:
    """Swept option value -> the validation NLL the protocol chooses by, then the sweep's test metrics
    (mean ± std over seeds), in value order. The row the protocol chooses (lowest mean validation NLL
    over the common seeds among the values whose fits pass their validity checks,
    :func:`bench.selection.choose_on_validation`) is marked; no test column is marked, so that the
    table never points at a value chosen on test data."""
    sub = df[df["label"].isin(sweep.labels)]
    ps = sweep_metrics_per_seed(sub, task)
    if ps.empty or not len(ps.columns):
        return None
    rows = {lab: format_option(v) for lab, v in sweep.values.items()}
    if sweep.numeric and len(set(rows.values())) < len(rows):  # values that only differ beyond 6 digits
        rows = {lab: repr(float(v)) for lab, v in sweep.values.items()}
    chosen, among_valid = _validation_choice(sub, sweep)
    if chosen is not None:
        rows[chosen] += CHOSEN_MARK
    ps = ps.rename(index=rows, level=0)
    val = sub[(sub["kind"] == "val") & (sub["status"] == "ok")] if "kind" in sub.columns else sub.iloc[:0]
    per_seed = [ps]
    columns = [scoped_column(c) for c in ps.columns]
    if not val.empty and "metrics.nll" in val.columns:
        v = per_seed_mean(val, ["metrics.nll"]).rename(index=rows, level=0)
        v.columns = ["val.nll"]
        per_seed.insert(0, v)
        columns.insert(0, Column("val.nll", "validation NLL (chooses) ↓", None))
    seeds = sub.assign(label=sub["label"].map(rows))
    if chosen is None:
        choice = ("No validation records: nothing is chosen." if val.empty else
                  "The values share no seed with validation records: nothing is chosen.")
    else:
        choice = (f"{CHOSEN_MARK.strip()}: the lowest mean validation NLL over the seeds every value has"
                  + (" among the values whose fits pass their validity checks (bench select's rule)." if among_valid
                     else "; no value passes its validity checks, so the choice is not method evidence."))
    caption = (f"{sweep.method}: metrics against {sweep.option}, every other option fixed "
               f"({', '.join(f'{v} = {lab}' for lab, v in rows.items())}). Mean ± std over seeds; validation "
               "NLL: the held-out validation split the tuning protocol chooses on; ID: clean test set; shift: per "
               "seed the mean over every shifted test set; OOD: detection from predictive entropy. "
               + choice + " Test columns are not marked: a value chosen by them would be chosen on test data.")
    table = _assemble(f"Sweep {sweep.method} {sweep.option}", per_seed, columns, list(rows.values()), caption,
                      seeds_from=seeds)
    if table is not None:
        table.index_title = sweep.option
        table.marks = {c.key: (set(), set()) for c in table.columns}
        if chosen is not None and "val.nll" in table.mean.columns:
            table.marks["val.nll"] = ({rows[chosen]}, set())
    return table


def _validation_choice(sub: pd.DataFrame, sweep: Sweep) -> tuple[str | None, bool]:
    """The label of the sweep's value that :func:`bench.selection.choose_on_validation` chooses, and
    whether it was chosen among valid fits; ``(None, False)`` without validation records."""
    from bench.errors import BenchError
    from bench.selection import choose_on_validation

    if "kind" not in sub.columns or not ((sub["kind"] == "val") & (sub["status"] == "ok")).any():
        return None, False
    try:
        choices = choose_on_validation(sub, sweep.method, (sweep.option,))
    except BenchError:
        return None, False
    if len(choices) != 1:
        return None, False
    by_hash = dict(zip(sub["config_hash"], sub["label"]))
    return by_hash.get(choices[0]["chosen_config_hash"]), bool(choices[0].get("chosen_among_valid"))


def layer_distribution_frame(runs: list) -> pd.DataFrame:
    """Long frame (seed, depth, layer, type, numel, selected, selected_weight, selected_bias,
    fraction_of_layer, fraction_of_subnet, sparsity) from [(seed, diagnostics)]."""
    rows = []
    for seed, diag in runs:
        for e in diag.get("layer_distribution") or []:
            by = e.get("selected_by_param") or {}
            rows.append({"seed": seed, "depth": e.get("depth"), "layer": str(e.get("layer")),
                         "type": str(e.get("type", "")), "numel": e.get("numel"), "selected": e.get("selected"),
                         "selected_weight": by.get("weight"), "selected_bias": by.get("bias"),
                         "fraction_of_layer": e.get("fraction_of_layer"),
                         "fraction_of_subnet": e.get("fraction_of_subnet"), "sparsity": e.get("sparsity")})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for c in frame.columns:
        if c not in ("layer", "type"):
            frame[c] = pd.to_numeric(frame[c], errors="coerce")
    return frame


def layer_row_label(depth, layer, type_) -> str:
    d = f"{int(depth)}: " if pd.notna(depth) else ""
    return f"{d}{layer} ({type_})" if type_ else f"{d}{layer}"


LAYER_COLUMNS = [("numel", "parameters"), ("selected", "selected"), ("selected_weight", "selected weights"),
                 ("selected_bias", "selected biases"), ("fraction_of_layer", "fraction of layer"),
                 ("sparsity", "sparsity"), ("fraction_of_subnet", "fraction of subnet")]


def criteria_overlap_table(runs: list) -> Table | None:
    """IoU between the removal sets of each pair of criteria (SSVI paper, Tables 4-7), from the
    ``history`` in the diagnostics of drop-and-grow runs: every entry with an ``iou`` dict
    ({"a|b": IoU}, computed at one drop step on that run's posterior). Mean over all drop steps
    of all runs, and over the first and the last drop step of each run."""
    rows: dict[str, dict[str, list]] = {}
    for _seed, diag in runs:
        steps = [h["iou"] for h in (diag.get("history") or []) if isinstance(h, dict) and h.get("iou")]
        for i, iou in enumerate(steps):
            for pair, v in iou.items():
                r = rows.setdefault(pair.replace("|", " vs "), {"all": [], "first": [], "last": []})
                r["all"].append(float(v))
                if i == 0:
                    r["first"].append(float(v))
                if i == len(steps) - 1:
                    r["last"].append(float(v))
    if not rows:
        return None
    order = sorted(rows, key=natural_key)
    keys = [("all", "mean IoU, all drop steps"), ("first", "IoU at the first drop step"),
            ("last", "IoU at the last drop step")]
    mean = pd.DataFrame({k: [np.mean(rows[p][k]) if rows[p][k] else np.nan for p in order] for k, _ in keys},
                        index=order)
    std = pd.DataFrame({k: [np.std(rows[p][k], ddof=1) if len(rows[p][k]) > 1 else np.nan for p in order]
                        for k, _ in keys}, index=order)
    count = pd.DataFrame({k: [len(rows[p][k]) for p in order] for k, _ in keys}, index=order)
    caption = (f"Overlap of the sets of active entries each removal criterion would drop, computed at every "
               f"drop-and-grow step on the same posterior ({len(runs)} run(s); the run's own criterion drives "
               "the training). IoU = |A ∩ B| / |A ∪ B|; 1 = the same entries. Mean ± std over steps / runs.")
    return Table("Removal criteria overlap", [Column(k, t) for k, t in keys], mean, std, count,
                 index_title="criteria", caption=caption)


def layer_distribution_table(label: str, runs: list) -> Table | None:
    """Per layer (depth order) of one configuration: mean over seeds of the selected count,
    its split into weights / biases, the fraction of the layer and of the subnetwork."""
    frame = layer_distribution_frame(runs)
    if frame.empty:
        return None
    frame["row"] = [layer_row_label(d, l, t) for d, l, t in zip(frame["depth"], frame["layer"], frame["type"])]
    order = frame.drop_duplicates("row").sort_values(["depth"], kind="stable")["row"].tolist()
    cols = [c for c, _ in LAYER_COLUMNS if frame[c].notna().any()]
    g = frame.groupby("row", sort=False)[cols]
    mean, count = g.mean().reindex(order), g.count().reindex(order)
    std = mean * np.nan
    n_seeds = frame["seed"].nunique(dropna=False)
    titles = dict(LAYER_COLUMNS)
    columns = [Column(c, titles[c], integers=not c.startswith(("fraction", "sparsity"))
                      and bool(np.all(np.mod(mean[c].dropna(), 1) == 0)))
               for c in cols]
    caption = (f"{label}: stochastic entries per layer, mean over {n_seeds} seed(s). fraction of layer = "
               "selected / parameters of the layer (sparsity = 1 − that, as in the PBN paper's Appendix D/E); "
               "fraction of subnet = selected / all selected entries.")
    return Table(f"Layer distribution {label}", columns, mean, std, count, index_title="layer", caption=caption)


def failed_table(failed: pd.DataFrame) -> TextTable | None:
    if failed.empty:
        return None
    rows = []
    order = sorted(failed.index, key=lambda i: (natural_key(failed.at[i, "label"]),
                                                natural_key(failed.at[i, "model"]),
                                                float(failed.at[i, "seed"]) if pd.notna(failed.at[i, "seed"]) else -1))
    for i in order:
        r = failed.loc[i]
        seed = "" if pd.isna(r["seed"]) else str(int(r["seed"]))
        rows.append([str(r["label"]), str(r["model"]), seed, str(r["profile"] or ""),
                     str(r["error"] if r["error"] is not None else "(no error message)")])
    return TextTable("Failed runs", ["method", "model", "seed", "profile", "error"], rows,
                     caption="Runs that failed while fitting; they have no metrics and are left out above.",
                     code_columns=(4,))


def methods_table(df: pd.DataFrame) -> TextTable | None:
    """Each distinct method configuration: label, plugin, config hash, configuration."""
    if df.empty:
        return None
    rows, seen = [], set()
    for lab in labels_in_order(df):
        sub = df[df["label"] == lab]
        for _, r in sub.drop_duplicates("config_hash").iterrows():
            key = (lab, r["config_hash"])
            if key in seen:
                continue
            seen.add(key)
            cfg = r["method_config"]
            cfg_text = json.dumps(cfg, sort_keys=True, default=str) if isinstance(cfg, dict) else ""
            rows.append([str(lab), str(r["method"]), str(r["config_hash"] or ""), cfg_text])
    return TextTable("Method configurations", ["method label", "plugin", "config hash", "config"], rows,
                     code_columns=(3,))
