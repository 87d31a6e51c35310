"""``build_report``: records -> one HTML + markdown report per suite."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.store import ResultsStore, load_records

from . import plots
from .data import (CLASSIFICATION_METRICS, REGRESSION_METRICS, SectionData, Sweep, diagnostics_by_label,
                   distinct, failed_records, find_ablations, find_sweeps, labels_in_order, ok_records, prepare,
                   severity_axis_label, shift_families, slugify, split_sections, sweep_order)
from .document import Banner, Bullets, Definitions, Document, Figure, KeyValues, Paragraph, Section
from .write import write_report
from .tables import (corruption_error_table, per_corruption_error_table, cost_table, method_cost_table, criteria_overlap_table, failed_table, layer_distribution_frame, layer_distribution_table,
                     leaderboard, methods_table, uncertainty_table, paper_cost_table, regression_tables, sweep_metrics_per_seed,
                     sweep_table)


CLASSIFICATION_DEFINITIONS = [
    ("Accuracy", "Fraction of examples whose most probable class (argmax of the predictive "
                 "distribution p(y|x), the mean over posterior samples for sampling methods) is the true class."),
    ("NLL", "Negative log-likelihood of the true label under the predictive distribution: "
            "−(1/N) Σ_i log p(y_i | x_i). Lower is better."),
    ("Brier score", "Σ_k (p_k − y_k)² summed over the K classes with y the one-hot label, averaged over "
                    "examples; between 0 and 2. Ovadia et al. (2019) report this minus 1."),
    ("ECE", "Expected calibration error with 15 equal-width bins on the top-label confidence: "
            "Σ_b |B_b|/N · |acc(B_b) − conf(B_b)|, where acc(B_b) is the accuracy and conf(B_b) the mean "
            "confidence of the examples whose confidence falls in bin b."),
    ("Predictive entropy", "H[p̄] = −Σ_k p̄_k log p̄_k (nats) of the mean predictive distribution "
                           "p̄ = (1/S) Σ_s p_s, averaged over examples."),
    ("Mutual information", "H[p̄] − (1/S) Σ_s H[p_s]: the epistemic part of the predictive entropy "
                           "(expected information gain about the weights); undefined (–) for methods "
                           "that do not sample."),
    ("AUROC / AUPR", "Area under the ROC / precision-recall curve for telling the OOD set from the clean "
                     "test set by predictive entropy, with OOD as the positive class (0.5 AUROC = chance)."),
    ("FPR@95%TPR", "Fraction of clean test examples flagged as OOD at the entropy threshold that flags 95 % of "
                   "the OOD set (lower is better)."),
    ("AUROC (MI)", "OOD AUROC with the mutual information as the score instead of the entropy (sampling "
                   "methods only): detection by the epistemic part alone."),
    ("AURC", "Area under the risk-coverage curve (Geifman & El-Yaniv 2017): examples sorted by decreasing "
             "top-label confidence, the error rate among the k most confident, averaged over k = 1..N (tied "
             "confidences enter as one group). Lower is better; it rewards confidence that ranks errors last."),
    ("Shift average", "For each seed, the mean of a metric over every shifted test set (all shift families "
                      "and severities > 0); the table shows mean ± std of that over seeds."),
]

def multilabel_definitions() -> list[tuple[str, str]]:
    """The metrics of a multi-label report, in the words of ``bench.multilabel_metrics``."""
    from bench.multilabel_metrics import DEFINITIONS

    names = [("accuracy", "Accuracy (Hamming)"), ("subset_accuracy", "Subset accuracy"), ("nll", "NLL"),
             ("brier", "Brier score"), ("ece", "ECE"), ("auroc_mean", "AUROC (label mean)"),
             ("mean_average_precision", "mAP"), ("labels_one_class", "Labels with one class"),
             ("entropy", "Predictive entropy"), ("mutual_information", "Mutual information"),
             ("auroc", "OOD AUROC")]
    return [(title, DEFINITIONS[key][:1].upper() + DEFINITIONS[key][1:] + ".") for key, title in names]


def segmentation_definitions() -> list[tuple[str, str]]:
    """The per-pixel metrics of a segmentation report, in the words of ``bench.segmentation_metrics``
    (one source for the code and the report)."""
    from bench.segmentation_metrics import DEFINITIONS

    names = [("miou", "mIoU"), ("iou_per_class", "IoU per class"), ("pixel_accuracy", "Pixel accuracy"),
             ("mean_class_accuracy", "Mean class accuracy"), ("nll", "NLL (per pixel)"),
             ("brier", "Brier score (per pixel)"), ("ece", "ECE (per pixel)"),
             ("entropy", "Predictive entropy"), ("mutual_information", "Mutual information"),
             ("error_auroc", "Error AUROC (entropy)"), ("error_aupr", "Error AUPR (entropy)"),
             ("error_auroc_mi", "Error AUROC (MI)"), ("n_pixels", "Valid pixels"), ("dice", "Dice (binary)"),
             ("dice_per_image", "Dice per image (binary)"), ("dice_per_class", "Dice per class"),
             ("mean_dice", "Mean Dice")]
    out = [(title, DEFINITIONS[key][:1].upper() + DEFINITIONS[key][1:] + ".") for key, title in names
           if key in DEFINITIONS]
    out.append(("Shift average", "For each seed, the mean of a metric over every corrupted test set (all "
                                 "corruptions and severities > 0); the table shows mean ± std of that over seeds."))
    return out


REGRESSION_DEFINITIONS = [
    ("RMSE", "√((1/N) Σ_i (μ(x_i) − y_i)²) of the predictive mean μ."),
    ("NLL", "Gaussian negative log-likelihood −(1/N) Σ_i log N(y_i; μ(x_i), σ²(x_i)), with σ² the "
            "predictive variance (epistemic plus noise)."),
    ("Mean std", "(1/N) Σ_i σ(x_i), the average predictive standard deviation."),
    ("3σ coverage", "Fraction of targets with |y_i − μ(x_i)| ≤ 3σ(x_i); 0.9973 for a calibrated Gaussian."),
]


def build_report(results_dir, out_dir="reports", suites=None) -> list[Path]:
    """Write ``<out_dir>/<suite>/{index.html, README.md, figures/*.png}`` for every suite.

    ``suites`` (a name or a list of names) restricts the report to those suites.
    Returns the paths of the written ``index.html`` files, in suite order.
    Raises ``BenchError`` when the results directory holds no records or a requested
    suite has none.
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise BenchError(f"results directory {str(results_dir)!r} does not exist")
    raw = load_records(results_dir)
    if raw.empty:
        raise BenchError(f"no result records under {str(results_dir)!r} (expected "
                         f"<results>/<suite>/records/.../*.json); run a suite first")
    df = prepare(raw)
    available = distinct(df["suite"])
    if suites is None:
        chosen = available
    else:
        chosen = [suites] if isinstance(suites, str) else list(suites)
        missing = [s for s in chosen if s not in available]
        if missing:
            raise BenchError(f"no records for suite(s) {', '.join(missing)} under {str(results_dir)!r}; "
                             f"suites with records: {', '.join(available)}")
    generated_at = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    from bench.tuning import choice_notes, chosen_configs

    tuned, tuning_notes = chosen_configs([results_dir]), choice_notes([results_dir], df)
    written = []
    for suite in chosen:
        doc = suite_document(df[df["suite"] == suite], suite, generated_at,
                             artifacts_dir=ResultsStore(results_dir).checkpoint_dir(suite).parent / "artifacts",
                             chosen=tuned, tuning_notes=tuning_notes)
        written.append(write_report(doc, Path(out_dir) / str(suite)))
    return written


# --------------------------------------------------------------------------- document


def suite_document(df: pd.DataFrame, suite: str, generated_at: str, artifacts_dir: Path | None = None,
                   chosen: dict | None = None, tuning_notes: dict | None = None) -> Document:
    """The report of one suite (``df``: its prepared records, ok and failed; ``artifacts_dir``:
    the files the suite wrote at run time, see :func:`_data_section`; ``chosen``: the configuration
    each stored tuning chose, :func:`bench.tuning.chosen_configs`: the other configurations of a
    tuned method are shown apart from the ranked rows; ``tuning_notes``: :func:`bench.tuning.choice_notes`)."""
    smoke = "smoke" in distinct(df["profile"])
    doc = Document(title=f"Benchmark report: {suite}" + (" (SMOKE PROFILE: not results)" if smoke else ""))
    doc.sections.append(_overview(df, suite, generated_at))
    sections = split_sections(df)
    palette = plots.make_palette(labels_in_order(ok_records(df)))  # failed-only labels get no colour
    for sec in sections:
        if not sec.records.empty:
            doc.sections.append(_model_section(sec, palette, artifacts_dir, chosen or {}, tuning_notes or {}))
    # the answer first: data description, failures and provenance after the results
    data = _data_section(artifacts_dir, distinct(df["profile"]))
    if data is not None:
        doc.sections.append(data)
    failed = failed_table(failed_records(df))
    if failed is not None:
        s = Section("Failed runs", anchor="failed-runs")
        s.add(failed)
        doc.sections.append(s)
    doc.sections.append(_provenance(df, generated_at))
    doc.sections.append(_definitions(df))
    return doc


def _join(values, empty="–") -> str:
    vals = [str(v) for v in values]
    return ", ".join(vals) if vals else empty


def _overview(df: pd.DataFrame, suite: str, generated_at: str) -> Section:
    """The banner (profile, stand-in, scale) and one line saying what the records are; the full
    list (runs, dates, commits) is under Provenance, so that the ranked table is on the first screen."""
    ok, failed = ok_records(df), failed_records(df)
    seeds = sorted({int(s) for s in df["seed"].dropna()})
    s = Section("Overview", anchor="overview")
    if "smoke" in distinct(df["profile"]):
        s.add(Banner("SMOKE PROFILE: these records come from tiny data subsets and a few training steps, run "
                        "to check that the code works. Their numbers say nothing about the methods; every table "
                        "and figure of a smoke section is marked."))
    banner = _regime_banner(df, suite)
    if banner is not None:
        s.add(banner)
    yours = _data_banner(ok, suite)
    if yours is not None:
        s.add(yours)
    s.add(Paragraph(f"{suite} ({_join(distinct(df['task']))}), profile {_join(distinct(df['profile']))}, "
                    f"model {_join(distinct(df['model']))}: {len(labels_in_order(df))} configurations x seeds "
                    f"{_join(seeds)}; {len(ok)} evaluation records, {len(failed)} failed run(s). Runs, commits, "
                    f"versions and every configuration: Provenance."))
    absent = _unsupported_methods(distinct(df["task"]))
    if absent:
        s.add(Paragraph("Methods that do not support this task (not run):"))
        s.add(Bullets(absent))
    refused = _refused_pairs(df)
    if refused:
        s.add(Paragraph("Not run: refused when the run was planned (the method cannot run on that network; the "
                        "other cells ran):"))
        s.add(Bullets(refused))
    return s


def _refused_pairs(df: pd.DataFrame) -> list[str]:
    """``"label on model: reason"`` for every (model, method configuration) pair the records say was
    refused when their run was planned (``not_run``; bench.config.RunPlan.refused), unless some
    record of that pair exists (a later run ran it)."""
    if "not_run" not in df:
        return []
    have = {(str(m), str(lab)) for m, lab in zip(df["model"], df["method_label"])}
    out = []
    for entries in df["not_run"]:
        for r in entries if isinstance(entries, list) else []:
            if not isinstance(r, dict) or (str(r.get("model")), str(r.get("label"))) in have:
                continue
            line = f"{r.get('label')} on {r.get('model')}: {r.get('reason')}"
            if line not in out:
                out.append(line)
    return out


def _data_banner(ok: pd.DataFrame, suite: str) -> Banner | None:
    """Whose data the records come from, for a suite over data the user brings
    (``Suite.data_banner``: the folder suite names the ImageFolder tree), in every profile."""
    from bench.suites import SUITES

    cls = SUITES.get(suite) if suite in SUITES.names() else None
    text = cls.data_banner(ok) if cls is not None and hasattr(cls, "data_banner") else None
    return Banner(text) if text else None


def _regime_banner(df: pd.DataFrame, suite: str) -> Banner | None:
    """What a reader must know before any number of a report below the papers' budget: the
    profile and its training budget, the benchmark a stand-in suite replaces, how far the MAP
    network is from chance, and that rows failing their validity checks are marked."""
    from bench.suites import SUITES

    profiles = [p for p in distinct(df["profile"]) if p not in ("smoke", "paper")]
    if not profiles:
        return None
    ok = ok_records(df)
    mine = ok[ok["profile"].isin(profiles)]
    epochs = sorted({int(c["epochs"]) for c in mine.get("train_config", pd.Series(dtype=object))
                     if isinstance(c, dict) and c.get("epochs") is not None})
    n_train = sorted({int(c["n_train"]) for c in mine.get("data_config", pd.Series(dtype=object))
                      if isinstance(c, dict) and c.get("n_train") is not None})
    scale = " on ".join(filter(None, [
        f"networks trained {', '.join(map(str, epochs))} epochs" if epochs else "",
        f"{' / '.join(f'{n:,}' for n in n_train)} training images (a subset)" if n_train else ""]))
    text = (f"{' / '.join(p.upper() for p in profiles)} PROFILE: a reduced budget"
            + (f" ({scale})" if scale else "")
            + " for a machine without a GPU, not the papers' budgets (profile 'paper').")
    cls = SUITES.get(suite) if suite in SUITES.names() else None
    stand_in = cls.stands_in_for if cls is not None else None
    if stand_in:
        text += f" This suite is a runnable stand-in for {stand_in}; its numbers are not that benchmark's."
    clean = mine[(mine["method"] == "deterministic") & (mine["kind"] == "id")]
    k = distinct(mine["num_classes"]) if "num_classes" in mine else []
    if not k and cls is not None and cls.task.kind == "classification":  # records made before num_classes
        k = [cls.task.num_outputs]
    multilabel = "task" in mine and distinct(mine["task"]) == ["multilabel"]
    if multilabel:
        text += _multilabel_map_line(clean)
    for col, what in (("metrics.accuracy", "clean accuracy"), ("metrics.miou", "clean mIoU")):
        if multilabel:
            break
        if col in clean and clean[col].notna().any():
            text += f" The MAP network reaches {clean[col].mean():.1%} {what}"
            if len(k) == 1 and what == "clean accuracy":
                text += f" (chance {1 / float(k[0]):.1%})"
            text += "."
            break
    return Banner(text + " Rows that fail their validity checks (bench.validity) are marked ✗ or ? in every "
                         "table: they measure the set-up, not the method.")


def _multilabel_map_line(clean: pd.DataFrame) -> str:
    """The banner's MAP sentence on a multi-label suite: Hamming accuracy is per (example, label)
    pair, and with rare labels a network that says "absent" everywhere scores high, so it is named
    as such, set beside the training-prevalence predictor's, and given with the mean AUROC."""
    def mean(col):
        vals = pd.to_numeric(clean[col], errors="coerce") if col in clean else pd.Series(dtype=float)
        return vals.mean() if vals.notna().any() else None

    acc, auroc, ref = mean("metrics.accuracy"), mean("metrics.auroc_mean"), mean("reference.accuracy")
    parts = []
    if acc is not None:
        parts.append(f"{acc:.1%} clean Hamming accuracy (the fraction of (example, label) pairs right at p > 0.5"
                     + (f"; predicting each label's training prevalence: {ref:.1%}" if ref is not None else "")
                     + ")")
    if auroc is not None:
        parts.append(f"a clean mean AUROC over the labels of {auroc:.3f} (0.5: no ranking)")
    return f" The MAP network reaches {' and '.join(parts)}." if parts else ""


def _provenance(df: pd.DataFrame, generated_at: str = "") -> Section:
    """What the records are, package versions and the full method configurations (after the results)."""
    ok, failed = ok_records(df), failed_records(df)
    starts, ends = distinct(df["started_at"]), distinct(df["finished_at"])
    s = Section("Provenance", anchor="provenance")
    s.add(KeyValues([("task", _join(distinct(df["task"]))),
                     ("profile(s)", _join(distinct(df["profile"]))),
                     ("model(s)", _join(distinct(df["model"]))),
                     ("seeds", _join(sorted({int(x) for x in df["seed"].dropna()}))),
                     ("records", f"{len(ok)} evaluations, {len(failed)} failed run(s)"),
                     ("runs", f"{starts[0] if starts else '?'} … {ends[-1] if ends else '?'}"),
                     ("report generated", generated_at),
                     ("configurations", _join(labels_in_order(df))),
                     ("device(s)", _join(distinct(df["device"]))),
                     ("git commit(s)", _join(distinct(df["git_commit"])))]))
    notes = distinct(df["eval_note"])
    if notes:
        s.add(Paragraph("Evaluation notes:"))
        s.add(Bullets([str(n) for n in notes]))
    versions = []
    for col in sorted(c for c in df.columns if c.startswith("versions.")):
        vals = distinct(df[col])
        if vals:
            versions.append((col.split(".", 1)[1], _join(vals)))
    if versions:
        v = Section("Package versions")
        v.add(KeyValues(versions))
        s.add(v)
    ok = ok_records(df)
    methods = methods_table(ok if not ok.empty else df)
    if methods is not None:
        m = Section("Method configurations")
        m.add(methods)
        s.add(m)
    return s


def _unsupported_methods(tasks) -> list[str]:
    """``"name: why"`` for every registered method that does not support one of ``tasks``."""
    from methods import METHODS

    out = []
    for name in METHODS.names():
        cls = METHODS.get(name)
        for task in tasks:
            if task not in cls.tasks:
                out.append(f"{name}: {cls.UNSUPPORTED.get(task, f'no {task} support')}")
    return out


def _model_section(sec: SectionData, palette: dict, artifacts_dir: Path | None = None,
                   chosen: dict | None = None, tuning_notes: dict | None = None) -> Section:
    df = sec.records
    smoke = " — SMOKE PROFILE, not results" if "smoke" in distinct(df["profile"]) else ""
    s = Section(f"Model: {sec.title}{smoke}", anchor=f"model-{sec.slug}")
    labels = labels_in_order(df)
    pal = {lab: palette[lab] for lab in labels}
    _glance_block(s, sec, chosen or {}, tuning_notes or {})
    if sec.task == "regression":
        _regression_blocks(s, sec, pal)
    else:
        _classification_blocks(s, sec, pal)
    if sec.task == "segmentation":
        _segmentation_maps_block(s, sec, artifacts_dir)
    sweeps = find_sweeps(df)
    _sweep_blocks(s, sec, pal, sweeps)
    _ablation_blocks(s, sec, find_ablations(df))
    _subnetwork_blocks(s, sec, sweeps)
    _warning_blocks(s, sec)
    cost = cost_table(df)
    paper = paper_cost_table(df)
    if cost is not None or paper is not None:
        from bench.leaderboard.board import shared_machine_notes

        c = Section("Cost")
        c.add(cost)
        load = shared_machine_notes(df)
        if load:
            c.add(Bullets(load))
        c.add(method_cost_table(df))
        if paper is not None:
            c.add(Paragraph("Paper cost formulas (PBN Appendix B/C):"))
            c.add(paper)
        s.add(c)
    return s


def _glance_block(parent: Section, sec: SectionData, chosen: dict, tuning_notes: dict | None = None) -> None:
    """"At a glance": sentences computed from the numbers (the ranking, ties, MAP comparisons, the
    cheapest of the top), the ranked table with its cost columns (``bench leaderboard``'s, so that
    the report's first screen answers "which method, at what cost"), its validity notes and the
    cost-quality Pareto figure. The configurations of a tuned method other than the one its stored
    tuning chose are not ranked: they follow in a table of their own."""
    from bench.leaderboard.board import build_ranked_board
    from bench.leaderboard.output import board_table, validity_notes
    from bench.leaderboard.pareto import pareto_figure
    from bench.leaderboard.summary import summary_lines

    df = sec.records
    profile = str((distinct(df["profile"]) or ["?"])[0])
    suite = str(df["suite"].iloc[0])
    from bench.tuning import not_chosen

    out = not_chosen(df, chosen)
    try:
        board = build_ranked_board(df[~out], suite, sec.model, profile, "shift.nll")
    except BenchError:
        return
    g = Section("At a glance")
    g.add(board_table(board))
    from bench.tuning import board_choice_notes

    notes = validity_notes(board) + board.notes + board_choice_notes(tuning_notes or {}, board)
    if notes:
        g.add(Bullets(notes))
    g.add(Paragraph("What the table shows:"))
    g.add(Bullets(summary_lines(board)))
    png = pareto_figure(board)
    if png is not None:
        g.add(Figure(f"{sec.slug}-pareto", png,
                     f"Cost against quality ({board.column(board.metric).title}, mean ± std over seeds); dashed: the "
                     f"Pareto front; numbers: rank. Best = better than every other configuration beyond the seed "
                     f"noise (paired t-test over seeds, 5 %); `python -m bench leaderboard` gives the same table "
                     f"across runs.", alt="Pareto view"))
    if out.any():
        try:
            others = build_ranked_board(df[out], suite, sec.model, profile, "shift.nll")
        except BenchError:
            others = None
        if others is not None:
            r = Section("Configurations the tuning did not choose (not ranked)")
            r.add(Paragraph("Configurations of the tuned methods other than the one the stored tuning (python -m "
                            "bench tune) chose on the validation split: its rejected candidates and any earlier "
                            "sweep's; listed for reference, in the same columns, unmarked: they are not candidates "
                            "of the ranking above."))
            t = board_table(others)
            t.name = f"rejected-{t.name}"
            t.marks = {k: (set(), set()) for k in t.marks}
            t.caption = "Not ranked: the tuning chose another configuration of the same method (see its table)."
            r.add(t)
            g.add(r)
    parent.add(g)


def _sweep_blocks(parent: Section, sec: SectionData, pal: dict, sweeps: list[Sweep]) -> None:
    """Per sweep (configs of a plugin differing in one numeric option): figure + table."""
    if not sweeps:
        return
    df = sec.records
    per_seed = sweep_metrics_per_seed(df, sec.task)
    sw_sec = Section("Sweeps")
    sw_sec.add(Paragraph("Configurations of one method that differ in a single numeric option, plotted against "
                         "that option (PBN paper Fig. 4a style); every other method of this section is a "
                         "dashed reference line."))
    used: dict = {}
    for sw in sweeps:
        stem = f"{sec.slug}-sweep-{slugify(sw.method)}-{slugify(sw.option)}"
        used[stem] = used.get(stem, 0) + 1
        name = stem if used[stem] == 1 else f"{stem}-{used[stem]}"
        sub = Section(f"{sw.method} against {sw.option}")
        png = plots.sweep_figure(per_seed, sw, pal)
        if png is not None:
            log = " (log scale)" if sw.log_x else ""
            scopes = (" Shift-avg.: per seed the mean over every shifted test set; OOD AUROC: detection from "
                      "predictive entropy." if sec.task != "regression" else "")
            sub.add(Figure(name, png,
                           f"{sw.method}: metrics against {sw.option}{log}; points: mean over seeds, error bars: "
                           f"± 1 std over seeds. Dashed lines: the other methods of this section (mean over "
                           f"seeds).{scopes}", alt=f"metrics vs {sw.option}"))
        sub.add(sweep_table(df, sw, sec.task))
        if sub.blocks:
            sw_sec.add(sub)
    if len(sw_sec.blocks) > 1:
        parent.add(sw_sec)


def _ablation_blocks(parent: Section, sec: SectionData, ablations: list[Sweep]) -> None:
    """Per categorical ablation (configs of a plugin differing in one string option, e.g. the
    subnet selection or removal criterion): a metrics table; and, for plugins whose runs record
    the removal sets of several criteria (SSVI's drop-and-grow history), their overlap."""
    diags = diagnostics_by_label(sec.records)
    ab_sec = Section("Ablations")
    ab_sec.add(Paragraph("Configurations of one method that differ in a single categorical option (for example "
                         "the subnetwork selection or the removal criterion), at equal size and otherwise "
                         "equal settings."))
    overlap_shown = set()  # once per plugin, with its criterion ablation when it has one
    for ab in sorted(ablations, key=lambda a: (a.method, a.option != "criterion")):
        sub = Section(f"{ab.method} by {ab.option}")
        sub.add(sweep_table(sec.records, ab, sec.task))
        if ab.method not in overlap_shown:
            overlap = criteria_overlap_table([run for lab in ab.labels for run in diags.get(lab, [])])
            if overlap is not None:
                sub.add(overlap)
                overlap_shown.add(ab.method)
        if sub.blocks:
            ab_sec.add(sub)
    if len(ab_sec.blocks) > 1:
        parent.add(ab_sec)


def _display_names(labels, sweeps: list[Sweep]) -> dict:
    """label -> label, plus the swept value when the label does not show it (a default value), in
    the labels' own bracket notation: ``pbn`` -> ``pbn[r_bayes=0.01]``, ``pbn[lr=0.05]`` ->
    ``pbn[lr=0.05,r_bayes=0.01]``."""
    names = {lab: str(lab) for lab in labels}
    for sw in sweeps:
        for lab, v in sw.values.items():
            text = str(lab)
            if lab in names and names[lab] == text and f"{sw.option}=" not in text:
                base, _, tag = text.partition("#")
                base = f"{base[:-1]},{sw.option}={v:g}]" if base.endswith("]") else f"{base}[{sw.option}={v:g}]"
                names[lab] = base + (f"#{tag}" if tag else "")
    return names


def _subnetwork_blocks(parent: Section, sec: SectionData, sweeps: list[Sweep]) -> None:
    """First-layer sigma heat maps (PBN Fig. 3) and the subnetwork's layer distribution
    (Appendix D/E), for methods whose records carry those diagnostics."""
    diags = diagnostics_by_label(sec.records)
    if not diags:
        return
    order = sweep_order(diags, sweeps)
    names = _display_names(order, sweeps)
    panels = []
    for lab in order:
        for seed, d in diags[lab]:
            fl = d.get("first_layer_sigma")
            if isinstance(fl, dict) and fl:
                panels.append((names[lab], fl))  # the first seed that has one
                break
    sigma_png = plots.sigma_heatmaps(panels) if panels else None
    if sigma_png is not None:
        first = panels[0][1]
        what = plots.sigma_image(first)[1] if plots.sigma_image(first) else "entry"
        s = Section("Weight uncertainty of the first layer")
        s.add(Figure(f"{sec.slug}-sigma-first-layer", sigma_png,
                     f"σ = softplus(ρ) of the first layer's weights ({first.get('param', '?')}, shape "
                     f"{first.get('shape')}) per configuration, first seed, after training (PBN paper Fig. 3). "
                     f"Pixel: {what}; grey: σ = 0 (deterministic weights only). Each panel has its own colour "
                     f"scale; the title gives the number of stochastic first-layer weights.",
                     alt="first-layer sigma heat maps"))
        parent.add(s)
    frames = {}
    tables = []
    for lab in order:
        runs = [(seed, d) for seed, d in diags[lab] if d.get("layer_distribution")]
        if not runs:
            continue
        frames[names[lab]] = layer_distribution_frame(runs)
        t = layer_distribution_table(names[lab], runs)
        if t is not None:
            tables.append((names[lab], t))
    if not tables:
        return
    s = Section("Subnetwork layer distribution")
    png = plots.layer_distribution_figure(frames)
    if png is not None:
        s.add(Figure(f"{sec.slug}-layer-distribution", png,
                     "Where the stochastic entries sit (PBN paper Appendix D/E), mean over seeds. Left: fraction "
                     "of the subnetwork in each layer (bars sum to 1). Right: fraction of each layer's "
                     "parameters that is stochastic (1 − sparsity), log scale.",
                     alt="subnetwork layer distribution"))
    for lab, t in tables:
        sub = Section(lab)
        sub.add(t)
        s.add(sub)
    parent.add(s)


def _warning_blocks(parent: Section, sec: SectionData) -> None:
    """The warnings methods put in their records' diagnostics (e.g. a Laplace prior precision
    on the edge of its search grid), one bullet per run."""
    items = []
    for lab, runs in diagnostics_by_label(sec.records).items():
        for seed, d in runs:
            items += [f"{lab}, seed {seed}: {w}" for w in d.get("warnings") or []]
    if items:
        s = Section("Warnings")
        s.add(Paragraph("Recorded by the methods themselves; the numbers above include these runs."))
        s.add(Bullets(items))
        parent.add(s)


def _shift_blocks(parent: Section, sec: SectionData, pal: dict, metrics: list[str]) -> None:
    df = sec.records
    families = shift_families(df)
    lines = plots.shift_lines(df, metrics, pal)
    if lines is None:
        return
    axis = severity_axis_label(families)
    sh = Section("Under distribution shift")
    avg = (f" At each severity a seed's value is the mean over the {len(families)} shift families "
           f"({', '.join(map(str, families))})." if len(families) > 1 else "")
    sh.add(Figure(f"{sec.slug}-shift", lines,
                  f"Metrics against {axis}; severity 0 is the clean in-distribution test set. Lines: mean "
                  f"over seeds; band: ± 1 std over seeds; each method has its own colour (colour-blind safe), "
                  f"marker and line style, and is shifted slightly sideways so that methods with equal values "
                  f"stay visible.{avg}", alt=f"metrics vs {axis}"))
    boxes = plots.shift_boxes(df, metrics, pal)
    if boxes is not None:
        sh.add(Figure(f"{sec.slug}-shift-boxes", boxes,
                      "Spread over shift families at each severity (Ovadia et al. 2019 style): each box "
                      "summarises one method's seed-averaged metric across the shift families; 'clean' is "
                      "the in-distribution test set.", alt="box plots over shift families"))
    parent.add(sh)


def _corruption_blocks(parent: Section, sec: SectionData, pal: dict) -> None:
    """Per-shift-family heat maps and the entropy of correct vs wrong predictions per severity."""
    heat = plots.shift_heatmap(sec.records, ["miou", "nll"] if sec.task == "segmentation" else ["accuracy", "nll"],
                               pal)
    ent = plots.entropy_by_correctness(sec.records, pal)
    if heat is None and ent is None:
        return
    c = Section("Per shift family and by correctness")
    if heat is not None:
        c.add(Figure(f"{sec.slug}-shift-heatmap", heat,
                     "Method x shift family (a corruption, a rotation, a noise type): each cell is the metric "
                     "averaged over the family's severities and the seeds.", alt="per-corruption heat map"))
    if ent is not None:
        ood = ("Dotted: mean entropy on the OOD set. " if (sec.records["kind"] == "ood").any() else "")
        unit = "pixels" if sec.task == "segmentation" else "test examples"
        c.add(Figure(f"{sec.slug}-entropy-correctness", ent,
                     f"One panel per method, shared axes: mean predictive entropy of correctly (solid) and wrongly "
                     f"(dashed) classified {unit} against severity (PBN paper Fig. 5, bottom right); at each "
                     f"severity the mean over shift families and seeds, severity 0 = clean test set. {ood}"
                     "A method whose uncertainty tracks its errors keeps the dashed line well above the solid one.",
                     alt="entropy of correct vs incorrect predictions"))
    parent.add(c)


def _data_section(artifacts_dir: Path | None, profiles: list) -> Section | None:
    """What a suite handed over at run time (``<results>/<suite>/artifacts/<profile>/``): lines
    about the data (``data.json``: ``lines``, ``captions``) and figures (``*.png``)."""
    if artifacts_dir is None or not Path(artifacts_dir).is_dir():
        return None
    import json

    s = Section("Data", anchor="data")
    for profile in profiles:
        d = _artifact_dir(artifacts_dir, profile)
        if d is None or not d.is_dir():
            continue
        info = {}
        if (d / "data.json").exists():
            try:
                info = json.loads((d / "data.json").read_text())
            except (OSError, ValueError):
                info = {}
        sub = Section(f"{profile} profile") if len(profiles) > 1 else s
        if info.get("lines"):
            sub.add(Bullets([str(x) for x in info["lines"]]))
        captions = info.get("captions") or {}
        for png in sorted(d.glob("*.png")):
            sub.add(Figure(slugify(f"data-{profile}-{png.stem}"), png.read_bytes(),
                           str(captions.get(png.name, png.stem)), alt=png.stem))
        if sub is not s and sub.blocks:
            s.add(sub)
    return s if s.blocks else None


def _artifact_dir(artifacts_dir: Path, profile) -> Path | None:
    """``<artifacts_dir>/<profile>``, or None when the profile (record content) is not a plain
    folder name: a record cannot make the report read files outside its results directory."""
    name = str(profile)
    if name in ("", ".", "..") or slugify(name) != name:
        return None
    return Path(artifacts_dir) / name


def _classification_blocks(s: Section, sec: SectionData, pal: dict) -> None:
    df = sec.records
    board = leaderboard(df)
    if board is not None:
        lb = Section("Every quality metric, per configuration")
        lb.add(board)
        lb.add(uncertainty_table(df))
        s.add(lb)
    _shift_blocks(s, sec, pal, CLASSIFICATION_METRICS)
    _corruption_blocks(s, sec, pal)
    reference = _mce_reference(str(df["suite"].iloc[0])) if len(df) else None
    if reference is not None:
        ce = corruption_error_table(df, None if reference == "none" else reference)
        if ce is not None:
            m = Section("Mean corruption error")
            m.add(ce)
            m.add(per_corruption_error_table(df, None if reference == "none" else reference))
            s.add(m)
    _figure_section(s, "Out-of-distribution detection", f"{sec.slug}-ood-entropy", plots.entropy_histograms(df, pal),
                    "Predictive entropy on the clean test set vs each OOD set, per method (densities, "
                    "histograms summed over seeds). Better OOD detection = less overlap; AUROC in the "
                    "panel titles and the leaderboard.", "entropy histograms")
    if sec.task == "multilabel":  # no top label: the pooled (example, label) pairs; no selective prediction
        _figure_section(s, "Calibration", f"{sec.slug}-reliability", plots.reliability_diagrams(df, pal),
                        "Reliability diagrams of every (example, label) pair pooled, bins pooled over seeds. Bars: "
                        "the clean test set (bar height = the fraction of pairs whose label is present among those "
                        "whose p_l falls in the bin); black line with squares: every shifted test set pooled; dotted "
                        "diagonal = perfect calibration; titles: the pooled ECE (the tables' ECE is the mean of the "
                        "per-label ECEs).", "reliability diagrams")
        return
    _figure_section(s, "Calibration", f"{sec.slug}-reliability", plots.reliability_diagrams(df, pal),
                    "Reliability diagrams, bins pooled over seeds. Bars: the clean test set (bar height = accuracy "
                    "of the examples whose top-label confidence falls in the bin, hatched = gap to the bin's mean "
                    "confidence); black line with squares: every shifted test set pooled (the same bins); dotted "
                    "diagonal = perfect calibration; titles: the pooled ECE of both. Lower panels: examples per "
                    "bin, clean (solid) and shifted (dashed), on one log axis for all panels.", "reliability diagrams")
    _figure_section(s, "Selective prediction", f"{sec.slug}-confidence", plots.confidence_curves(df, pal),
                    "Left: accuracy of the examples whose top-label confidence exceeds τ, against τ (Ovadia et "
                    "al. 2019); right: risk-coverage, the error rate among the examples kept against the fraction "
                    "kept when the least confident are refused. From the reliability bins pooled over seeds, so "
                    "exact at the 15 bin edges only; top row the clean test set, bottom row every shifted set "
                    "pooled. AURC (exact, from the predictions) is in the predictive-uncertainty table.",
                    "accuracy vs confidence and risk-coverage")


def _figure_section(parent: Section, title: str, name: str, png: bytes | None, caption: str, alt: str) -> None:
    """A section holding one figure, added to ``parent`` when the figure exists."""
    if png is not None:
        sub = Section(title)
        sub.add(Figure(name, png, caption, alt=alt))
        parent.add(sub)


def _segmentation_maps_block(parent: Section, sec: SectionData, artifacts_dir: Path | None) -> None:
    """Uncertainty maps from the records and the suite's input panels (one profile's artifacts)."""
    if artifacts_dir is None:
        return
    import numpy as np

    from bench.suites.segmentation import SEG_MAPS_ARTIFACT

    for profile in distinct(sec.records["profile"]):
        d = _artifact_dir(artifacts_dir, profile)
        path = d / SEG_MAPS_ARTIFACT if d is not None else None
        if path is None or not path.exists():
            continue
        from bench.suites import SUITES

        suite = str(sec.records["suite"].iloc[0])
        classes = list(getattr(SUITES.get(suite), "CLASSES", ()) or []) if suite in SUITES.names() else []
        with np.load(path) as inputs:
            png = plots.segmentation_maps(sec.records[sec.records["profile"] == profile], dict(inputs), classes)
        if png is not None:
            m = Section(f"Uncertainty maps ({profile} profile)")
            m.add(Figure(slugify(f"{sec.slug}-{profile}-uncertainty-maps"), png,
                         "The first test image, clean and under the suite's first corruption at severities 1 / 3 / 5 "
                         "(columns): input, ground truth (white: ignored; class colours in the legend), then per "
                         "method its prediction, predictive entropy and, for sampling methods, mutual information, "
                         "every second pixel, first seed. Each entropy and MI row has its own colour scale, from 0 "
                         "to the row's largest value (colour bar in nats; the maps are stored at a resolution of "
                         "log K / 255), so compare rows by their bars, not their brightness. Uncertainty that finds "
                         "errors is bright where the prediction differs from the ground truth.", alt="uncertainty maps"))
            parent.add(m)


def _mce_reference(suite_name: str) -> str | None:
    """The suite's corruption-error reference ("alexnet", "none" = unnormalised), or None (no table)."""
    from bench.suites import SUITES

    try:
        return getattr(SUITES.get(suite_name), "mce_reference", None)
    except Exception:  # noqa: BLE001 - records of a suite this version does not know: no table
        return None


def _regression_blocks(s: Section, sec: SectionData, pal: dict) -> None:
    df = sec.records
    tables = regression_tables(df)
    if tables:
        t = Section("Metrics")
        for table in tables:
            t.add(table)
        s.add(t)
    _shift_blocks(s, sec, pal, REGRESSION_METRICS)
    bands = plots.regression_bands(df, pal)
    if bands is not None:
        b = Section("Predictive bands")
        b.add(Figure(f"{sec.slug}-bands", bands,
                     "Predictive mean and mean ± 3 std (shaded) per method for the first seed, with the "
                     "true function (dashed) and the training points.", alt="3-sigma predictive bands"))
        s.add(b)


def _definitions(df: pd.DataFrame) -> Section:
    s = Section("Metric definitions", anchor="metric-definitions")
    tasks = set(distinct(df["task"])) or {"classification"}
    if "segmentation" in tasks:
        s.add(Definitions(segmentation_definitions()))
    if "multilabel" in tasks:
        s.add(Definitions(multilabel_definitions()))
    if tasks - {"regression", "segmentation", "multilabel"}:
        s.add(Definitions(CLASSIFICATION_DEFINITIONS))
    if "regression" in tasks:
        s.add(Definitions(REGRESSION_DEFINITIONS))
    s.add(Paragraph("Tables show mean ± std over seeds (sample std, ddof = 1); with a single seed "
                    "only the mean is shown. Cells marked best are compared at full precision."))
    return s
