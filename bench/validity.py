"""Is a row method evidence? The validity verdict of one fitted configuration.

A benchmark row is a verdict on a method only where its fit converged and the setting can test
the method's claim. A learned variance that followed the optimiser's step limit, a prior
precision at the edge of its grid, a posterior whose attainable predictive variance is tiny, a
network near chance: each makes the row a measurement of the set-up. Every check here reads the
fitted method's own record (its clean-test ``metrics`` and its ``diagnostics``, which the method
writes at fit time) and returns a :class:`CheckResult` with the reason and the numbers.

A method names its checks in ``Method.VALIDITY_CHECKS`` (``bench list`` shows them); a plugin
adds one with :func:`register_check`. The verdict of a configuration is

* ``ok``: every check passed (or does not apply);
* ``fail``: some check failed: the row measures the set-up, not the method;
* ``unverified``: none failed, but some could not be computed (a record made before the check
  existed): not evidence either, until it is rerun.

Pure Python and numpy (no torch): the leaderboard and the report recompute the verdict of every
record they read, so that old records get it and a changed rule applies everywhere at once.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from bench.curves import (NOISE_MIN_EPOCHS, NOISE_WINDOW, NOISE_Z, PLATEAU_MAX_IMPROVEMENT,  # noqa: F401
                          curve_noise, gain_limit)
from bench.curves import finite as _num
from bench.laplace.prior import feasible_edge
from bench.registry import Registry

VERSION = 1

PASS, FAIL, NOT_MEASURED, NOT_APPLICABLE = "pass", "fail", "not measured", "not applicable"
OK, FAILED, UNVERIFIED = "ok", "fail", "unverified"

# -- thresholds (each check's docstring says why) -----------------------------------------------------
#: informative: the clean NLL must be at most this fraction of a uniform guess's ln K ...
INFORMATIVE_NLL_FRACTION = 0.75
#: ... and the clean accuracy at least this multiple of chance (1 / K)
INFORMATIVE_ACCURACY_X_CHANCE = 2.0
#: informative, multilabel: the mean per-label AUROC at least this (0.5: a constant ranks nothing)
INFORMATIVE_MULTILABEL_AUROC = 0.6
#: rate limit: median travel of log sigma at or above this fraction of the optimiser's ceiling
RATE_LIMIT_FRACTION = 0.5
#: sigma "did not move": |log(median sigma_final / median sigma_init)| below this
MOVED_MIN_LOG_CHANGE = 0.05
#: stationarity: |d objective / d log c| / (|likelihood part| + |KL part|) at most this, where
#: every sigma is scaled by c (0 at a stationary point of the ELBO in sigma, -1 when only the
#: KL acts on sigma, +1 when only the likelihood does)
STATIONARITY_MAX_RESIDUAL = 0.3
#: ... and at most half of the stochastic weights may each have a gradient in log sigma beyond
#: twice its noise and 30 % of its parts (Adam moves every sigma by its own gradient)
STATIONARITY_MAX_MOVING_FRACTION = 0.5
#: Laplace: validation NLL range over the feasible grid below this (relative): the prior
#: precision changes nothing, i.e. the posterior does not change the predictive
FLAT_GRID_RTOL = 1e-4
#: full-covariance Laplace: s / N below this cannot reach the predictive variance that matters
ATTAINABLE_MIN_S_OVER_N = 0.5
#: map_converged: the last fifth of the epochs may improve the validation NLL on its best value
#: before that fifth by at most 2 % (PLATEAU_MAX_IMPROVEMENT) or, where the curve is noisier, by at
#: most NOISE_Z standard deviations of the difference of two epochs' values (bench.curves, shared
#: with the budget trials); fewer than MIN_EPOCHS_FOR_PLATEAU epochs: not measured
PLATEAU_TAIL = 0.2
MIN_EPOCHS_FOR_PLATEAU = 5
#: Laplace: the posterior's logit variance at least this fraction of the MAP logits' spread
MIN_PREDICTIVE_VARIANCE_RATIO = 1e-3
#: Adam's epsilon (torch's default): a gradient well below it moves a parameter at a fraction of lr
ADAM_EPS = 1e-8


@dataclass
class CheckResult:
    name: str
    status: str            # PASS | FAIL | NOT_MEASURED | NOT_APPLICABLE
    reason: str
    numbers: dict = field(default_factory=dict)


@dataclass
class Check:
    name: str
    description: str
    fn: Callable[[dict], CheckResult]


CHECKS: Registry[Check] = Registry("validity check")


def register_check(name: str, description: str):
    """Decorator: ``fn(run) -> CheckResult`` registered as check ``name``. ``run`` holds the
    fitted configuration's ``method``, ``task``, ``num_classes``, ``metrics`` (clean test set),
    ``diagnostics``, ``method_config`` and ``train_config``."""
    def deco(fn):
        CHECKS.register(name)(Check(name, description, fn))
        return fn
    return deco


def _result(name, status, reason, **numbers) -> CheckResult:
    return CheckResult(name, status, reason, {k: v for k, v in numbers.items() if v is not None})


# -- every method: a predictor well above chance -----------------------------------------------------
@register_check("informative", "clean NLL at most 75 % of a uniform guess's ln K and accuracy at least twice chance "
                               "(classification, segmentation pixels); multilabel: clean NLL below the training-"
                               "prevalence predictor's and mean per-label AUROC at least 0.6; binary segmentation: "
                               "clean NLL below the foreground-share predictor's and the foreground Dice at least "
                               "twice a random mask's (at most halfway to 1)")
def informative(run: dict) -> CheckResult:
    """A network near chance cannot test an uncertainty claim: every method on it is near-uniform,
    and near-uniform predictors score well on ECE and badly on everything else. The clean NLL must
    remove at least a quarter of a uniform guess's ln K, and the accuracy must be at least twice
    chance (1 / K)."""
    name, task, k = "informative", run.get("task"), run.get("num_classes")
    if task == "multilabel":
        return _informative_multilabel(run)
    if task == "segmentation" and _num(k) == 2:
        return _informative_binary_segmentation(run)
    if task not in ("classification", "segmentation"):
        return _result(name, NOT_APPLICABLE, f"{task} task")
    m = run.get("metrics") or {}
    nll = _num(m.get("nll"))
    acc = _num(m.get("accuracy", m.get("pixel_accuracy")))
    if not k or nll is None or acc is None:
        return _result(name, NOT_MEASURED, "no clean-test NLL / accuracy or number of classes in the record")
    ln_k, chance = math.log(k), 1.0 / k
    nums = dict(nll=nll, ln_k=ln_k, nll_fraction_of_uniform=nll / ln_k, accuracy=acc, chance=chance)
    if nll > INFORMATIVE_NLL_FRACTION * ln_k:
        return _result(name, FAIL, f"near chance: clean NLL {nll:.3g} is {nll / ln_k:.0%} of a uniform guess's "
                                   f"ln {k} = {ln_k:.3g}", **nums)
    if acc < INFORMATIVE_ACCURACY_X_CHANCE * chance:
        return _result(name, FAIL, f"near chance: clean accuracy {acc:.3g} against chance {chance:.3g}", **nums)
    return _result(name, PASS, f"clean NLL {nll / ln_k:.0%} of ln K, accuracy {acc / chance:.1f}x chance", **nums)


def binary_entropy(p: float) -> float:
    """H(p) in nats: the NLL of the predictor that says the foreground's share p for every pixel,
    the reference of binary segmentation (0 < p < 1)."""
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def _informative_binary_segmentation(run: dict) -> CheckResult:
    """Binary segmentation (``camvid_binary``: cars against the rest): twice chance would ask for
    100 % pixel accuracy, and a uniform guess's ln 2 is far above what the all-background
    predictor scores when the foreground is rare. The references follow from the foreground share
    p of the set's pixels (``metrics.foreground_share``), as the multi-label check's follow from the
    label prevalence: the clean NLL must be below the constant prevalence predictor's, the binary
    entropy H(p); and the foreground's Dice must be at least twice a random mask's of the same share
    (whose Dice is p), or halfway from p to 1 where twice p would be out of reach (p > 1/3)."""
    name, m = "informative", run.get("metrics") or {}
    nll, p, dice = _num(m.get("nll")), _num(m.get("foreground_share")), _num(m.get("dice"))
    if nll is None or dice is None or p is None or not 0 < p < 1:
        return _result(name, NOT_MEASURED, "no clean-test NLL, Dice or foreground share in the record "
                                           "(binary segmentation)")
    ref_nll = binary_entropy(p)
    need = min(2 * p, (1 + p) / 2)
    nums = dict(nll=nll, reference_nll=ref_nll, foreground_share=p, dice=dice, dice_needed=need)
    if nll >= ref_nll:
        return _result(name, FAIL, f"uninformed: clean NLL {nll:.3g} is not below the foreground-share "
                                   f"predictor's H({p:.3g}) = {ref_nll:.3g}", **nums)
    if dice < need:
        return _result(name, FAIL, f"near chance: foreground Dice {dice:.3g} is below {need:.3g} (a random mask "
                                   f"of the foreground's share scores {p:.3g})", **nums)
    return _result(name, PASS, f"clean NLL {nll / ref_nll:.0%} of the foreground-share predictor's, foreground "
                               f"Dice {dice:.3g} (a random mask: {p:.3g})", **nums)


def _informative_multilabel(run: dict) -> CheckResult:
    """Multi-label: the uninformed reference is the predictor that says each label's training
    prevalence (the record's ``reference``, :func:`bench.multilabel_metrics.prevalence_reference`;
    0.5 per label, NLL L ln 2, for a record without it). On rare labels (ChestMNIST's findings)
    that predictor already has most of the NLL a network can reach, so a fraction of it, as for
    classification, would fail good networks: the clean NLL must be below it, and the ranking must
    carry signal, the mean per-label AUROC at least INFORMATIVE_MULTILABEL_AUROC."""
    name, m = "informative", run.get("metrics") or {}
    nll, auroc = _num(m.get("nll")), _num(m.get("auroc_mean"))
    ref = _num((run.get("reference") or {}).get("nll"))
    what = "the training-prevalence predictor's"
    if ref is None and _num(run.get("num_labels")):
        ref, what = float(run["num_labels"]) * math.log(2), "a 0.5-per-label guess's"
    if nll is None or auroc is None or ref is None:
        return _result(name, NOT_MEASURED, "no clean-test NLL / mean AUROC or reference in the record")
    nums = dict(nll=nll, reference_nll=ref, auroc_mean=auroc)
    if nll >= ref:
        return _result(name, FAIL, f"uninformed: clean NLL {nll:.3g} is not below {what} {ref:.3g}", **nums)
    if auroc < INFORMATIVE_MULTILABEL_AUROC:
        return _result(name, FAIL, f"near chance: clean mean per-label AUROC {auroc:.3g} below "
                                   f"{INFORMATIVE_MULTILABEL_AUROC}", **nums)
    return _result(name, PASS, f"clean NLL {nll / ref:.0%} of {what}, mean AUROC {auroc:.3g}", **nums)


# -- trained networks (MAP, ensemble members): a validation loss at rest --------------------------------
def plateau_limit(curve, before: float) -> tuple[float, float | None]:
    """The improvement over the last fifth that ``map_converged`` still reads as at rest, relative to
    ``before`` (the best value before that fifth), and the curve's noise relative to it: 2 %, or,
    where the curve is noisier, NOISE_Z standard deviations of the difference of two epochs' values
    (NOISE_Z sqrt(2) times :func:`curve_noise`): a gain smaller than that is one the noise of the
    curve alone makes, and so is the spread a longer budget gives the final network on such a
    curve (docs/validity.md, the budget trials)."""
    noise = curve_noise(curve)
    rel = None if noise is None else noise / max(abs(before), 1e-12)
    return gain_limit(rel), rel


@register_check("map_converged", "the trained network's validation NLL (for a method built on the MAP network: "
                                 "that network's) fell over the last fifth of its epochs by at most 2 % or, on "
                                 "a noisier curve, the noise of a difference of two epochs (every member "
                                 "of an ensemble)")
def map_converged(run: dict) -> CheckResult:
    """A network whose validation NLL is still falling when its training stops is not at the end of
    its training: a longer budget would give another network, and every method built on it
    inherits that. The training loss cannot tell (a decaying rate flattens it anyway); the
    validation NLL after every epoch can: its best value over the last fifth of the epochs must be
    within 2 % of its best value before that fifth (the early-stopping criterion: improvement over
    the best so far). Measured against the single epoch where the fifth begins, the epoch-to-epoch
    noise of the curve (a few % at a large rate) would read as improvement: a network whose
    validation NLL had not gone below its epoch-6 value in 14 epochs failed that way
    (docs/validity.md). A validation NLL that rises in the last fifth (overfitting) is at rest
    too.

    Where the curve itself is noisier than 2 % allows for (a small, correlated validation set: CamVid's
    validation NLL moves by 2-20 % from one epoch to the next), the limit is the standard deviation
    of a difference of two epochs' values, estimated from the curve's last half (:func:`plateau_limit`):
    a gain inside it is one the noise makes, and on such curves a longer budget moved a seed's final
    network by as much in either direction (camvid_binary's budget trials, docs/validity.md). A gain
    beyond the curve's own noise still fails: on `camvid` the networks it fails kept improving with
    longer budgets. Fewer than 5 epochs: not measured."""
    name = "map_converged"
    logs = (run.get("diagnostics") or {}).get("map_training")
    logs = [logs] if isinstance(logs, dict) or logs is None else list(logs)
    if logs and all(isinstance(lg, dict) and lg.get("pretrained") for lg in logs):
        return _result(name, NOT_APPLICABLE, "published pretrained weights")
    curves = [[_num(v) for v in (lg or {}).get("val_nll") or []] for lg in logs]
    if not curves or any(not c or any(v is None for v in c) for c in curves):
        return _result(name, NOT_MEASURED, "no validation NLL per epoch in the record (it predates the check: rerun "
                                           "the cell; a cached MAP network is retrained with --force)")
    return _at_rest(name, curves)


def _at_rest(name: str, curves: list[list[float]]) -> CheckResult:
    """:func:`map_converged`'s rule on validation curves (one per network, every one must pass): the
    best value over the last fifth of the epochs within the limit of the best before it."""
    worst, detail = None, None
    for i, c in enumerate(curves):
        if len(c) < MIN_EPOCHS_FOR_PLATEAU:
            return _result(name, NOT_MEASURED, f"{len(c)} epochs: too few to tell a plateau")
        t0 = max(1, int(round(len(c) * (1 - PLATEAU_TAIL))))
        before, after = min(c[:t0]), min(c[t0:])
        drop = (before - after) / max(abs(before), 1e-12)
        limit, noise = plateau_limit(c, before)
        if worst is None or drop - limit > worst:   # the member nearest its limit (or furthest past it)
            worst, detail = drop - limit, (i, t0, len(c), before, after, drop, limit, noise)
    i, t0, n, before, after, drop, limit, noise = detail
    who = f"member {i}: " if len(curves) > 1 else ""
    nums = dict(tail_improvement=drop, improvement_limit=limit, val_nll_noise=noise, epochs=n,
                val_nll_best_before_tail=before, val_nll_tail_best=after)
    why = ("the 2 % limit" if limit == PLATEAU_MAX_IMPROVEMENT else
           f"the limit {limit:.1%}: the noise of a difference of two epochs, the curve's noise "
           f"{noise:.1%} an epoch over its last half")
    if drop > limit:
        return _result(name, FAIL, f"{who}still improving: validation NLL {after:.4g} over epochs {t0 + 1}-{n}, "
                                   f"{drop:.1%} below its best before them ({before:.4g}), beyond {why}", **nums)
    return _result(name, PASS, f"{who}validation NLL at rest over epochs {t0 + 1}-{n} (best there {after:.4g}, "
                               f"{-drop:+.1%} on the best before, {before:.4g}; within {why})", **nums)


@register_check("vi_converged", "the method's own training: the validation NLL of its network at the posterior "
                                "means fell over the last fifth of its epochs by at most 2 % or, on a noisier "
                                "curve, the noise of a difference of two epochs (map_converged's rule), unless a "
                                "phase trial on two seeds or more finds a longer phase no better (a decaying rate)")
def vi_converged(run: dict) -> CheckResult:
    """A variational method that trains its own network (from a random initialisation: mean-field VI,
    SSVI, VDP++) inherits nothing from the MAP network's checks: its row is a verdict only where its
    own training ended at rest, else a longer budget gives another network and the row measures the
    budget. Its means are what that training moves most; the validation NLL of the network at the
    posterior means after every epoch (``train.epoch_stats[e].val_nll``, no random draw) is read with
    :func:`map_converged`'s rule. The sigmas' own rest is ``vi_stationarity``'s and ``vi_rate_limit``'s.

    Under a decaying rate the curve also falls over the last fifth because the rate anneals there, at
    any budget; whether a longer budget gives a better network is then a phase trial's to say
    (``run["phase_trial"]``, :func:`bench.budget.phase_trials`: the same configuration with a longer
    phase on the same seeds). A curve still falling passes where such a trial, over at least two seeds,
    finds the longer phase no better beyond its limit; it fails where the trial finds it better."""
    name = "vi_converged"
    stats = _vi_train(run).get("epoch_stats") or []
    curve = [_num(e.get("val_nll")) if isinstance(e, dict) else None for e in stats]
    if not curve or any(v is None for v in curve):
        return _result(name, NOT_MEASURED, "no validation NLL of the mean network per epoch in the record (it "
                                           "predates the check: rerun the cell)")
    res = _at_rest(name, [curve])
    trial = run.get("phase_trial")
    if res.status != FAIL or trial is None or trial.short or not trial.judges:
        return res
    return _result(name, PASS, f"{res.reason}; but a longer phase gives no better network, so the fall is the "
                               f"decaying rate's, at any budget: {trial.text('the same configuration', 'fit')}",
                   **res.numbers, trial_epochs=trial.longer, trial_gain_max=max(trial.gains))


@register_check("map_budget", "no longer budget of the same recipe ends, on every seed trained at both (at least "
                              "two), with a MAP validation NLL lower beyond map_converged's limit")
def map_budget(run: dict) -> CheckResult:
    """A budget trial: where the records the table reads (or the trials kept with bench) hold MAP
    networks of this run's recipe trained for longer, on the same seeds, and every seed's longer
    network ends with a validation NLL lower beyond the noise (:mod:`bench.budget`), this run's
    networks stop short of their training: the row measures the budget, whatever its own curve
    says; so do the rows built on that network and the networks the same loop trains
    (:func:`bench.budget.trained_by_the_recipe`).
    A method that trains its own network another way for the same epochs is not measured by the
    trial: unverified where the trial finds the budget short (too short for MAP's recipe, it is
    not shown to suffice for another), else not applicable. Without a trial: not applicable
    (``attach_validity`` adds the check only where there is one)."""
    name = "map_budget"
    trial = run.get("budget_trial")
    if trial is None:
        return _result(name, NOT_APPLICABLE, "no MAP network of this recipe trained for longer in these records")
    nums = dict(epochs=trial.epochs, longer_epochs=trial.longer, gain_min=min(trial.gains),
                gain_max=max(trial.gains), limit=max(trial.limits), seeds=len(trial.seeds))
    if run.get("budget_same_recipe") is not False:
        return _result(name, FAIL if trial.short else PASS, trial.text(), **nums)
    if trial.short:  # its own network, trained another way for a budget the MAP recipe's trial finds short
        return _result(name, NOT_MEASURED, f"its own network, trained another way (its own optimiser or options), "
                                           f"has no budget trial of its own in these records, and {trial.epochs} "
                                           f"epochs are short for the MAP recipe's (its networks trained for "
                                           f"{trial.summary()}, beyond the noise)", **nums)
    return _result(name, NOT_APPLICABLE, "its own network is trained another way than the trial's MAP networks")


@register_check("phase_budget", "a longer training phase of the method (its epochs, e.g. PBN's VI phase) on the same "
                               "MAP network does not end lower in validation NLL (a phase trial); a phase shorter "
                               "than the paper's for this network, without such a trial: unverified")
def phase_budget(run: dict) -> CheckResult:
    """The budget trial of a method's own training phase (:func:`bench.budget.phase_trials`): where the
    records (or the trials kept with bench) hold runs of this method, on this MAP recipe, with a longer
    phase on the same seeds and their validation NLL is lower beyond the limit on every seed, the phase
    is short and the row measures the budget: fail; a trial that finds no such gain: pass. Without a
    trial, a phase shorter than the paper's for this network (``Method.PAPER_EPOCHS``) is a budget far
    below the paper's that nothing shows to suffice: unverified. Otherwise not applicable."""
    name, trial = "phase_budget", run.get("phase_trial")
    epochs, paper = run.get("phase_epochs"), run.get("paper_epochs")
    if trial is not None:
        nums = dict(epochs=trial.epochs, longer_epochs=trial.longer, gain_min=min(trial.gains),
                    gain_max=max(trial.gains), limit=max(trial.limits), seeds=len(trial.seeds), paper_epochs=paper)
        return _result(name, FAIL if trial.short else PASS,
                       trial.text("the same configuration's runs " + ("on the same MAP networks"
                                  if run.get("phase_from_map", True) else "from the same seeds' initialisations"),
                                  "fit"), **nums)
    if epochs is not None and paper is not None and epochs < paper:
        return _result(name, NOT_MEASURED, f"its training phase is {epochs} epochs, the paper's for this network "
                                           f"{paper}: no longer phase in these records shows that {epochs} suffice "
                                           f"(a phase trial: the same configuration with --set "
                                           f"{run.get('method')}.epochs=E on two seeds or more)",
                       epochs=epochs, paper_epochs=paper)
    return _result(name, NOT_APPLICABLE, "no phase trial in these records, and no shorter phase than the paper's")


# -- variational methods: the variances at their ELBO optimum, not where the optimiser left them ----
def _vi_train(run: dict) -> dict:
    return (run.get("diagnostics") or {}).get("train") or {}


def _no_stochastic_weight(run: dict) -> str | None:
    """Why the VI checks do not apply to a fit with no stochastic weight (PBN's ``n_bayes=0``: the
    fine-tuning-only control has no sigma; its MAP and informativeness checks decide), else None."""
    k = (run.get("diagnostics") or {}).get("k")
    if k is None:
        k = (run.get("cost") or {}).get("stochastic_params")
    return "no stochastic weight: the same pipeline without VI (a control)" if k is not None and _num(k) == 0 else None


def _median_log_change(diag: dict) -> float | None:
    ratio = _num((diag.get("sigma_change") or {}).get("median_ratio"))
    if ratio is None or ratio <= 0:
        return None
    return math.log(ratio)


def _schedule_mean_factor(train_config: dict, epochs: int) -> float | None:
    """The mean of bench.training.lr_factor over training (cosine 0.5, constant 1, steps by
    their milestones), without the warm-up (which only lowers it)."""
    sched = (train_config or {}).get("schedule", "cosine")
    if sched == "cosine":
        return 0.5
    if sched in ("constant", "none", None):
        return 1.0
    if sched in ("step", "multistep"):
        ms = sorted(float(m) for m in (train_config.get("milestones") or []))
        if epochs <= 0:
            return None
        return sum(0.1 ** sum(e >= m for m in ms) for e in range(epochs)) / epochs
    return None


def vi_steps(run: dict) -> int | None:
    """Optimiser steps of the VI phase: recorded (``train.steps``), else epochs x batches of a
    classification training set (``num_train`` examples, the profile's batch size)."""
    tr = _vi_train(run)
    if _num(tr.get("steps")):
        return int(tr["steps"])
    epochs, n = _num(tr.get("epochs")), _num(tr.get("num_train"))
    bs = _num((run.get("train_config") or {}).get("batch_size"))
    if run.get("task") == "classification" and epochs and n and bs:
        return int(epochs) * math.ceil(n / bs)
    return None


@register_check("vi_rate_limit", "the median travel of log sigma below half of what Adam's step limit allows "
                                 "(lr x the sum of the schedule's factors)")
def vi_rate_limit(run: dict) -> CheckResult:
    """Adam moves a parameter by at most about lr per step whatever the gradient, so in T steps of
    a schedule with factors f_t rho (and log sigma = log softplus(rho), whose slope in rho is at
    most 1) travels at most lr x sum f_t (cosine: 0.5 lr T). A median travel at half that
    ceiling or more means the variances moved at full speed for most of training: the final
    sigma is set by the budget (a longer run or a larger rate moves it further), not by the ELBO.
    The last epoch's relative change cannot see this: a decaying rate makes it small anyway."""
    if why := _no_stochastic_weight(run):
        return _result("vi_rate_limit", NOT_APPLICABLE, why)
    name, tr = "vi_rate_limit", _vi_train(run)
    opt = tr.get("rho_optimizer")
    if opt is None:
        return _result(name, NOT_MEASURED, "the record does not name the variances' optimiser")
    if opt != "adam":
        return _result(name, NOT_APPLICABLE, f"{opt} on the variances has no per-step limit; the stationarity "
                                             f"check decides")
    diag = run.get("diagnostics") or {}
    change = _median_log_change(diag)
    if change is None:
        return _result(name, NOT_MEASURED, "no sigma summaries at initialisation and after training")
    ratio = _num(tr.get("rho_adam_travel_ratio"))  # VDP++ measures it on rho itself
    steps, lr = vi_steps(run), _num(tr.get("rho_lr"))
    epochs = int(_num(tr.get("epochs")) or 0)
    factor = _schedule_mean_factor(run.get("train_config") or {}, epochs)
    ceiling = lr * steps * factor if (lr and steps and factor) else None
    if ratio is None and ceiling:
        ratio = abs(change) / ceiling
    if ratio is None:
        if abs(change) < MOVED_MIN_LOG_CHANGE:
            return _result(name, PASS, "sigma did not move (see vi_moved)", median_log_change=change)
        return _result(name, NOT_MEASURED, "the number of optimiser steps is not in the record",
                       median_log_change=change)
    nums = dict(median_log_change=change, ceiling=ceiling, travel_fraction=ratio, steps=steps, rho_lr=lr)
    if ratio >= RATE_LIMIT_FRACTION:
        return _result(name, FAIL, f"rate-limited: log sigma travelled {ratio:.0%} of Adam's ceiling"
                                   + (f" ({abs(change):.2f} of {ceiling:.2f} in {steps} steps at rho lr {lr:g})"
                                      if ceiling else ""), **nums)
    return _result(name, PASS, f"log sigma travelled {ratio:.0%} of Adam's ceiling", **nums)


@register_check("vi_moved", "sigma left its initial value (or was measured stationary there)")
def vi_moved(run: dict) -> CheckResult:
    """A sigma that ends where it started is noise injection at the initial scale, not VI, unless
    the stationarity check shows the ELBO is at rest there. With Adam a KL pull per weight
    (beta / divisor) below Adam's epsilon moves rho at a fraction of its rate: the number is
    reported."""
    if why := _no_stochastic_weight(run):
        return _result("vi_moved", NOT_APPLICABLE, why)
    name, diag, tr = "vi_moved", run.get("diagnostics") or {}, _vi_train(run)
    change = _median_log_change(diag)
    if change is None:
        return _result(name, NOT_MEASURED, "no sigma summaries at initialisation and after training")
    beta = _num(tr.get("final_beta", (run.get("method_config") or {}).get("kl_weight")))
    divisor = _num(tr.get("kl_divisor", tr.get("num_train")))
    pull = beta / divisor if (beta and divisor) else None
    nums = dict(median_log_change=change, kl_pull_per_weight=pull)
    if abs(change) >= MOVED_MIN_LOG_CHANGE:
        return _result(name, PASS, f"median sigma changed x{math.exp(change):.3g}", **nums)
    st = _stationarity(diag)
    if st is not None and st.status == PASS:
        return _result(name, PASS, "sigma stayed at its initial value, where the ELBO is stationary", **nums)
    why = (f"; the KL pull per weight beta / N = {pull:.2g} is below Adam's epsilon {ADAM_EPS:g}"
           if pull is not None and tr.get("rho_optimizer") == "adam" and pull < ADAM_EPS else "")
    return _result(name, FAIL, f"sigma stayed at its initial value (median x{math.exp(change):.3f}){why}", **nums)


def _stationarity(diag: dict) -> CheckResult | None:
    st = diag.get("sigma_stationarity")
    if not isinstance(st, dict) or _num(st.get("residual")) is None:
        return None
    r, se = float(st["residual"]), _num(st.get("residual_se"))
    nums = {k: st.get(k) for k in ("residual", "residual_se", "likelihood_part", "kl_part", "batches", "beta")}
    w = st.get("weights") if isinstance(st.get("weights"), dict) else {}
    frac = _num(w.get("not_stationary"))
    if frac is not None:
        nums.update(weights_not_stationary=frac, weights_kl_pulls_up=w.get("kl_pulls_up"),
                    weights_likelihood_pulls_down=w.get("likelihood_pulls_down"))
    if frac is not None and frac > STATIONARITY_MAX_MOVING_FRACTION:
        up, down = _num(w.get("kl_pulls_up")) or 0.0, _num(w.get("likelihood_pulls_down")) or 0.0
        side = "the KL still pulls them up" if up >= down else "the likelihood still pushes them down"
        return _result("vi_stationarity", FAIL, f"not stationary in sigma: {frac:.0%} of the stochastic weights "
                       f"have a gradient beyond its noise ({side}; {up:.0%} up, {down:.0%} down)", **nums)
    if abs(r) > STATIONARITY_MAX_RESIDUAL:
        side = "the KL wants larger sigmas" if r < 0 else "the likelihood wants smaller sigmas"
        return _result("vi_stationarity", FAIL, f"not stationary in sigma: relative gradient {r:+.2f}"
                       + (f" ± {se:.2f}" if se is not None else "") + f" ({side})", **nums)
    return _result("vi_stationarity", PASS, f"stationary in sigma: relative gradient {r:+.2f}"
                   + (f" ± {se:.2f}" if se is not None else ""), **nums)


@register_check("vi_stationarity", "measured after the fit: the gradient of the objective with respect to a common "
                                   "scale of every sigma near zero relative to its likelihood and KL parts, and at "
                                   "most half of the sigmas each moved by a gradient beyond its noise")
def vi_stationarity(run: dict) -> CheckResult:
    """At an optimum of the ELBO in sigma, scaling every sigma by c changes nothing to first order.
    The fit measures d objective / d log c at c = 1 on training batches (KL weight at its end
    value), split into the likelihood's and the KL's parts; the residual is their sum over the
    sum of their magnitudes: 0 at rest, -1 when only the KL acts (sigma too small for the
    likelihood to care), +1 when only the likelihood does."""
    if why := _no_stochastic_weight(run):
        return _result("vi_stationarity", NOT_APPLICABLE, why)
    st = _stationarity(run.get("diagnostics") or {})
    if st is None:
        return _result("vi_stationarity", NOT_MEASURED, "not measured (the record predates the check: rerun the cell)")
    return st


# -- Laplace: a prior chosen inside a feasible grid, and a posterior that can change the predictive --
@register_check("laplace_prior_grid", "the prior precision chosen inside the grid (not at an edge of its feasible "
                                      "part), every grid point feasible, and the validation NLL not flat over it")
def laplace_prior_grid(run: dict) -> CheckResult:
    """A prior precision at the edge of its grid was not chosen by the data: at the upper edge the
    validation data prefer the posterior collapsed onto MAP, at the lower edge the widest one on
    offer. Grid points whose predictive could not be formed (``inf``) make the grid infeasible
    there; an optimum beside them is an edge too. A validation NLL flat over the whole grid means
    the prior changes nothing: the posterior does not reach the predictive."""
    name = "laplace_prior_grid"
    diag = run.get("diagnostics") or {}
    ps = diag.get("prior_search")
    if diag.get("prior_precision_method", "gridsearch") != "gridsearch":
        return _result(name, NOT_APPLICABLE, f"prior precision by {diag.get('prior_precision_method')}")
    if not isinstance(ps, dict) or not ps.get("log10_grid"):
        return _result(name, NOT_MEASURED, "no prior search in the record")
    grid = [float(g) for g in ps["log10_grid"]]
    losses = [(_num(v) if _num(v) is not None else math.inf) for v in ps["val_nll"]]
    best = float(ps["log10_prior_precision"])
    best = min(grid, key=lambda g: abs(g - best))
    finite = [v for v in losses if math.isfinite(v)]
    n_inf = len(losses) - len(finite)
    edge = feasible_edge(grid, losses, best)
    spread = (max(finite) - min(finite)) / max(abs(min(finite)), 1e-12) if finite else None
    nums = dict(log10_prior_precision=best, grid_min=grid[0], grid_max=grid[-1], n_infeasible=n_inf,
                n_points=len(grid), val_nll_relative_range=spread)
    if not finite:
        return _result(name, FAIL, "no grid point gave a finite validation NLL", **nums)
    if spread is not None and spread < FLAT_GRID_RTOL:
        return _result(name, FAIL, f"validation NLL flat over the grid (relative range {spread:.1e}): the posterior "
                                   f"does not change the predictive", **nums)
    if edge is not None:
        side = ("the validation data prefer the posterior collapsed onto MAP" if edge == "upper"
                else "the validation data prefer the widest posterior on offer")
        at = "beside infeasible points" if (edge == "lower" and grid[0] != best and n_inf) else "of the grid"
        return _result(name, FAIL, f"prior precision 10^{best:.1f} at the {edge} edge {at} ({side})", **nums)
    if n_inf:
        return _result(name, FAIL, f"{n_inf} of {len(grid)} grid points infeasible (non-finite validation NLL)",
                       **nums)
    return _result(name, PASS, f"prior precision 10^{best:.1f} inside the grid 10^{grid[0]:.0f}..10^{grid[-1]:.0f}",
                   **nums)


@register_check("laplace_attainable_variance", "full-covariance Laplace: subnet size s over training observations N "
                                               "at least 0.5")
def laplace_attainable_variance(run: dict) -> CheckResult:
    """With a full-covariance GGN posterior over s weights from N observations, the Lambda-weighted
    predictive variance averaged over the training inputs is at most s / N (the trace of a
    projection of rank s shared among N terms). At s / N far below 1 the predictive on
    training-like inputs is MAP's whatever the prior: a row "equal to MAP" is guaranteed by the
    setting. The bound says nothing of shifted inputs, whose Jacobians reach the directions the
    training data constrain least: there the predictive can move far from MAP's (the README's
    rotated-MNIST board, s / N = 0.02). The row stays marked for shift claims too: there the
    movement follows the prior scale that validation tunes for the subnet's size, random subnets
    move it far too, and no number of the row separates that from evidence for the selected subnetwork
    (docs/validity.md; docs/subnet_laplace.md, the size table): a criterion's shift claim is read
    against the random subnet of the same size. Daxberger et al.'s
    ResNet-18 on CIFAR-10 (s = 42,438, N = 50,000) is at about 0.85."""
    name = "laplace_attainable_variance"
    diag = run.get("diagnostics") or {}
    s = _num(diag.get("subnet_size"))
    n = _num(diag.get("num_observations"))
    if n is None:
        info = diag.get("select_info") or {}
        if run.get("task") == "classification":
            n = _num(info.get("n_examples"))
    if s is None or n is None or n <= 0:
        return _result(name, NOT_MEASURED, "subnet size or number of training observations not in the record",
                       subnet_size=s)
    ratio = s / n
    nums = dict(subnet_size=s, num_observations=n, s_over_n=ratio)
    if ratio < ATTAINABLE_MIN_S_OVER_N:
        return _result(name, FAIL, f"s / N = {ratio:.2g} ({s:,.0f} / {n:,.0f}): on training-like inputs the predictive "
                                   f"is MAP's by construction (the attainable variance there is at most s / N); "
                                   f"under shift it can still move, along the directions the training data "
                                   f"constrain least (not judged here)", **nums)
    return _result(name, PASS, f"s / N = {ratio:.2g}", **nums)


@register_check("laplace_predictive_variance", "classification, GLM predictive: the logit variance the posterior "
                                               "adds at the chosen prior at least 1e-3 of the MAP logits' spread")
def laplace_predictive_variance(run: dict) -> CheckResult:
    """Whatever bound the setting allows, what the fitted posterior does: the linearised
    predictive's logit variance on validation inputs, at the chosen prior precision, against the
    spread of MAP's logits across the classes (both measured at fit time, ``predictive_spread``).
    A thousandth of the spread moves the softmax by about a thousandth: the predictive is MAP's.
    Segmentation and the sampled (``nn``) predictive: not applicable."""
    name = "laplace_predictive_variance"
    diag = run.get("diagnostics") or {}
    if run.get("task") != "classification" or diag.get("pred_type", "glm") != "glm":
        return _result(name, NOT_APPLICABLE, "measured for the GLM predictive on classification")
    ps = diag.get("predictive_spread")
    ratio = _num((ps or {}).get("ratio"))
    if not isinstance(ps, dict) or ratio is None:
        return _result(name, NOT_MEASURED, "not measured (the record predates the check: rerun the cell)")
    nums = dict(logit_variance=ps.get("logit_variance"), map_logit_spread=ps.get("map_logit_spread"), ratio=ratio)
    if ratio < MIN_PREDICTIVE_VARIANCE_RATIO:
        return _result(name, FAIL, f"the posterior's logit variance is {ratio:.1e} of the MAP logits' spread: the "
                                   f"predictive is MAP's", **nums)
    return _result(name, PASS, f"logit variance {ratio:.2g} of the MAP logits' spread", **nums)


# -- the verdict ---------------------------------------------------------------------------------------
#: the checks a refit of the cell measures where its records predate them (their reason then says so,
#: :data:`PREDATES`): ``bench run --redo-predating`` refits those cells. ``map_converged`` is not one: its
#: measurement is the cached MAP network's, which a refit of the cell does not train again
REFIT_MEASURES = ("vi_converged", "vi_stationarity", "laplace_predictive_variance")
PREDATES = "predates the check"


def predating_checks(id_record: dict) -> list[str]:
    """The checks of :data:`REFIT_MEASURES` that the fit behind ``id_record`` (its clean-test record) could
    not be judged by because the record predates them: a refit of its cell measures them. None for a fit
    that fails a check its record measures (:func:`refit_view`): a refit repeats the fit (its seed, data and
    options), which fails again, so no check it measures can make the cell method evidence."""
    predates, failed = refit_view(id_record)
    return [] if failed else predates


def refit_view(id_record: dict) -> tuple[list[str], list[str]]:
    """``(predates, failed)`` of the fit behind ``id_record``: the checks of :data:`REFIT_MEASURES` its record
    predates, and the checks it fails."""
    v = verdict(run_view(id_record), checks_of(id_record.get("method"), id_record.get("validity")))
    predates = [c["name"] for c in v["checks"]
                if c["name"] in REFIT_MEASURES and c["status"] == NOT_MEASURED and PREDATES in c["reason"]]
    return predates, [c["name"] for c in v["checks"] if c["status"] == FAIL]


def verdict(run: dict, check_names) -> dict:
    """``{"status", "checks": [CheckResult as dict], "reasons": [text], "version"}`` of one fitted
    configuration (``run``: see :func:`register_check`) under the checks ``check_names``."""
    results = []
    for cname in check_names:
        try:
            res = CHECKS.get(cname).fn(run)
        except Exception as exc:  # noqa: BLE001 - a malformed record is an unmeasured check, not a crash
            res = CheckResult(cname, NOT_MEASURED, f"could not be computed: {type(exc).__name__}: {exc}")
        results.append(res)
    failed = [r for r in results if r.status == FAIL]
    unmeasured = [r for r in results if r.status == NOT_MEASURED]
    status = FAILED if failed else UNVERIFIED if unmeasured else OK
    reasons = [f"{r.name}: {r.reason}" for r in (failed or unmeasured)]
    return {"status": status, "reasons": reasons, "checks": [asdict(r) for r in results], "version": VERSION}


def checks_of(method: str, stored: dict | None = None) -> list[str]:
    """The checks a method declares (``Method.VALIDITY_CHECKS``); for a method this version does
    not know, the ones its stored verdict used (else ``informative`` alone)."""
    try:
        from methods import METHODS

        return list(METHODS.get(str(method)).VALIDITY_CHECKS)
    except Exception:  # noqa: BLE001 - a plugin that is not installed here
        if isinstance(stored, dict) and stored.get("checks"):
            return [c["name"] for c in stored["checks"] if c.get("name") in CHECKS]
        return ["informative"]


def num_classes_of(suite: str) -> int | None:
    try:
        from bench.suites import SUITES

        return int(SUITES.get(str(suite)).task.num_outputs)
    except Exception:  # noqa: BLE001
        return None


def run_view(id_record: dict) -> dict:
    """What the checks read, from a fitted configuration's clean-test (``id``) record."""
    k = id_record.get("num_classes")
    k = k if _num(k) else num_classes_of(id_record.get("suite"))
    return {"method": id_record.get("method"), "task": id_record.get("task"), "num_classes": k,
            "num_labels": id_record.get("num_labels"), "reference": id_record.get("reference"),
            "metrics": id_record.get("metrics") or {}, "diagnostics": id_record.get("diagnostics") or {},
            "method_config": id_record.get("method_config") or {}, "train_config": id_record.get("train_config") or {},
            "budget_trial": id_record.get("budget_trial"),
            "budget_same_recipe": id_record.get("budget_same_recipe"), "phase_trial": id_record.get("phase_trial"),
            "phase_epochs": id_record.get("phase_epochs"), "paper_epochs": id_record.get("paper_epochs"),
            "phase_from_map": id_record.get("phase_from_map", True)}


SYMBOLS = {FAILED: "✗", UNVERIFIED: "?"}


def unverified(reason: str) -> dict:
    """A verdict that could not be computed at all (no clean-test record of the fit)."""
    return {"status": UNVERIFIED, "reasons": [reason], "checks": [], "version": VERSION}


def marked_label(label: str, status: str) -> str:
    """A table row's label with its verdict's symbol when it is not method evidence."""
    return f"{label} {SYMBOLS[status]}" if status in SYMBOLS else label


#: the records of one fitted configuration (every evaluation set of one seed)
RUN_KEY = ["suite", "profile", "model", "config_hash", "seed"]


def attach_validity(df):
    """``df`` (flat records, as :func:`bench.store.load_records` gives them) with the verdict of
    each fitted configuration recomputed from its clean-test record, in every one of its rows:
    ``validity`` (the dict of :func:`verdict`) and ``validity.status``. A run without a clean-test
    record is ``unverified``. Where ``df`` also holds MAP networks of a run's recipe trained for
    longer, or bench keeps a trial of that recipe (:func:`bench.budget.kept_trials`), the run is
    judged by that budget trial too (``map_budget``, :mod:`bench.budget`)."""
    import pandas as pd

    df = df.copy()
    if df.empty:
        for col in ("validity", "validity.status"):
            df[col] = pd.Series(dtype=object)
        return df
    from bench.budget import (budget_trials, epochs_of, kept_phase_trials, kept_trials, paper_epochs, phase_epochs,
                              phase_key, phase_trials, recipe_key, starts_from_map, strongest,
                              trained_by_the_recipe)

    key = [c for c in RUN_KEY if c in df.columns]
    metric_cols = [c for c in df.columns if c.startswith("metrics.")]
    kind = df["kind"] if "kind" in df.columns else pd.Series("id", index=df.index)
    # the kept budget trials and those these records hold, the strongest per key: a frame's own trial
    # never hides a stronger kept one
    trials = strongest(kept_trials(), budget_trials(df))
    phases = strongest(kept_phase_trials(), phase_trials(df))
    by_run = {}
    for _, rec in df[kind == "id"].iterrows():
        metrics = {c.split(".", 1)[1]: rec[c] for c in metric_cols if _num(rec[c]) is not None}
        recipe = recipe_key(rec.get("suite"), rec.get("profile"), rec.get("model"), rec.get("train_config"),
                            rec.get("data_config"))
        trial = trials.get((recipe, epochs_of(rec.get("train_config"))))
        view = {"method": rec.get("method"), "task": rec.get("task"), "suite": rec.get("suite"),
                "num_classes": rec.get("num_classes"), "metrics": metrics, "diagnostics": rec.get("diagnostics"),
                "num_labels": rec.get("num_labels"), "reference": {"nll": rec.get("reference.nll")},  # multilabel
                "method_config": rec.get("method_config"), "train_config": rec.get("train_config"),
                "budget_trial": trial, "budget_same_recipe": trained_by_the_recipe(
                    rec.get("method"), rec.get("method_label"), rec.get("method_config"), rec.get("diagnostics"))}
        phase = phase_epochs(rec.get("diagnostics"))
        if phase is not None and rec.get("method") != "deterministic":
            view.update(phase_epochs=phase, paper_epochs=paper_epochs(rec.get("method"), rec.get("model")),
                        phase_from_map=starts_from_map(rec.get("method"), rec.get("method_config")),
                        phase_trial=phases.get((phase_key(recipe, rec.get("train_config"), rec.get("method")), phase)))
        stored = rec.get("validity") if isinstance(rec.get("validity"), dict) else None
        checks = checks_of(rec.get("method"), stored) + (["map_budget"] if trial is not None else [])
        if view.get("phase_trial") is not None or view.get("paper_epochs") is not None:
            checks.append("phase_budget")
        by_run[tuple(rec[c] for c in key)] = verdict(run_view(view), checks)
    missing = unverified("no clean-test record of this run")
    verdicts = [by_run.get(k, missing) for k in zip(*(df[c] for c in key))]
    df["validity"] = verdicts
    df["validity.status"] = [v["status"] for v in verdicts]
    return df


# -- the verdict of a table's rows ---------------------------------------------------------------------
def worst_status(statuses) -> str:
    """The verdict of several runs (a row's seeds): ``fail`` if one fails, else ``unverified`` if
    one could not be checked, else ``ok``."""
    statuses = set(statuses)
    return FAILED if FAILED in statuses else UNVERIFIED if UNVERIFIED in statuses else OK


def runs_validity(records) -> tuple[str, list[str]]:
    """(status, reasons) of the runs in ``records`` (rows with ``seed``, ``validity`` and
    ``validity.status``): :func:`worst_status`, and each failing check's reason once, with the
    seeds it holds for (the numbers are the first such seed's)."""
    status = worst_status(records["validity.status"].dropna())
    reasons: dict = {}
    for _, r in records.iterrows():
        v = r.get("validity")
        if not isinstance(v, dict) or v.get("status") != status:
            continue
        for text in v.get("reasons") or []:
            reasons.setdefault(text.split(":", 1)[0], [text, []])[1].append(int(r["seed"]))
    texts = [f"{t} (seed {sd[0]})" if len(set(sd)) == 1 else
             f"{t} (seeds {', '.join(map(str, sorted(set(sd))))}; the numbers are seed {sd[0]}'s)"
             for t, sd in reasons.values()]
    return status, texts


def row_validity(df, labels) -> dict:
    """label -> :func:`runs_validity` of the label's clean-test records (all its records when it
    has none)."""
    if "validity.status" not in df.columns:
        return {}
    out = {}
    for lab in labels:
        sub = df[(df["label"] == lab) & (df["kind"] == "id")] if "kind" in df.columns else df[df["label"] == lab]
        out[lab] = runs_validity(sub if not sub.empty else df[df["label"] == lab])
    return out


def board_num_classes(df, suite: str) -> int | None:
    import pandas as pd

    if "num_classes" in df.columns:
        k = pd.to_numeric(df["num_classes"], errors="coerce").dropna()
        if len(k):
            return int(k.iloc[0])
    return num_classes_of(suite)


def reference_row(task: str, k: int | None, keys, df=None) -> tuple[str, dict]:
    """(row title, column key -> value) of the board's uninformed reference: the uniform predictor
    over K classes (:func:`uniform_reference`), or on multilabel boards the training-prevalence
    predictor (:func:`prevalence_reference`)."""
    if task == "multilabel":
        return prevalence_reference(df, keys)
    if task == "segmentation" and k == 2 and df is not None and "metrics.foreground_share" in getattr(df, "columns", ()):
        ref = foreground_share_reference(df, keys)
        if ref:
            return "foreground share for every pixel (reference)", ref
    return f"uniform predictor (1/{k} each; reference)", uniform_reference(task, k, keys)


def foreground_share_reference(df, keys) -> dict:
    """Binary segmentation: what the predictor that says the foreground's share p of the set's
    pixels (``metrics.foreground_share``) for every pixel scores, the reference of the binary
    ``informative`` check: NLL the binary entropy H(p), Brier 2 p (1 - p) (summed over the two
    classes), and, its arg-max being background everywhere, pixel accuracy 1 - p, mIoU (1 - p) / 2
    and foreground Dice 0. Per set, averaged as the columns average a seed's sets (``id.``: the clean
    test set; ``shift.``: the shifted sets, whose labels, and so p, are the test set's)."""
    import pandas as pd

    def scores(p: float) -> dict:
        if not 0 < p < 1:
            return {}
        return {"nll": binary_entropy(p), "brier": 2 * p * (1 - p),
                "pixel_accuracy": 1 - p, "miou": (1 - p) / 2, "dice": 0.0}

    ref = {}
    for key in keys:
        if not key.startswith(("id.", "shift.")):
            continue
        kind, metric = key.split(".", 1)
        sub = df[df["kind"] == kind].dropna(subset=["metrics.foreground_share"])
        if not len(sub):
            continue
        per_set = sub.drop_duplicates(["shift", "severity"])
        vals = [scores(float(p)).get(metric) for p in pd.to_numeric(per_set["metrics.foreground_share"])]
        if vals and all(v is not None for v in vals):
            ref[key] = float(sum(vals) / len(vals))
    return ref


def prevalence_reference(df, keys) -> tuple[str, dict]:
    """Multilabel: what the predictor that says each label's training prevalence scores, from the
    records' ``reference.<metric>`` (each labelled record carries it for its own targets): the id
    set's, and for ``shift.`` columns the mean over the shifted sets (as the shift columns average
    a seed's shifted records). Records without it: 0.5 per label (NLL L ln 2, Brier 0.25, AUROC 0.5)."""
    import pandas as pd

    ref, fallback = {}, False
    for key in keys:
        if not key.startswith(("id.", "shift.")) or df is None or not len(df):
            continue
        kind, metric = key.split(".", 1)
        sub = df[df["kind"] == kind]
        col = f"reference.{metric}"
        if col in sub.columns and sub[col].notna().any():
            per_set = sub.dropna(subset=[col]).drop_duplicates(["shift", "severity"])
            ref[key] = float(pd.to_numeric(per_set[col]).mean())
            continue
        labels = pd.to_numeric(sub.get("num_labels", pd.Series(dtype=float)), errors="coerce").dropna()
        half = {"nll": float(labels.iloc[0]) * math.log(2) if len(labels) else None, "brier": 0.25, "auroc_mean": 0.5}
        if half.get(metric) is not None:
            ref[key], fallback = half[metric], True
    title = ("0.5 for every label (reference)" if fallback
             else "training label prevalence for every example (reference)")
    return title, ref


def uniform_reference(task: str, k: int | None, keys) -> dict:
    """The columns a predictor that says 1/K for every class would score, whatever the data:
    NLL ln K and Brier 1 - 1/K; accuracy 1/K on classification (balanced test sets; an argmax of
    ties picks one class)."""
    if task not in ("classification", "segmentation") or not k:
        return {}
    ref = {}
    for key in keys:
        metric = key.rsplit(".", 1)[-1]
        if not key.startswith(("id.", "shift.")):
            continue
        if metric == "nll":
            ref[key] = float(math.log(k))
        elif metric == "brier":
            ref[key] = 1.0 - 1.0 / k
        elif metric == "accuracy" and task == "classification":
            ref[key] = 1.0 / k
    return ref


# -- command line: the checks, and each kept board's regime -------------------------------------------
def checks_markdown() -> str:
    rows = ["| check | what passes | methods that declare it |", "| --- | --- | --- |"]
    try:
        from methods import METHODS

        users = {c: [m for m in METHODS.names() if c in METHODS.get(m).VALIDITY_CHECKS] for c in CHECKS.names()}
        with_paper = [m for m in METHODS.names() if getattr(METHODS.get(m), "PAPER_EPOCHS", None)]
    except Exception:  # noqa: BLE001
        users, with_paper = {}, []
    users["map_budget"] = ["every method, where the records a table reads, or the trials kept with bench, hold a "
                           "budget trial of its recipe (bench.budget)"]
    users["phase_budget"] = ["every method with a training phase of its own (diagnostics.train.epochs), where the "
                             "records or the kept trials hold a phase trial, or its Method.PAPER_EPOCHS names the "
                             "network (" + ", ".join(with_paper) + ")"]
    for name in CHECKS.names():
        rows.append(f"| `{name}` | {CHECKS.get(name).description} | {', '.join(users.get(name, [])) or '–'} |")
    return "\n".join(rows)


def regime_markdown(results) -> str:
    """Per (suite, model, profile) of the records under ``results``: the MAP network's clean accuracy
    and NLL against a uniform guess, the subnetwork Laplace's s / N, and how many configurations
    are method evidence."""
    import numpy as np

    from bench.store import load_records

    df = load_records(results)
    if df.empty:
        return "no records under " + str(results)
    df = attach_validity(df)
    df = df[(df["status"].fillna("ok") == "ok") & (df["kind"] == "id")]
    rows = ["| suite / model (profile) | MAP clean accuracy, pixels on segmentation, Hamming on multi-label "
            "(chance 1/K; multi-label: the training-prevalence predictor's; binary segmentation: the "
            "foreground-share predictor's) "
            "| MAP clean NLL / ln K (multi-label: / the prevalence predictor's; binary segmentation: / the "
            "foreground-share predictor's) | subnet Laplace s / N "
            "| configurations: ok / fail / unverified |", "| --- | --- | --- | --- | --- |"]
    for (suite, model, profile), g in df.groupby(["suite", "model", "profile"]):
        k = num_classes_of(suite)
        m = g[g["method_label"] == "deterministic"]
        acc = m["metrics.accuracy"] if "metrics.accuracy" in m and m["metrics.accuracy"].notna().any() else \
            m.get("metrics.pixel_accuracy", m.get("metrics.accuracy"))
        multilabel = bool(len(m)) and "task" in m and bool((m["task"] == "multilabel").all())
        if multilabel:  # the uninformed reference is the prevalence predictor's (informative, multilabel)
            ref_acc = m["reference.accuracy"] if "reference.accuracy" in m else None
            ref_nll = m["reference.nll"] if "reference.nll" in m else None
            acc_t = f"{np.mean(acc):.3f} ({np.mean(ref_acc):.3f})" if ref_acc is not None else "–"
            nll_t = f"{np.mean(m['metrics.nll'] / ref_nll):.0%}" if ref_nll is not None else "–"
        elif k == 2 and len(m) and "metrics.foreground_share" in m and m["metrics.foreground_share"].notna().all():
            # binary segmentation: the reference of its informative check, the foreground-share predictor
            p = m["metrics.foreground_share"].astype(float)
            ref_nll = p.map(binary_entropy)
            acc_t = f"{np.mean(acc):.3f} ({np.mean(1 - p):.3f})" if acc is not None else "–"
            nll_t = f"{np.mean(m['metrics.nll'] / ref_nll):.0%}"
        else:
            acc_t = f"{np.mean(acc):.3f} ({1 / k:.3f})" if k and acc is not None and len(m) else "–"
            nll_t = f"{np.mean(m['metrics.nll']) / math.log(k):.0%}" if k and len(m) else "–"
        s_over_n = []
        for v in g[g["method"] == "subnet_laplace"]["validity"]:
            for c in (v or {}).get("checks", []):
                if c["name"] == "laplace_attainable_variance" and "s_over_n" in c["numbers"]:
                    s_over_n.append(c["numbers"]["s_over_n"])
        sn = f"{min(s_over_n):.2g}" + (f"-{max(s_over_n):.2g}" if max(s_over_n) != min(s_over_n) else "") \
            if s_over_n else "–"
        runs = g.groupby(["method_label", "config_hash"])["validity.status"].agg(worst_status)
        counts = " / ".join(str(int((runs == s).sum())) for s in (OK, FAILED, UNVERIFIED))
        rows.append(f"| {suite} / {model} ({profile}) | {acc_t} | {nll_t} | {sn} | {counts} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.validity",
                                description="The validity checks, or the regime of each board of kept records.")
    p.add_argument("--results", default=None, help="print each (suite, model, profile) board's regime instead")
    a = p.parse_args(argv)
    print(regime_markdown(a.results) if a.results else checks_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
