"""Report builder on a small synthetic results directory (no training, a few seconds)."""
from __future__ import annotations

import base64
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.errors import BenchError
from bench.reporting import build_report
from bench.reporting.data import prepare
from bench.reporting.tables import CHOSEN_MARK, format_mean_std, format_number, leaderboard
from bench.store import ResultsStore, config_hash, load_records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# --------------------------------------------------------------------------- synthetic data
# Classification suite "mnist_rotated": per (method, seed) the clean-test metrics below;
# a shift record at `sev` degrees has accuracy acc - DROP[method] * sev / 60 and
# nll / brier / ece increased by RISE[method] * sev / 60.
METHODS = {
    "deterministic": ("deterministic", {}),
    "pbn": ("pbn[r_bayes=0.01]", {"r_bayes": 0.01}),
}
ID_METRICS = {  # (method, seed): accuracy, nll, brier, ece
    ("deterministic", 0): (0.98, 0.08, 0.030, 0.010),
    ("deterministic", 1): (0.96, 0.10, 0.050, 0.020),
    ("pbn", 0): (0.975, 0.07, 0.035, 0.015),
    ("pbn", 1): (0.985, 0.09, 0.040, 0.017),
}
DROP = {"deterministic": 0.10, "pbn": 0.05}
RISE = {"deterministic": 0.20, "pbn": 0.10}
SHIFT_SEVERITIES = [60.0, 120.0]
AUROC = {("deterministic", 0): 0.80, ("deterministic", 1): 0.84, ("pbn", 0): 0.90, ("pbn", 1): 0.92}
COST = {"deterministic": 266_610, "pbn": 266_610}
TRAIN_TIME = {("deterministic", 0): 10.0, ("deterministic", 1): 12.0, ("pbn", 0): 20.0, ("pbn", 1): 30.0}
EDGES = np.linspace(0.0, np.log(10), 21).tolist()
#: PBN diagnostics that pass its validity checks (bench.validity): sigma moved x1.5, 40 % of Adam's
#: ceiling, and measured stationary
CONVERGED_VI = {"sigma_change": {"median_ratio": 1.5},
                "train": {"rho_optimizer": "adam", "rho_lr": 0.01, "epochs": 2, "steps": 200, "num_train": 1000,
                          "final_beta": 0.01, "kl_divisor": 1000},
                "sigma_stationarity": {"residual": 0.05, "residual_se": 0.02},
                # the MAP network PBN starts from, at rest over its last epochs (check map_converged)
                "map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}
UNIFORM = "uniform predictor (1/10 each; reference)"
#: a trained network whose validation NLL is at rest over its last epochs (check map_converged)
TRAINED = {"map_training": {"val_nll": [1.0 + 1.0 / (e + 1) ** 3 for e in range(12)]}}


def _metrics_at(method, seed, sev):
    acc, nll, brier, ece = ID_METRICS[(method, seed)]
    k = sev / 60.0
    return {"accuracy": acc - DROP[method] * k, "nll": nll + RISE[method] * k,
            "brier": brier + RISE[method] * k, "ece": ece + RISE[method] * k}


def _reliability(acc, rng):
    edges = np.linspace(0, 1, 16)
    count = rng.integers(1, 50, size=15).astype(float)
    count[-1] = 800
    conf = count * (edges[:-1] + edges[1:]) / 2
    correct = np.minimum(count, np.round(conf * (0.9 + 0.1 * acc)))
    return {"edges": edges.tolist(), "count": count.tolist(), "confidence_sum": conf.tolist(),
            "correct_sum": correct.tolist()}


def _entropy_hist(center, rng):
    samples = np.clip(rng.normal(center, 0.3, size=500), 0, np.log(10))
    counts, _ = np.histogram(samples, bins=EDGES)
    return {"edges": EDGES, "counts": counts.tolist()}


def _base(suite, model, method, seed, task="classification", profile="smoke"):
    label, cfg = METHODS[method]
    return {"status": "ok", "suite": suite, "profile": profile, "task": task, "method": method,
            "method_label": label, "method_config": cfg, "config_hash": config_hash(cfg),
            "model": model, "seed": seed, "git_commit": "abc1234", "device": "cpu",
            "versions": {"torch": "2.14.1", "numpy": "2.4.6"},
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:10:00+00:00",
            "cost": {"total_params": COST[method], "stochastic_params": 0 if method == "deterministic" else 2_666,
                     "train_time_s": TRAIN_TIME.get((method, seed), 1.0),
                     "predict_time_per_example_s": 2e-5, "flops_per_example": 533_000,
                     "peak_memory_mb": 120.5}}


def write_synthetic(root: Path, with_cifar: bool = True) -> None:
    store = ResultsStore(root)
    rng = np.random.default_rng(0)
    suite, model = "mnist_rotated", "lenet5"
    for method, (label, cfg) in METHODS.items():
        for seed in (0, 1):
            run = store.run_dir(suite, model, method, config_hash(cfg), seed)
            base = _base(suite, model, method, seed)
            base["eval_note"] = "smoke profile: 200-image subset per cell"
            for sev in [0.0] + SHIFT_SEVERITIES:
                m = _metrics_at(method, seed, sev)
                m.update(entropy=0.1 + sev / 200, mutual_information=None if method == "deterministic" else 0.01)
                diag = (CONVERGED_VI if method == "pbn" else TRAINED) if sev == 0 else None
                store.write(run, {**base, "kind": "id" if sev == 0 else "shift", "shift": "rotation",
                                  "severity": sev, "n": 200, "metrics": m, "diagnostics": diag,
                                  "curves": {"reliability": _reliability(m["accuracy"], rng),
                                             "entropy_hist": _entropy_hist(0.2 + sev / 100, rng)}})
            store.write(run, {**base, "kind": "ood", "shift": "fashion_mnist", "severity": None, "n": 200,
                              "metrics": {"auroc": AUROC[(method, seed)], "aupr": AUROC[(method, seed)] - 0.05,
                                          "entropy": 1.1},
                              "curves": {"entropy_hist": _entropy_hist(1.2 if method == "pbn" else 0.6, rng)}})
    # one failed fit
    failed = {**_base(suite, model, "deterministic", 1), "method": "mc_dropout",
              "method_label": "mc_dropout[p=0.1]", "method_config": {"p": 0.1},
              "config_hash": config_hash({"p": 0.1}), "status": "failed", "kind": "fit", "shift": "fit",
              "severity": None, "error": "DivergedError: non-finite loss at epoch 2"}
    failed.pop("cost")
    store.write(store.run_dir(suite, model, "mc_dropout", failed["config_hash"], 1), failed)

    # a tiny regression suite, one seed
    x = np.linspace(-6, 6, 50)
    for method, rmse in (("deterministic", 3.0), ("pbn", 2.5)):
        label, cfg = METHODS[method]
        run = store.run_dir("toy", "mlp", method, config_hash(cfg), 0)
        rec = {**_base("toy", "mlp", method, 0, task="regression"), "kind": "id", "shift": "none",
               "severity": None, "n": 50,
               "metrics": {"rmse": rmse, "nll": rmse + 1, "mean_std": 4.0, "coverage_3sigma": 0.9 if method == "pbn" else 0.5},
               "curves": {"band": {"x": x.tolist(), "mean": (x ** 3 * 0.95).tolist(),
                                   "std": (3 + np.abs(x) ** 2 * (2 if method == "pbn" else 0.3)).tolist(),
                                   "train_x": np.linspace(-4, 4, 20).tolist(),
                                   "train_y": (np.linspace(-4, 4, 20) ** 3 + rng.normal(0, 3, 20)).tolist(),
                                   "truth": (x ** 3).tolist()}}}
        store.write(run, rec)

    if with_cifar:  # several shift families per severity -> family-averaged lines + box plots
        for method, (label, cfg) in METHODS.items():
            for seed in (0, 1):
                run = store.run_dir("cifar10c", "resnet20", method, config_hash(cfg), seed)
                base = _base("cifar10c", "resnet20", method, seed)
                store.write(run, {**base, "kind": "id", "shift": "clean", "severity": 0, "n": 100,
                                  "metrics": {"accuracy": 0.9, "nll": 0.3, "brier": 0.15, "ece": 0.03}})
                for fam_i, fam in enumerate(("gaussian_noise", "fog", "contrast")):
                    for sev in range(1, 6):
                        acc = 0.9 - sev * (0.08 if method == "deterministic" else 0.05) - 0.03 * fam_i + 0.01 * seed
                        store.write(run, {**base, "kind": "shift", "shift": fam, "severity": sev, "n": 100,
                                          "metrics": {"accuracy": acc, "nll": 0.3 + (0.9 - acc) * 3,
                                                      "brier": 0.15 + (0.9 - acc), "ece": 0.03 + (0.9 - acc) / 2}})


# ------------------------------------------------------------------------------- helpers

class _Tables(HTMLParser):
    """Collect every <table> as a list of rows of (tag, classes, text) cells."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = [tag, dict(attrs).get("class", "") or "", ""]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(tuple(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data.replace("\xa0", " ")  # the renderer's no-break space after "±"


def html_table(html: str, first_header: str, contains: str):
    """The HTML table whose header row starts with ``first_header`` and has a ``contains`` column,
    as {row label: {column title: (classes, text)}}."""
    p = _Tables()
    p.feed(html)
    for t in p.tables:
        head = [c[2] for c in t[0]]
        if head and head[0] == first_header and contains in head:
            return {row[0][2]: {h: (c[1], c[2]) for h, c in zip(head[1:], row[1:])} for row in t[1:]}
    raise AssertionError(f"no table with header {first_header!r}/{contains!r}")


def md_table(md: str, contains: str):
    """The first GitHub markdown table whose header has a ``contains`` column, as {row: {col: text}}."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and contains in [c.strip() for c in line.strip("|").split(" | ")]:
            head = [c.strip() for c in line.strip().strip("|").split(" | ")]
            rows = {}
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
                rows[cells[0]] = dict(zip(head[1:], cells[1:]))
            return rows
    raise AssertionError(f"no markdown table with column {contains!r}")


def mean_std_text(values):
    """The tables' ``mean ± std``, computed here: the std to two significant digits, the mean to the
    same decimals (at most four significant digits); one value: four decimals."""
    import math

    m = statistics.fmean(values)
    if len(values) < 2:
        return f"{m:.4f}"
    sd = statistics.stdev(values)
    d = min(max(0, 1 - math.floor(math.log10(sd))), max(0, 3 - math.floor(math.log10(abs(m)))))
    return f"{m:.{d}f} ± {sd:.{d}f}"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    write_synthetic(root)
    out = tmp_path_factory.mktemp("reports")
    paths = build_report(root, out)
    return root, out, paths


# --------------------------------------------------------------------------------- tests

def test_files_written(report):
    _, out, paths = report
    assert sorted(p.parent.name for p in paths) == ["cifar10c", "mnist_rotated", "toy"]
    for p in paths:
        assert p.name == "index.html" and p.is_file()
        readme = (p.parent / "README.md").read_text()
        refs = re.findall(r"\]\((figures/[^)]+\.png)\)", readme)
        assert refs, "markdown references no figures"
        for ref in refs:
            assert (p.parent / ref).read_bytes().startswith(PNG_MAGIC)
        on_disk = sorted(f.name for f in (p.parent / "figures").glob("*.png"))
        assert on_disk == sorted(Path(r).name for r in refs)  # nothing stale, nothing missing
    names = {f.name for f in (out / "mnist_rotated" / "figures").glob("*.png")}
    assert {"lenet5-shift.png", "lenet5-ood-entropy.png", "lenet5-reliability.png"} <= names
    assert "resnet20-shift-boxes.png" in {f.name for f in (out / "cifar10c" / "figures").glob("*.png")}
    assert "mlp-bands.png" in {f.name for f in (out / "toy" / "figures").glob("*.png")}


def test_html_is_self_contained(report):
    _, out, paths = report
    for p in paths:
        html = p.read_text()
        for bad in ("http://", "https://", 'src="figures', "<script", "<link", "@import"):
            assert bad not in html
        srcs = re.findall(r'<img src="([^"]+)"', html)
        assert srcs
        for src in srcs:
            assert src.startswith("data:image/png;base64,")
            assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)
        assert len(srcs) == len(list((p.parent / "figures").glob("*.png")))


def test_leaderboard_values_and_best(report):
    root, out, _ = report
    html = (out / "mnist_rotated" / "index.html").read_text()
    md = (out / "mnist_rotated" / "README.md").read_text()
    # the table of every quality metric (the ranked board above it is bench leaderboard's, tested there)
    h = html_table(html, "method", "OOD fashion_mnist AUROC ↑")
    m = md_table(md, "OOD fashion_mnist AUROC ↑")
    det, pbn = "deterministic", "pbn[r_bayes=0.01]"
    assert set(h) == {det, pbn, UNIFORM} and set(m) == {det, pbn, UNIFORM}
    # the uniform predictor's reference row: NLL ln K, Brier 1 - 1/K, accuracy 1/K
    assert float(m[UNIFORM]["ID acc ↑"]) == 0.1 and float(m[UNIFORM]["ID NLL ↓"]) == pytest.approx(np.log(10), abs=1e-3)

    # in-distribution accuracy and ECE: mean ± std over the two seeds
    for method, label in (("deterministic", det), ("pbn", pbn)):
        acc = [ID_METRICS[(method, s)][0] for s in (0, 1)]
        ece = [ID_METRICS[(method, s)][3] for s in (0, 1)]
        assert h[label]["ID acc ↑"][1] == mean_std_text(acc)
        assert m[label]["ID acc ↑"].strip("*_") == mean_std_text(acc)
        assert h[label]["ID ECE ↓"][1] == mean_std_text(ece)
        # shift: per seed the mean over the shifted severities, then over seeds
        shift_acc = [statistics.fmean(ID_METRICS[(method, s)][0] - DROP[method] * sev / 60
                                      for sev in SHIFT_SEVERITIES) for s in (0, 1)]
        assert h[label]["shift acc ↑"][1] == mean_std_text(shift_acc)
        auroc = [AUROC[(method, s)] for s in (0, 1)]
        assert h[label]["OOD fashion_mnist AUROC ↑"][1] == mean_std_text(auroc)
        assert h[label]["seeds"][1] == "2"

    # exact numbers from the table object too
    table = leaderboard(prepare(load_records(root, "mnist_rotated")).query("status == 'ok'"))
    assert table.mean.at[pbn, "id.accuracy"] == pytest.approx((0.975 + 0.985) / 2, abs=1e-12)
    assert table.std.at[det, "id.accuracy"] == pytest.approx(statistics.stdev([0.98, 0.96]), abs=1e-12)

    # marks: "best" only where a paired t-test over the two seeds (scipy, independently) rejects
    # equality at 5 %; otherwise both rows are tied. pbn's shift NLL is lower by the same 0.16 on
    # both seeds (best); ID accuracy (-0.005, +0.025), ID ECE and AUROC (+0.10, +0.08 with one
    # degree of freedom: p = 0.07) are ties
    from scipy.stats import ttest_rel

    def p_value(metric_index):
        a = [ID_METRICS[("pbn", s)][metric_index] for s in (0, 1)]
        b = [ID_METRICS[("deterministic", s)][metric_index] for s in (0, 1)]
        return ttest_rel(a, b).pvalue

    assert p_value(0) > 0.05 and p_value(3) > 0.05
    assert ttest_rel([AUROC[("pbn", s)] for s in (0, 1)], [AUROC[("deterministic", s)] for s in (0, 1)]).pvalue > 0.05
    marks = {col: {lab: h[lab][col][0].split()[-1] for lab in (det, pbn)}
             for col in ("ID acc ↑", "ID ECE ↓", "shift NLL ↓", "OOD fashion_mnist AUROC ↑", "seeds")}
    assert marks == {"ID acc ↑": {det: "tie", pbn: "tie"}, "ID ECE ↓": {det: "tie", pbn: "tie"},
                     "shift NLL ↓": {det: "num", pbn: "best"},
                     "OOD fashion_mnist AUROC ↑": {det: "tie", pbn: "tie"}, "seeds": {det: "num", pbn: "num"}}
    assert m[pbn]["shift NLL ↓"].startswith("**") and not m[det]["shift NLL ↓"].startswith("**")
    assert m[det]["ID ECE ↓"].startswith("_") and m[pbn]["ID ECE ↓"].startswith("_")


def test_cost_table_and_header(report):
    _, out, _ = report
    html = (out / "mnist_rotated" / "index.html").read_text()
    cost = html_table(html, "method", "train time (s)")
    assert cost["pbn[r_bayes=0.01]"]["train time (s)"][1] == "25.0"      # three significant digits
    assert cost["deterministic"]["parameters"][1] == "266,610"
    assert cost["deterministic"]["stochastic params"][1] == "0"
    assert cost["deterministic"]["predict (ms / example)"][1] == "0.0200"  # 2e-5 s, in ms
    assert cost["deterministic"]["MFLOPs / example"][1] == "0.533"
    assert "measured on: cpu" in html
    for text in ("mnist_rotated", "smoke", "abc1234", "2.14.1", "smoke profile: 200-image subset per cell",
                 "Metric definitions", "Ovadia"):
        assert text in html


def test_failed_runs_listed(report):
    _, out, _ = report
    html = (out / "mnist_rotated" / "index.html").read_text()
    md = (out / "mnist_rotated" / "README.md").read_text()
    failed = html_table(html, "method", "error")
    assert failed["mc_dropout[p=0.1]"]["error"][1] == "DivergedError: non-finite loss at epoch 2"
    assert failed["mc_dropout[p=0.1]"]["seed"][1] == "1"
    assert "## Failed runs" in md and "DivergedError: non-finite loss at epoch 2" in md
    # the failed method is not in the leaderboard
    assert "mc_dropout[p=0.1]" not in html_table(html, "method", "ID acc ↑")
    assert "Failed runs" not in (out / "toy" / "index.html").read_text()


def test_regression_table_single_seed(report):
    _, out, _ = report
    md = (out / "toy" / "README.md").read_text()
    t = md_table(md, "RMSE ↓")
    assert t["pbn[r_bayes=0.01]"]["RMSE ↓"] == "**2.5000**"  # one seed: no "± std"
    assert t["deterministic"]["RMSE ↓"] == "3.0000"
    # coverage: best = closest to 0.9973
    cov = [c for c in t["pbn[r_bayes=0.01]"] if c.startswith("3σ coverage")][0]
    assert t["pbn[r_bayes=0.01]"][cov] == "**0.9000**"


def test_suite_filter_and_errors(tmp_path):
    with pytest.raises(BenchError, match="no result records"):
        build_report(tmp_path, tmp_path / "out")
    with pytest.raises(BenchError, match="does not exist"):
        build_report(tmp_path / "missing", tmp_path / "out")
    write_synthetic(tmp_path / "res", with_cifar=False)
    with pytest.raises(BenchError, match="cifar10c"):
        build_report(tmp_path / "res", tmp_path / "out", suites=["cifar10c"])
    paths = build_report(tmp_path / "res", tmp_path / "out", suites="toy")
    assert paths == [tmp_path / "out" / "toy" / "index.html"]
    assert not (tmp_path / "out" / "mnist_rotated").exists()


# ------------------------------------------------------------- PBN sweep with diagnostics
# Suite "pbn_sweep", model lenet_300_100: deterministic (reference, no diagnostics) and
# pbn at two r_bayes values, 2 seeds each; PBN id records carry diagnostics and the paper's
# cost keys like methods/pbn.py writes them.
SWEEP_R = [0.01, 0.1]
SWEEP_ID = {  # (r_bayes or "det", seed): accuracy, nll, brier
    ("det", 0): (0.970, 0.100, 0.050), ("det", 1): (0.968, 0.110, 0.052),
    (0.01, 0): (0.980, 0.060, 0.030), (0.01, 1): (0.976, 0.070, 0.034),
    (0.1, 0): (0.975, 0.080, 0.040), (0.1, 1): (0.971, 0.085, 0.041),
}
SWEEP_AUROC = {("det", 0): 0.80, ("det", 1): 0.82, (0.01, 0): 0.88, (0.01, 1): 0.86,
               (0.1, 0): 0.91, (0.1, 1): 0.93}
SWEEP_SEV = [60.0, 120.0]
# validation NLL: validation prefers r = 0.1, while r = 0.01 is better on the test set
SWEEP_VAL = {("det", 0): 0.12, ("det", 1): 0.13, (0.01, 0): 0.090, (0.01, 1): 0.094,
             (0.1, 0): 0.070, (0.1, 1): 0.078}
# layer distribution: (layer, type, numel) and per (r, seed) the selected counts
LAYERS = [("1", "Linear", 235_500), ("4", "Linear", 30_100), ("7", "Linear", 1_010)]
SELECTED = {(0.01, 0): (1200, 1200, 266), (0.01, 1): (1250, 1180, 236),
            (0.1, 0): (20_000, 6000, 661), (0.1, 1): (20_001, 5990, 670)}


def _ms(values):
    """The table's text for mean ± std (sample std) of ``values``."""
    return format_mean_std(statistics.fmean(values), statistics.stdev(values))


def _sweep_shift(key, seed, sev):
    acc, nll, brier = SWEEP_ID[(key, seed)]
    k = sev / 60.0
    return {"accuracy": acc - 0.1 * k, "nll": nll + 0.5 * k * (2 if key == "det" else 1), "brier": brier + 0.2 * k}


def _pbn_diagnostics(r, seed):
    sel = SELECTED[(r, seed)]
    k = sum(sel)
    layers = []
    for depth, ((name, typ, numel), s) in enumerate(zip(LAYERS, sel)):
        bias = 0 if depth == 0 else 3
        layers.append({"depth": depth, "layer": name, "type": typ, "numel": numel, "selected": s,
                       "fraction_of_layer": s / numel, "fraction_of_subnet": s / k, "sparsity": 1 - s / numel,
                       "selected_by_param": {"weight": s - bias, "bias": bias}})
    yy, xx = np.mgrid[0:28, 0:28]
    blob = np.exp(-((yy - 14) ** 2 + (xx - 14) ** 2) / (2 * (3 + 30 * r) ** 2))
    mean = np.where(blob > 0.2, 0.05 * blob * r, 0.0)
    return {"criterion": {"name": "gradient", "size": r, "squared": False, "per_layer": False, "n_batches": None},
            "k": k, "n_params": 267_410, "n_candidates": 266_610, "r_bayes_effective": k / 266_610,
            "init": "map", "sigma": {"mean": 0.05, "median": 0.05, "min": 0.04, "max": 0.06},
            "warnings": [f"a warning for r {r:g} seed {seed}"] if (r, seed) == (SWEEP_R[-1], 1) else [],
            "train": {"epochs": 2, "epoch_loss": [0.1, 0.05], "final_nll": 0.01, "final_kl": 100.0,
                      "final_beta": 0.01, "num_train": 1000},
            "layer_distribution": layers,
            "first_layer_sigma": {"param": "1.weight", "shape": [300, 784], "stochastic": sel[0],
                                  "mean": 0.05, "max": 0.06, "min": 0.04,
                                  "per_input_mean": mean.ravel().tolist(), "per_input_max": (mean * 2).ravel().tolist(),
                                  "per_input_count": (mean > 0).astype(int).ravel().tolist(),
                                  "input_shape": [1, 28, 28]}}


def _paper_cost(r, seed):
    theta, k, f_d, n = 267_410, sum(SELECTED[(r, seed)]), 532_400, 1000
    return {"variational_params": k, "mean_params": theta, "param_ratio_vs_deterministic": (theta + k) / theta,
            "variational_state_bytes": 8 * k, "variational_state_bytes_dense_rho": 4 * theta,
            "forward_flops_deterministic": f_d, "predict_flops_per_example_paper": (1 + k / theta) * 5 * f_d,
            "train_flops_per_example_step_paper": (1 + k / theta) * 7 * f_d,
            "pretrain_flops_paper": 3 * f_d * n * 2, "train_flops_paper": (1 + k / theta) * 7 * f_d * n * 2,
            "vi_train_time_s": 3.0 + seed}


def write_sweep_synthetic(root: Path) -> None:
    store = ResultsStore(root)
    suite, model = "pbn_sweep", "lenet_300_100"
    runs = [("deterministic", "deterministic", {}, "det")]
    runs += [("pbn", f"pbn[r_bayes={r:g}]", {"r_bayes": r, "init": "map", "predict_samples": 5}, r) for r in SWEEP_R]
    for method, label, cfg, key in runs:
        for seed in (0, 1):
            run = store.run_dir(suite, model, method, config_hash(cfg), seed)
            cost = {"total_params": 267_410, "stochastic_params": 0, "train_time_s": 10.0 + seed,
                    "fit_time_s": 1.0, "predict_time_per_example_s": 1e-5, "flops_per_example": 532_400,
                    "peak_memory_mb": 5.0, "predict_peak_memory_mb": 0.1}
            if key != "det":
                k = sum(SELECTED[(key, seed)])
                cost.update(total_params=267_410 + k, stochastic_params=k, state_mb=1.0, **_paper_cost(key, seed))
            base = {"status": "ok", "suite": suite, "profile": "quick", "task": "classification", "method": method,
                    "method_label": label, "method_config": cfg, "config_hash": config_hash(cfg), "model": model,
                    "seed": seed, "git_commit": "abc1234", "device": "cpu", "cost": cost,
                    "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:10:00+00:00"}
            acc, nll, brier = SWEEP_ID[(key, seed)]
            store.write(run, {**base, "kind": "id", "shift": "rotation", "severity": 0.0, "n": 100,
                              "metrics": {"accuracy": acc, "nll": nll, "brier": brier, "ece": 0.01},
                              "diagnostics": None if key == "det" else _pbn_diagnostics(key, seed)})
            for sev in SWEEP_SEV:
                store.write(run, {**base, "kind": "shift", "shift": "rotation", "severity": sev, "n": 100,
                                  "metrics": _sweep_shift(key, seed, sev), "diagnostics": None})
            store.write(run, {**base, "kind": "ood", "shift": "fashion_mnist", "severity": None, "n": 100,
                              "metrics": {"auroc": SWEEP_AUROC[(key, seed)], "aupr": 0.8}, "diagnostics": None})
            store.write(run, {**base, "kind": "val", "shift": "validation", "severity": None, "n": 100,
                              "metrics": {"accuracy": acc, "nll": SWEEP_VAL[(key, seed)], "brier": brier},
                              "diagnostics": None})


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep_results")
    write_sweep_synthetic(root)
    out = tmp_path_factory.mktemp("sweep_reports")
    (path,) = build_report(root, out)
    return root, path


def html_tables(html: str, first_header: str, contains: str) -> list:
    """Every HTML table like :func:`html_table` finds, in document order."""
    p = _Tables()
    p.feed(html)
    out = []
    for t in p.tables:
        head = [c[2] for c in t[0]]
        if head and head[0] == first_header and contains in head:
            out.append({row[0][2]: {h: c[2] for h, c in zip(head[1:], row[1:])} for row in t[1:]})
    return out


def test_sweep_detection():
    from bench.reporting.data import find_sweeps

    def frame(configs):
        rows = [{"label": lab, "method": m, "method_config": cfg, "kind": "id", "seed": 0}
                for lab, (m, cfg) in configs.items()]
        return pd.DataFrame(rows)

    cfgs = {"pbn[r=0.01]": ("pbn", {"r_bayes": 0.01, "init": "map", "squared": False}),
            "pbn[r=0.5]": ("pbn", {"r_bayes": 0.5, "init": "map", "squared": False}),
            "pbn[r=0.1]": ("pbn", {"r_bayes": 0.1, "init": "map", "squared": False}),
            # an ablation: differs from the sweep in a non-numeric option -> not part of it
            "pbn[init=random]": ("pbn", {"r_bayes": 0.1, "init": "random", "squared": False}),
            # differs in a bool only: not a numeric sweep
            "pbn[squared]": ("pbn", {"r_bayes": 0.01, "init": "map", "squared": True}),
            "mfvi": ("mfvi", {"predict_samples": 5}), "deterministic": ("deterministic", {})}
    (sw,) = find_sweeps(frame(cfgs))
    assert (sw.method, sw.option) == ("pbn", "r_bayes")
    assert sw.values == {"pbn[r=0.01]": 0.01, "pbn[r=0.1]": 0.1, "pbn[r=0.5]": 0.5}  # value order
    assert sw.log_x is True
    # two options changing at once: no sweep
    two = {"a": ("pbn", {"r_bayes": 0.01, "predict_samples": 5}), "b": ("pbn", {"r_bayes": 0.1, "predict_samples": 10})}
    assert find_sweeps(frame(two)) == []
    lin = {"a": ("mcd", {"p": 0.1}), "b": ("mcd", {"p": 0.3})}
    assert find_sweeps(frame(lin))[0].log_x is False


def test_ablation_detection():
    """Configurations differing in one string option form an ablation; numeric or two-option
    differences do not."""
    from bench.reporting.data import find_ablations

    def frame(configs):
        return pd.DataFrame([{"label": lab, "method": m, "method_config": cfg, "kind": "id", "seed": 0}
                             for lab, (m, cfg) in configs.items()])

    cfgs = {"ssvi": ("ssvi", {"criterion": "snr_abs", "density": 0.1}),
            "ssvi[criterion=mu_abs]": ("ssvi", {"criterion": "mu_abs", "density": 0.1}),
            "ssvi[density=0.2]": ("ssvi", {"criterion": "snr_abs", "density": 0.2}),
            "ssvi[both]": ("ssvi", {"criterion": "snr", "density": 0.5})}
    (ab,) = find_ablations(frame(cfgs))
    assert (ab.method, ab.option, ab.numeric) == ("ssvi", "criterion", False)
    assert ab.values == {"ssvi": "snr_abs", "ssvi[criterion=mu_abs]": "mu_abs"}


def test_criteria_overlap_table_by_hand():
    from bench.reporting.tables import criteria_overlap_table

    runs = [(0, {"history": [{"step": 0}, {"iou": {"a|b": 0.5, "a|c": 1.0}}, {"iou": {"a|b": 0.25, "a|c": 0.0}}]}),
            (1, {"history": [{"iou": {"a|b": 1.0, "a|c": 0.5}}]}),
            (2, {"history": []})]
    t = criteria_overlap_table(runs)
    assert t.rows == ["a vs b", "a vs c"]
    assert t.mean.loc["a vs b", "all"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert t.mean.loc["a vs b", "first"] == pytest.approx((0.5 + 1.0) / 2)
    assert t.mean.loc["a vs b", "last"] == pytest.approx((0.25 + 1.0) / 2)
    assert t.mean.loc["a vs c", "last"] == pytest.approx(0.25)
    assert t.count.loc["a vs c", "all"] == 3
    assert criteria_overlap_table([(0, {"history": [{"step": 1}]})]) is None


def test_sweep_table_values(sweep_report):
    _, path = sweep_report
    html = path.read_text()
    t = html_table(html, "r_bayes", "ID acc ↑")
    chosen = "0.1" + CHOSEN_MARK
    assert list(t) == ["0.01", chosen]  # option values, in order; no reference method rows
    for r in SWEEP_R:
        row = t[f"{r:g}" + (CHOSEN_MARK if r == 0.1 else "")]
        assert row["seeds"][1] == "2"
        assert row["validation NLL (chooses) ↓"][1] == _ms([SWEEP_VAL[(r, s)] for s in (0, 1)])
        for i, col in enumerate(("ID acc ↑", "ID NLL ↓", "ID Brier ↓")):
            assert row[col][1] == _ms([SWEEP_ID[(r, s)][i] for s in (0, 1)])
        for metric, col in (("nll", "shift NLL ↓"), ("brier", "shift Brier ↓")):
            per_seed = [statistics.fmean(_sweep_shift(r, s, sev)[metric] for sev in SWEEP_SEV) for s in (0, 1)]
            assert row[col][1] == _ms(per_seed)
        assert row["OOD fashion_mnist AUROC ↑"][1] == _ms([SWEEP_AUROC[(r, s)] for s in (0, 1)])
        # no test column points at a value: r = 0.01 is better on test, and nothing says so
        for col, (cls, _) in row.items():
            if col != "validation NLL (chooses) ↓":
                assert "best" not in cls.split() and "tie" not in cls.split(), (r, col)
    # the validation choice: r = 0.1 (lower validation NLL), marked in its row and its score
    assert "best" in t[chosen]["validation NLL (chooses) ↓"][0].split()
    assert "best" not in t["0.01"]["validation NLL (chooses) ↓"][0].split()


def test_sweep_figures_embedded(sweep_report):
    _, path = sweep_report
    html = path.read_text()
    names = {f.name for f in (path.parent / "figures").glob("*.png")}
    for name in ("lenet_300_100-sweep-pbn-r_bayes", "lenet_300_100-sigma-first-layer",
                 "lenet_300_100-layer-distribution"):
        assert f"{name}.png" in names
        m = re.search(rf'<figure id="fig-{re.escape(name)}"><img src="data:image/png;base64,([^"]+)"', html)
        assert m, name
        png = base64.b64decode(m.group(1))
        assert png.startswith(PNG_MAGIC) and png == (path.parent / "figures" / f"{name}.png").read_bytes()
    for title in ("Sweeps", "Weight uncertainty of the first layer", "Subnetwork layer distribution"):
        assert f">{title}</h" in html


def test_layer_distribution_tables(sweep_report):
    _, path = sweep_report
    html = path.read_text()
    tables = html_tables(html, "layer", "fraction of subnet")
    assert len(tables) == 2  # one per pbn configuration, in r_bayes order; none for deterministic
    for r, t in zip(SWEEP_R, tables):
        assert list(t) == [f"{d}: {name} ({typ})" for d, (name, typ, _) in enumerate(LAYERS)]
        for d, (row, cells) in enumerate(t.items()):
            sel = [SELECTED[(r, s)][d] for s in (0, 1)]
            ks = [sum(SELECTED[(r, s)]) for s in (0, 1)]
            assert cells["parameters"] == f"{LAYERS[d][2]:,}"
            mean_sel = statistics.fmean(sel)
            # a count column prints as integers when every mean in it is integral
            integral = all(statistics.fmean([SELECTED[(r, s)][i] for s in (0, 1)]).is_integer()
                           for i in range(len(LAYERS)))
            assert cells["selected"] == format_number(mean_sel, integers=integral)
            assert cells["fraction of subnet"] == format_number(statistics.fmean(
                [a / k for a, k in zip(sel, ks)]))
            assert cells["fraction of layer"] == format_number(mean_sel / LAYERS[d][2])
            assert cells["selected biases"] == ("0" if d == 0 else "3")
    # r = 0.01: means 1225, 1190, 251 print as integers; r = 0.1: 20,000.5 keeps its decimal
    assert tables[0]["0: 1 (Linear)"]["selected"] == "1,225"
    assert tables[1]["0: 1 (Linear)"]["selected"] == "20,000.5"
    assert tables[1]["1: 4 (Linear)"]["selected"] == "5,995.0"


def test_cost_tables_split(sweep_report):
    _, path = sweep_report
    html = path.read_text()
    main = html_table(html, "method", "train time (s)")
    assert set(main) == {"deterministic", "pbn[r_bayes=0.01]", "pbn[r_bayes=0.1]"}
    cols = set(main["deterministic"])
    assert {"parameters", "stochastic params", "state (MiB)", "own fit (s)", "predict (ms / example)",
            "MFLOPs / example", "train peak memory (MiB)", "predict peak memory (MiB)"} <= cols
    assert not any("_" in c for c in cols)                      # readable titles, no raw keys
    # method-specific keys: their own table, one row per method that records them, each quantity with its mean
    specific = html_table(html, "method", "quantities recorded (mean over seeds)")
    assert set(specific) == {"pbn[r_bayes=0.01]", "pbn[r_bayes=0.1]"}
    text = specific["pbn[r_bayes=0.1]"]["quantities recorded (mean over seeds)"][1]
    assert "vi train time (s): 3.5" in text                     # mean of 3.0 and 4.0 over the seeds
    assert not any(k in text for k in ("paper", "variational", "param ratio"))
    paper = html_table(html, "method", "train_flops_paper")
    assert set(paper) == {"pbn[r_bayes=0.01]", "pbn[r_bayes=0.1]"}  # only methods with those keys
    k = [sum(SELECTED[(0.1, s)]) for s in (0, 1)]
    assert paper["pbn[r_bayes=0.1]"]["variational_params (k = rθ)"][1] == format_number(statistics.fmean(k))
    ratio = statistics.fmean([(267_410 + x) / 267_410 for x in k])
    assert paper["pbn[r_bayes=0.1]"]["param_ratio_vs_deterministic (1 + r)"][1] == format_number(ratio)
    for formula in ("(1 + r) θ", "(1 + r) N f_d", "(1 + r)(N + 2) f_d", "3 f_d per example and epoch",
                    "2 (N + 2) f_d", "measured times"):
        assert formula in html


def test_no_diagnostic_sections_without_diagnostics(report):
    _, out, _ = report
    for suite in ("mnist_rotated", "toy", "cifar10c"):
        html = (out / suite / "index.html").read_text()
        for title in ("Sweeps", "Weight uncertainty of the first layer", "Subnetwork layer distribution", "Warnings"):
            assert f">{title}</h" not in html
        assert "Paper cost formulas" not in html
        names = {f.name for f in (out / suite / "figures").glob("*.png")}
        assert not any(("sweep" in n or "sigma" in n or "layer-distribution" in n) for n in names)


def test_recorded_warnings_are_listed_per_run(sweep_report):
    _, path = sweep_report
    html = path.read_text()
    assert ">Warnings</h" in html
    assert f"a warning for r {SWEEP_R[-1]:g} seed 1" in html and f"r {SWEEP_R[0]:g} seed" not in html


def test_sigma_images():
    from bench.reporting.plots import sigma_heatmaps, sigma_image

    img, _ = sigma_image({"values": [[0.0, 0.1, 0.2], [0.3, 0.0, 0.0]], "shape": [2, 3], "stochastic": 3})
    assert img.shape == (2, 3)
    conv = np.arange(6 * 1 * 5 * 5, dtype=float).reshape(6, 1, 5, 5)
    mosaic, _ = sigma_image({"values": conv.tolist(), "shape": [6, 1, 5, 5]})
    assert mosaic.shape == (2 * 6 - 1, 3 * 6 - 1)  # 6 kernels on a 3 x 2 grid with 1-pixel gaps
    assert np.array_equal(mosaic[:5, 6:11], conv[1, 0]) and np.isnan(mosaic[5]).all()
    per_input = {"per_input_mean": list(range(784)), "input_shape": [1, 28, 28], "shape": [300, 784]}
    img, _ = sigma_image(per_input)
    assert img.shape == (28, 28) and img[1, 0] == 28
    assert sigma_image({"per_input_mean": [0.1] * 10, "input_shape": [1, 28, 28]}) is None
    png = sigma_heatmaps([("a", per_input), ("b", {"values": conv.tolist(), "shape": [6, 1, 5, 5], "stochastic": 150})])
    assert png.startswith(PNG_MAGIC)
    assert sigma_heatmaps([("c", {"param": "w"})]) is None


def test_uncertainty_table_reports_mutual_information(report):
    _, out, _ = report
    html = (out / "mnist_rotated" / "index.html").read_text()
    u = html_table(html, "method", "ID MI")
    # the synthetic pbn records carry MI 0.01 on every clean and shifted set; deterministic none
    assert u["pbn[r_bayes=0.01]"]["ID MI"][1] == "0.0100 ± 0.0000"
    assert u["deterministic"]["ID MI"][1] == "–"
    assert "OOD AUPR ↑" in u["pbn[r_bayes=0.01]"]
    aupr = [AUROC[("pbn", s)] - 0.05 for s in (0, 1)]
    assert u["pbn[r_bayes=0.01]"]["OOD AUPR ↑"][1] == mean_std_text(aupr)


def test_markdown_keeps_greater_than_and_escapes_tags():
    from bench.reporting.render import _md_escape

    assert _md_escape("p > 0.5 and <script>") == "p > 0.5 and &lt;script>"
    assert _md_escape("> quoted") == "\\> quoted"


def test_swept_default_value_in_the_labels_own_notation():
    from bench.reporting.build import _display_names
    from bench.reporting.data import Sweep

    sw = Sweep("pbn", "r_bayes", {"pbn": 0.01, "pbn[r_bayes=0.1]": 0.1})
    sw2 = Sweep("pbn", "r_bayes", {"pbn[lr=0.05]": 0.01, "pbn[lr=0.05,r_bayes=0.1]": 0.1})
    names = _display_names(["pbn", "pbn[r_bayes=0.1]", "pbn[lr=0.05]"], [sw, sw2])
    assert names == {"pbn": "pbn[r_bayes=0.01]", "pbn[r_bayes=0.1]": "pbn[r_bayes=0.1]",
                     "pbn[lr=0.05]": "pbn[lr=0.05,r_bayes=0.01]"}


def test_mnist_rotated_hands_its_data_description_to_the_report(fake_mnist):
    import json as _json

    from bench.suites.mnist_rotated import MnistRotated

    suite = MnistRotated()
    cfg = {**suite.profiles["smoke"]["data"], "n_train": 100, "n_val": 100, "n_test": 50, "n_ood": 50}
    data = suite.load(fake_mnist, cfg, download=False)
    art = data.extras["artifacts"]
    lines = _json.loads(art["data.json"])["lines"]
    assert any("0, 60, 120, 180 degrees" in line for line in lines)
    assert any("FashionMNIST" in line for line in lines) and art["gallery.png"].startswith(b"\x89PNG")


def test_selective_curves_from_bins_match_the_predictions():
    import torch

    from bench.metrics import reliability_bins
    from bench.reporting.plots import selective_from_bins

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(500, 4, generator=g) * 2, -1)
    y = torch.randint(0, 4, (500,), generator=g)
    b = reliability_bins(probs, y)
    tau, acc, cov = selective_from_bins(b["edges"], b["count"], b["correct_sum"])
    conf, pred = probs.double().max(-1)
    for t, a, c in zip(tau, acc, cov):
        keep = conf > t
        assert c == pytest.approx(keep.double().mean().item())
        assert a == pytest.approx((pred[keep] == y[keep]).double().mean().item())


def test_wrap_label_breaks_configuration_labels_at_commas():
    """A configuration label has no spaces: figure labels break after its commas (worked by hand)
    and never change its characters."""
    from bench.reporting.plots import wrap_label

    label = "subnet_laplace[glm_sampler=jvp,link_approx=mc,n_samples=10]"
    assert wrap_label(label, 32) == "subnet_laplace[glm_sampler=jvp,\nlink_approx=mc,n_samples=10]"
    assert wrap_label("deterministic", 24) == "deterministic"
    for w in (5, 10, 24):
        assert wrap_label(label, w).replace("\n", "") == label


@pytest.mark.parametrize("profile, banner", [("quick", True), ("paper", False)])
def test_a_report_below_the_papers_budget_says_so_with_the_stand_in_and_the_map_accuracy(tmp_path, profile, banner):
    """Tiny-ImageNet-C at the quick profile: the banner names the profile and its epochs, the
    benchmark the suite stands in for, and the MAP network's clean accuracy beside chance."""
    store = ResultsStore(tmp_path / "results")
    for seed, acc in ((0, 0.10), (1, 0.12)):
        base = {**_base("tinyimagenetc", "resnet_small", "deterministic", seed, profile=profile),
                "train_config": {"epochs": 30}}
        run = store.run_dir("tinyimagenetc", "resnet_small", "deterministic", base["config_hash"], seed)
        store.write(run, {**base, "kind": "id", "shift": "clean", "severity": 0.0, "n": 100,
                          "metrics": {"accuracy": acc, "nll": 5.0, "brier": 0.99, "ece": 0.01}})
    build_report(tmp_path / "results", tmp_path / "reports")
    md = (tmp_path / "reports" / "tinyimagenetc" / "README.md").read_text()
    found = "PROFILE: a reduced budget (networks trained 30 epochs)" in md
    assert found is banner
    if banner:
        assert "QUICK PROFILE" in md and "stand-in for ImageNet-C" in md
        assert "The MAP network reaches 11.0% clean accuracy (chance 0.5%)" in md


def test_per_corruption_error_table_by_hand():
    """Transposed CE table: a row per corruption, a column per method, the mean over seeds of the
    unnormalised CE (mean error over severities), bold only among methods that pass their checks."""
    from bench.reporting.tables import per_corruption_error_table

    rows = []
    # accuracies at severities 1-5 (errors 1 - a): mean error a/fog: seed 0 0.5, seed 1 0.6
    acc = {("a", 0): {"fog": (0.7, 0.6, 0.5, 0.4, 0.3), "snow": (0.6,) * 5},
           ("a", 1): {"fog": (0.6, 0.5, 0.4, 0.3, 0.2), "snow": (0.6,) * 5},
           ("b", 0): {"fog": (0.9,) * 5, "snow": (0.9,) * 5}, ("b", 1): {"fog": (0.9,) * 5, "snow": (0.9,) * 5},
           ("c", 0): {"fog": (0.8,) * 5, "snow": (0.6,) * 5}, ("c", 1): {"fog": (0.8,) * 5, "snow": (0.6,) * 5}}
    for (lab, seed), cells in acc.items():
        rows.append({"label": lab, "seed": seed, "kind": "id", "shift": None, "severity": 0.0, "status": "ok",
                     "metrics.accuracy": 0.95, "validity.status": "fail" if lab == "b" else "ok"})
        for corr, accs in cells.items():
            for sev, a in zip((1.0, 2.0, 3.0, 4.0, 5.0), accs):
                rows.append({"label": lab, "seed": seed, "kind": "shift", "shift": corr, "severity": sev,
                             "status": "ok", "metrics.accuracy": a, "validity.status": "fail" if lab == "b" else "ok"})
    df = pd.DataFrame(rows)
    df["validity.reasons"] = [["constructed"] if lab == "b" else [] for lab in df["label"]]
    t = per_corruption_error_table(df, None)
    assert list(t.mean.index) == ["fog", "snow"]
    titles = [c.title for c in t.columns]
    assert titles[0] == "a" and titles[1].startswith("b") and "✗" in titles[1]
    # a, fog: mean error 0.5 (seed 0) and 0.6 (seed 1): 0.55
    assert t.cell_text("fog", "m0") == "0.550" and t.cell_text("snow", "m0") == "0.400"
    assert t.cell_text("fog", "m2") == "0.200" and t.cell_text("snow", "m2") == "0.400"
    # b has the lowest errors everywhere but fails its checks: never bold; c wins fog, a and c tie on snow
    assert t.best_rows("m1") == set()
    assert t.best_rows("m2") >= {"fog"} and "fog" not in t.best_rows("m0")


def test_configurations_of_one_label_are_named_by_the_settings_they_differ_in():
    """Two MAP networks trained at different rates share the label 'deterministic': the tables name
    each by the training / data settings that differ ('Labels say exactly what ran'), and fall back to
    the config hash only when those settings do not tell them apart."""
    import pandas as pd

    from bench.reporting.data import unique_labels

    def row(h, lr, size=None, label="deterministic"):
        return {"suite": "s", "profile": "quick", "model": "m", "method_label": label, "config_hash": h,
                "train_config": {"lr": lr, "epochs": 5}, "data_config": {"size": size}}

    df = pd.DataFrame([row("aaaaaaaa", 0.05), row("bbbbbbbb", 0.01), row("aaaaaaaa", 0.05), row("c", 0.1, label="x")])
    assert list(unique_labels(df)) == ["deterministic [train.lr=0.05]", "deterministic [train.lr=0.01]",
                                        "deterministic [train.lr=0.05]", "x"]
    df = pd.DataFrame([row("aaaaaaaa", 0.05, [64, 80]), row("bbbbbbbb", 0.05, [120, 160])])
    assert list(unique_labels(df)) == ["deterministic [data.size=[64, 80]]", "deterministic [data.size=[120, 160]]"]
    same = pd.DataFrame([row("aaaaaaaa", 0.05), row("bbbbbbbb", 0.05)])  # e.g. a plugin's source changed
    assert list(unique_labels(same)) == ["deterministic#aaaaaa", "deterministic#bbbbbb"]
    # a data setting one record does not name ran at the suite's default: named by it, not "–"
    aug = [{**row("aaaaaaaa", 0.05), "suite": "camvid_multilabel", "data_config": {"n_per_cell": 60}},
           {**row("bbbbbbbb", 0.05), "suite": "camvid_multilabel", "data_config": {"n_per_cell": 60, "augment": True}}]
    assert list(unique_labels(pd.DataFrame(aug))) == ["deterministic [data.augment=false]",
                                                       "deterministic [data.augment=true]"]


def test_a_marked_rows_reasons_are_a_list_under_the_table_not_the_caption():
    """Why a row is not method evidence: one list item per marked row under the table (HTML and
    markdown), not one run-on caption (a board with many marked rows read as a wall of text)."""
    from bench.reporting.render import _html_table, markdown_table
    from bench.reporting.tables import Column, Table, _mark_rows
    from bench.validity import FAILED, OK

    idx = ["a", "b[p=0.1]", "c"]
    t = Table("board", [Column("x", "x ↓", "min")], pd.DataFrame({"x": [0.3, 0.1, 0.2]}, index=idx),
              pd.DataFrame({"x": [0.01, 0.01, 0.01]}, index=idx), pd.DataFrame({"x": [3, 3, 3]}, index=idx),
              caption="Mean ± std.")
    _mark_rows(t, {"a": (OK, []), "b[p=0.1]": (FAILED, ["map_converged: still improving (seed 1)"]),
                   "c": (FAILED, ["informative: uninformed"])})
    md = markdown_table(t)
    assert "- b[p=0.1] ✗: map_converged: still improving (seed 1)\n- c ✗: informative: uninformed" in md
    caption = md.split("\n\n")[1]
    assert "still improving" not in caption and "listed under the table" in caption
    html = _html_table(t)
    assert html.count("<li>") == 2 and "<li>c ✗: informative: uninformed</li>" in html
    assert "still improving" not in html.split("<caption>")[1].split("</caption>")[0]
