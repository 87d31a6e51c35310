"""The medical PBN paper's claims beside the runs here, one table per suite, each marked verdict or not.

``../shared/papers/sparse-bayesian-networks-medical.txt`` (a partial Bayesian network with 1 % of its
weights Bayesian, on ChestMNIST multi-label classification and LIDC-IDRI / ISIC binary segmentation)
makes claims that this project's multi-label and binary-segmentation suites can put to a test: every
claim is a declarative :class:`Claim` below (which suites, the two rows compared, by method and
options on top of the suite profile's, the metric, which way is better, and whether the claim says
"better" or "no worse than a margin"). The command reads the kept records (``--results``, several
directories pooled; a record in two of them counts once, the latest finished) and prints, per suite,
one row per claim: the paper's figure, the rows here and their seeds, the means ± std over seeds and
the paired difference over the seeds both rows share (a 95 % t interval), and the verdict:

* ``verdict: supported / contradicted / not separable`` only when every record of both rows passes
  its validity checks (``bench.validity``: ``validity.status == "ok"`` on all of them,
  :func:`bench.validity.worst_status`);
* ``not a verdict: <row>: <the failing check's reason>`` when a row fails (or could not be checked):
  a row whose sigma did not learn measures the set-up, not PBN; likewise a row of a method with a
  tuning space (``bench.tuning.space_of``) that no stored ``bench tune`` chose from and that does
  not set those options itself: it ran at its defaults, not by the protocol every method is chosen
  by (the command that tunes it is named);
* ``not run here yet: <the bench command that makes the missing rows>``, with what it costs where
  the records of a suite sharing the network and profile measured it (or the suite's stated budget).

Beside the claims stand controls of this benchmark (``C1``-``C4``, not the paper's): PBN against its
own pipeline with no stochastic weight (the MAP network fine-tuned for the VI phase, ``n_bayes=0``),
where a claim sets PBN against the network it fine-tunes, and against a random subnetwork of its size
beside the saliency claim; they are decided as the claims are.

Where a stored ``bench tune`` of the suite and profile (``<results>/<suite>/tuning/<profile>.json``)
chose a method's options, every row of that method, its ablations too, is read at that choice, and
the command of a missing row sets it (the tuning protocol of docs/validity.md: one procedure for
every method, on validation).

Run from the repository root:
  .venv/bin/python benchmarks/medical_claims.py                                  # docs/records, every suite
  .venv/bin/python benchmarks/medical_claims.py --results results docs/records --suite camvid_binary
  .venv/bin/python benchmarks/medical_claims.py --summary      # one line per suite: the claims of each outcome

``--summary`` is the README's table: the claims sorted by outcome, generated, so that no prose retypes a
verdict that the records have since changed.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the two-sided level of the intervals (as the leaderboard's paired test, bench.leaderboard.stats.ALPHA)
LEVEL = 0.95
PCT = f"{LEVEL * 100:.0f} %"
#: how the tables name the records' metrics (bench/multilabel_metrics.py, bench/segmentation_metrics.py)
METRIC_TITLES = {"accuracy": "Hamming accuracy", "brier": "Brier score", "entropy": "predictive entropy",
                 "dice": "foreground Dice", "error_auroc": "error AUROC"}
METRIC_NOTES = {
    "accuracy": "the mean over labels of each label's accuracy at p > 0.5 (as MedMNIST's evaluator scores "
                "multi-label ACC)",
    "dice": "2 TP / (2 TP + FP + FN) of the arg-max foreground mask, pooled over the test pixels",
    "entropy": "multi-label: the sum over labels of each label's Bernoulli entropy, per image; segmentation: per "
               "pixel (nats)",
    "error_auroc": "the ROC area of the pixels' predictive entropy separating wrong from right pixels",
}
#: a record stored in two results directories counts once (bench.leaderboard.records.RECORD_KEY)
RECORD_KEY = ["suite", "profile", "model", "config_hash", "method_label", "seed", "kind", "shift", "severity"]


# -- the specification -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One side of a comparison: a method with the options that define the row (on top of the suite
    profile's options for the method; those that differ from the profile's become ``--set``)."""
    name: str
    method: str
    options: dict = field(default_factory=dict)
    #: the options a stored ``bench tune`` chose for the method (already in ``options``; named in the text)
    tuned: dict = field(default_factory=dict)
    #: the options the tune that chose ``tuned`` held fixed: empty for the profile's objective, e.g.
    #: ``{"class_weights": "median_frequency"}`` for a tune of the class-weighted ELBO
    tuned_for: dict = field(default_factory=dict)


_UNSET = object()


def with_tuned(row: Row, chosen: dict, objectives: dict | None = None) -> Row:
    """``row`` at the options ``bench tune`` chose for its method (``chosen``: method -> options),
    under the row's own: a tuned method's rows and their ablations all run at its choice. A row that
    sets every option a tune of another objective held fixed (``objectives``: method -> [(fixed,
    options)], :func:`tuned_objectives`; e.g. the class-weighted ELBO) runs at that tune's choice
    instead (the one holding the most of them, where several match)."""
    matching = [(fixed, opts) for fixed, opts in (objectives or {}).get(row.method, [])
                if all(row.options.get(k, _UNSET) == v for k, v in fixed.items())]
    fixed, opts = max(matching, key=lambda fo: len(fo[0])) if matching else ({}, chosen.get(row.method) or {})
    tuned = {k: v for k, v in opts.items() if k not in row.options}
    return Row(row.name, row.method, {**tuned, **row.options}, tuned, dict(fixed)) if tuned else row


@dataclass(frozen=True)
class Claim:
    """A claim of the paper as a comparison of row ``a`` against row ``b`` on ``metric`` (the records'
    ``metrics.<metric>``, mean over a seed's records of ``kind``). ``relation``: ``"better"`` (a better
    than b) or ``"no_worse"`` (a worse than b by at most ``margin``)."""
    key: str
    suites: tuple
    text: str
    where: str
    paper: str
    a: Row
    b: Row
    metric: str
    higher_is_better: bool
    relation: str = "better"
    margin: float = 0.0
    kind: str = "id"

    @property
    def gain(self) -> str:
        """How the comparison reads: the gain of a over b, positive when a is better."""
        return f"{self.a.name} − {self.b.name}" if self.higher_is_better else f"{self.b.name} − {self.a.name}"

    @property
    def supports(self) -> str:
        if self.relation == "better":
            return f"the {PCT} interval of the gain ({self.gain}) lies above 0"
        return f"the {PCT} interval of the gain ({self.gain}) lies above −{self.margin:g}"

    @property
    def contradicts(self) -> str:
        if self.relation == "better":
            return "it lies below 0"
        return f"it lies below −{self.margin:g} ({self.a.name} worse by more than the margin)"


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    profile: str
    #: where a missing row's cost was measured: a suite sharing this one's network, images and profile
    cost_reference: str | None = None
    #: the suite's own budget, where no records measure it
    cost_note: str = ""
    #: what running it needs beyond the command
    data_note: str = ""


# the rows: PBN at the paper's headline 1 % (the profile's own PBN: gradient saliency |g|, unweighted
# likelihood, MAP initialisation), its ablations, and the paper's baselines
PBN_1 = Row("PBN 1 %", "pbn", {"r_bayes": 0.01, "n_bayes": None, "criterion": "gradient", "squared": False,
                               "class_weights": "none", "init": "map"})
PBN_20 = Row("PBN 20 %", "pbn", {**PBN_1.options, "r_bayes": 0.2})
PBN_1_WEIGHTED = Row("PBN 1 % weighted", "pbn", {**PBN_1.options, "class_weights": "median_frequency"})
PBN_1_SQUARED = Row("PBN 1 % squared", "pbn", {**PBN_1.options, "squared": True})
#: the controls (docs/pbn.md, "Controls"): PBN's pipeline with no stochastic weight (the MAP network
#: fine-tuned for the VI phase's epochs at its rate and loss), and a random subnetwork of PBN's size
FINE_TUNE_ONLY = Row("fine-tuning only", "pbn", {**PBN_1.options, "n_bayes": 0})
RANDOM_SUBNET = Row("PBN 1 % random", "pbn", {**PBN_1.options, "criterion": "random"})
ENSEMBLE = Row("ensemble of 5", "deep_ensemble", {"members": 5})
DETERMINISTIC = Row("deterministic", "deterministic", {})
FULL_VI = Row("fully Bayesian", "mfvi", {"class_weights": "none"})

MULTILABEL = ("camvid_multilabel", "chestmnist")
BINARY = ("camvid_binary",)
CHEST = "Table 1, ChestMNIST"
SEG = "Table 1, LIDC-IDRI and ISIC"
#: the controls' "where": not the paper's; what each separates
CONTROL = "control (this benchmark, not the paper's)"
FT_WHY = ("PBN fine-tunes the MAP network for its VI phase; the same pipeline with no stochastic weight "
          "separates what the VI does from what the extra training does")

CLAIMS: tuple[Claim, ...] = (
    # -- multi-label classification (ChestMNIST, ResNet-18; Sec. 3.2, Table 1) --
    Claim("M1", MULTILABEL, "1 % Bayesian is as accurate as a 5-member ensemble", f"{CHEST}; Sec. 3.2",
          "accuracy 0.934 vs 0.936", PBN_1, ENSEMBLE, "accuracy", True, "no_worse", 0.01),
    Claim("M2", MULTILABEL, "1 % Bayesian is more accurate than the deterministic network", CHEST,
          "accuracy 0.934 vs 0.899", PBN_1, DETERMINISTIC, "accuracy", True),
    Claim("M3", MULTILABEL, "1 % Bayesian is more accurate than the fully Bayesian network", f"{CHEST}; Sec. 3.2",
          "accuracy 0.934 vs 0.723 (a ~20 % drop for full VI)", PBN_1, FULL_VI, "accuracy", True),
    Claim("M4", MULTILABEL, "1 % Bayesian has a lower Brier score than the deterministic network", CHEST,
          "Brier 0.064 vs 0.098 (the ensemble's: 0.053)", PBN_1, DETERMINISTIC, "brier", False),
    Claim("M5", MULTILABEL, "1 % Bayesian has a lower Brier score than the fully Bayesian network", CHEST,
          "Brier 0.064 vs 0.215", PBN_1, FULL_VI, "brier", False),
    Claim("M6", MULTILABEL, "1 % Bayesian has a lower predictive entropy than a 5-member ensemble",
          f"{CHEST}; Sec. 3.2", "entropy 0.367 vs 1.162", PBN_1, ENSEMBLE, "entropy", False),
    Claim("M7", MULTILABEL, "1 % Bayesian has a lower predictive entropy than the fully Bayesian network",
          f"{CHEST}; Sec. 3.2", "entropy 0.367 vs 3.794 (~10x)", PBN_1, FULL_VI, "entropy", False),
    Claim("M8", MULTILABEL, "accuracy falls as the Bayesian share grows (1 % above 20 %)",
          f"{CHEST}; Sec. 3.2, Fig. 4", "accuracy 0.934 / 0.931 / 0.925 at 1 / 5 / 20 %", PBN_1, PBN_20,
          "accuracy", True),
    Claim("M9", MULTILABEL, "the Brier score rises with the Bayesian share (1 % below 20 %)",
          f"{CHEST}; Sec. 3.2, Fig. 4", "Brier 0.064 / 0.067 / 0.083 at 1 / 5 / 20 %", PBN_1, PBN_20, "brier", False),
    Claim("C1", MULTILABEL, "beside M2: 1 % Bayesian is more accurate than its pipeline without stochastic weights",
          CONTROL, FT_WHY, PBN_1, FINE_TUNE_ONLY, "accuracy", True),
    Claim("C2", MULTILABEL, "beside M4: 1 % Bayesian has a lower Brier score than its pipeline without stochastic "
          "weights", CONTROL, FT_WHY, PBN_1, FINE_TUNE_ONLY, "brier", False),
    # -- binary segmentation (LIDC-IDRI, ISIC, UNet; Sec. 3.3, Table 1) --
    Claim("S1", BINARY, "1 % Bayesian segments as well as a 5-member ensemble, or better",
          f"{SEG}; Sec. 3.3, Sec. 4", "LIDC Dice 0.800 vs 0.687; ISIC IoU 0.783 vs 0.808 (called a match)",
          PBN_1, ENSEMBLE, "dice", True, "no_worse", 0.025),
    Claim("S2", BINARY, "1 % Bayesian segments better than the fully Bayesian network", f"{SEG}; Sec. 3.3",
          "LIDC Dice 0.80 ± 0.01 vs 0.67 ± 0.09; ISIC IoU 0.783 vs 0.675", PBN_1, FULL_VI, "dice", True),
    Claim("S3", BINARY, "1 % Bayesian has a lower Brier score than a 5-member ensemble", SEG,
          "LIDC Brier 0.004 vs 0.075; ISIC 0.068 vs 0.109", PBN_1, ENSEMBLE, "brier", False),
    Claim("S4", BINARY, "1 % Bayesian has a lower predictive entropy than the fully Bayesian network",
          f"{SEG}; Sec. 3.3", "LIDC entropy 0.010 ± 0.001 vs 0.3 ± 0.1; ISIC 0.154 vs 0.273", PBN_1, FULL_VI,
          "entropy", False),
    Claim("S5", BINARY, "Dice falls as the Bayesian share grows (1 % above 20 %)", f"{SEG}; Fig. 4",
          "LIDC Dice 0.800 / 0.750 / 0.750, ISIC IoU 0.783 / 0.762 / 0.677 at 1 / 5 / 20 %", PBN_1, PBN_20,
          "dice", True),
    Claim("S6", BINARY, "1 % Bayesian's uncertainty marks its errors as well as the ensemble's",
          "Fig. 3; Sec. 3.3 (qualitative)", "no number: entropy maps high at borders and ambiguous regions, "
          "on par with the ensemble", PBN_1, ENSEMBLE, "error_auroc", True, "no_worse", 0.02),
    Claim("S7", BINARY, "the class-weighted cross-entropy in the ELBO helps the imbalanced foreground",
          "Sec. 3.1 (a training detail)", "no number: every model of the paper is trained weighted, no "
          "ablation", PBN_1_WEIGHTED, PBN_1, "dice", True),
    Claim("S8", BINARY, "the squared-gradient saliency chooses a subnetwork no worse than the absolute "
          "gradient's", "Sec. 2.2, step 2", "no number: the paper ranks by squared gradients and compares no "
          "other saliency", PBN_1_SQUARED, PBN_1, "dice", True, "no_worse", 0.025),
    Claim("C3", BINARY, "beside S1-S5: 1 % Bayesian segments better than its pipeline without stochastic weights",
          CONTROL, FT_WHY, PBN_1, FINE_TUNE_ONLY, "dice", True),
    Claim("C4", BINARY, "beside S8: the gradient saliency chooses a better subnetwork than a random one of the same "
          "size", CONTROL, "a saliency earns its place only where it beats a random subnetwork of the same size "
          "(subnetwork Laplace's paper reports that baseline for its criterion)", PBN_1, RANDOM_SUBNET, "dice", True),
)

SUITE_SPECS: dict[str, SuiteSpec] = {
    "camvid_multilabel": SuiteSpec(
        "camvid_multilabel", "quick",
        cost_note="the MAP network ~7 min per seed (6 epochs of the pooled UNet, as docs/ablations' unet_presence "
                  "records took on 2 shared cores) after the camvid MAP UNet it starts from; each method's fit and "
                  "prediction: its train s and predict ms / ex on the unet_presence boards, docs/results/medical.md "
                  "(most fitted beside other jobs: upper bounds, as the boards' notes say)"),
    "chestmnist": SuiteSpec(
        "chestmnist", "quick",
        cost_note="~3.5 min per network on one core (docs/medical.md)",
        data_note="needs DATA_ROOT/chestmnist.npz (MedMNIST), which cannot be downloaded here"),
    "camvid_binary": SuiteSpec("camvid_binary", "quick", cost_reference="camvid"),
}


# -- the records ----------------------------------------------------------------------------------------
def load(results_dirs, suites, validity: bool = True) -> "pd.DataFrame":
    """The records of ``suites`` under every directory, a record in two of them once (the latest
    finished), each run's validity recomputed (``bench.validity.attach_validity``; not with
    ``validity=False``, for the cost of a reference suite)."""
    import pandas as pd

    from bench.store import load_records
    from bench.validity import attach_validity

    frames = [df for d in results_dirs for s in suites if not (df := load_records(d, s)).empty]
    if not frames:
        return pd.DataFrame(columns=RECORD_KEY + ["status", "method", "method_config", "finished_at"])
    df = pd.concat(frames, ignore_index=True)
    key = [c for c in RECORD_KEY if c in df.columns]
    if "finished_at" in df.columns:
        df = df.sort_values("finished_at", na_position="first", kind="stable")
    df = df.drop_duplicates(subset=key, keep="last").reset_index(drop=True)
    return attach_validity(df) if validity else df


def profile_config(suite: str, profile: str, row: Row) -> dict:
    """The configuration ``python -m bench run`` gives the row on the suite's profile (its options
    set with ``--set``): what the records of the row hold."""
    from bench.config import resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    plan = resolve_plan(SUITES.get(suite)(), profile, [row.method], set_options(suite, profile, row),
                        method_registry=METHODS)
    return plan.methods[row.method][0]


def set_options(suite: str, profile: str, row: Row) -> dict:
    """``{"method.option": [value]}``: the row's options that differ from the profile's."""
    from bench.suites import SUITES
    from methods import METHODS

    cls = METHODS.get(row.method)
    base = {**cls.defaults, **cls.profile_defaults.get(profile, {}),
            **SUITES.get(suite).profiles[profile].get("methods", {}).get(row.method, {})}
    return {f"{row.method}.{k}": [v] for k, v in row.options.items() if base.get(k) != v}


def _value_text(v) -> str:
    import json

    return v if isinstance(v, str) else json.dumps(v)


def command(suite: str, profile: str, rows: list[Row]) -> str:
    """The bench command(s) that make ``rows``' records: rows at the profile's options in one, each
    row with options of its own in another (two options of one method would sweep their product)."""
    plain = [r.method for r in rows if not set_options(suite, profile, r)]
    cmds = []
    head = f"python -m bench run --suite {suite} --profile {profile}"
    if plain:
        cmds.append(f"{head} --methods {','.join(dict.fromkeys(plain))}")
    for r in rows:
        sets = set_options(suite, profile, r)
        if sets:
            cmds.append(f"{head} --methods {r.method} "
                        + " ".join(f"--set {k}={_value_text(v[0])}" for k, v in sets.items()))
    return " and ".join(f"`{c}`" for c in cmds)


@dataclass
class RowRuns:
    row: Row
    label: str | None = None      # the configuration's method label; None: no records
    exact: bool = True            # the profile's configuration (else one matching only the row's options)
    configs: int = 0              # configurations that match
    values: "pd.Series | None" = None  # metric by seed
    status: str = "ok"
    reasons: list = field(default_factory=list)
    network: str = ""             # the records' network identity beyond the model name ("" for none)
    networks: tuple = ()          # every identity the row has records on (at the configuration's options)
    network_choice: str = ""      # why this network, where both rows of the claim stand on several (said once, after the second row)
    map_networks: "pd.Series | None" = None  # seed -> the MAP network the run started from (built_on_map_network)


def _norm(method: str, cfg) -> dict:
    from methods import METHODS

    return {**METHODS.get(method).defaults, **(cfg if isinstance(cfg, dict) else {})}


def select(df, suite: str, profile: str, claim: Claim, row: Row, network: str | None = None) -> RowRuns:
    """The records of ``row``: the configuration the profile runs it with (else the one matching the
    row's own options with the most seeds, marked), its metric per seed and its validity; with
    ``network``, its records on that network identity where it has any (the other row's network)."""
    import pandas as pd

    from bench.reporting.data import built_on_map_network, model_identities
    from bench.suites import SUITES
    from bench.validity import runs_validity

    out = RowRuns(row)
    if df.empty:
        return out
    models = SUITES.get(suite).profiles[profile]["models"]
    sub = df[(df["suite"] == suite) & (df["profile"] == profile) & (df["method"] == row.method)
             & (df["status"] == "ok") & df["model"].isin(models)]
    sub = sub.assign(_network=model_identities(sub))
    if sub.empty:
        return out
    cfgs = sub["method_config"].map(lambda c: _norm(row.method, c))
    want = profile_config(suite, profile, row)
    hit = sub[cfgs.map(lambda c: c == want).astype(bool)]
    if hit.empty:
        hit = sub[cfgs.map(lambda c: all(c.get(k) == v for k, v in row.options.items())).astype(bool)]
        out.exact = False
    if hit.empty:
        return out
    ids = hit[hit["kind"] == "id"]
    if ids.empty:
        return out
    out.networks = tuple(sorted(set(ids["_network"])))
    if network is not None and network in out.networks:
        hit, ids = hit[hit["_network"] == network], ids[ids["_network"] == network]
    seeds = ids.groupby("config_hash")["seed"].nunique()
    latest = ids.groupby("config_hash")["finished_at"].max() if "finished_at" in ids.columns else {}
    chosen = max(seeds.index, key=lambda h: (seeds[h], str(latest.get(h))))  # most seeds, then the latest
    out.configs = len(seeds)
    runs = hit[hit["config_hash"] == chosen]
    out.label = str(runs["method_label"].iloc[0])
    out.network = str(runs["_network"].iloc[0])
    col = f"metrics.{claim.metric}"
    sets = runs[runs["kind"] == claim.kind]
    with_id = set(runs[runs["kind"] == "id"]["seed"])
    if col in sets.columns:
        vals = pd.to_numeric(sets[col], errors="coerce")
        out.values = vals.groupby(sets["seed"]).mean().dropna()
        out.values = out.values[out.values.index.isin(with_id)]
        out.values.index = out.values.index.astype(int)
    else:
        out.values = pd.Series(dtype=float)
    used = runs[(runs["kind"] == "id") & runs["seed"].isin(out.values.index if len(out.values) else with_id)]
    out.status, out.reasons = runs_validity(used)
    if "diagnostics" in used.columns:
        cfg = runs["method_config"].iloc[0]
        out.map_networks = pd.Series([built_on_map_network(row.method, cfg, d) for d in used["diagnostics"]],
                                     index=used["seed"].astype(int).to_numpy())
    return out


def pair(df, suite: str, profile: str, claim: Claim) -> tuple[RowRuns, RowRuns]:
    """The two rows of ``claim``, on one network where they share one: the first row's records
    (:func:`select`), then the second's on its network; where the second has none there, the
    second's own choice and the first's on that network. Where both rows have records on several
    networks, the one on which they pair the most seeds (:func:`paired_seeds`; a tie keeps the first
    row's choice). Two rows on different networks (e.g. a backbone file trained twice) stay so, and
    :func:`verdict_text` says so."""
    a = select(df, suite, profile, claim, claim.a)
    b = select(df, suite, profile, claim, claim.b, network=a.network if a.label is not None else None)
    if a.label is not None and b.label is not None and a.network != b.network and b.network in a.networks:
        a = select(df, suite, profile, claim, claim.a, network=b.network)
    if a.label is None or b.label is None:
        return a, b
    # both rows on several networks (a backbone file trained twice, each with its rows): the one on which
    # they pair the most seeds, whatever their values; a tie keeps the first row's own choice
    shared = sorted(set(a.networks) & set(b.networks))
    if len(shared) > 1:
        for net in shared:
            if net != a.network:
                an = select(df, suite, profile, claim, claim.a, network=net)
                bn = select(df, suite, profile, claim, claim.b, network=net)
                if paired_seeds(an, bn) > paired_seeds(a, b):
                    a, b = an, bn
        b.network_choice = f"of the {len(shared)} networks both rows stand on, the one on which they pair the most seeds"
    return a, b


def paired_seeds(a: RowRuns, b: RowRuns) -> int:
    """How many seeds the comparison of ``a`` and ``b`` pairs: those both have a value for, started
    from one fit of the seed's MAP network (as :func:`interval` pairs them); none for rows on different
    networks (no verdict compares them)."""
    if a.values is None or b.values is None or a.network != b.network:
        return 0
    return len(pairable(a.values.index, b.values.index, a.map_networks, b.map_networks))


def pairable(seeds_a, seeds_b, nets_a=None, nets_b=None) -> list:
    """The seeds both sides have, sorted, that started from one fit of the seed's MAP network (with
    ``nets_a`` / ``nets_b``, seed -> ``map_network``; without them, every shared seed)."""
    from bench.reporting.data import same_map_network

    return [s for s in sorted(set(seeds_a) & set(seeds_b))
            if nets_a is None or nets_b is None or same_map_network(nets_a.get(s), nets_b.get(s))]


# -- the comparison -------------------------------------------------------------------------------------
def interval(a, b, higher_is_better: bool, nets_a=None, nets_b=None):
    """(gain mean, low, high, how): the gain of a over b (positive: a better) with its two-sided
    ``LEVEL`` t interval, paired over the seeds both have (two or more; with ``nets_a`` / ``nets_b``,
    seed -> ``map_network``, only those whose runs can stand on one MAP network), else Welch's over
    each row's seeds (two or more each); None when the seed noise is unknown."""
    import numpy as np
    from scipy.stats import t

    sign = 1.0 if higher_is_better else -1.0
    common = sorted(set(a.index) & set(b.index))
    shared = pairable(a.index, b.index, nets_a, nets_b)
    apart = (f"; seed{'s' if len(common) - len(shared) > 1 else ''} "
             f"{', '.join(str(s) for s in common if s not in shared)} not paired: the rows stand on "
             f"different fits of that seed's MAP network") if len(shared) < len(common) else ""
    q = (1 + LEVEL) / 2
    if len(shared) >= 2:
        d = sign * (a[shared].to_numpy(float) - b[shared].to_numpy(float))
        n, m, sd = len(d), float(d.mean()), float(d.std(ddof=1))
        half = float(t.ppf(q, n - 1)) * sd / math.sqrt(n)
        return m, m - half, m + half, f"paired over seeds {', '.join(map(str, shared))}{apart}"
    if len(a) >= 2 and len(b) >= 2:
        va, vb = float(np.var(a, ddof=1)) / len(a), float(np.var(b, ddof=1)) / len(b)
        m, se = sign * (float(a.mean()) - float(b.mean())), math.sqrt(va + vb)
        dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0)) \
            if (va or vb) else 1.0
        half = float(t.ppf(q, dof)) * se
        return m, m - half, m + half, f"unpaired (no two shared seeds), Welch{apart}"
    return None


def decide(claim: Claim, lo: float, hi: float) -> str:
    floor = 0.0 if claim.relation == "better" else -claim.margin
    if lo > floor or (claim.relation == "no_worse" and lo >= floor):
        return "supported"
    if hi < floor:
        return "contradicted"
    return "not separable"


def _mean_std(s) -> str:
    """Mean ± std over seeds, both to the decimals that show the std with two significant digits."""
    from bench.leaderboard.stats import decimals_for

    mean = float(s.mean())
    if len(s) == 1:
        return f"{mean:.{decimals_for(None, value=mean)}f} (1 seed)"
    std = float(s.std(ddof=1))
    d = decimals_for(std, value=mean)
    return f"{mean:.{d}f} ± {std:.{d}f} ({len(s)} seeds)"


def _gain_text(m: float, lo: float, hi: float) -> str:
    from bench.leaderboard.stats import decimals_for

    d = decimals_for((hi - lo) / 2, value=m)
    return f"{m:+.{d}f}, {PCT} interval [{lo:+.{d}f}, {hi:+.{d}f}]"


def _seeds(s) -> str:
    return ", ".join(map(str, sorted(s.index)))


def row_text(r: RowRuns) -> str:
    from bench.validity import marked_label

    if r.label is None:
        return f"{r.row.name}: no records"
    wanted = "the options bench tune chose" if r.row.tuned else "the profile's options"
    what = f"`{marked_label(r.label, r.status)}`" + ("" if r.exact else f", not {wanted}") \
        + (f" (of the {r.configs} configurations that match, the one with the most seeds)" if r.configs > 1 else "")
    seeds = f"seeds {_seeds(r.values)}" if r.values is not None and len(r.values) else "no value"
    # the network the records stand on, where the suite's records name one (a backbone file): a choice
    # bench tune made on another file of the same recipe reads beside it
    return (f"{r.row.name}: {what}, {seeds}" + (f", on {r.network}" if r.network else "")
            + (f" ({r.network_choice})" if r.network and r.network_choice else ""))


def cost_text(df_ref, spec: SuiteSpec, rows: list[Row]) -> str:
    """What the missing rows cost: per seed, from the records of the suite sharing this one's
    network and profile (training time, its MAP network included, plus evaluation), else the
    suite's stated budget."""
    from bench.suites import SUITES

    seeds = len(SUITES.get(spec.name).profiles[spec.profile]["seeds"])
    parts, total = [], 0.0
    if spec.cost_reference and df_ref is not None and not df_ref.empty:
        ref = df_ref[(df_ref["suite"] == spec.cost_reference) & (df_ref["profile"] == spec.profile)
                     & (df_ref["status"] == "ok")]
        for method in dict.fromkeys(r.method for r in rows):
            g = ref[ref["method"] == method]
            if g.empty or "cost.train_time_s" not in g:
                parts = []
                break
            pred = (g["cost.predict_time_per_example_s"].fillna(0) * g["n"].fillna(0)).groupby(
                [g["config_hash"], g["seed"]]).sum()
            idr = g[g["kind"] == "id"].set_index(["config_hash", "seed"])["cost.train_time_s"]
            per_seed = (idr + pred.reindex(idr.index).fillna(0)).dropna()
            if per_seed.empty:
                parts = []
                break
            minutes = float(per_seed.median()) / 60
            total += minutes * seeds
            parts.append(f"{method} ~{minutes:.0f} min")
        if parts:
            return (f"~{total / 60:.1f} h for {seeds} seeds: {', '.join(parts)} per seed, training with its MAP "
                    f"network and evaluation, as {spec.cost_reference}'s {spec.profile} records of the same "
                    f"network and profile took on 2 shared cores; less where rows share the MAP network")
    return ""


#: options that rescale the likelihood a tuned KL weight is balanced against: a row that sets one on
#: top of a choice ``bench tune`` made without it stands at a weight chosen for another objective
RESCALING_OPTIONS = ("class_weights",)


def untuned_reason(suite: str, profile: str, row: Row) -> str | None:
    """Why ``row`` is not chosen by the tuning protocol, or None: its method has a tuning space on
    ``suite`` (:func:`bench.tuning.space_of`), no stored ``bench tune`` chose from it (``row.tuned``
    is empty) and the row does not set the swept options itself; or the row sets an option of
    :data:`RESCALING_OPTIONS` on top of a choice made without it (a tune of its own objective, ``bench
    tune --set <method>.class_weights=...``, is one made with it)."""
    from bench.suites import SUITES
    from bench.tuning import options_of, space_of
    from methods import METHODS

    space = space_of(row.method, SUITES.get(suite)())
    defaults = METHODS.get(row.method).defaults
    rescaled = [o for o in RESCALING_OPTIONS if row.tuned and o not in row.tuned and o not in row.tuned_for
                and row.options.get(o, defaults.get(o)) != defaults.get(o)]
    if space and rescaled:
        sets = " ".join(f"--set {row.method}.{o}={row.options.get(o)}" for o in rescaled)
        return (f"its {', '.join(space)} were chosen by `bench tune` for the objective without "
                f"{', '.join(rescaled)}, which rescales the likelihood they balance; this objective's own "
                f"tuning has not run (`python -m bench tune --suite {suite} --profile {profile} --methods "
                f"{row.method} {sets}`)")
    if not space or row.tuned or any(o in row.options for k in space for o in options_of(k)):
        return None
    return (f"at the method's defaults: `bench tune` has not chosen its {', '.join(space)} on this suite "
            f"(`python -m bench tune --suite {suite} --profile {profile} --methods {row.method}`)")


def verdict_text(claim: Claim, spec: SuiteSpec, a: RowRuns, b: RowRuns, df_ref,
                 mixed: dict[str, str] | None = None) -> tuple[str, str]:
    """(measured, verdict) cells of one claim on one suite; ``mixed``: method -> why its stored tuning's
    choice is no verdict on the method (:func:`bench.tuning.verdict_notes`: not the protocol's, or at the
    edge of its space)."""
    from bench.validity import OK

    missing = [r.row for r in (a, b) if r.label is None]
    failing = [r for r in (a, b) if r.label is not None and r.status != OK]
    why = "; ".join(f"{r.row.name}: " + ("; ".join(r.reasons) or r.status) for r in failing)
    untuned = [(r.row.name, u) for r in (a, b) if r.label is not None
               and (u := untuned_reason(spec.name, spec.profile, r.row))]
    untuned += [(r.row.name, (mixed or {})[r.row.method]) for r in (a, b) if r.label is not None and r.row.tuned
                and r.row.method in (mixed or {})]
    why = "; ".join([why] * bool(why) + [f"{name}: {u}" for name, u in untuned])
    if a.label is not None and b.label is not None and a.network != b.network:
        why = "; ".join([why] * bool(why) + [f"the two rows stand on networks of different identity ({a.row.name}: "
                                             f"{a.network or 'no model identity'}; {b.row.name}: "
                                             f"{b.network or 'no model identity'}): not shown to be one network, "
                                             f"so not a like-for-like comparison"])
    blocked = bool(why)  # a row that fails its checks, one not chosen by the tuning protocol, two networks
    measured = " vs ".join(f"{r.row.name} {_mean_std(r.values)}" for r in (a, b)
                           if r.values is not None and len(r.values))
    if missing:
        cost = cost_text(df_ref, spec, missing)
        text = f"not run here yet: {command(spec.name, spec.profile, missing)}" + (f" ({cost})" if cost else "")
        if blocked:
            text += f"; and not a verdict either way: {why}"
        return measured or "–", text
    no_value = [r.row.name for r in (a, b) if r.values is None or not len(r.values)]
    if no_value:
        return measured or "–", (f"not measured: no `metrics.{claim.metric}` in the {claim.kind} records of "
                                 + ", ".join(no_value))
    res = interval(a.values, b.values, claim.higher_is_better, a.map_networks, b.map_networks)
    if res is not None:
        m, lo, hi, how = res
        measured += f"; gain {claim.gain} {_gain_text(m, lo, hi)} ({how})"
    if blocked:
        return measured, f"not a verdict: {why}"
    if res is None:
        # both rows pass their checks, but one seed on a side gives no interval: nothing is decided yet
        return measured, "no verdict yet: fewer than two seeds on a side (the seed noise is unknown)"
    return measured, f"verdict: {decide(claim, res[1], res[2])}"


def claims_of(suite: str) -> list[Claim]:
    return [c for c in CLAIMS if suite in c.suites]


def tuned_choices(choices: dict, suite: str, profile: str) -> dict[str, dict]:
    """method -> the options a stored ``bench tune`` of ``suite``/``profile`` chose (for the profile's
    first model, the one the claims are read on), of ``choices`` (bench.tuning.chosen_options)."""
    from bench.suites import SUITES

    model = SUITES.get(suite).profiles[profile]["models"][0]
    return {m: opts for (s, p, mdl, m), opts in choices.items() if (s, p, mdl) == (suite, profile, model)}


def tuned_objectives(objectives: dict, suite: str, profile: str) -> dict[str, list[tuple[dict, dict]]]:
    """method -> [(fixed, options)]: the choices of the stored tunes of other objectives of ``suite`` /
    ``profile`` (for the profile's first model), of ``objectives`` (bench.tuning.objective_choices)."""
    from bench.suites import SUITES

    model = SUITES.get(suite).profiles[profile]["models"][0]
    return {m: v for (s, p, mdl, m), v in objectives.items() if (s, p, mdl) == (suite, profile, model)}


def claim_lines(df, suite: str, profile: str, df_ref=None, tuned: dict | None = None,
                objectives: dict | None = None, mixed: dict | None = None):
    """(claim at the tuned options, its rows a and b, measured, verdict) for every claim of ``suite``
    (the arguments as :func:`table`'s)."""
    spec = replace(SUITE_SPECS[suite], profile=profile)
    tuned, objectives = tuned or {}, objectives or {}
    for c in claims_of(suite):
        c = replace(c, a=with_tuned(c.a, tuned, objectives), b=with_tuned(c.b, tuned, objectives))
        a, b = pair(df, suite, profile, c)
        yield (c, a, b, *verdict_text(c, spec, a, b, df_ref, mixed))


#: the outcome columns of the summary, in order, each with the verdict cell's prefix that makes it
OUTCOMES = (("supported", "verdict: supported"), ("contradicted", "verdict: contradicted"),
            ("not separable", "verdict: not separable"), ("not a verdict", "not a verdict"),
            ("no verdict yet (one seed)", "no verdict yet"), ("not measured", "not measured"),
            ("not run here yet", "not run here yet"))


def outcome(verdict: str) -> str:
    """The summary column of one verdict cell (:data:`OUTCOMES`)."""
    for name, prefix in OUTCOMES:
        if verdict.startswith(prefix):
            return name
    raise ValueError(f"a verdict cell of no known outcome: {verdict[:80]!r}")


def summary(per_suite: dict[str, tuple[str, list]]) -> list[str]:
    """One line per suite (``suite -> (profile, claim_lines(...))``): the claims of each outcome, so
    that prose elsewhere (the README) names the outcomes and never retypes them; a verdict's claims
    with their text, the others by key."""
    used = [name for name, _ in OUTCOMES if any(outcome(v) == name for _, ls in per_suite.values()
                                                 for *_, v in ls)]
    decided = {name for name, prefix in OUTCOMES if prefix.startswith("verdict:")}

    def named(c, name):
        return f"{c.key} ({c.text})" if name in decided else c.key

    lines = ["| suite (profile) | " + " | ".join(used) + " |", "| --- |" + " --- |" * len(used)]
    for suite, (profile, ls) in per_suite.items():
        cells = [("; " if name in decided else ", ").join(named(c, name) for c, *_, v in ls if outcome(v) == name)
                 or "–" for name in used]
        lines.append(f"| {suite} ({profile}) | " + " | ".join(cells) + " |")
    return lines


def table(df, suite: str, profile: str, df_ref=None, tuned: dict | None = None,
          objectives: dict | None = None, mixed: dict | None = None, claims: list | None = None) -> list[str]:
    """``tuned``: method -> the options bench tune chose (:func:`tuned_choices`); every row of a tuned
    method is read, and its missing records are asked for, at that choice. ``objectives``: the choices
    of tunes of other objectives (:func:`tuned_objectives`), for the rows that set their fixed options.
    ``mixed``: method -> why a row at its stored choice is no verdict (:func:`bench.tuning.verdict_notes`).
    ``claims``: :func:`claim_lines` of these arguments, when already computed."""
    spec = replace(SUITE_SPECS[suite], profile=profile)
    tuned, objectives = tuned or {}, objectives or {}
    if claims is None:
        claims = list(claim_lines(df, suite, profile, df_ref, tuned, objectives, mixed))

    def options_text(o):
        return ", ".join(f"{k} {_value_text(v)}" for k, v in sorted(o.items()))

    tuned_note = "; ".join([f"{m}: {options_text(o)}" for m, o in sorted(tuned.items())]
                           + [f"{m} with {options_text(fixed)}: {options_text(o)}"
                              for m, fo in sorted(objectives.items()) for fixed, o in fo])
    notes = [n for n in (spec.data_note and f"Running it {spec.data_note}.",
                         spec.cost_note and f"Cost of a missing row: {spec.cost_note}.",
                         tuned_note and "Tuned by `bench tune` (the rows of a tuned method, its ablations too, at "
                                        f"its choice): {tuned_note}.") if n]
    lines = [" ".join([f"**{suite}**, profile {profile}, on the clean test set.", *notes]), "",
             "| claim | paper: where, its numbers | rows here | measured here | verdict |",
             "| --- | --- | --- | --- | --- |"]
    for c, a, b, measured, verdict in claims:
        lines.append(f"| {c.key}: {c.text} ({METRIC_TITLES.get(c.metric, c.metric)}, "
                     f"{'higher' if c.higher_is_better else 'lower'} is better) "
                     f"| {c.where}: {c.paper} | {row_text(a)}; {row_text(b)} | {measured} | {verdict} |")
    return lines


def legend(suites) -> list[str]:
    lines = ["How each claim is decided (the gain: the difference oriented so that positive favours the first row; "
             f"{PCT} t interval over seeds, paired where the rows share two or more):", ""]
    for c in [c for c in CLAIMS if set(c.suites) & set(suites)]:
        lines.append(f"- {c.key}: supported when {c.supports}; contradicted when {c.contradicts}; otherwise not "
                     "separable.")
    keys = [c.key for c in CLAIMS if set(c.suites) & set(suites) and c.where == CONTROL]
    if keys:
        lines += ["", f"{', '.join(keys)} are controls of this benchmark, not claims of the paper: a claim of PBN "
                      "against another network speaks of its Bayesian weights (or of its saliency) only where the "
                      "control separates them from the extra training (or from chance)."]
    lines += ["", "The metrics (the records' `metrics.<name>`):", ""]
    lines += [f"- {METRIC_TITLES[k]} (`{k}`): {v}." for k, v in METRIC_NOTES.items()]
    lines += ["", "A verdict only where every record of both rows passes its validity checks (bench.validity), "
              "each row has two seeds or more, and a row of a method with a tuning space stands at the options a "
              "stored `bench tune` chose over the suite's space of now, on one network, inside the space (a "
              "choice at an end of a swept range is the best of the space, not the method's) (or sets them "
              "itself); "
              "`✗` marks a row that fails them, `?` one that could not be checked. Records reach docs/records "
              "with `.venv/bin/python scripts/keep_records.py save <suite>` after the run."]
    return lines


def add_results_option(p: argparse.ArgumentParser) -> None:
    """``--results DIR [DIR ...]``: the results directories a table pools."""
    p.add_argument("--results", nargs="+", default=["docs/records"], metavar="DIR",
                   help="results directories, pooled (default: docs/records, the records kept in git)")


def missing_results(prog: str, dirs) -> bool:
    """True (and why, on stderr) when one of ``dirs`` is not a directory: the caller exits 2."""
    missing = [d for d in dirs if not Path(d).is_dir()]
    if missing:
        print(f"{prog}: results directory {', '.join(map(repr, missing))} does not exist "
              "(give directories holding <suite>/records, e.g. results or docs/records)", file=sys.stderr)
    return bool(missing)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_results_option(p)
    p.add_argument("--suite", default=",".join(SUITE_SPECS),
                   help=f"comma-separated, of {', '.join(SUITE_SPECS)} (default: all)")
    p.add_argument("--profile", default=None, help="the profile whose records are compared (default: each suite's, "
                                                   "quick)")
    p.add_argument("--summary", action="store_true",
                   help="one line per suite instead of the tables: which claims each outcome holds")
    a = p.parse_args(argv)
    suites = [s.strip() for s in a.suite.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITE_SPECS]
    if unknown or not suites:
        print(f"medical_claims.py: unknown suite(s) {', '.join(unknown) or '(none given)'}; the paper's claims are "
              f"compared on: {', '.join(SUITE_SPECS)}", file=sys.stderr)
        return 2
    if missing_results("medical_claims.py", a.results):
        return 2
    from bench.suites import SUITES

    for s in suites:
        profile = a.profile or SUITE_SPECS[s].profile
        if profile not in SUITES.get(s).profiles:
            print(f"medical_claims.py: suite {s} has no profile {profile!r}; its profiles: "
                  f"{', '.join(SUITES.get(s).profiles)}", file=sys.stderr)
            return 2
    refs = sorted({SUITE_SPECS[s].cost_reference for s in suites if SUITE_SPECS[s].cost_reference})
    df = load(a.results, suites)
    df_ref = load(a.results, refs, validity=False) if refs else None
    from bench.tuning import chosen_options, objective_choices, verdict_notes

    choices, objectives = chosen_options(a.results), objective_choices(a.results)  # every stored tuning, read once
    mixed = verdict_notes(a.results, df)
    per_suite = {}
    for s in suites:
        profile = a.profile or SUITE_SPECS[s].profile
        args = (df, s, profile, df_ref, tuned_choices(choices, s, profile), tuned_objectives(objectives, s, profile),
                tuned_choices(mixed, s, profile))
        per_suite[s] = (profile, args, list(claim_lines(*args)))
    if a.summary:
        print("\n".join(summary({s: (profile, ls) for s, (profile, _, ls) in per_suite.items()})))
        return 0
    out = []
    for s, (_, args, ls) in per_suite.items():
        out += table(*args, claims=ls) + [""]
    out += legend(suites)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
