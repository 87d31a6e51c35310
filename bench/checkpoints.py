"""Checkpoints: the shared cache of trained deterministic (MAP) networks, and fitted methods.

Methods that start from a MAP network (PBN, subnetwork Laplace, ensembles whose members
are MAP networks of distinct seeds) ask ``MapCache.get(seed)``: the network is trained
once per (suite, data, model, training budget, seed) and reused by every method after.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bench.allocator import allocator_settings
from bench.data import TensorLoader
from bench.errors import DivergedError
from bench.events import log_event
from bench.locks import file_lock
from bench.measurement import NO_USAGE, ThreadUsage, add_usage
from bench.provenance import cpu_model, worker_identity
from bench.seeding import derive_seed, isolated_rng, seed_everything
from bench.store import atomic_write_json, config_hash, read_record
from bench.torch_files import DamagedCheckpointError, load_or_set_aside, load_torch, save_torch  # noqa: F401
from bench.training import (TrainConfig, earlier_training_time, nll_loss, train_model, training_curve,
                            validation_curve)


def network_digest(state_dict) -> str:
    """A short SHA-256 of a network's weights (every entry's name, dtype, shape and bytes, in order):
    the identity of the MAP network a record stands on. Two fits of one seed on different machines
    differ in it (CPU floating point), so a paired comparison can keep to runs on the same network."""
    import hashlib

    h = hashlib.sha256()
    for name, t in state_dict.items():
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def state_digest(state) -> str:
    """A short SHA-256 of a fitted method's state (its ``state_dict``: tensors by dtype, shape and
    bytes, mappings by sorted key, sequences in order, anything else by type and ``repr``): the
    identity of the fit its records come from (:func:`bench.store.fit_key`). A deterministic refit repeats it;
    a refit on other hardware, or after a change, does not."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()

    def feed(obj) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().to("cpu").contiguous()
            h.update(f"T|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, np.ndarray):
            a = np.ascontiguousarray(obj)
            h.update(f"A|{a.dtype}|{a.shape}|".encode())
            h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
        elif isinstance(obj, dict):
            h.update(f"D|{len(obj)}|".encode())
            for k in sorted(obj, key=repr):
                h.update(f"{k!r}=".encode())
                feed(obj[k])
        elif isinstance(obj, (list, tuple)):
            h.update(f"L|{type(obj).__name__}|{len(obj)}|".encode())
            for v in obj:
                feed(v)
        else:
            h.update(f"O|{type(obj).__name__}|{obj!r}|".encode())

    feed(state)
    return h.hexdigest()[:16]


def recorded_networks(records: Path, model: str, seed: int, train: dict) -> dict[str, int]:
    """``{digest: cells}``: the MAP networks of ``model``'s seed ``seed`` trained with ``train`` that
    the cells kept under ``records`` (a suite's records folder, loose files and packs alike) stand on, as
    their ``id`` record's diagnostics name them (:func:`bench.reporting.data.map_network`, as the
    leaderboard pairs runs)."""
    from pathlib import PurePosixPath

    from bench.reporting.data import map_network
    from bench.store import ResultsStore

    records = Path(records)
    found: dict[str, int] = {}
    seen = set()
    for rel, rec in ResultsStore(records.parent.parent).iter_located(records.parent.name):
        parts = PurePosixPath(rel).parts  # <suite>/records/<model>/<method>-<hash>/seed<k>/<set>.json
        if len(parts) != 6 or parts[2] != str(model) or parts[4] != f"seed{seed}" or not parts[5].startswith("id-"):
            continue
        sha = map_network(rec.get("diagnostics"))[0]
        if sha and parts[3] not in seen:
            seen.add(parts[3])
            if rec.get("train_config") == train:
                found[sha] = found.get(sha, 0) + 1
    return found


def _with_digest(log: dict | None, state_dict) -> dict | None:
    """``log`` with the weights' :func:`network_digest` (computed where a checkpoint of earlier code lacks it)."""
    if not isinstance(log, dict) or log.get("network_sha"):
        return log
    return {**log, "network_sha": network_digest(state_dict)}


def pretrained_path(pretrained: dict, seed: int):
    """The weights file of the MAP network of ``seed``: one file for every seed (``{"path": ...}``,
    e.g. ``data.weights``), or one per seed (``{"per_seed": {"0": {"path": ...}, ...}}``,
    ``bench.evaluate(map_checkpoint={seed: file})``)."""
    from bench.errors import BenchError

    per_seed = pretrained.get("per_seed")
    if per_seed is None:
        return pretrained["path"]
    if str(seed) not in per_seed:
        raise BenchError(f"no MAP checkpoint for seed {seed}; given for seeds {', '.join(sorted(per_seed))}")
    return per_seed[str(seed)]["path"]


class MapCache:
    def __init__(self, root: Path, key: dict, build_model: Callable[..., nn.Module], task,
                 train_x: torch.Tensor, train_y: torch.Tensor, train_cfg: TrainConfig,
                 device: torch.device, augment=None, progress: bool = False, refresh: bool = False,
                 pretrained: dict | None = None, legacy_keys: list[dict] = (), val: tuple | None = None):
        self.dir = Path(root) / "map" / str(key.get("model", "model")) / config_hash(key)
        # where older code cached the same networks (a key that also held evaluation-only options)
        self.legacy_dirs = [Path(root) / "map" / str(k.get("model", "model")) / config_hash(k) for k in legacy_keys]
        self.events_path = Path(root).parent / "events.jsonl"  # <results>/<suite>/events.jsonl
        self.records_dir = Path(root).parent / "records"
        self.key = key
        self.build_model, self.task = build_model, task
        self.train_x, self.train_y, self.train_cfg = train_x, train_y, train_cfg
        self.device, self.augment, self.progress = device, augment, progress
        self.refresh = refresh  # retrain each seed once in this process even if cached (--force)
        self.trained_now: list[int] = []  # seeds trained (not loaded) by this cache instance
        self.train_time_s: dict[int, float] = {}
        self.in_process_s: dict[int, float] = {}  # of the networks trained now: the part this process ran
        self.retried: set[int] = set()
        self.requested: list[int] = []  # every get(seed), in order: the harness charges their training time
        # {"path": weights file, ...}: the MAP network is these published weights for every seed
        # (nothing trained, nothing cached; its training is not this benchmark's cost)
        self.pretrained = pretrained
        # (val_x, val_y): the validation NLL after every epoch of a MAP network trained here is kept
        # in its checkpoint (train_log), the evidence that its training converged (bench.validity)
        self.val = val
        self.logs: dict[int, dict | None] = {}
        self._checked: set[int] = set()  # seeds whose network was compared with the cells' (_check_kept_cells)
        self._data_hash: str | None = None  # data_hash(), when a failure record needs it

    def path(self, seed: int) -> Path:
        return self.dir / f"seed{seed}.pt"

    def cached_path(self, seed: int) -> Path:
        """Where the network of ``seed`` is cached: :meth:`path`, or a legacy key's file when only
        that one exists."""
        path = self.path(seed)
        if not path.exists():
            for d in self.legacy_dirs:
                if (d / path.name).exists():
                    return d / path.name
        return path

    def failure_path(self, seed: int) -> Path:
        return self.dir / f"seed{seed}.failed.json"

    def get(self, seed: int) -> nn.Module:
        """The MAP network for ``seed`` on the device in eval mode (trained and cached if absent).
        One process trains it; a concurrent run on the same results directory (or another worker
        of a distributed run) waits, then loads. The caller's random streams are left as they
        were, so that a method draws the same numbers whether the network was trained here or
        loaded."""
        self.requested.append(seed)
        with isolated_rng(self.device), file_lock(self.path(seed).with_suffix(".lock"), wait=True):
            return self._get(seed)

    def _get(self, seed: int) -> nn.Module:
        if self.pretrained is not None:
            from bench.models import load_pretrained

            model = self.build_model(dropout=0.0)
            load_pretrained(model, pretrained_path(self.pretrained, seed))
            self.train_time_s[seed] = 0.0
            return model.to(self.device).eval()
        path = self.path(seed)
        failed = self.failure_path(seed)
        if failed.exists() and not (self.refresh and seed not in self.retried) and self.failed_on_this_data(failed):
            # trained once and diverged: every method built on it fails the same way, without retraining
            err = json.loads(failed.read_text()).get("error", "?")
            raise DivergedError(f"the MAP network of seed {seed} failed to train earlier ({err}; {failed}); "
                                f"use --force to retry")
        self.retried.add(seed)
        model = self.build_model(dropout=0.0)
        cached = self.cached_path(seed)
        if cached.exists() and not (self.refresh and seed not in self.trained_now):
            state = load_or_set_aside(cached, lambda st: model.load_state_dict(st["model"]))
            if state is not None:
                self.train_time_s.setdefault(seed, state.get("train_time_s", float("nan")))
                self.logs[seed] = _with_digest(state.get("train_log"), state["model"])
                self._check_kept_cells(seed, cached, trained=False)
                return model.to(self.device).eval()
        gen_seed = derive_seed("map", seed)
        seed_everything(gen_seed)
        model = self.build_model(dropout=0.0).to(self.device)
        loader = TensorLoader(self.train_x, self.train_y, self.train_cfg.batch_size, shuffle=True,
                              seed=gen_seed, device=self.device, augment=self.augment)
        usage = ThreadUsage()
        try:
            stats = validation_curve(model, self.task, self.val, self.train_cfg.batch_size)
            with earlier_training_time() as earlier:  # a MAP network resumed here: its earlier epochs count
                trained = train_model(model, loader, self.train_cfg, nll_loss(self.task), desc=f"MAP seed {seed}",
                                      progress=self.progress, resume_path=path.with_suffix(".partial"),
                                      epoch_stats=stats)
        except DivergedError as exc:
            atomic_write_json(failed, {"seed": seed, "error": str(exc), "key": self.key, "data_hash": self.data_hash()})
            raise
        failed.unlink(missing_ok=True)
        used = usage.usage()
        self.in_process_s[seed] = used["wall_s"]  # inside a fit's timer: not the fit's time
        elapsed = self.in_process_s[seed] + earlier[0]
        self.logs[seed] = {**training_curve(trained), "network_sha": network_digest(model.state_dict()),
                           "torch_threads": torch.get_num_threads(), "cpu": cpu_model(),
                           "allocator": allocator_settings(),
                           # what the training did with its time: stops, waits for a core (resumed pieces included)
                           "usage": add_usage(used, earlier[1])}
        save_torch({"model": model.state_dict(), "key": self.key, "seed": seed, "train_time_s": elapsed,
                    "train_log": self.logs[seed], **worker_identity()}, path)
        log_event(self.events_path, "map_trained", model=self.key.get("model"), seed=seed, seconds=elapsed,
                  checkpoint=str(path))
        self.trained_now.append(seed)
        self.train_time_s[seed] = elapsed
        self._check_kept_cells(seed, path, trained=True)
        return model.eval()

    def _check_kept_cells(self, seed: int, path: Path, trained: bool) -> None:
        """Say (standard error and the events log), once per seed, when cells of this results folder
        stand on another fit of the MAP network of ``seed`` than the one trained now or loaded from
        ``path`` (:func:`recorded_networks`): a CPU fit repeats bit for bit only at one thread count
        on one CPU, and rows on two fits are not paired (the leaderboard keeps them apart), so a grid
        or tuning that goes on from here compares across fits."""
        import sys

        if seed in self._checked:
            return
        self._checked.add(seed)
        log = self.logs.get(seed) or {}
        sha = log.get("network_sha")
        if not sha:
            return
        kept = recorded_networks(self.records_dir, str(self.key.get("model", "model")), seed, self.key.get("train"))
        others = {d: n for d, n in kept.items() if d != sha}
        if not others:
            return
        how = (f"trained now ({sha}, {log.get('torch_threads')} torch thread(s) on {log.get('cpu')})" if trained else
               f"loaded from {path} ({sha})")
        theirs = ", ".join(f"{d} ({n} cell(s))" for d, n in sorted(others.items()))
        ours = f"; they pair with the {kept[sha]} cell(s) here that stand on this one" if kept.get(sha) else ""
        print(f"warning: the MAP network of {self.key.get('model')} seed {seed} {how} is another fit than the one(s) "
              f"some cells of this results folder stand on ({theirs}): new cells on it are not paired with "
              f"those{ours}. To go on from those cells, stop, put their network's checkpoint at {self.path(seed)} "
              f"(or train it again with the thread count and CPU it was trained with) and run again (kept networks: "
              f"scripts/keep_records.py save-maps)", file=sys.stderr, flush=True)
        log_event(self.events_path, "map_another_fit", model=self.key.get("model"), seed=seed, network_sha=sha,
                  trained=trained, kept=others, on_this_one=kept.get(sha, 0), checkpoint=str(path),
                  **{k: log[k] for k in ("torch_threads", "cpu", "allocator") if k in log})

    def data_hash(self) -> str:
        """A hash of the data the networks train on (:func:`bench.data.data_digest`), computed once."""
        if self._data_hash is None:
            from bench.data import data_digest

            self._data_hash = data_digest(self.train_x, self.train_y, *(self.val or ()))
        return self._data_hash

    def failed_on_this_data(self, failed: Path) -> bool:
        """Whether the failure record ``failed`` was written on the data this cache trains on: one
        written on other data (or by code that did not record which) is retried, as the data may
        have been fixed since."""
        try:
            return json.loads(failed.read_text()).get("data_hash") == self.data_hash()
        except (OSError, ValueError, AttributeError):
            return False

    def training_log(self, seed: int) -> dict | None:
        """``{"epoch_loss", "val_nll"}`` per epoch of the MAP network of ``seed`` and its weights'
        ``network_sha`` (:func:`network_digest`) (None: a pretrained network, or one cached by code
        that did not keep the curve)."""
        if self.pretrained is not None:  # published weights: their training is not this benchmark's
            return {"pretrained": str(pretrained_path(self.pretrained, seed))}
        if seed not in self.logs and self.cached_path(seed).exists():
            state = load_or_set_aside(self.cached_path(seed))
            self.logs[seed] = None if state is None else _with_digest(state.get("train_log"), state["model"])
        return self.logs.get(seed)

    def upstream_usage(self, seeds) -> dict | None:
        """What the training threads of the MAP networks of ``seeds`` did with their time, together
        (:class:`bench.measurement.ThreadUsage`; from the networks' training logs): None when one of
        them was trained before bench recorded it; ``NO_USAGE`` for published weights."""
        if self.pretrained is not None:
            return dict(NO_USAGE)
        total = dict(NO_USAGE)
        for s in seeds:
            total = add_usage(total, (self.training_log(s) or {}).get("usage"))
        return total

    def upstream_time(self, seeds) -> float:
        """Total training time of the MAP networks of ``seeds`` (for methods built on them),
        read from the cached checkpoints when this process did not train or load them."""
        total = 0.0
        for s in seeds:
            if s not in self.train_time_s and self.cached_path(s).exists():
                state = load_or_set_aside(self.cached_path(s))
                if state is not None:
                    self.train_time_s[s] = float(state.get("train_time_s", 0.0))
            total += self.train_time_s.get(s, 0.0)
        return float(total)
