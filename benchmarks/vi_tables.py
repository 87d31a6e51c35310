"""The variational-inference tables of README.md and docs/pbn.md / docs/ssvi.md, generated from
the results store (issue: "variational methods that really learn their variances").

Tables (markdown on stdout), each from ``results/<suite>/records`` of one model:
  main      deterministic, PBN (fine-tuning rate chosen on validation), mfvi, SSVI at 10 % and at
            density 1 (its own dense baseline), with sigma at initialisation and after training;
  controls  PBN's selection criterion x r_bayes x initialisation, paired differences over seeds
            against the gradient criterion with MAP initialisation;
  sigma0    the initial-sigma sweep (SSVI paper Fig. 2 right): dense VI vs SSVI at 10 %;
  selection the validation choice of PBN's fine-tuning rate (bench/selection.py);
  rsweep    PBN Fig. 4a / 4d: the r_bayes sweep beside MAP, full VI and the deep ensemble;
  init      PBN Fig. 6: convergence from the MAP network vs a random initialisation;
  rho       how rho's optimiser decides whether sigma moves at all (one-epoch mfvi runs);
  ssvi      SSVI Table 1: 10 % and 5 % density against SSVI's own dense model, paired;
  criteria  SSVI's removal-criteria ablation at 10 %, paired against SNR(|theta|).

Run from the repository root:
  .venv/bin/python benchmarks/vi_tables.py --model lenet_300_100 --table main
  .venv/bin/python benchmarks/vi_tables.py --model lenet_300_100 --table controls
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from bench.reporting.data import map_network, same_map_network  # noqa: E402
from bench.reporting.tables import mean_std_text as ms  # noqa: E402
from bench.selection import choose_on_validation, flat_options  # noqa: E402
from bench.store import load_records  # noqa: E402
from bench.validity import attach_validity, marked_label, runs_validity  # noqa: E402
from methods import METHODS  # noqa: E402


def cfg_of(method: str, cfg: dict) -> dict:
    return {**METHODS.get(method).defaults, **(cfg or {})}


class Runs:
    """Records of one suite / model / profile, grouped into runs (method, config hash, seed)."""

    def __init__(self, results, suite, model, profile, seeds, where: dict | None = None):
        df = load_records(results, suite)
        if df.empty:
            raise SystemExit(f"no records under {results}/{suite}")
        from bench.suites import SUITES

        profile_data = SUITES.get(suite).profiles.get(profile, {}).get("data", {})
        df = df[[_settings_match(d, t, where or {}, profile_data)
                 for d, t in zip(df["data_config"], df["train_config"])]]
        if df.empty:
            raise SystemExit(f"no records under {results}/{suite} with {where or 'the profile data settings'}")
        # every fit's validity verdict (bench.validity), recomputed from its clean-test record: a row
        # whose fit fails its checks is marked in every table (Runs.mark) and its reasons printed below
        df = attach_validity(df)
        self.all = df
        self.notes: dict[str, str] = {}
        self.df = df[(df["status"] == "ok") & (df["model"] == model) & (df["profile"] == profile)
                     & df["seed"].isin(seeds)]
        self.model, self.suite, self.profile, self.results = model, suite, profile, results
        # a seed counts only when it has every shift set of the suite (a run still evaluating, or
        # killed half-way, would otherwise enter with the sets it has)
        sh = self.df[self.df["kind"] == "shift"]
        self.n_shift = len(sh[["shift", "severity"]].drop_duplicates())

    def configs(self, method: str, **match) -> list[tuple[str, dict]]:
        """(config hash, full config) of ``method`` whose options equal ``match``."""
        import json

        d = self.df[self.df["method"] == method]
        best: dict[str, tuple[int, str, dict]] = {}
        for h, g in d.groupby("config_hash"):
            cfg = cfg_of(method, g["method_config"].iloc[0])
            if all(_eq(cfg.get(k), v) for k, v in match.items()):
                # a record written before a default was added has another hash for the same full
                # configuration: one row per configuration, the hash with the most seeds
                key = json.dumps(cfg, sort_keys=True, default=str)
                n = g["seed"].nunique()
                if key not in best or n > best[key][0]:
                    best[key] = (n, h, cfg)
        return sorted(((h, cfg) for _, h, cfg in best.values()), key=lambda t: t[0])

    def per_seed(self, h: str) -> pd.DataFrame:
        """One row per seed: ID / rotation / OOD / validation metrics and diagnostics."""
        g = self.df[self.df["config_hash"] == h]
        rows = []
        for seed, s in g.groupby("seed"):
            idr, sh, ood = s[s["kind"] == "id"], s[s["kind"] == "shift"], s[s["kind"] == "ood"]
            val = s[s["kind"] == "val"]
            if idr.empty or sh.empty or len(sh[["shift", "severity"]].drop_duplicates()) < self.n_shift:
                continue
            diag = idr["diagnostics"].iloc[0] or {}
            rows.append({"seed": int(seed), "id_acc": idr["metrics.accuracy"].iloc[0], "id_nll": idr["metrics.nll"].iloc[0],
                         "id_brier": idr["metrics.brier"].iloc[0], "id_ece": idr["metrics.ece"].iloc[0],
                         "sh_acc": sh["metrics.accuracy"].mean(), "sh_nll": sh["metrics.nll"].mean(),
                         "sh_brier": sh["metrics.brier"].mean(), "sh_ece": sh["metrics.ece"].mean(),
                         "auroc": ood["metrics.auroc"].mean() if not ood.empty else float("nan"),
                         "val_nll": val["metrics.nll"].iloc[0] if not val.empty else float("nan"),
                         "sigma0": (diag.get("sigma_init") or {}).get("median"),
                         "sigma1": (diag.get("sigma_final") or {}).get("median"),
                         "sigma1_mean": (diag.get("sigma_final") or {}).get("mean"),
                         "k": idr["cost.stochastic_params"].iloc[0],
                         "status": idr["validity.status"].iloc[0], "validity": idr["validity"].iloc[0],
                         **dict(zip(("map_sha", "map_fp"), map_network(diag))),
                         "train_s": idr["cost.train_time_s"].iloc[0]})
        return pd.DataFrame(rows)


    def mark(self, label: str, p: pd.DataFrame) -> str:
        """``label`` with the verdict symbol of its seeds (``p`` from :meth:`per_seed`) when one fails
        its validity checks (or could not be checked); the reasons are kept for :meth:`notes_text`."""
        if p is None or p.empty or "status" not in p:
            return label
        status, texts = runs_validity(p.rename(columns={"status": "validity.status"}))
        marked = marked_label(label, status)
        if marked != label:
            self.notes[marked] = {t.split(":", 1)[0]: t for t in texts}
        return marked

    def notes_text(self) -> str:
        """The reasons of the marked rows, as a list under the table, rows failing the same checks
        together (the numbers are the first such row's; '' when no row is marked)."""
        if not self.notes:
            return ""
        groups: dict[tuple, list[str]] = {}
        for lab, texts in self.notes.items():
            groups.setdefault(tuple(texts), []).append(lab)
        lines = ["", "_✗: fails its validity checks, ?: could not be checked (bench.validity): the row measures "
                 "the set-up, not the method._", ""]
        for checks, labs in groups.items():
            first = self.notes[labs[0]]
            example = "; ".join(first[c] for c in checks) or "no reason recorded"
            lines.append(f"- {', '.join(labs)}: " + (f"{'; '.join(checks) or 'unverified'} (e.g. {labs[0]}: {example})"
                                                      if len(labs) > 1 else example))
        return "\n".join(lines)

    def per_seed_with(self, h: str, extract) -> pd.DataFrame:
        """:meth:`per_seed` plus the columns ``extract(diagnostics, seed)`` returns per seed."""
        p = self.per_seed(h)
        if p.empty:
            return p
        g = self.df[(self.df["config_hash"] == h) & (self.df["kind"] == "id")].set_index("seed")
        extra = [{"seed": seed, **extract(g.loc[seed, "diagnostics"] or {}, seed)} for seed in p["seed"]]
        return p.merge(pd.DataFrame(extra), on="seed") if extra else p


def _settings_match(data_config, train_config, where: dict, profile_data: dict) -> bool:
    """Whether a record's data / training settings are those of ``where`` (``{"data.n_train": 1500,
    "train.epochs": 60}``): the named ones equal, every data setting not named the profile's own, so
    that a table never pools records of another training set under one configuration."""
    data = data_config if isinstance(data_config, dict) else {}
    train = train_config if isinstance(train_config, dict) else {}
    named = {k.split(".", 1)[1]: v for k, v in where.items() if k.startswith("data.")}
    for name in set(data) | set(profile_data):
        if name not in named and not _eq(data.get(name), profile_data.get(name)):
            return False
    for key, want in where.items():
        part, name = key.split(".", 1)
        if not _eq((data if part == "data" else train).get(name), want):
            return False
    return True


def parse_where(text: str | None) -> dict:
    """``--where data.n_train=1500,train.epochs=60`` as a dict (values as numbers where they are)."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        key, _, val = item.partition("=")
        if not key.startswith(("data.", "train.")) or not _:
            raise SystemExit(f"--where takes data.NAME=VALUE or train.NAME=VALUE, comma-separated; got {item!r}")
        try:
            out[key] = float(val) if "." in val or "e" in val.lower() else int(val)
        except ValueError:
            out[key] = val
    return out


def _eq(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


MAIN_HEADER = ["method", "seeds", "ID acc", "ID NLL", "ID ECE", "rotation acc", "rotation NLL", "rotation Brier",
               "rotation ECE", "OOD AUROC", "sigma median: init -> final", "stochastic params", "train time (s)"]


def main_row(label, p: pd.DataFrame, runs: Runs | None = None) -> list[str]:
    label = runs.mark(label, p) if runs is not None else label
    sig = "-"
    if p["sigma0"].notna().any():
        sig = f"{statistics.mean(p['sigma0']):.2g} -> {ms(p['sigma1'], '{:.2g}')}"
    return [label, ",".join(map(str, p["seed"])), ms(p["id_acc"]), ms(p["id_nll"]), ms(p["id_ece"]),
            ms(p["sh_acc"]), ms(p["sh_nll"], "{:.3f}"), ms(p["sh_brier"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"),
            ms(p["auroc"], "{:.3f}"), sig, f"{int(p['k'].iloc[0]):,}", ms(p["train_s"], "{:.0f}")]


def pbn_choice(runs: Runs) -> dict | None:
    """The validation choice of PBN's fine-tuning rate at the profile's PBN configuration."""
    try:
        choices = choose_on_validation(runs.all[runs.all["status"] == "ok"], "pbn", ["lr"], model=runs.model)
        choices = [c for c in choices if not flat_options(c)]  # a sweep, not a later run at one value
    except Exception:  # noqa: BLE001 - no sweep run: no choice
        return None
    from bench.config import resolve_plan
    from bench.suites import SUITES

    # the profile's PBN, as a run of the profile configures it (defaults, Method.profile_defaults, the profile's)
    profile = resolve_plan(SUITES.get(runs.suite)(), runs.profile, ["pbn"], {}, method_registry=METHODS).methods["pbn"][0]
    dflt = {k: v for k, v in profile.items() if k != "lr"}
    for c in choices:
        cfg = cfg_of("pbn", runs.df.loc[runs.df["config_hash"] == c["chosen_config_hash"], "method_config"].iloc[0]
                     if (runs.df["config_hash"] == c["chosen_config_hash"]).any() else {})
        if all(_eq(cfg.get(k), v) for k, v in dflt.items()):
            return c
    return None


def tuned_base(runs: Runs, method: str) -> dict:
    """The options every row of ``method`` in the tables is taken at: the configuration `bench tune`
    chose among fits that pass their validity checks (``--tuning``: ``<dir>/<suite>/tuning/<profile>.json``)
    for the table's objective (the profile's, or the one ``--objective`` names, e.g. ``ssvi.epochs=60``:
    its fixed options and its tune's choice), with the options another stored objective holds fixed at
    the profile's values (:func:`bench.tuning.objective_options`); with no such choice stored, the
    method's defaults for the options its space tunes (rows that may fail their checks, marked), so
    that a row is one configuration, never every value of them."""
    from bench.suites import SUITES
    from bench.tuning import objective_options, space_of, tuned_options

    fixed = getattr(runs, "objective", {}).get(method)
    tuning = getattr(runs, "tuning", "docs/tuning")
    base = objective_options(tuning, runs.suite, runs.profile, method, runs.model, fixed)
    defaults = METHODS.get(method).defaults
    space = space_of(method, SUITES.get(runs.suite)()) or {}
    for o in tuned_options(space):
        if o in defaults:
            base.setdefault(o, defaults[o])
    return base


def shown(runs: Runs, method: str) -> bool:
    """Whether a table shows ``method``'s rows: every method's, or with ``--objective`` only those of the
    methods it names (a table of one objective, e.g. SSVI at 60 epochs, sets no row of another budget
    beside them)."""
    objective = getattr(runs, "objective", {})
    return not objective or method in objective


def pbn_base(runs: Runs) -> dict:
    """PBN's rows: its tuned configuration (:func:`tuned_base`) at the profile's fine-tuning rate
    (docs/validity.md: why the rate is not tuned)."""
    return {"lr": None, **tuned_base(runs, "pbn")}


def mfvi_base(runs: Runs) -> dict:
    """Mean-field VI's rows: its tuned configuration, its default sigma0 and the profile's epochs."""
    return {"sigma_init": METHODS.get("mfvi").defaults["sigma_init"], "epochs": None, **tuned_base(runs, "mfvi")}


def _pbn_label(base: dict) -> str:
    """What a row's tuned options are, for its label ("tuned: beta_start 0.01, rho_lr 0.05")."""
    tuned = {k: v for k, v in base.items() if k not in ("lr", "sigma_init", "epochs")}
    return ("tuned: " + ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in tuned.items())
            if tuned else "the profile's options")


def table_main(runs: Runs) -> list[list[str]]:
    rows = []
    if shown(runs, "deterministic"):
        for h, _ in runs.configs("deterministic", optimizer=None, lr=None, weight_decay=None, epochs=None):
            rows.append(main_row("deterministic (MAP)", runs.per_seed(h), runs))
    if shown(runs, "pbn"):
        base = pbn_base(runs)
        d = METHODS.get("pbn").defaults
        for h, cfg in runs.configs("pbn", **base, r_bayes=d["r_bayes"], criterion=d["criterion"], init=d["init"],
                                   n_bayes=None):
            rows.append(main_row(f"pbn (r {float(cfg['r_bayes']):.0%}; {_pbn_label(base)})", runs.per_seed(h), runs))
    if shown(runs, "mfvi"):
        mb = mfvi_base(runs)
        for h, cfg in runs.configs("mfvi", **mb):
            rows.append(main_row(f"mfvi ({_pbn_label(mb)})", runs.per_seed(h), runs))
    if not shown(runs, "ssvi"):
        return [MAIN_HEADER] + rows
    d = METHODS.get("ssvi").defaults
    sb = tuned_base(runs, "ssvi")  # its tuned prior scale and rho rate (on rotated MNIST: its defaults)
    for dens in (0.1, 0.05, 1.0):
        for h, cfg in runs.configs("ssvi", density=dens, sigma_init_mean=d["sigma_init_mean"], criterion=d["criterion"], **sb):
            rows.append(main_row(f"ssvi (density {dens:g})" + (" = its dense baseline" if dens == 1.0 else ""),
                                 runs.per_seed(h), runs))
    return [MAIN_HEADER] + rows


def paired(a: pd.DataFrame, b: pd.DataFrame, col: str, fmt: str) -> str:
    """Mean ± std over seeds of the per-seed difference a - b (seeds both have, and, where both rows
    start from a MAP network, the same one: ``same_map_network`` of their ``map_sha`` and ``map_fp``),
    signed mean."""
    m = (a.set_index("seed")[col] - b.set_index("seed")[col]).dropna()
    na, nb = (p.set_index("seed").reindex(columns=["map_sha", "map_fp"]) for p in (a, b))
    m = m[[same_map_network(tuple(na.loc[s]), tuple(nb.loc[s])) for s in m.index]]
    if not len(m):
        return "-"
    if len(m) == 1:
        return fmt.format(float(m.iloc[0]))
    return f"{fmt.format(statistics.mean(m))} ± {fmt.replace('+', '').format(statistics.stdev(m))} (n {len(m)})"


def table_controls(runs: Runs) -> list[list[str]]:
    header = ["r_bayes", "subnet / init", "seeds", "ID acc", "ID Brier", "rotation NLL", "rotation ECE", "OOD AUROC",
              "sigma median final", "Δ rotation NLL vs gradient", "Δ ID Brier vs gradient", "Δ AUROC vs gradient"]
    base = pbn_base(runs)
    rows = []
    ft = runs.configs("pbn", n_bayes=0, **base)
    if ft:  # the same pipeline with no stochastic weight: what the extra fine-tuning alone does
        p = runs.per_seed(ft[0][0])
        rows.append(["0 (n_bayes 0)", runs.mark("none: MAP fine-tuned by the same pipeline", p), ",".join(map(str, p["seed"])),
                     ms(p["id_acc"]), ms(p["id_brier"]), ms(p["sh_nll"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"),
                     ms(p["auroc"], "{:.3f}"), "-", "-", "-", "-"])
    for r in (0.01, 0.05, 0.1):
        ref = runs.configs("pbn", r_bayes=r, criterion="gradient", init="map", n_bayes=None, **base)
        if not ref:
            continue
        bp = runs.per_seed(ref[0][0])
        for crit, init in (("gradient", "map"), ("random", "map"), ("magnitude", "map"), ("gradient", "random")):
            found = runs.configs("pbn", r_bayes=r, criterion=crit, init=init, n_bayes=None, **base)
            if not found:
                continue
            p = runs.per_seed(found[0][0])
            same = crit == "gradient" and init == "map"
            rows.append([f"{r:.0%}", runs.mark(f"{crit} / {init} init (r {r:.0%})", p), ",".join(map(str, p["seed"])), ms(p["id_acc"]),
                         ms(p["id_brier"]), ms(p["sh_nll"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"), ms(p["auroc"], "{:.3f}"),
                         ms(p["sigma1"], "{:.2g}"),
                         "-" if same else paired(p, bp, "sh_nll", "{:+.3f}"),
                         "-" if same else paired(p, bp, "id_brier", "{:+.4f}"),
                         "-" if same else paired(p, bp, "auroc", "{:+.3f}")])
    return [header] + rows


def table_sigma0(runs: Runs) -> list[list[str]]:
    header = ["method, sigma0", "seeds", "ID acc", "ID NLL", "rotation NLL", "rotation ECE", "sigma median final"]
    rows = []
    crit = METHODS.get("ssvi").defaults["criterion"]
    mb = {k: v for k, v in mfvi_base(runs).items() if k != "sigma_init"}
    sb = tuned_base(runs, "ssvi")
    for method, key, extra in (("mfvi", "sigma_init", mb),
                               ("ssvi", "sigma_init_mean", {"density": 1.0, "criterion": crit, **sb}),
                               ("ssvi", "sigma_init_mean", {"density": 0.1, "criterion": crit, **sb})):
        if not shown(runs, method):
            continue
        found = sorted(runs.configs(method, **extra), key=lambda hc: float(hc[1][key]))
        for h, cfg in found:
            p = runs.per_seed(h)
            if p.empty:
                continue
            name = method if method == "mfvi" else f"ssvi (density {cfg['density']:g})"
            rows.append([runs.mark(f"{name}, sigma0 {float(cfg[key]):g}", p), ",".join(map(str, p["seed"])), ms(p["id_acc"]), ms(p["id_nll"]),
                         ms(p["sh_nll"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"), ms(p["sigma1"], "{:.2g}")])
    return [header] + rows


def table_selection(runs: Runs) -> list[list[str]]:
    c = pbn_choice(runs)
    if not c:
        return [["no PBN learning-rate sweep"]]
    rows = [["pbn lr", "validation NLL (mean over seeds)", "per seed", "validity", "chosen"]]
    for r in c["candidates"]:
        rows.append([str(r["values"]["lr"]), f"{r['score']:.5f}",
                     " / ".join(f"{v:.4f}" for v in r["per_seed"].values()), r.get("validity", "ok"),
                     "yes" if r["config_hash"] == c["chosen_config_hash"] else ""])
    return rows


def table_rsweep(runs: Runs) -> list[list[str]]:
    """PBN Fig. 4a / 4d: ID Brier, rotation NLL / ECE and OOD AUROC against r_bayes, with the
    MAP network, full VI and the deep ensemble as reference rows."""
    header = ["method", "seeds", "ID acc", "ID Brier", "rotation acc", "rotation NLL", "rotation ECE", "OOD AUROC",
              "sigma median final", "Δ rotation NLL vs the same pipeline without VI"]
    base = pbn_base(runs)
    ft = runs.configs("pbn", n_bayes=0, **base)
    ftp = runs.per_seed(ft[0][0]) if ft else None
    rows = []
    for label, method, match in (("MAP (deterministic)", "deterministic", {}), ("deep ensemble (M 5)", "deep_ensemble", {}),
                                 (f"full VI (mfvi; {_pbn_label(mfvi_base(runs))})", "mfvi", mfvi_base(runs)),
                                 ("PBN pipeline, no stochastic weight", "pbn", {"n_bayes": 0, **base})):
        for h, _ in runs.configs(method, **match):
            p = runs.per_seed(h)
            rows.append([runs.mark(label, p), ",".join(map(str, p["seed"])), ms(p["id_acc"]), ms(p["id_brier"]), ms(p["sh_acc"]),
                         ms(p["sh_nll"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"), ms(p["auroc"], "{:.3f}"),
                         ms(p["sigma1"], "{:.2g}") if p["sigma1"].notna().any() else "-", "-"])
    found = sorted(runs.configs("pbn", criterion="gradient", init="map", n_bayes=None, **base),
                   key=lambda hc: float(hc[1]["r_bayes"]))
    for h, cfg in found:
        p = runs.per_seed(h)
        rows.append([runs.mark(f"PBN r = {float(cfg['r_bayes']):.1%}", p), ",".join(map(str, p["seed"])), ms(p["id_acc"]),
                     ms(p["id_brier"]), ms(p["sh_acc"]), ms(p["sh_nll"], "{:.3f}"), ms(p["sh_ece"], "{:.3f}"),
                     ms(p["auroc"], "{:.3f}"), ms(p["sigma1"], "{:.2g}"),
                     "-" if ftp is None else paired(p, ftp, "sh_nll", "{:+.3f}")])
    return [header] + rows


def table_init(runs: Runs) -> list[list[str]]:
    """PBN Fig. 6: convergence from the MAP network vs from a random initialisation (r 1 %, PBN's default) and
    full VI: the training NLL (last mini-batch) and mean sigma after each epoch, mean over seeds."""
    base = pbn_base(runs)
    cands = [("PBN 1 %, MAP init (proposed)", runs.configs("pbn", r_bayes=0.01, criterion="gradient", init="map", **base)),
             ("PBN 1 %, random init", runs.configs("pbn", r_bayes=0.01, criterion="gradient", init="random", **base)),
             (f"full VI (mfvi; {_pbn_label(mfvi_base(runs))})", runs.configs("mfvi", **mfvi_base(runs)))]
    rows, width = [], 0
    for label, found in cands:
        if not found:
            continue
        g = runs.df[(runs.df["config_hash"] == found[0][0]) & (runs.df["kind"] == "id")]
        per_epoch = [[st.get("nll") for st in (d or {}).get("train", {}).get("epoch_stats", [])] for d in g["diagnostics"]]
        per_epoch = [e for e in per_epoch if e and None not in e]
        if not per_epoch:
            continue
        width = max(width, len(per_epoch[0]))
        means = [statistics.mean(v) for v in zip(*per_epoch)]
        acc = ms(g["metrics.accuracy"])
        rows.append([runs.mark(label, runs.per_seed(found[0][0])), str(len(per_epoch))] + [f"{m:.3f}" for m in means] + [acc])
    header = ["run", "seeds"] + [f"NLL after epoch {i + 1}" for i in range(width)] + ["final ID acc"]
    return [header] + rows


def table_rho(runs: Runs) -> list[list[str]]:
    """How rho is optimised decides whether sigma moves (mfvi, one epoch, seed 0)."""
    header = ["rho optimiser", "rho lr", "sigma median init", "sigma median after 1 epoch", "sigma mean", "sigma max",
              "ID acc", "validation NLL"]
    rows = []
    found = sorted(runs.configs("mfvi", epochs=1), key=lambda hc: (hc[1]["rho_optimizer"], float(hc[1]["rho_lr"])))
    for h, cfg in found:
        g = runs.df[(runs.df["config_hash"] == h) & (runs.df["kind"] == "id")]
        v = runs.df[(runs.df["config_hash"] == h) & (runs.df["kind"] == "val")]
        d = g["diagnostics"].iloc[0]
        rows.append([cfg["rho_optimizer"], f"{float(cfg['rho_lr']):g}", f"{d['sigma_init']['median']:.3g}",
                     f"{d['sigma_final']['median']:.3g}", f"{d['sigma_final']['mean']:.3g}", f"{d['sigma_final']['max']:.3g}",
                     f"{g['metrics.accuracy'].iloc[0]:.4f}", f"{v['metrics.nll'].iloc[0]:.4f}" if not v.empty else "-"])
    return [header] + rows


def _ssvi_reference(runs: Runs, density: float, sb: dict) -> pd.DataFrame | None:
    """Per-seed rows of SSVI at its tuned options ``sb`` with its default criterion and sigma0 at
    ``density`` (None if not run)."""
    d = METHODS.get("ssvi").defaults
    found = runs.configs("ssvi", density=density, criterion=d["criterion"], sigma_init_mean=d["sigma_init_mean"], **sb)
    return runs.per_seed(found[0][0]) if found else None


def _delta(p: pd.DataFrame, ref: pd.DataFrame | None, col: str, fmt: str, same: bool, what: str) -> str:
    """A row's paired difference to its reference row ``ref`` (:func:`paired`): "-" on the reference row
    itself, "no fit of WHAT" where the reference was not run."""
    return "-" if same else f"no fit of {what}" if ref is None else paired(p, ref, col, fmt)


def table_ssvi(runs: Runs) -> list[list[str]]:
    """SSVI Table 1 at this scale: 10 % and 5 % density against SSVI's own dense model (density
    1, same estimator, prior, initialisation and optimiser), paired over seeds."""
    header = ["density", "seeds", "ID acc", "Δ ID acc vs density 1", "ID NLL", "rotation NLL", "Δ rotation NLL vs density 1",
              "OOD AUROC", "stochastic params", "train FLOPs vs density 1", "sigma median: init -> final"]
    sb = tuned_base(runs, "ssvi")
    bp = _ssvi_reference(runs, 1.0, sb)  # None: the other densities' rows stand without their differences
    d = METHODS.get("ssvi").defaults
    rows = []
    for dens in (1.0, 0.1, 0.05):
        found = runs.configs("ssvi", density=dens, sigma_init_mean=d["sigma_init_mean"], criterion=d["criterion"], **sb)
        if not found:
            continue
        h = found[0][0]
        p = runs.per_seed(h)
        g = runs.df[(runs.df["config_hash"] == h) & (runs.df["kind"] == "id")]
        flops = g["cost.train_flops_ratio_vs_dense_vi"].iloc[0] if "cost.train_flops_ratio_vs_dense_vi" in g else None
        same = dens == 1.0
        rows.append([runs.mark(f"{dens:g}", p), ",".join(map(str, p["seed"])), ms(p["id_acc"]),
                     _delta(p, bp, "id_acc", "{:+.4f}", same, "density 1"),
                     ms(p["id_nll"]), ms(p["sh_nll"], "{:.3f}"), _delta(p, bp, "sh_nll", "{:+.3f}", same, "density 1"),
                     ms(p["auroc"], "{:.3f}"), f"{int(p['k'].iloc[0]):,}",
                     "-" if flops is None or pd.isna(flops) else f"{flops:.3f}",
                     f"{statistics.mean(p['sigma0']):.2g} -> {ms(p['sigma1'], '{:.2g}')}"])
    return [header] + rows


def table_criteria(runs: Runs) -> list[list[str]]:
    """SSVI's removal-criteria ablation at 10 % (Sec. 3.3.1, Fig. 2), paired against the default."""
    header = ["removal criterion", "seeds", "ID acc", "Δ ID acc vs SNR(|theta|)", "rotation NLL", "Δ rotation NLL",
              "OOD AUROC"]
    from bench.subnet.ssvi import CRITERIA, CRITERION_LABELS

    sb = tuned_base(runs, "ssvi")
    bp = _ssvi_reference(runs, 0.1, sb)  # None: the other criteria's rows stand without their differences
    d = METHODS.get("ssvi").defaults
    rows = []
    for c in CRITERIA:
        found = runs.configs("ssvi", density=0.1, criterion=c, sigma_init_mean=d["sigma_init_mean"], **sb)
        if not found:
            continue
        p = runs.per_seed(found[0][0])
        same = c == d["criterion"]
        rows.append([runs.mark(CRITERION_LABELS[c] + (" (default)" if same else ""), p), ",".join(map(str, p["seed"])), ms(p["id_acc"]),
                     _delta(p, bp, "id_acc", "{:+.4f}", same, "the default criterion"), ms(p["sh_nll"], "{:.3f}"),
                     _delta(p, bp, "sh_nll", "{:+.3f}", same, "the default criterion"), ms(p["auroc"], "{:.3f}")])
    return [header] + rows


TABLES = {"main": table_main, "ssvi": table_ssvi, "criteria": table_criteria, "controls": table_controls, "sigma0": table_sigma0, "selection": table_selection,
          "rsweep": table_rsweep, "init": table_init, "rho": table_rho}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")  # a literal | (e.g. |mu|) must not split a markdown cell


def render(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(map(_cell, rows[0])) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
    out += ["| " + " | ".join(map(_cell, r)) + " |" for r in rows[1:]]
    return "\n".join(out)


def table_cli(argv, doc: str, tables: dict, *, suite: str = "mnist_rotated", seeds: str = "0,1,2", default: str = "main",
              add_arguments=None):
    """The command line every table script shares: ``(runs, args, table function)``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--results", default="results")
    p.add_argument("--suite", default=suite)
    p.add_argument("--model", default="lenet_300_100")
    p.add_argument("--profile", default="quick")
    p.add_argument("--seeds", default=seeds)
    p.add_argument("--table", choices=sorted(tables), default=default)
    p.add_argument("--tuning", default="docs/tuning",
                   help="where bench tune's choices are stored (<dir>/<suite>/tuning/<profile>.json): the PBN "
                        "rows are taken at PBN's chosen configuration (default: docs/tuning)")
    p.add_argument("--where", default=None, metavar="data.NAME=V,train.NAME=V",
                   help="only records made with these data / training settings (e.g. data.n_train=1500,"
                        "train.epochs=60); default: the profile's own data settings")
    if add_arguments is not None:
        add_arguments(p)
    a = p.parse_args(argv)
    runs = Runs(a.results, a.suite, a.model, a.profile, [int(s) for s in a.seeds.split(",")], parse_where(a.where))
    runs.seeds = [int(s) for s in a.seeds.split(",")]
    runs.tuning = a.tuning
    return runs, a, tables[a.table]


#: the tables that take ``--objective`` (the others are PBN's and mean-field VI's, at the profile's objective)
OBJECTIVE_TABLES = ("main", "ssvi", "sigma0", "criteria")


def _objective_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--objective", action="append", default=None, metavar="METHOD.OPTION=VALUE",
                   help="rows of METHOD at a stored tune of another objective (`bench tune --set METHOD.OPTION=VALUE`, "
                        "e.g. ssvi.epochs=60): its fixed options and its choice; the other methods' rows left out "
                        f"(tables {', '.join(OBJECTIVE_TABLES)})")


def objective_text(runs: Runs) -> str:
    """The line under a table of another objective saying what its rows were taken at."""
    from bench.tuning import entry_key, probe_text, stored_choice, tuning_path, valid_choice

    parts = []
    for method in sorted(getattr(runs, "objective", {})):
        key, base = entry_key(method, runs.objective[method]), tuned_base(runs, method)
        where = tuning_path(runs.tuning, runs.suite, runs.profile)
        chosen = valid_choice(runs.tuning, runs.suite, runs.profile, key, runs.model)
        probes = probe_text(stored_choice(runs.tuning, runs.suite, runs.profile, key, runs.model) or {})
        parts.append(f"{method} rows at the objective {key}: " + ", ".join(f"{k} {v}" for k, v in sorted(base.items()))
                     + (f" (its tune's choice, {where}; {probes or 'its edges not probed'})" if chosen else
                        f" (no choice among valid fits in {where}: the method's defaults for its tuned options)"))
    return "".join(f"\n\n_{p}._" for p in parts)


def main(argv=None) -> int:
    from bench.errors import BenchError
    from bench.tuning import parse_objective

    runs, a, table = table_cli(argv, __doc__, TABLES, add_arguments=_objective_argument)
    try:
        runs.objective = parse_objective(a.objective, a.tuning, a.suite, a.profile)
    except BenchError as e:
        print(f"vi_tables: {e}", file=sys.stderr)
        return 2
    if runs.objective and a.table not in OBJECTIVE_TABLES:
        print(f"vi_tables: --objective applies to the tables {', '.join(OBJECTIVE_TABLES)}, not {a.table}",
              file=sys.stderr)
        return 2
    rows = table(runs)
    if a.suite != "mnist_rotated":  # the shifted sets of other suites are corruptions, not rotations
        rows[0] = [h.replace("rotation", "shift") for h in rows[0]]
    print(render(rows) + objective_text(runs) + runs.notes_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
