"""One training loop for every method: SGD/Adam, schedules, divergence check, resumable epochs."""
from __future__ import annotations

import copy
import math
import os
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bench.data import TensorLoader
from bench.options import ListOf, OneOf, Range, check_options
from bench.errors import BenchError, DivergedError
from bench.measurement import NO_USAGE, ThreadUsage, add_usage
from bench.torch_files import load_or_set_aside, save_torch


@dataclass
class TrainConfig:
    """The training budget a suite profile gives every method (methods may scale epochs)."""

    epochs: int = 5
    batch_size: int = 128
    optimizer: str = "sgd"  # "sgd" | "adam"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    schedule: str = "constant"  # "constant" | "cosine" | "step"
    warmup_epochs: float = 0.0  # linear warm-up from 0 (step-based)
    milestones: list[int] = field(default_factory=list)  # for "step": epochs where lr /= 10
    grad_clip: float | None = None
    max_train_examples: int | None = None  # profile-level cap (smoke)
    # the training steps' arithmetic (LATER_FIELDS): "bf16" runs each step's forward pass and loss
    # under torch.autocast in bfloat16 (the weights, their gradients and the optimiser stay float32;
    # evaluation is float32 either way); channels_last trains a 4-d-input network in the channels-last
    # memory layout (back to the usual one after training): the GPU recipe's (cifar10c's gpu profile)
    precision: str = "fp32"  # "fp32" | "bf16"
    channels_last: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise BenchError(f"unknown training option(s) {sorted(unknown)}; valid: {sorted(names)}")
        return cls(**d)

    def check(self) -> "TrainConfig":
        """Every field valid for a run (:data:`TRAIN_CONSTRAINTS`), else one BenchError naming
        them; called when a run is planned, before any data is loaded."""
        check_options("training (train.*)", self.to_dict(), {}, TRAIN_CONSTRAINTS)
        return self

    def to_dict(self) -> dict:
        """The fields, those of :data:`LATER_FIELDS` left out at the value that is the behaviour
        before they existed (so a cell's identity, its MAP network's key and its records' training
        configuration are what they were before them)."""
        return {k: v for k, v in asdict(self).items() if not (k in LATER_FIELDS and v == LATER_FIELDS[k])}

    def replace(self, **kw) -> "TrainConfig":
        return TrainConfig.from_dict({**self.to_dict(), **kw})


#: training options added after records were kept, with the value that is the earlier behaviour
LATER_FIELDS = {"precision": "fp32", "channels_last": False}
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine", "step")
PRECISIONS = ("fp32", "bf16")
#: what a run's training budget may be (an untrained network is not a result: epochs >= 1)
TRAIN_CONSTRAINTS = {
    "epochs": Range(1, integer=True),
    "batch_size": Range(1, integer=True),
    "optimizer": OneOf(*OPTIMIZERS),
    "lr": Range(0, lo_open=True),
    "momentum": Range(0, 1, hi_open=True),
    "weight_decay": Range(0),
    "schedule": OneOf(*SCHEDULES),
    "warmup_epochs": Range(0),
    "milestones": ListOf(Range(1, integer=True), min_len=0),
    "grad_clip": Range(0, lo_open=True, optional=True),
    "max_train_examples": Range(1, integer=True, optional=True),
    "precision": OneOf(*PRECISIONS),
    "channels_last": OneOf(True, False),
}


def _optimizer(kind: str, groups: list[dict], cfg: TrainConfig) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise BenchError(f"unknown optimizer {kind!r}; valid: {', '.join(OPTIMIZERS)}")


class OptimizerChain:
    """Several torch optimisers stepped together, one per optimiser kind of the parameter
    groups (e.g. the means with the profile's SGD, the variational ``rho`` with Adam).
    ``param_groups`` lists every group, so the learning-rate schedule scales all of them."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def state(self) -> dict:
        """Per-parameter state of every optimiser (the parameter sets are disjoint)."""
        return {p: st for o in self.optimizers for p, st in o.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def state_dict(self) -> dict:
        return {"chain": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        states = state.get("chain") if isinstance(state, dict) else None
        if states is None or len(states) != len(self.optimizers):
            raise BenchError("optimizer state does not match this optimiser chain")
        for o, st in zip(self.optimizers, states):
            o.load_state_dict(st)


def own_group(params, optimizer: str, lr: float) -> dict:
    """A parameter group with its own optimiser kind and rate and no weight decay, for
    :func:`make_optimizer` (the variational ``rho`` of the VI methods)."""
    return {"params": list(params), "optimizer": str(optimizer), "lr": float(lr), "weight_decay": 0.0}


def make_optimizer(params, cfg: TrainConfig):
    """The profile's optimiser over ``params`` (tensors, or parameter-group dicts).

    A group may name its own ``"optimizer"`` (``adam`` / ``sgd``) and ``lr`` /
    ``weight_decay``; groups of another kind than the profile's get an optimiser of their own
    and the result is an :class:`OptimizerChain`. Without such groups: one torch optimiser.
    """
    params = list(params)
    if not params or not isinstance(params[0], dict):
        params = [{"params": params}]
    by_kind: dict[str, list[dict]] = {}
    for g in params:
        g = dict(g)
        kind = str(g.pop("optimizer", cfg.optimizer))
        g["params"] = [p for p in g["params"] if p.requires_grad]
        if g["params"]:
            by_kind.setdefault(kind, []).append(g)
    if not by_kind:
        raise BenchError("no trainable parameters to optimise")
    opts = [_optimizer(kind, groups, cfg) for kind, groups in by_kind.items()]
    return opts[0] if len(opts) == 1 else OptimizerChain(opts)


def lr_factor(cfg: TrainConfig, step: int, steps_per_epoch: int) -> float:
    total = max(1, cfg.epochs * steps_per_epoch)
    warm = int(cfg.warmup_epochs * steps_per_epoch)
    if warm and step < warm:
        return (step + 1) / warm
    if cfg.schedule == "constant":
        return 1.0
    if cfg.schedule == "cosine":
        t = (step - warm) / max(1, total - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))
    if cfg.schedule == "step":
        epoch = step // steps_per_epoch
        return 0.1 ** sum(epoch >= m for m in cfg.milestones)
    raise BenchError(f"unknown schedule {cfg.schedule!r}; valid: constant, cosine, step")


LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor, float], torch.Tensor]


def progress_enabled(requested: bool) -> bool:
    return requested and sys.stderr.isatty()


class _EarlierTime(threading.local):
    def __init__(self):
        self.boxes: list[list] = []


_EARLIER = _EarlierTime()


@contextmanager
def earlier_training_time():
    """Collect the training time that the trainings inside the block resumed from: the seconds
    earlier processes spent on the epochs a partial checkpoint holds (a run killed mid-fit and
    started again). Yields a two-element list, ``[seconds, usage]``: seconds 0.0 when nothing was
    resumed, NaN when a resumed checkpoint predates this bookkeeping (its earlier time is unknown);
    usage what the earlier processes' training thread did with that time
    (:class:`bench.measurement.ThreadUsage`; ``NO_USAGE`` when nothing was resumed, None when a
    resumed checkpoint does not say). Blocks nest; a training counts in the innermost one only (the
    MAP cache's own block keeps a MAP network's earlier time out of the fit that asked for it)."""
    box = [0.0, dict(NO_USAGE)]
    _EARLIER.boxes.append(box)
    try:
        yield box
    finally:
        _EARLIER.boxes.pop()


class TrainingClock:
    """Wall time of one training across resumes: what the resumed checkpoint says earlier
    processes spent (``state["train_seconds"]``) plus this process's time since the clock was
    made, and what the training thread did with it (``state["train_usage"]`` plus this process's
    :class:`~bench.measurement.ThreadUsage`; None when a resumed checkpoint predates it). Reports
    the earlier part to the innermost :func:`earlier_training_time` block, so that the fit time a
    record carries is the whole training's, not only its last piece."""

    def __init__(self, resumed_state: dict | None = None):
        self.earlier = 0.0 if resumed_state is None else float(resumed_state.get("train_seconds", math.nan))
        self.earlier_usage = dict(NO_USAGE) if resumed_state is None else resumed_state.get("train_usage")
        self.t0 = time.perf_counter()
        self._usage = ThreadUsage()
        if _EARLIER.boxes and resumed_state is not None:
            box = _EARLIER.boxes[-1]
            box[0] += self.earlier
            box[1] = add_usage(box[1], self.earlier_usage)

    def seconds(self) -> float:
        return self.earlier + (time.perf_counter() - self.t0)

    def usage(self) -> dict | None:
        """The whole training's usage, earlier processes' pieces included (None: one of them unknown)."""
        return add_usage(self.earlier_usage, self._usage.usage())


#: seconds between two resume checkpoints of a training in progress: one is written after an epoch once
#: this long has passed since the last one (or the start), so an interrupted training loses at most this
#: and one epoch, and a training of short epochs is not pickled and fsynced after every one of them (a
#: LeNet epoch on a GPU takes about a second). ``BENCH_CHECKPOINT_INTERVAL_S`` overrides it; 0 writes
#: one after every epoch.
CHECKPOINT_INTERVAL_S = 60.0


def checkpoint_interval() -> float:
    """:data:`CHECKPOINT_INTERVAL_S`, or ``BENCH_CHECKPOINT_INTERVAL_S`` when set (seconds, >= 0)."""
    raw = os.environ.get("BENCH_CHECKPOINT_INTERVAL_S")
    if raw is None or raw.strip() == "":
        return CHECKPOINT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise BenchError(f"BENCH_CHECKPOINT_INTERVAL_S={raw!r}: give the seconds between two resume checkpoints "
                         f"of a training, a number >= 0 (0: after every epoch; unset: {CHECKPOINT_INTERVAL_S:g})")
    return value


class CheckpointSchedule:
    """When a training writes its resume checkpoint: :meth:`due` after an epoch is true once
    :func:`checkpoint_interval` seconds have passed since the last checkpoint (or the start)."""

    def __init__(self):
        self.interval = checkpoint_interval()
        self.last = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.interval:
            return False
        self.last = now
        return True


def save_training_state(path, model: nn.Module, optimizer, loader: TensorLoader, **extra) -> None:
    """Checkpoint (atomically) what a resumed training needs after a finished epoch: model,
    optimiser, data order and torch's random state, plus ``extra`` (epoch, log, and
    ``train_seconds`` from the loop's :class:`TrainingClock`, ...)."""
    save_torch({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "loader": loader.state_dict(),
                "torch_rng": torch.get_rng_state(), **extra}, Path(path))


def restore_training_state(path, model: nn.Module, optimizer, loader: TensorLoader,
                           identity: dict | None = None) -> dict | None:
    """Restore what :func:`save_training_state` wrote at ``path`` into model, optimiser, loader and
    torch's random state, and return the whole saved dict; None when there is nothing to resume
    (no file, or a damaged one, which is set aside and model, optimiser and data order put back as
    they were given). ``identity``: what the checkpoint must have been saved with (its ``identity``
    extra, e.g. the settings and starting network of the run); one saved with another is set aside too."""
    if path is None or not Path(path).exists():
        return None

    def restore(state):
        if identity is not None and state.get("identity") != identity:
            raise ValueError(f"saved by another run ({state.get('identity')}, not {identity})")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        torch.set_rng_state(state["torch_rng"])

    initial = copy.deepcopy((model.state_dict(), optimizer.state_dict(), loader.state_dict()))
    state = load_or_set_aside(Path(path), restore)
    if state is None:  # train from the start, from what was given
        model.load_state_dict(initial[0])
        optimizer.load_state_dict(initial[1])
        loader.load_state_dict(initial[2])
    return state


#: on an accelerator, how many training steps run between two reads of the loss on the host (the
#: divergence check); a non-finite loss is then reported with the steps it lies between
DIVERGENCE_CHECK_STEPS = 50


def divergence_check_steps(device: torch.device) -> int:
    """Steps between two reads of the summed loss: every step on the CPU (a read costs nothing
    there, and a diverged training stops at once), :data:`DIVERGENCE_CHECK_STEPS` elsewhere."""
    return 1 if device.type == "cpu" else DIVERGENCE_CHECK_STEPS


def host_float(value) -> float | None:
    """A loss term a training step left on its device (a tensor), read as a Python float; None stays
    None. The loss functions' ``log`` holds tensors, read at an epoch's end, not at every step."""
    return None if value is None else float(value)


class RunningLoss:
    """An epoch's summed training loss, kept on the loss's device (float64; float32 on MPS) and read
    on the host every :func:`divergence_check_steps` steps and at the epoch's last step: on a GPU a
    per-step read waits for the step to finish (a LeNet step on an H200 is bound by the host's kernel
    launches, which it then cannot run ahead). :meth:`add` raises :class:`DivergedError` at the first
    read that finds it non-finite, naming the step (every step on the CPU) or the steps it lies between,
    after calling ``on_diverge`` (e.g. closing the loop's progress bar)."""

    def __init__(self, epoch: int, steps_per_epoch: int, desc: str, on_diverge: Callable[[], None] | None = None):
        self.epoch, self.last_step, self.desc, self.on_diverge = epoch, steps_per_epoch - 1, desc, on_diverge
        self.sum, self.count, self.checked, self.check = None, 0, -1, 1

    def add(self, i: int, loss: torch.Tensor, n: int) -> None:
        """Step ``i``'s mean loss over its ``n`` examples (before the step's backward pass)."""
        if self.sum is None:
            self.sum = torch.zeros((), dtype=torch.float32 if loss.device.type == "mps" else torch.float64,
                                   device=loss.device)
            self.check = divergence_check_steps(loss.device)
        self.sum += loss.detach().to(self.sum.dtype) * n
        self.count += n
        if (i - self.checked) >= self.check or i == self.last_step:
            if not torch.isfinite(self.sum):
                if self.on_diverge is not None:
                    self.on_diverge()
                if i - self.checked == 1:
                    raise DivergedError(f"non-finite loss {loss.item()} at epoch {self.epoch} step {i} ({self.desc})")
                raise DivergedError(f"non-finite loss at epoch {self.epoch}, in steps {self.checked + 1}-{i} "
                                    f"({self.desc})")
            self.checked = i

    def mean(self) -> float:
        """The epoch's mean loss per example so far (0.0 before any step)."""
        return float(self.sum) / max(self.count, 1) if self.sum is not None else 0.0


class StepFormat:
    """The arithmetic and memory layout of a training loop's steps (``train.precision``,
    ``train.channels_last``), for :func:`train_model` and the methods with a loop of their own: made
    at the loop's start (the network goes to the channels-last layout then, its parameters in place,
    so an optimiser keeps them), :meth:`batch` for each input batch, :meth:`forward` around each
    step's forward pass and loss (bfloat16 autocast on the batch's device type), :meth:`done` after
    the last step (the network back in the usual layout).

    In bfloat16 on the CPU a convolution whose input is smaller than its stride is refused
    (:class:`BenchError`, at its first forward pass): oneDNN's bfloat16 convolution then returns NaN
    weight gradients at random (PyTorch 2.14.1; e.g. ``resnet_small``'s last block on 32x32 images,
    a 3x3 stride-2 convolution on a 1x1 map, in about one step in seven), which a fit would report as
    a divergence of the method. Every other size, and float32, trains as usual."""

    def __init__(self, cfg: TrainConfig, model: nn.Module):
        if cfg.precision not in PRECISIONS:
            raise BenchError(f"unknown precision {cfg.precision!r}; valid: {', '.join(PRECISIONS)}")
        self.bf16, self.channels_last, self.model = cfg.precision == "bf16", bool(cfg.channels_last), model
        self._hooks = []
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        if self.bf16 and on_cpu:  # no hook on a GPU's hot path: the defect is oneDNN's
            self._hooks = [m.register_forward_pre_hook(self._conv_check(name)) for name, m in model.named_modules()
                           if isinstance(m, nn.modules.conv._ConvNd)]
        if self.channels_last:
            model.to(memory_format=torch.channels_last)

    def batch(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def forward(self, device: torch.device):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()

    def done(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.channels_last:
            self.model.to(memory_format=torch.contiguous_format)

    def _conv_check(self, name: str):
        def check(module, inputs):
            x = inputs[0]
            if not torch.is_autocast_enabled("cpu"):  # an evaluation outside the training steps
                return
            size = tuple(x.shape[-len(module.stride):])
            if any(n < s for n, s in zip(size, module.stride)):
                self.done()
                raise BenchError(
                    f"train.precision=bf16 on the CPU: layer {name or type(module).__name__} has a "
                    f"{'x'.join(map(str, size))} input and stride {'x'.join(map(str, module.stride))}; "
                    f"PyTorch {torch.__version__.split('+')[0]}'s oneDNN bfloat16 convolution returns NaN weight "
                    f"gradients at random when an input is smaller than the stride, which would read as a "
                    f"diverged fit. Train this network in float32 on the CPU (train.precision=fp32), or in "
                    f"bfloat16 on a GPU")
        return check


def train_model(model: nn.Module, loader: TensorLoader, cfg: TrainConfig, loss_fn: LossFn, *,
                params=None, desc: str = "train", progress: bool = False,
                resume_path: str | os.PathLike | None = None,
                on_epoch_end: Callable[[int], None] | None = None,
                epoch_stats: Callable[[], dict] | None = None, callback_state: dict | None = None) -> dict:
    """Minimise ``loss_fn(model, x, y, fraction_of_training_done)`` over ``cfg.epochs`` epochs.

    Raises :class:`DivergedError` on a non-finite loss. With ``resume_path`` the model,
    optimiser and data order are checkpointed after an epoch, at most once every
    :func:`checkpoint_interval` seconds (:class:`CheckpointSchedule`), and a restarted call
    continues from the epoch of the last checkpoint. Returns a small training log (``train_seconds``:
    the whole training's wall time, the epochs of earlier processes included; ``resumed_seconds``:
    that earlier part, 0.0 without a resume; see :class:`TrainingClock`); with
    ``epoch_stats`` the dict it returns after each epoch is appended to ``log["epoch_stats"]``
    (checkpointed with the log, so it survives a resume). ``callback_state``: a dict an
    ``on_epoch_end`` callback keeps its own state in (tensors and plain Python data); it is
    checkpointed with the rest and, on a resume, filled in place with the saved contents.
    """
    from tqdm.auto import tqdm

    optimizer = make_optimizer(params if params is not None else model.parameters(), cfg)
    base_lrs = [g["lr"] for g in optimizer.param_groups]
    steps_per_epoch = len(loader)
    start_epoch, log = 0, {"epoch_loss": []}
    resume_path = Path(resume_path) if resume_path else None
    state = restore_training_state(resume_path, model, optimizer, loader)
    clock = TrainingClock(state)
    if state is not None:
        start_epoch, log = state["epoch"], state["log"]
        if callback_state is not None:
            callback_state.clear()
            callback_state.update(state.get("callback_state") or {})

    total_steps = max(1, cfg.epochs * steps_per_epoch)
    checkpoints = CheckpointSchedule() if resume_path is not None else None
    fmt = StepFormat(cfg, model)
    bar = tqdm(total=cfg.epochs * steps_per_epoch, initial=start_epoch * steps_per_epoch, desc=desc,
               disable=not progress_enabled(progress), leave=False, mininterval=0.5)
    model.train()
    for epoch in range(start_epoch, cfg.epochs):
        running = RunningLoss(epoch, steps_per_epoch, desc, bar.close)  # read on the host every few steps only
        for i, (x, y) in enumerate(loader):
            step = epoch * steps_per_epoch + i
            f = lr_factor(cfg, step, steps_per_epoch)
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr * f
            x = fmt.batch(x)
            with fmt.forward(x.device):
                loss = loss_fn(model, x, y, step / total_steps)
            running.add(i, loss, len(x))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], cfg.grad_clip)
            optimizer.step()
            bar.update(1)
            if i % 20 == 0 and not bar.disable:
                bar.set_postfix(epoch=epoch, loss=f"{running.mean():.4f}")
        log["epoch_loss"].append(running.mean())
        if epoch_stats is not None:
            log.setdefault("epoch_stats", []).append(epoch_stats())
        if on_epoch_end is not None:
            on_epoch_end(epoch)
        if resume_path is not None and epoch + 1 < cfg.epochs and checkpoints.due():
            save_training_state(resume_path, model, optimizer, loader, epoch=epoch + 1, log=log,
                                callback_state=callback_state or {}, train_seconds=clock.seconds(),
                                train_usage=clock.usage())
    bar.close()
    fmt.done()
    if resume_path is not None and resume_path.exists():
        resume_path.unlink()
    model.eval()
    log["train_seconds"] = clock.seconds()  # the whole training's, earlier processes' epochs included
    log["resumed_seconds"] = clock.earlier
    return log


@torch.no_grad()
def validation_nll(model: nn.Module, task, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256,
                   forward: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """The mean NLL of ``model`` on a validation split (eval mode, batches moved to the model's
    device; segmentation: summed over the labelled pixels, then divided by their number). The
    model's mode is restored; no random number is drawn. ``forward``: the outputs another way
    than ``model(x)`` (a posterior's mean network), with ``model`` in eval mode."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    forward = forward or model
    total, count = 0.0, 0
    try:
        for i in range(0, len(x), batch_size):
            xb, yb = x[i:i + batch_size].to(device), y[i:i + batch_size].to(device)
            total += float(task.loss(forward(xb), yb, reduction="sum"))
            if task.kind == "segmentation":
                count += int((yb != task.ignore_index).sum())
            else:
                count += len(xb)
    finally:
        model.train(was)
    return total / max(count, 1)


def validation_curve(model: nn.Module, task, val, batch_size: int,
                     forward: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """``epoch_stats`` for :func:`train_model` recording the validation NLL after every epoch
    (:func:`validation_nll`; it draws no random number, so the network trains exactly as without
    it), or None without a validation split. :func:`training_curve` reads it back from the log.
    ``forward``: a variational posterior's mean network (its outputs with every weight at its mean),
    whose curve says whether the method's own training ended at rest (bench.validity.vi_converged)."""
    if val is None or val[0] is None or not len(val[0]):
        return None
    vx, vy = val
    bs = max(int(batch_size), 64)
    return lambda: {"val_nll": validation_nll(model, task, vx, vy, bs, forward=forward)}


def training_curve(log: dict) -> dict:
    """``{"epoch_loss", "val_nll"}`` per epoch from a :func:`train_model` log (``val_nll`` None
    without a :func:`validation_curve`): the evidence bench.validity's map_converged reads."""
    return {"epoch_loss": [float(v) for v in log.get("epoch_loss", [])],
            "val_nll": [e.get("val_nll") for e in log.get("epoch_stats", [])] or None}


def nll_loss(task) -> LossFn:
    """The plain maximum-likelihood (MAP with weight decay) objective."""

    def fn(model, x, y, _progress):
        return task.loss(model(x), y)

    return fn
