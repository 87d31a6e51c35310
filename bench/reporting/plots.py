"""Report figures, each returned as PNG bytes (``None`` when there is nothing to draw).

Figures are built on ``matplotlib.figure.Figure`` objects (Agg backend, no pyplot state),
so they are freed as soon as they are saved. Every function takes the prepared ok-record
frame of one report section and a ``palette`` mapping method label -> colour.
"""
from __future__ import annotations

import io
import math
import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib import MatplotlibDeprecationWarning, patheffects  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .data import distinct, shift_families, shift_frame, severity_axis_label  # noqa: E402

DPI = 100
METRIC_AXIS = {
    "accuracy": "accuracy", "nll": "NLL", "brier": "Brier score", "ece": "ECE",
    "rmse": "RMSE", "mean_std": "mean predictive std", "coverage_3sigma": "3σ coverage",
    "miou": "mIoU", "pixel_accuracy": "pixel accuracy", "error_auroc": "error AUROC (entropy)", "dice": "Dice",
}


def make_palette(labels: list[str]) -> dict:
    """label -> colour, colour-blind safe (Okabe-Ito, cycling); :func:`style_for` adds the marker
    and line style that tell apart methods sharing a colour."""
    return {lab: OKABE_ITO[i % len(OKABE_ITO)] for i, lab in enumerate(labels)}


def wrap_label(label, width: int = 34) -> str:
    """A long configuration label broken after commas into lines of at most ~``width`` characters."""
    text, lines, line = str(label), [], ""
    for part in text.replace(",", ",\0").split("\0"):
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    lines.append(line)
    return "\n".join(lines)


def style_for(palette: dict, label) -> dict:
    """The colour, marker and line style of ``label`` (its position in ``palette``)."""
    return make_styles(list(palette))[label]


#: Okabe & Ito (2008), "Color Universal Design": eight colours told apart with every common form
#: of colour blindness (black last, as bars and text are dark); markers and line styles repeat on a different period, so
#: no two of the first 56 methods share colour, marker and style
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
LINESTYLES = ["-", "--", "-.", ":"]


def make_styles(labels: list[str]) -> dict:
    """label -> {"color", "marker", "linestyle"}: a colour-blind-safe colour, a marker and a line
    style per method, so that methods are told apart without colour and coinciding lines show."""
    return {lab: {"color": OKABE_ITO[i % len(OKABE_ITO)], "marker": MARKERS[i % len(MARKERS)],
                  "linestyle": LINESTYLES[(i // len(OKABE_ITO)) % len(LINESTYLES)]}
            for i, lab in enumerate(labels)}


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    # no "Software" text chunk: smaller files, identical bytes for identical figures
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


#: legend and tick labels wrap after commas at about this many characters, so that a long
#: configuration label (laplace_diag[glm_sampler=jvp,...]) does not widen the figure past its panels
LABEL_WIDTH = 40


def _legend(fig: Figure, labels, palette, kind: str = "line", title: str | None = None) -> None:
    if kind == "patch":
        handles = [Patch(facecolor=palette[lab], edgecolor="#333", label=wrap_label(lab, LABEL_WIDTH))
                   for lab in labels]
    else:
        styles = make_styles(list(palette))
        handles = [Line2D([0], [0], color=palette[lab], marker=styles[lab]["marker"], linestyle=styles[lab]["linestyle"],
                          markeredgecolor="#333", label=wrap_label(lab, LABEL_WIDTH)) for lab in labels]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), frameon=False,
               bbox_to_anchor=(0.5, -0.01), title=title)


def _grid(n: int, max_cols: int = 4):
    ncols = min(n, max_cols)
    return ncols, math.ceil(n / ncols)


def _severity_ticks(ax, severities) -> None:
    sev = sorted(severities)
    if len(sev) > 8:
        sev = sev[::2]
    ax.set_xticks(sev)
    ax.set_xticklabels([f"{s:g}" for s in sev])


# ------------------------------------------------------------------------------ shift


def shift_lines(df: pd.DataFrame, metrics: list[str], palette: dict) -> bytes | None:
    """Metric vs severity, one line per method, band = ±1 std over seeds.

    Severity 0 is the in-distribution record. With several shift families (CIFAR-10-C
    corruptions) each seed's value at a severity is the mean over families.
    """
    cols = [f"metrics.{m}" for m in metrics if f"metrics.{m}" in df.columns]
    sf = shift_frame(df, cols)
    if sf.empty or not (sf["kind"] == "shift").any():
        return None
    cols = [c for c in cols if sf[c].notna().any()]
    if not cols:
        return None
    families = shift_families(df)
    per_seed = sf.groupby(["label", "seed", "severity"], as_index=False)[cols].mean()
    labels = [lab for lab in palette if lab in set(per_seed["label"])]
    ncols, nrows = _grid(len(cols), 2)
    fig = Figure(figsize=(5.2 * ncols, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    styles = make_styles(list(palette))
    sev = np.sort(per_seed["severity"].unique())
    gap = float(np.min(np.diff(sev))) if len(sev) > 1 else 1.0
    for ax, col in zip(axes, cols):
        for i, lab in enumerate(labels):
            d = per_seed[per_seed["label"] == lab].groupby("severity")[col].agg(["mean", "std"]).reset_index()
            # a small sideways offset per method, so that coinciding methods stay visible
            x = d["severity"] + (0.25 * gap * (i / max(len(labels) - 1, 1) - 0.5) if len(labels) > 1 else 0.0)
            st = styles[lab]
            ax.plot(x, d["mean"], color=st["color"], marker=st["marker"], linestyle=st["linestyle"], markersize=4.5,
                    markeredgecolor="#333", markeredgewidth=0.5, linewidth=1.3)
            ax.fill_between(x, d["mean"] - d["std"].fillna(0), d["mean"] + d["std"].fillna(0), color=st["color"],
                            alpha=0.12, linewidth=0)
        name = col.split(".", 1)[1]
        ax.set_ylabel(METRIC_AXIS.get(name, name))
        ax.set_xlabel(severity_axis_label(families))
        _severity_ticks(ax, per_seed["severity"].unique())
        ax.grid(alpha=0.3)
    for ax in axes[len(cols):]:
        ax.set_visible(False)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(labels) / 4), 1, 1))
    _legend(fig, labels, palette)
    return to_png(fig)


def shift_boxes(df: pd.DataFrame, metrics: list[str], palette: dict) -> bytes | None:
    """Ovadia-style box plots: per severity, the spread over shift families of each
    method's (seed-averaged) metric. Only drawn when there are several families."""
    families = shift_families(df)
    if len(families) < 2:
        return None
    cols = [f"metrics.{m}" for m in metrics if f"metrics.{m}" in df.columns]
    sf = shift_frame(df, cols)
    cols = [c for c in cols if sf[c].notna().any()]
    if sf.empty or not cols:
        return None
    per_family = sf.groupby(["label", "family", "severity"], as_index=False)[cols].mean()
    severities = sorted(per_family["severity"].unique())
    names = {s: ("clean" if s == 0 else f"{s:g}") for s in severities}
    per_family["sev"] = per_family["severity"].map(names)
    order = [names[s] for s in severities]
    labels = [lab for lab in palette if lab in set(per_family["label"])]
    ncols, nrows = _grid(len(cols), 2)
    fig = Figure(figsize=(5.6 * ncols, 3.8 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, col in zip(axes, cols):
        with warnings.catch_warnings():  # seaborn 0.13 passes matplotlib 3.11's deprecated `vert`
            warnings.simplefilter("ignore", MatplotlibDeprecationWarning)
            sns.boxplot(data=per_family, x="sev", y=col, hue="label", order=order, hue_order=labels,
                        palette=palette, fliersize=2, linewidth=0.8, legend=False, ax=ax)
        name = col.split(".", 1)[1]
        ax.set_ylabel(METRIC_AXIS.get(name, name))
        ax.set_xlabel(severity_axis_label(families))
        ax.grid(alpha=0.3, axis="y")
    for ax in axes[len(cols):]:
        ax.set_visible(False)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * math.ceil(len(labels) / 4), 1, 1))
    _legend(fig, labels, palette, kind="patch")
    return to_png(fig)


def entropy_by_correctness(df: pd.DataFrame, palette: dict) -> bytes | None:
    """PBN paper Fig. 5 (bottom right) as small multiples, one panel per method on a shared y axis:
    mean predictive entropy of the correctly (solid) and wrongly (dashed) classified examples
    against severity (at each severity the mean over shift families and seeds), and a dotted line
    at the method's mean entropy on the OOD set(s), when there are any."""
    cols = ["metrics.entropy_correct", "metrics.entropy_incorrect"]
    if not all(c in df.columns for c in cols):
        return None
    sf = shift_frame(df, cols)
    if sf.empty or not (sf["kind"] == "shift").any() or not sf[cols].notna().any().any():
        return None
    per_seed = sf.groupby(["label", "seed", "severity"], as_index=False)[cols].mean()
    per_sev = per_seed.groupby(["label", "severity"], as_index=False)[cols].mean()
    labels = [lab for lab in palette if lab in set(per_sev["label"])]
    families = shift_families(df)
    ood = df[(df["kind"] == "ood")] if "metrics.entropy" in df.columns else df.iloc[:0]
    ncols, nrows = _grid(len(labels), 4)
    fig = Figure(figsize=(3.4 * ncols, 2.9 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    for i, lab in enumerate(labels):
        ax = axes.ravel()[i]
        d = per_sev[per_sev["label"] == lab].sort_values("severity")
        ax.plot(d["severity"], d[cols[0]], color=palette[lab], marker="o", markersize=3.5, linestyle="-",
                markeredgecolor="#333", markeredgewidth=0.4, label="correct")
        ax.plot(d["severity"], d[cols[1]], color=palette[lab], marker="x", markersize=4.5, linestyle="--",
                label="incorrect")
        o = ood[ood["label"] == lab]["metrics.entropy"].dropna()
        if len(o):
            ax.axhline(float(o.mean()), color="#333", linestyle=":", linewidth=1.1, label="OOD set (all)")
        ax.set_title(wrap_label(lab), fontsize=8)
        ax.grid(alpha=0.3)
        _severity_ticks(ax, per_sev["severity"].unique())
        r, c = divmod(i, ncols)
        if c == 0:
            ax.set_ylabel("entropy (nats)", fontsize=8)
        if r == nrows - 1 or i + ncols >= len(labels):
            ax.set_xlabel(severity_axis_label(families), fontsize=8)
            ax.tick_params(labelbottom=True)
        if i == 0:
            ax.legend(loc="best", fontsize=6.5, framealpha=0.8)
    for ax in axes.ravel()[len(labels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return to_png(fig)


def shift_heatmap(df: pd.DataFrame, metrics: list[str], palette: dict) -> bytes | None:
    """Method x shift family heat maps of each metric averaged over the family's severities
    (> 0) and the seeds. Only drawn with several shift families (CIFAR-10-C corruptions)."""
    families = shift_families(df)
    if len(families) < 2:
        return None
    cols = [f"metrics.{m}" for m in metrics if f"metrics.{m}" in df.columns]
    sub = df[df["kind"] == "shift"]
    cols = [c for c in cols if sub[c].notna().any()]
    if sub.empty or not cols:
        return None
    labels = [lab for lab in palette if lab in set(sub["label"])]
    fig = Figure(figsize=(min(max(7.0, 3.5 + 0.6 * len(families)), 18), (1.4 + 0.42 * len(labels)) * len(cols)))
    axes = fig.subplots(len(cols), 1, squeeze=False).ravel()
    for ax, col in zip(axes, cols):
        per_seed = sub.groupby(["label", "seed", "shift"])[col].mean()
        table = per_seed.groupby(level=["label", "shift"]).mean().unstack("shift")
        table = table.reindex(index=[lab for lab in labels if lab in table.index], columns=families)
        table.index = [wrap_label(lab, LABEL_WIDTH) for lab in table.index]
        name = col.split(".", 1)[1]
        higher_better = name in ("accuracy", "miou", "pixel_accuracy", "dice")
        sns.heatmap(table, annot=len(families) * len(labels) <= 400, fmt=".2f", annot_kws={"fontsize": 7},
                    cmap="viridis" if higher_better else "viridis_r", linewidths=0.3, ax=ax,
                    cbar_kws={"label": METRIC_AXIS.get(name, name), "shrink": 0.8})
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.set_title(f"{METRIC_AXIS.get(name, name)}, mean over severities 1-5 and seeds", fontsize=10)
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        for t in ax.get_xticklabels():   # anchored at their tick: long names do not run into each other
            t.set_horizontalalignment("right")
            t.set_rotation_mode("anchor")
        ax.tick_params(axis="y", labelrotation=0, labelsize=8)
    fig.tight_layout()
    return to_png(fig)


# -------------------------------------------------------------------------------- ood


def _summed_hist(records: pd.DataFrame):
    """Sum the ``entropy_hist`` curves of ``records`` (those sharing the first one's edges)."""
    edges, total = None, None
    for curves in records["curves"]:
        h = curves.get("entropy_hist") if isinstance(curves, dict) else None
        if not h or h.get("edges") is None or h.get("counts") is None:
            continue
        e = np.asarray(h["edges"], dtype=float)
        c = np.asarray(h["counts"], dtype=float)
        if len(e) != len(c) + 1:
            continue
        if edges is None:
            edges, total = e, c.copy()
        elif len(e) == len(edges) and np.allclose(e, edges):
            total += c
    return edges, total


def _density(edges, counts):
    width = np.diff(edges)
    s = counts.sum()
    return counts / (s * width) if s > 0 else counts


def entropy_histograms(df: pd.DataFrame, palette: dict) -> bytes | None:
    """Per method: predictive-entropy density on the clean test set vs each OOD set."""
    ood_names = distinct(df.loc[df["kind"] == "ood", "shift"])
    if not ood_names:
        return None
    labels = [lab for lab in palette if lab in set(df["label"])]
    panels = []
    for lab in labels:
        sub = df[df["label"] == lab]
        hists = [("in-distribution", *_summed_hist(sub[sub["kind"] == "id"]))]
        hists += [(name, *_summed_hist(sub[(sub["kind"] == "ood") & (sub["shift"] == name)])) for name in ood_names]
        hists = [h for h in hists if h[1] is not None]
        if len(hists) >= 2 or (hists and hists[0][0] != "in-distribution"):
            panels.append((lab, hists))
    if not panels:
        return None
    set_colors = {"in-distribution": "#4c72b0"}
    extra = sns.color_palette("Set2", n_colors=max(len(ood_names), 1))
    for i, name in enumerate(ood_names):
        set_colors[name] = extra[i] if name != "in-distribution" else "#dd8452"
    ncols, nrows = _grid(len(panels), 3)
    fig = Figure(figsize=(4.4 * ncols, 3.2 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (lab, hists) in zip(axes, panels):
        for name, edges, counts in hists:
            dens = _density(edges, counts)
            ax.stairs(dens, edges, fill=True, alpha=0.35, color=set_colors[name])
            ax.stairs(dens, edges, color=set_colors[name], linewidth=1.2)
        sub = df[(df["label"] == lab) & (df["kind"] == "ood")]
        title = lab
        if "metrics.auroc" in sub.columns and sub["metrics.auroc"].notna().any():
            au = sub.groupby("shift")["metrics.auroc"].mean()
            title += "\n" + ", ".join(f"AUROC {k}: {v:.3f}" for k, v in au.items() if np.isfinite(v))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("predictive entropy (nats)")
        ax.set_ylabel("density")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    present = [n for n in ["in-distribution"] + ood_names if any(n == h[0] for _, hs in panels for h in hs)]
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles=[Patch(facecolor=set_colors[n], alpha=0.6, label=n) for n in present],
               loc="lower center", ncol=min(len(present), 4), frameon=False, bbox_to_anchor=(0.5, -0.01))
    return to_png(fig)


# ------------------------------------------------------------------------ reliability


def summed_reliability(records: pd.DataFrame):
    """Sum the ``reliability`` bins of ``records`` over seeds: (edges, count, conf_sum, correct_sum)."""
    edges = count = conf = corr = None
    for curves in records["curves"]:
        r = curves.get("reliability") if isinstance(curves, dict) else None
        if not r or any(r.get(k) is None for k in ("edges", "count", "confidence_sum", "correct_sum")):
            continue
        e = np.asarray(r["edges"], dtype=float)
        parts = [np.asarray(r[k], dtype=float) for k in ("count", "confidence_sum", "correct_sum")]
        if any(len(p) != len(e) - 1 for p in parts):
            continue
        if edges is None:
            edges, (count, conf, corr) = e, [p.copy() for p in parts]
        elif len(e) == len(edges) and np.allclose(e, edges):
            count, conf, corr = count + parts[0], conf + parts[1], corr + parts[2]
    return edges, count, conf, corr


def reliability_diagrams(df: pd.DataFrame, palette: dict) -> bytes | None:
    """Per method: accuracy per confidence bin on the clean test set (bars, gap to the diagonal
    hatched) and pooled over every shifted test set (line), bin counts of both below on one log
    axis for every panel."""
    labels = [lab for lab in palette if lab in set(df["label"])]
    panels = []
    for lab in labels:
        clean = summed_reliability(df[(df["label"] == lab) & (df["kind"] == "id")])
        shifted = summed_reliability(df[(df["label"] == lab) & (df["kind"] == "shift")])
        if clean[0] is not None and clean[1].sum() > 0:
            panels.append((lab, clean, shifted if shifted[0] is not None and shifted[1].sum() > 0 else None))
    if not panels:
        return None
    ncols, nrows = _grid(len(panels), 4)
    lines = max(wrap_label(lab).count("\n") + 2 for lab, _, _ in panels)   # title lines
    fig = Figure(figsize=(3.7 * ncols, (4.6 + 0.18 * lines) * nrows))
    outer = fig.add_gridspec(nrows, ncols, hspace=0.2 + 0.09 * lines, wspace=0.28)  # room for titles between rows
    top = max(max(c[1].max(), s[1].max() if s is not None else 0) for _, c, s in panels)
    for i, (lab, (edges, count, conf, corr), shifted) in enumerate(panels):
        r, c = divmod(i, ncols)
        inner = outer[r, c].subgridspec(2, 1, height_ratios=[3, 1], hspace=0.06)
        ax = fig.add_subplot(inner[0])
        axc = fig.add_subplot(inner[1], sharex=ax)
        width = np.diff(edges)
        nz = count > 0
        acc = np.divide(corr, count, out=np.zeros_like(corr), where=nz)
        mconf = np.divide(conf, count, out=np.zeros_like(conf), where=nz)
        ece = float(np.abs(corr - conf).sum() / count.sum())
        color = palette[lab]
        ax.bar(edges[:-1][nz], acc[nz], width=width[nz], align="edge", color=color, alpha=0.75,
               edgecolor="#333", linewidth=0.5, label="clean: accuracy")
        # gap to perfect calibration, drawn from the bin's accuracy to its mean confidence
        ax.bar(edges[:-1][nz], (mconf - acc)[nz], bottom=acc[nz], width=width[nz], align="edge",
               facecolor="none", edgecolor="#c44e52", hatch="///", linewidth=0.5, label="clean: gap")
        title = f"{wrap_label(lab)}\nECE clean {ece:.3f}"
        axc.step(edges, np.append(count, count[-1]), where="post", color="#555", linewidth=1, label="clean")
        if shifted is not None:
            s_edges, s_count, s_conf, s_corr = shifted
            snz = s_count > 0
            s_acc = np.divide(s_corr, s_count, out=np.zeros_like(s_corr), where=snz)
            s_ece = float(np.abs(s_corr - s_conf).sum() / s_count.sum())
            ax.plot(((s_edges[:-1] + s_edges[1:]) / 2)[snz], s_acc[snz], "s-", color="#000", markersize=3,
                    linewidth=1.2, label="shifted (pooled): accuracy",
                    path_effects=[patheffects.Stroke(linewidth=2.8, foreground="white"), patheffects.Normal()])
            axc.step(s_edges, np.append(s_count, s_count[-1]), where="post", color="#000", linewidth=1,
                     linestyle="--", label="shifted")
            title += f", shifted {s_ece:.3f}"
        ax.plot([0, 1], [0, 1], ":", color="gray", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=8.5)
        ax.tick_params(labelbottom=False)
        axc.set_yscale("log")                        # the same count axis in every panel
        axc.set_ylim(0.8, top * 1.5)
        if c == 0:
            ax.set_ylabel("accuracy")
            axc.set_ylabel("count (log)")
        axc.set_xlabel("confidence (top label)", fontsize=8)
        if i == 0:
            ax.legend(loc="upper left", fontsize=6.5, frameon=False)
            axc.legend(loc="upper left", fontsize=6, frameon=False)
    return to_png(fig)


def selective_from_bins(edges, count, correct) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tau, accuracy, coverage) at the lower bin edges tau: the examples with confidence > tau are
    those of the bins from tau's on (bins are (lo, hi], ``bench.metrics.reliability_bins``)."""
    edges, count, correct = (np.asarray(a, dtype=float) for a in (edges, count, correct))
    kept = np.cumsum(count[::-1])[::-1]
    right = np.cumsum(correct[::-1])[::-1]
    ok = kept > 0
    return edges[:-1][ok], right[ok] / kept[ok], kept[ok] / count.sum()


def confidence_curves(df: pd.DataFrame, palette: dict) -> bytes | None:
    """Ovadia et al. (2019) Fig. 2-style selective prediction from the stored reliability bins:
    accuracy of the examples whose top-label confidence exceeds tau, against tau, and the
    risk-coverage curve (error rate against the fraction of examples kept), on the clean test set
    and on every shifted set pooled; bin edges only (15 bins: exact at the edges)."""
    labels = [lab for lab in palette if lab in set(df["label"])]
    scopes = [("clean", df[df["kind"] == "id"]), ("shifted (pooled)", df[df["kind"] == "shift"])]
    curves = {}
    for scope, sub in scopes:
        for lab in labels:
            edges, count, _, corr = summed_reliability(sub[sub["label"] == lab])
            if edges is None or count.sum() == 0:
                continue
            curves[(scope, lab)] = selective_from_bins(edges, count, corr)
    if not curves:
        return None
    present = [sc for sc, _ in scopes if any(k[0] == sc for k in curves)]
    styles = make_styles(list(palette))
    fig = Figure(figsize=(5.0 * 2, 3.6 * len(present)))
    axes = fig.subplots(len(present), 2, squeeze=False)
    for r, scope in enumerate(present):
        for lab in labels:
            if (scope, lab) not in curves:
                continue
            tau, acc, cov = curves[(scope, lab)]
            st = styles[lab]
            kw = dict(color=st["color"], marker=st["marker"], linestyle=st["linestyle"], markersize=3.5,
                      markeredgecolor="#333", markeredgewidth=0.4, linewidth=1.2)
            axes[r, 0].plot(tau, acc, **kw)
            axes[r, 1].plot(cov, 1 - acc, **kw)
        axes[r, 0].set_xlabel("confidence threshold τ")
        axes[r, 0].set_ylabel(f"accuracy on conf. > τ\n({scope})")
        axes[r, 1].set_xlabel("coverage (fraction kept)")
        axes[r, 1].set_ylabel(f"risk = error rate\n({scope})")
        for ax in axes[r]:
            ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.06 + 0.025 * math.ceil(len(labels) / 4), 1, 1))
    _legend(fig, labels, palette)
    return to_png(fig)


# ------------------------------------------------------------------------- regression


def regression_bands(df: pd.DataFrame, palette: dict) -> bytes | None:
    """Per method, first seed: truth, training points, predictive mean and mean ± 3 std."""
    labels = [lab for lab in palette if lab in set(df["label"])]
    panels = []
    for lab in labels:
        sub = df[(df["label"] == lab) & (df["kind"] == "id")].sort_values("seed")
        for curves in sub["curves"]:
            band = curves.get("band") if isinstance(curves, dict) else None
            if band and band.get("x") is not None and band.get("mean") is not None:
                panels.append((lab, band, sub["seed"].iloc[0]))
                break
    if not panels:
        return None
    ncols, nrows = _grid(len(panels), 3)
    fig = Figure(figsize=(4.6 * ncols, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (lab, band, seed) in zip(axes, panels):
        x = np.asarray(band["x"], dtype=float)
        order = np.argsort(x)
        x = x[order]
        mean = np.asarray(band["mean"], dtype=float)[order]
        std = np.asarray(band.get("std") or np.zeros_like(mean), dtype=float)[order]
        color = palette[lab]
        ax.fill_between(x, mean - 3 * std, mean + 3 * std, color=color, alpha=0.25, label="mean ± 3 std")
        ax.plot(x, mean, color=color, linewidth=1.6, label="predictive mean")
        ylo, yhi = np.nanmin(mean), np.nanmax(mean)
        if band.get("truth") is not None:
            truth = np.asarray(band["truth"], dtype=float)[order]
            ax.plot(x, truth, "--", color="black", linewidth=1, label="truth")
            ylo, yhi = np.nanmin(truth), np.nanmax(truth)
        if band.get("train_x") is not None and band.get("train_y") is not None:
            ax.scatter(band["train_x"], band["train_y"], s=8, color="#c44e52", zorder=3, label="training data")
        pad = 0.15 * (yhi - ylo if yhi > ylo else 1.0)
        ax.set_ylim(ylo - pad, yhi + pad)  # keep the truth in view even when a band explodes
        ax.set_title(f"{lab} (seed {int(seed)})" if pd.notna(seed) else lab, fontsize=9)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, names = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles, names, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, -0.01))
    return to_png(fig)


# --------------------------------------------------------------------- sweeps, subnetworks

SWEEP_COLOR = "#222222"
_SCOPE_AXIS = {"id": "ID", "shift": "shift-avg."}


def scoped_axis_title(key: str) -> str:
    """``id.nll`` -> "ID NLL", ``shift.brier`` -> "shift-avg. Brier score",
    ``ood.fmnist.auroc`` -> "OOD fmnist AUROC"."""
    kind, rest = key.split(".", 1)
    if kind == "ood":
        name, metric = rest.rsplit(".", 1)
        return f"OOD {name} {metric.upper() if metric in ('auroc', 'aupr') else METRIC_AXIS.get(metric, metric)}"
    return f"{_SCOPE_AXIS.get(kind, kind)} {METRIC_AXIS.get(rest, rest)}"


def sweep_figure(per_seed: pd.DataFrame, sweep, palette: dict) -> bytes | None:
    """PBN paper Fig. 4a style: each metric against the swept option (mean ± std over seeds as
    error bars), other methods of the section as dashed horizontal reference lines.

    ``per_seed``: (label, seed)-indexed frame with one column per metric key (``id.nll`` ...),
    holding the sweep's labels and the reference labels; ``sweep``: a ``data.Sweep``.
    """
    keys = [k for k in per_seed.columns if per_seed[k].notna().any()]
    if not keys or per_seed.empty:
        return None
    g = per_seed.groupby(level=0, sort=False)
    mean, std = g.mean(), g.std(ddof=1)
    labs = [lab for lab in sweep.labels if lab in mean.index]
    if len(labs) < 2:
        return None
    x = np.array([sweep.values[lab] for lab in labs], dtype=float)
    refs = [lab for lab in palette if lab in mean.index and lab not in sweep.values]
    refs += [lab for lab in mean.index if lab not in refs and lab not in sweep.values]
    ncols, nrows = _grid(len(keys), 3)
    fig = Figure(figsize=(4.3 * ncols, 3.3 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    shown = set()
    for ax, key in zip(axes, keys):
        m = mean.loc[labs, key].to_numpy(dtype=float)
        sd = std.loc[labs, key].to_numpy(dtype=float)
        ok = np.isfinite(m)
        ax.errorbar(x[ok], m[ok], yerr=np.where(np.isfinite(sd), sd, 0.0)[ok], color=SWEEP_COLOR, marker="o",
                    markersize=4, capsize=3, linewidth=1.5, zorder=3)
        for lab in refs:
            v = float(mean.at[lab, key])
            if np.isfinite(v):
                ax.axhline(v, linestyle="--", linewidth=1.2, color=palette.get(lab, "#888"), zorder=2)
                shown.add(lab)
        if sweep.log_x:
            ax.set_xscale("log")
        ax.set_xlabel(sweep.option)
        ax.set_title(scoped_axis_title(key), fontsize=10)
        ax.grid(alpha=0.3, which="both" if sweep.log_x else "major")
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    handles = [Line2D([0], [0], color=SWEEP_COLOR, marker="o", label=f"{sweep.method}: {sweep.option} sweep "
                      f"(mean ± std over seeds)")]
    handles += [Line2D([0], [0], color=palette.get(lab, "#888"), linestyle="--", label=lab)
                for lab in refs if lab in shown]
    rows = math.ceil(len(handles) / 4)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * rows / nrows, 1, 1))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), frameon=False,
               bbox_to_anchor=(0.5, -0.01), fontsize=9)
    return to_png(fig)


def _kernel_mosaic(a: np.ndarray) -> np.ndarray:
    """(out, in, kh, kw) -> a 2-D image of the out*in kernels tiled on a grid, NaN between them."""
    out_c, in_c, kh, kw = a.shape[:4]
    tiles = a.reshape(out_c * in_c, kh, kw)
    ncol = math.ceil(math.sqrt(len(tiles)))
    nrow = math.ceil(len(tiles) / ncol)
    img = np.full((nrow * (kh + 1) - 1, ncol * (kw + 1) - 1), np.nan)
    for i, t in enumerate(tiles):
        r, c = divmod(i, ncol)
        img[r * (kh + 1):r * (kh + 1) + kh, c * (kw + 1):c * (kw + 1) + kw] = t
    return img


def sigma_image(fl: dict):
    """(2-D array, what its pixels are) for a ``first_layer_sigma`` diagnostic, or None.

    Large Linear layers store per-input summaries: ``per_input_mean`` reshaped to the input's
    H x W (averaged over channels when C > 1). Small layers store the whole tensor: a 2-D
    matrix as is, a convolution's kernels tiled.
    """
    if not isinstance(fl, dict):
        return None
    per_input = fl.get("per_input_mean")
    if per_input is not None:
        v = np.asarray(per_input, dtype=float)
        shape = [int(d) for d in (fl.get("input_shape") or [])]
        if len(shape) >= 2 and shape[-1] * shape[-2] == v.size:
            return v.reshape(shape[-2], shape[-1]), "input pixel (mean σ over output units)"
        if len(shape) >= 3 and int(np.prod(shape)) == v.size:
            return v.reshape(-1, shape[-2], shape[-1]).mean(0), "input pixel (mean σ over output units and channels)"
        return None
    values = fl.get("values")
    if values is None:
        return None
    a = np.asarray(values, dtype=float)
    if a.ndim == 2:
        return a, "weight matrix (outputs × inputs)"
    if a.ndim == 4:
        return _kernel_mosaic(a), "convolution kernels (tiled)"
    if a.ndim == 1:
        return a[None, :], "weights"
    if a.ndim == 3:
        return a.reshape(a.shape[0], -1), "weights (outputs × rest)"
    return None


def sigma_heatmaps(panels: list[tuple[str, dict]]) -> bytes | None:
    """PBN paper Fig. 3: first-layer σ as heat maps, one panel per (label, first_layer_sigma).

    Entries with σ = 0 (deterministic weights) are masked grey; each panel has its own colour scale.
    """
    items = []
    for lab, fl in panels:
        img = sigma_image(fl)
        if img is not None:
            items.append((lab, fl, *img))
    if not items:
        return None
    ncols, nrows = _grid(len(items), 5)
    fig = Figure(figsize=(3.0 * ncols, 3.1 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    for ax, (lab, fl, img, _) in zip(axes, items):
        data = np.ma.masked_invalid(np.where(img == 0, np.nan, img))
        aspect = "equal" if max(img.shape) <= 4 * min(img.shape) else "auto"
        im = ax.imshow(data, cmap=cmap, interpolation="nearest", aspect=aspect)
        if data.count() == 0:
            im.set_clim(0, 1)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03).ax.tick_params(labelsize=7)
        numel = int(np.prod(fl.get("shape") or [0]))
        count = fl.get("stochastic")
        sub = f"{int(count):,} / {numel:,} weights stochastic" if count is not None and numel else ""
        ax.set_title(f"{lab}\n{sub}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[len(items):]:
        ax.set_visible(False)
    fig.tight_layout()
    return to_png(fig)


def layer_distribution_figure(frames: dict) -> bytes | None:
    """Appendix D/E: per configuration (label -> long frame of ``tables.layer_distribution_frame``)
    the fraction of the subnetwork in each layer (stacked bars) and the fraction of each layer
    that is stochastic (log scale)."""
    frames = {lab: f for lab, f in frames.items() if f is not None and not f.empty}
    if not frames:
        return None
    layers = []  # (depth, name) in depth order, over all configurations
    for f in frames.values():
        for d, name, t in f[["depth", "layer", "type"]].drop_duplicates().itertuples(index=False):
            key = (d, f"{name} ({t})" if t else str(name))
            if key not in layers:
                layers.append(key)
    layers.sort(key=lambda k: (k[0] if pd.notna(k[0]) else math.inf))
    names = [n for _, n in layers]
    configs = list(frames)
    sub_frac = pd.DataFrame(0.0, index=configs, columns=names)
    lay_frac = pd.DataFrame(np.nan, index=configs, columns=names)
    for lab, f in frames.items():
        f = f.assign(name=[f"{n} ({t})" if t else str(n) for n, t in zip(f["layer"], f["type"])])
        g = f.groupby("name")
        sub_frac.loc[lab, g["fraction_of_subnet"].mean().index] = g["fraction_of_subnet"].mean().fillna(0).values
        lay_frac.loc[lab, g["fraction_of_layer"].mean().index] = g["fraction_of_layer"].mean().values
    layer_colors = sns.color_palette("crest", n_colors=max(len(names), 1))
    config_colors = sns.color_palette("flare", n_colors=max(len(configs), 1))
    fig = Figure(figsize=(13, 1.6 + 0.38 * max(len(configs), 6)))
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    y = np.arange(len(configs))
    left = np.zeros(len(configs))
    for j, name in enumerate(names):
        w = sub_frac[name].to_numpy(dtype=float)
        ax1.barh(y, w, left=left, color=layer_colors[j], edgecolor="white", linewidth=0.5, label=name)
        for yi, (l0, wi) in enumerate(zip(left, w)):
            if wi >= 0.08:
                ax1.text(l0 + wi / 2, yi, f"{wi:.0%}", ha="center", va="center", fontsize=7,
                         color="white" if j >= len(names) / 2 else "black")
        left += w
    ax1.set_yticks(y)
    ax1.set_yticklabels([wrap_label(c, 40) for c in configs], fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlim(0, 1)
    ax1.set_xlabel("fraction of the subnetwork (stochastic entries) per layer")
    ax1.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(names), 5), frameon=False, fontsize=8,
               title="layer (depth order)", title_fontsize=8)
    xs = np.arange(len(names))
    for i, lab in enumerate(configs):
        v = lay_frac.loc[lab].to_numpy(dtype=float)
        v = np.where(v > 0, v, np.nan)
        ax2.plot(xs, v, marker="o", markersize=4, color=config_colors[i], label=wrap_label(lab, 40))
    ax2.set_xticks(xs)
    ax2.set_xticklabels(names, rotation=30 if len(names) <= 10 else 75, ha="right", rotation_mode="anchor", fontsize=8)
    if (lay_frac.to_numpy(dtype=float) > 0).any():
        ax2.set_yscale("log")
    ax2.set_ylabel("fraction of the layer stochastic")
    ax2.set_title("stochastic fraction of each layer (1 − sparsity)", fontsize=9)
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=8)
    fig.tight_layout()
    return to_png(fig)


__all__ = ["make_palette", "to_png", "shift_lines", "shift_boxes", "entropy_histograms",
           "reliability_diagrams", "regression_bands", "summed_reliability", "sweep_figure", "sigma_heatmaps",
           "sigma_image", "layer_distribution_figure", "scoped_axis_title"]


def segmentation_maps(df: pd.DataFrame, inputs: dict, class_names=None) -> bytes | None:
    """Uncertainty maps of the first test image, clean and under one corruption at increasing
    severity (columns): the input and its ground truth, then per method its prediction, predictive
    entropy and (sampling methods) mutual information, from the maps the harness keeps in the
    records (``curves.maps``, first seed of each method). ``inputs``: the suite's
    ``segmentation_maps_inputs.npz`` (names, set images, labels); ``class_names``: the legend of
    the class colours.

    Entropy and MI are stored quantised to 0-255 over [0, log K]; each row has its own colour
    scale, from 0 to the largest value of its panels, with a colour bar in nats, so that a method
    whose MI is a hundredth of another's is still visible. A row whose every value is below the
    stored resolution (log K / 255) says so instead of showing a black panel."""
    names = [str(n) for n in inputs["names"]]
    recs = df[df["kind"].isin(["id", "shift"])]
    by_label: dict = {}
    for _, r in recs.sort_values("seed").iterrows():
        curves = r.get("curves")
        maps = curves.get("maps") if isinstance(curves, dict) else None
        if not maps:
            continue
        key = "clean" if r["kind"] == "id" else f"{r['shift']} {int(r['severity'])}"
        by_label.setdefault(r["label"], {}).setdefault(key, maps[0])
    if not by_label:
        return None
    rows = [("input", None), ("ground truth", None)]
    for label, sets in by_label.items():
        rows += [(label, "pred"), (label, "entropy")]
        if any(m.get("mi") is not None for m in sets.values()):
            rows.append((label, "mi"))
    n_classes = int(max(int(np.max(inputs["labels"][inputs["labels"] != 255], initial=0)),
                        *[int(np.max(m["pred"])) for s in by_label.values() for m in s.values()])) + 1
    if class_names:
        n_classes = max(n_classes, len(class_names))
    log_k = float(np.log(max(n_classes, 2)))
    cmap = matplotlib.colormaps["tab20"].resampled(max(n_classes, 2))
    fig = Figure(figsize=(3.3 * len(names) + 1.6, 2.25 * len(rows) + 0.6))
    # one column per set, and a narrow last one for each row's colour bar
    grid = fig.subplots(len(rows), len(names) + 1, squeeze=False,
                        gridspec_kw={"width_ratios": [1.0] * len(names) + [0.05]})
    axes, bars = grid[:, :-1], grid[:, -1]
    for i, (label, what) in enumerate(rows):
        row_max = 0
        if what in ("entropy", "mi"):   # the row's own scale: 0 .. its largest stored value
            row_max = max((int(np.max(m[what])) for m in by_label[label].values() if m.get(what) is not None),
                          default=0)
        image = None
        for j, name in enumerate(names):
            ax = axes[i, j]
            ax.set_xticks([]), ax.set_yticks([])
            if what is None and label == "input":
                ax.imshow(inputs[f"set{j}"][0])
            elif what is None:
                lab = np.ma.masked_equal(inputs["labels"][0].astype(int), 255)
                ax.imshow(lab, cmap=cmap, vmin=0, vmax=max(n_classes, 2) - 1, interpolation="nearest")
            else:
                m = by_label[label].get(name)
                if m is None or m.get(what) is None:
                    ax.axis("off")
                    continue
                a = np.asarray(m[what])
                if what == "pred":
                    ax.imshow(a, cmap=cmap, vmin=0, vmax=max(n_classes, 2) - 1, interpolation="nearest")
                elif row_max == 0:
                    ax.set_facecolor("#f2f2f2")
                    ax.text(0.5, 0.5, f"every pixel below\n{log_k / 255:.3g} nats (the stored\nresolution, log K / 255)",
                            ha="center", va="center", fontsize=8, transform=ax.transAxes)
                else:  # stored 0-255 over [0, log K], shown in nats on the row's scale
                    image = ax.imshow(a.astype(float) * log_k / 255, cmap="magma", vmin=0,
                                      vmax=row_max * log_k / 255, interpolation="nearest")
            if i == 0:
                ax.set_title(name, fontsize=10)
            if j == 0:
                kind = {"pred": "prediction", "entropy": "entropy", "mi": "mutual information"}.get(what, "")
                wrapped = wrap_label(label, 22)
                ax.set_ylabel(f"{wrapped}\n{kind}" if kind else label, fontsize=8)
        if image is not None:
            bar = fig.colorbar(image, cax=bars[i])
            bar.ax.tick_params(labelsize=7)
            bar.set_label("nats", fontsize=7)
        else:
            bars[i].axis("off")
    if class_names:
        from matplotlib.patches import Patch

        handles = [Patch(facecolor=cmap(c), edgecolor="none", label=str(n)) for c, n in enumerate(class_names)]
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), fontsize=8, frameon=False,
                   title="classes (white in the ground truth: ignored)", title_fontsize=8)
    fig.subplots_adjust(left=0.07, right=0.93, top=1 - 0.3 / (2.25 * len(rows) + 0.6),
                        bottom=(0.8 if class_names else 0.1) / (2.25 * len(rows) + 0.6),
                        wspace=0.04, hspace=0.08)
    return to_png(fig)
