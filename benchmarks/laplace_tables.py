"""The Laplace tables of README.md and docs/subnet_laplace.md, generated from the results store
(issue: "Subnetwork Laplace as its authors ran it").

Tables (markdown on stdout), each from ``results/<suite>/records`` of one model:
  criteria  subnetwork Laplace at the paper's size (~0.4 % of the weights) per selection
            criterion -- Wasserstein with diagonal SWAG (the authors' estimator, default), with a
            diagonal Laplace (the paper's text), magnitude, random, PBN's gradient -- beside MAP,
            the diagonal and the last-layer Laplace; prior precision per seed, excluded weights,
            and paired differences over seeds against MAP and against the random subnet;
  overlap   how much the criteria's subnets share (IoU, per seed, from the fitted checkpoints)
            and where they sit (fraction of the subnet per layer);
  swag      SWAG with one snapshot per epoch (laplace-torch's mask's rule) against one every 20 SGD steps (the
            cheaper estimate the larger networks use here): subnet overlap and paired differences;
  size      the subnet-size sweep, Wasserstein (SWAG) against a random subnet of the same size;
  schemes   selection criterion x inference scheme at equal size: each criterion's subnet under
            the subnetwork Laplace and under PBN's partial VI (``pbn[n_bayes=<size>]``, its
            fine-tuning rate as chosen on validation), paired over seeds against MAP and
            against each other, and whether the two schemes got the same mask.

Run from the repository root:
  .venv/bin/python benchmarks/laplace_tables.py --model lenet_300_100 --seeds 0,1,2,3,4 --table criteria
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from bench.checkpoints import load_torch  # noqa: E402

from vi_tables import Runs, ms, paired, render, table_cli  # noqa: E402

CRITERIA = [("wasserstein", "Wasserstein, diagonal SWAG, one snapshot per epoch (default)"),
            ("wasserstein_diag_laplace", "Wasserstein, diagonal Laplace (paper's text)"),
            ("magnitude", "largest |w|"), ("random", "random (control)"), ("gradient", "PBN gradient")]
LABELS = dict(CRITERIA)


def criteria(a) -> list[tuple[str, str]]:
    """CRITERIA with the Wasserstein label saying which SWAG ran: one snapshot per epoch (the
    default), or a short SWAG of one snapshot per ``--swag-snapshot-every`` SGD steps, which
    docs/subnet_laplace.md measured as a different, random-like estimator."""
    every = getattr(a, "swag_snapshot_every", None)
    if every is None:
        return CRITERIA
    short = f"Wasserstein, short diagonal SWAG (one snapshot per {every} SGD steps)"
    return [(c, short if c == "wasserstein" else lab) for c, lab in CRITERIA]


def laplace_rows(runs: Runs, h: str) -> pd.DataFrame:
    """:meth:`Runs.per_seed` plus the Laplace diagnostics of each seed."""
    def extract(d, seed):
        search = d.get("prior_search") or {}
        spread = d.get("predictive_spread") or {}
        s, n = d.get("subnet_size"), d.get("num_observations")
        return {"log10_tau": search.get("log10_prior_precision"), "edge": search.get("at_grid_edge"),
                "excluded": d.get("n_non_identifiable"), "layers": d.get("layer_distribution"),
                "digest": d.get("subnet_digest"),
                "s_over_n": s / n if s and n else None, "logit_var_ratio": spread.get("ratio")}

    return runs.per_seed_with(h, extract)


def subnet_config(runs: Runs, criterion: str, n_subnet=None, fraction=None, every=None) -> str | None:
    match = {"criterion": criterion, "n_subnet": n_subnet, "subnet_fraction": fraction, "swag_snapshot_every": every}
    found = runs.configs("subnet_laplace", **match)
    return found[0][0] if found else None


def tau_text(p: pd.DataFrame) -> str:
    if "log10_tau" not in p or p["log10_tau"].isna().all():
        return "-"
    taus = ", ".join(f"{v:g}" for v in p["log10_tau"])
    edges = int(p["edge"].notna().sum())
    return f"{taus}" + (f" ({edges} at an edge)" if edges else "")


def excluded_text(p: pd.DataFrame) -> str:
    if "excluded" not in p or p["excluded"].isna().all():
        return "-"
    return ms(p["excluded"], "{:,.0f}")


def _size_args(a):
    return {"n_subnet": a.n_subnet, "fraction": a.subnet_fraction, "every": a.swag_snapshot_every}


def table_criteria(runs: Runs, a) -> list[list[str]]:
    header = ["method", "seeds", "ID acc", "ID NLL", "shift NLL", "shift ECE", "OOD AUROC", "log10 prior precision per seed",
              "excluded weights", "Δ shift NLL vs MAP", "Δ shift NLL vs random", "Δ ID acc vs MAP"]
    det = runs.configs("deterministic", optimizer=None, lr=None, weight_decay=None, epochs=None)  # the shared MAP
    base = laplace_rows(runs, det[0][0]) if det else None
    h_rand = subnet_config(runs, "random", **_size_args(a))
    rand = laplace_rows(runs, h_rand) if h_rand else None
    rows = []

    def row(label, p, vs_random=True):
        if p.empty:  # no seed with every shift set yet
            return
        rows.append([runs.mark(label, p), ",".join(map(str, p["seed"])), ms(p["id_acc"]), ms(p["id_nll"]), ms(p["sh_nll"], "{:.3f}"),
                     ms(p["sh_ece"], "{:.3f}"), ms(p["auroc"], "{:.3f}"), tau_text(p), excluded_text(p),
                     "-" if base is None else paired(p, base, "sh_nll", "{:+.3f}"),
                     "-" if rand is None or not vs_random else paired(p, rand, "sh_nll", "{:+.3f}"),
                     "-" if base is None else paired(p, base, "id_acc", "{:+.4f}")])

    if base is not None:
        rows.append([runs.mark("MAP (deterministic)", base), ",".join(map(str, base["seed"])), ms(base["id_acc"]), ms(base["id_nll"]),
                     ms(base["sh_nll"], "{:.3f}"), ms(base["sh_ece"], "{:.3f}"), ms(base["auroc"], "{:.3f}"), "-", "-",
                     "-", "-", "-"])
    for crit, label in criteria(a):
        h = subnet_config(runs, crit, **_size_args(a))
        if h:
            row(f"subnet Laplace: {label}", laplace_rows(runs, h), vs_random=crit != "random")
    for method, label in (("laplace_diag", "diagonal Laplace, all weights"), ("laplace_last_layer", "last-layer KFAC Laplace")):
        found = runs.configs(method)
        if found:
            row(label, laplace_rows(runs, found[0][0]))
    return [header] + rows


def fitted_indices(results: str, suite: str, model: str, h: str, seed: int) -> set[int] | None:
    import json

    from bench.store import ResultsStore

    store = ResultsStore(results)
    recs = sorted(store.run_dir(suite, model, "subnet_laplace", h, seed).glob("*.json"))
    if not recs:
        return None
    path = store.fitted_checkpoint(json.loads(recs[0].read_text()))  # the record says which fit it came from
    if not path.exists():
        return None
    state = load_torch(path)
    return set(torch.as_tensor(state["method"]["indices"]).tolist())


def iou(a: set, b: set) -> float:
    return len(a & b) / max(1, len(a | b))


def table_overlap(runs: Runs, a) -> list[list[str]]:
    hashes = {c: subnet_config(runs, c, **_size_args(a)) for c, _ in CRITERIA}
    hashes = {c: h for c, h in hashes.items() if h}
    idx = {c: {s: fitted_indices(a.results, a.suite, runs.model, h, s) for s in runs.seeds} for c, h in hashes.items()}
    names = list(hashes)
    header = ["criterion"] + [f"IoU with {c}" for c in names] + ["subnet fraction per layer (mean over seeds)"]
    rows = []
    for c in names:
        cells = []
        for d in names:
            vals = [iou(idx[c][s], idx[d][s]) for s in runs.seeds if idx[c][s] is not None and idx[d][s] is not None]
            cells.append(ms(vals, "{:.3f}") if vals else "-")
        p = laplace_rows(runs, hashes[c])
        layers: dict[str, list[float]] = {}
        for dist in p["layers"]:
            for entry in dist or []:
                layers.setdefault(entry["layer"], []).append(entry["fraction_of_subnet"])
        frac = " / ".join(f"{k} {statistics.mean(v):.2f}" for k, v in layers.items() if statistics.mean(v) >= 0.005)
        rows.append([LABELS[c]] + cells + [frac or "-"])
    return [header] + rows


def table_swag(runs: Runs, a) -> list[list[str]]:
    header = ["SWAG snapshots", "seeds", "ID acc", "shift NLL", "OOD AUROC", "SWAG time (s)", "IoU with per-epoch subnet",
              "Δ shift NLL vs per-epoch"]
    size = {"n_subnet": a.n_subnet, "fraction": a.subnet_fraction}
    ref_h = subnet_config(runs, "wasserstein", **size)
    if not ref_h:
        return [header]
    ref = laplace_rows(runs, ref_h)
    rows = []
    for every in (None, 20):
        h = subnet_config(runs, "wasserstein", every=every, **size)
        if not h:
            continue
        p = laplace_rows(runs, h)
        g = runs.df[(runs.df["config_hash"] == h) & (runs.df["kind"] == "id")]
        secs = [((d or {}).get("select_info") or {}).get("fit_time_s") for d in g["diagnostics"]]
        ious = []
        for s in p["seed"]:
            i, j = fitted_indices(a.results, a.suite, runs.model, h, s), fitted_indices(a.results, a.suite, runs.model, ref_h, s)
            if i is not None and j is not None:
                ious.append(iou(i, j))
        rows.append([runs.mark("256, one per epoch" if every is None else f"256, one every {every} SGD steps", p),
                     ",".join(map(str, p["seed"])), ms(p["id_acc"]), ms(p["sh_nll"], "{:.3f}"), ms(p["auroc"], "{:.3f}"),
                     ms([v for v in secs if v is not None], "{:.0f}"), ms(ious, "{:.3f}") if every else "-",
                     "-" if every is None else paired(p, ref, "sh_nll", "{:+.3f}")])
    return [header] + rows


def table_size(runs: Runs, a) -> list[list[str]]:
    """The size sweep, with what bears on the attainable-variance check beside each row: s / N, the
    prior precision the validation search chose, the predictive's logit variance on validation
    inputs against the MAP logits' spread (``predictive_spread``), and how far the clean (training-
    like) and the rotated NLL moved from MAP's."""
    header = ["subnet size", "criterion", "seeds", "s / N", "log10 prior precision", "logit variance / MAP spread (val)",
              "ID acc", "shift NLL", "OOD AUROC", "Δ ID NLL vs MAP", "Δ shift NLL vs MAP", "Δ shift NLL vs random"]
    det = runs.configs("deterministic", optimizer=None, lr=None, weight_decay=None, epochs=None)
    base = laplace_rows(runs, det[0][0]) if det else None
    sizes = sorted({int(c.get("n_subnet") or 1000) for _, c in runs.configs("subnet_laplace")
                    if c.get("subnet_fraction") is None and c.get("swag_snapshot_every") is None})
    rows = []
    for n in sizes:
        n_arg = None if n == 1000 else n
        hr = subnet_config(runs, "random", n_subnet=n_arg)
        rand = laplace_rows(runs, hr) if hr else None
        for crit in ("wasserstein", "random"):
            h = subnet_config(runs, crit, n_subnet=n_arg)
            if not h:
                continue
            p = laplace_rows(runs, h)
            sn = [v for v in p["s_over_n"] if v is not None]
            rows.append([f"{n:,}", runs.mark(f"{LABELS[crit]} ({n:,})", p), ",".join(map(str, p["seed"])),
                         ms(sn, "{:.3g}") if sn else "-", tau_text(p),
                         ms([v for v in p["logit_var_ratio"] if v is not None], "{:.3f}"), ms(p["id_acc"]),
                         ms(p["sh_nll"], "{:.3f}"), ms(p["auroc"], "{:.3f}"),
                         "-" if base is None else paired(p, base, "id_nll", "{:+.4f}"),
                         "-" if base is None else paired(p, base, "sh_nll", "{:+.3f}"),
                         "-" if rand is None or crit == "random" else paired(p, rand, "sh_nll", "{:+.3f}")])
    return [header] + rows


def _digest(indices) -> str | None:
    from bench.subnet.selection import subnet_digest

    return None if indices is None else subnet_digest(torch.tensor(sorted(indices)))


def table_schemes(runs: Runs, a) -> list[list[str]]:
    header = ["criterion", "seeds (both)", "Laplace shift NLL", "PBN shift NLL", "Laplace Δ shift NLL vs MAP",
              "PBN Δ shift NLL vs MAP", "Δ shift NLL PBN - Laplace", "Laplace OOD AUROC", "PBN OOD AUROC",
              "Δ ID acc PBN - Laplace", "same mask"]
    size = a.n_subnet or 1000
    det = runs.configs("deterministic", optimizer=None, lr=None, weight_decay=None, epochs=None)
    base = runs.per_seed(det[0][0]) if det else None
    rows = []
    lrs = {c.get("lr") for _, c in runs.configs("pbn", n_bayes=size, init="map")}
    ft = [h for lr in lrs for h, _ in runs.configs("pbn", n_bayes=0, lr=lr)]
    if ft:  # PBN's pipeline with no stochastic weight: what its fine-tuning alone does to MAP
        p = runs.per_seed(ft[0])
        rows.append([runs.mark("none: MAP fine-tuned by PBN's pipeline (n_bayes 0)", p), ",".join(map(str, p["seed"])), "-",
                     ms(p["sh_nll"], "{:.3f}"), "-", "-" if base is None else paired(p, base, "sh_nll", "{:+.3f}"),
                     "-", "-", ms(p["auroc"], "{:.3f}"), "-", "-"])
    for crit, label in criteria(a):
        hl = subnet_config(runs, crit, **_size_args(a))
        hp = runs.configs("pbn", criterion=crit, n_bayes=size, init="map")
        if not hl or not hp:
            continue
        hp = hp[0][0]
        lap, pbn = laplace_rows(runs, hl), runs.per_seed_with(hp, lambda d, s: {"digest": d.get("subnet_digest")})
        both = sorted(set(lap["seed"]) & set(pbn["seed"]))
        if not both:
            continue
        lap, pbn = lap[lap["seed"].isin(both)], pbn[pbn["seed"].isin(both)]
        # the subnet each fit used: its record's digest (older Laplace records lack it: their fitted
        # checkpoint, where kept); a seed where either is unknown is not counted
        lap_digest = {s: d if d is not None else _digest(fitted_indices(a.results, a.suite, runs.model, hl, s))
                      for s, d in zip(lap["seed"], lap["digest"])}
        same = [lap_digest[s] == d for s, d in zip(pbn["seed"], pbn["digest"])
                if d is not None and lap_digest.get(s) is not None]
        # the row holds two fits: each is marked on its own ("(Laplace) ✗", "(PBN) ✗")
        plain = (f"{label} (Laplace)", f"{label} (PBN)")
        flags = [m[len(label) + 1:] for m, q in zip((runs.mark(plain[0], lap), runs.mark(plain[1], pbn)), plain) if m != q]
        rows.append([" ".join([label, *flags]), ",".join(map(str, both)), ms(lap["sh_nll"], "{:.3f}"), ms(pbn["sh_nll"], "{:.3f}"),
                     "-" if base is None else paired(lap, base, "sh_nll", "{:+.3f}"),
                     "-" if base is None else paired(pbn, base, "sh_nll", "{:+.3f}"),
                     paired(pbn, lap, "sh_nll", "{:+.3f}"), ms(lap["auroc"], "{:.3f}"), ms(pbn["auroc"], "{:.3f}"),
                     paired(pbn, lap, "id_acc", "{:+.4f}"), f"{sum(same)} of {len(same)} seeds" if same else "-"])
    return [header] + rows


TABLES = {"criteria": table_criteria, "schemes": table_schemes, "overlap": table_overlap, "swag": table_swag, "size": table_size}


def _size_arguments(p):
    p.add_argument("--n-subnet", type=int, default=None, help="the subnet size of the rows (None: the default)")
    p.add_argument("--subnet-fraction", type=float, default=None, help="... or the fraction that was set")
    p.add_argument("--swag-snapshot-every", type=int, default=None,
                   help="the rows' swag_snapshot_every (None: the authors' one per epoch)")


def main(argv=None) -> int:
    runs, a, table = table_cli(argv, __doc__, TABLES, seeds="0,1,2,3,4", default="criteria",
                               add_arguments=_size_arguments)
    print(render(table(runs, a)) + runs.notes_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
