"""ChestMNIST: multi-label classification of chest X-rays (14 findings), the classification set of
the medical PBN paper (``../shared/papers/sparse-bayesian-networks-medical.txt``, Sec. 3.2: a
ResNet-18, SGD lr 0.01, weight decay 1e-5, batch 50, 50 epochs, at 224 x 224), tested clean and
under the project's image corruptions (an addition: the paper has no shift).

Data: MedMNIST's official ``.npz`` (:mod:`datasets.medmnist`; ``data.size`` 28 reads
``chestmnist.npz``, 64 / 128 / 224 the MedMNIST+ ``chestmnist_<size>.npz``), its official train /
val / test splits (``data.n_train`` / ``n_val`` / ``n_test``: seeded subsets). Targets: float
``(N, 14)`` 0/1 (:func:`bench.tasks.multilabel`); the training split's label prevalence is in the
suite's ``data.json`` artifact and ``SuiteData.extras["label_prevalence"]`` (the harness's reference
row is computed from the training targets, ``bench.multilabel_metrics.prevalence_reference``).
Images are grey, scaled to [-1, 1] (MedMNIST's own ``Normalize(mean=[.5], std=[.5])``); with
``data.channels=3`` the grey channel is repeated (MedMNIST's ``as_rgb``) for networks with an RGB
stem (the paper profile's torchvision ResNet-18).

Shifts: the test images (``data.n_per_cell`` of them per cell, seeded) under ``data.corruptions`` x
``data.severities``, made in memory when a cell is first read by the project's corruption generator
(:func:`datasets.corruptions.corrupt`, the code CIFAR-10-C and the ``folder`` suite's cells come
from) with the severity parameters of the release nearest the image size (CIFAR-10-C's at 28 and
32, Tiny-ImageNet-C's at 64 and 128, ImageNet-C's at 224). The generator works on RGB images of at
least 32 x 32: a grey image is given as three equal channels and the first channel of the result is
kept (exact for the default corruptions, which treat the channels alike: noise drawn per channel
keeps its full strength in the kept channel), and a 28 x 28 image is reflect-padded by 2 pixels to
32 x 32 and cropped back after (so the border sees a mirrored context, as the generator's own
``reflect`` filters do).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import torch

from bench.data import EvalSet, SuiteData
from bench.options import Check, OneOf, Range
from bench.suites.base import Suite, register_suite
from bench.suites.cifar10c import SEVERITIES
from bench.suites.folder import DEFAULT_CORRUPTIONS, _corruption_list, _severity_list, default_release
from bench.tasks import multilabel
from datasets.medmnist import CHESTMNIST_LABELS, SIZES

#: the methods the paper compares (deterministic, a 5-member ensemble, PBN, the fully Bayesian
#: network), MC dropout and temperature scaling; the others join when they support multi-label tasks
MULTILABEL_METHODS = ("deterministic", "temperature_scaling", "mc_dropout", "deep_ensemble", "pbn", "mfvi")
#: MedMNIST's normalisation of its grey images: (x / 255 - 0.5) / 0.5
MEAN, STD = 0.5, 0.5


def paper_vi() -> dict:
    """The paper's VI options for classification (Sec. 3.1), a fresh dict per profile: 1 % of the
    weights Bayesian and a static KL weight of 0.01 (beta_start = beta_end = 0.01) for PBN and the
    fully Bayesian network alike; the methods' default anneals from 0.2, the paper's form for
    segmentation."""
    return {"pbn": {"r_bayes": 0.01, "beta_start": 0.01}, "mfvi": {"beta_start": 0.01}}


PAD_TO = 32  # the corruption generator's smallest image side (datasets.corruptions.functions.MIN_SIZE)


def grey_corrupt(images: np.ndarray, name: str, severity: int, seed: int, release: str) -> np.ndarray:
    """uint8 (N, S, S) grey images under one corruption: three equal channels in, the first channel
    out; sides below 32 reflect-padded to 32 and cropped back (module docstring)."""
    from datasets.corruptions import corrupt

    n, h, w = images.shape
    ph, pw = max(0, PAD_TO - h), max(0, PAD_TO - w)
    top, left = ph // 2, pw // 2
    x = np.pad(images, ((0, 0), (top, ph - top), (left, pw - left)), mode="reflect") if ph or pw else images
    out = corrupt(np.repeat(x[..., None], 3, axis=-1), name, severity, seed=seed, release=release)[..., 0]
    return np.ascontiguousarray(out[:, top:top + h, left:left + w])


def standardise(images: np.ndarray, channels: int) -> torch.Tensor:
    """uint8 (N, S, S) -> float32 (N, channels, S, S) in [-1, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(images)).unsqueeze(1).float().div_(255.0).sub_(MEAN).div_(STD)
    return x.expand(-1, channels, -1, -1).contiguous() if channels > 1 else x


def _corrupted_set(images: np.ndarray, name: str, severity: int, seed: int, release: str, channels: int) -> torch.Tensor:
    return standardise(grey_corrupt(images, name, severity, seed, release), channels)


def seeded_subset(n: int, k: int | None, seed: int) -> np.ndarray:
    """Sorted positions of ``k`` of ``n`` items drawn with ``seed`` (all of them when ``k`` is None or >= n)."""
    if k is None or k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:k])


def _size(value) -> None:
    if value not in SIZES or isinstance(value, bool):
        raise ValueError(f"ChestMNIST is published at sizes {', '.join(map(str, SIZES))}, got {value!r}")


@register_suite("chestmnist")
class ChestMNIST(Suite):
    description = ("ChestMNIST (MedMNIST, 14 chest X-ray findings, multi-label): the medical PBN paper's "
                   "classification set, clean and under generated image corruptions")
    task = multilabel(len(CHESTMNIST_LABELS))
    in_shape = (1, 28, 28)
    shift_label = "corruption severity"
    default_methods = MULTILABEL_METHODS
    LABELS = CHESTMNIST_LABELS
    profiles = {
        "smoke": {
            "models": ["lenet5"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
            "data": {"n_train": 2000, "n_val": 500, "n_test": 500, "n_per_cell": 200,
                     "corruptions": ["gaussian_noise", "contrast"], "severities": [1, 3], "eval_batch_size": 100},
            "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4},
                        "pbn": {"train_samples": 2, "predict_samples": 2},
                        "mfvi": {"train_samples": 2, "predict_samples": 2}},
            "note": "smoke profile: small subsets, one epoch, 2 corruptions at severities 1 and 3; numbers are meaningless",
        },
        "quick": {
            # the paper's optimiser (SGD lr 0.01, weight decay 1e-5, batch 50) with momentum and a
            # cosine schedule, on the 28 x 28 file and the PBN paper's small ResNet for 2 CPU cores
            # (~1 ms per training image: 20,000 images x 10 epochs ~ 3.5 min per network)
            "models": ["resnet_small"], "seeds": [0, 1, 2],
            "train": {"epochs": 10, "batch_size": 50, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5,
                      "schedule": "cosine"},
            "data": {"n_train": 20000, "n_val": 2000, "n_per_cell": 2000},
            "methods": paper_vi(),
            "note": ("quick profile: ChestMNIST at 28 x 28, 20,000 of the 78,468 training images, resnet_small for 10 "
                     "epochs, PBN and mean-field VI at the paper's static KL weight 0.01; the clean test set is complete "
                     "(22,433), each corruption cell 2,000 test images"),
        },
        "paper": {
            # Sec. 3.1-3.2: ResNet-18 at 224 x 224, SGD lr 0.01 (fixed), weight decay 1e-5, batch 50, 50
            # epochs, 1 % of the weights Bayesian, KL weight 0.01; its weighted cross-entropy is an option
            # (class_weights=balanced), not the default: the paper does not say how it weighted 14 findings
            "models": ["resnet18"], "seeds": [0, 1, 2],
            "train": {"epochs": 50, "batch_size": 50, "lr": 0.01, "momentum": 0.0, "weight_decay": 1e-5},
            "data": {"size": 224, "channels": 3},
            "methods": paper_vi(),
            "note": ("the medical PBN paper's ChestMNIST recipe (ResNet-18 at 224 x 224, grey repeated to RGB, SGD lr "
                     "0.01, weight decay 1e-5, batch 50, 50 epochs; PBN and mean-field VI at its static KL weight 0.01); "
                     "its class-weighted loss is an option, not the default (the unweighted Bernoulli likelihood), "
                     "a GPU budget"),
        },
    }
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test", "n_per_cell", "corruptions", "severities", "generator_seed"}
    DEFAULT_DATA = {"size": 28, "channels": 1, "n_train": None, "n_val": None, "n_test": None, "n_per_cell": None,
                    "corruptions": list(DEFAULT_CORRUPTIONS), "severities": list(SEVERITIES), "generator_seed": 0,
                    "eval_batch_size": 500}
    data_constraints = {
        "size": Check(_size, "a published ChestMNIST size: 28, 64, 128 or 224"),
        "channels": OneOf(1, 3),
        "n_val": Range(1, integer=True, optional=True),
        "n_per_cell": Range(1, integer=True, optional=True),
        "corruptions": Check(_corruption_list, "all, standard, extra, a corruption name or a list of them"),
        "severities": Check(_severity_list, "a severity 1..5 or a list of them"),
        "generator_seed": Range(0, integer=True),
    }

    def input_shape(self, data_cfg: dict) -> tuple[int, ...]:
        cfg = {**self.DEFAULT_DATA, **data_cfg}
        return (int(cfg["channels"]), int(cfg["size"]), int(cfg["size"]))

    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        names = _corruption_list(cfg["corruptions"])
        sev = ",".join(map(str, _severity_list(cfg["severities"])))
        per = f", {cfg['n_per_cell']} test images per cell" if cfg["n_per_cell"] else ""
        return ["clean ChestMNIST test split (in-distribution)",
                f"{len(names)} corruptions ({', '.join(names)}) x severities {sev}{per}, generated in memory by "
                f"datasets.corruptions ({default_release(int(cfg['size']))} parameters)"]

    def load(self, data_root: Path, data_cfg: dict, download: bool = False) -> SuiteData:
        from datasets.corruptions import GENERATOR_VERSION
        from datasets.medmnist import chestmnist_file, load_chestmnist

        cfg = self.data_cfg(data_cfg)
        size, channels = int(cfg["size"]), int(cfg["channels"])
        splits = load_chestmnist(Path(data_root), size)  # checked whole before anything else happens
        names = _corruption_list(cfg["corruptions"])
        severities = _severity_list(cfg["severities"])
        release = default_release(size)
        seed = int(cfg["generator_seed"])

        tr = seeded_subset(len(splits["train"]), cfg["n_train"], seed=1)
        va = seeded_subset(len(splits["val"]), cfg["n_val"], seed=2)
        te = seeded_subset(len(splits["test"]), cfg["n_test"], seed=3)
        cell = te[seeded_subset(len(te), cfg["n_per_cell"], seed=4)]

        def y(split, rows):
            return torch.from_numpy(splits[split].labels[rows].astype(np.float32))

        train_y = y("train", tr)
        prevalence = train_y.double().mean(0)
        test_images = splits["test"].images
        from bench.suites.folder import digest16

        test_digest = digest16(test_images[te], [str(i) for i in te])
        fingerprint = f"generated {GENERATOR_VERSION} {release} seed {seed} test {test_digest}"
        gen_line = (f"corruptions: {', '.join(names)} x severities {', '.join(map(str, severities))}, generated in "
                    f"memory from {len(cell)} test images by datasets.corruptions (generator {GENERATOR_VERSION}, "
                    f"{release} severity parameters, seed {seed}; grey as 3 equal channels, the first kept"
                    + (f"; reflect-padded to {PAD_TO} x {PAD_TO} and cropped back" if size < PAD_TO else "") + ")")
        eval_sets = [EvalSet("id", "clean", 0.0, standardise(test_images[te], channels), y("test", te),
                             note=f"ChestMNIST test split at {size} x {size}", fingerprint=f"test {test_digest}")]
        from datasets.sources import Computed

        cell_images = test_images[cell]
        for name in names:
            for sev in severities:
                make = functools.partial(_corrupted_set, cell_images, name, sev, seed, release, channels)
                eval_sets.append(EvalSet("shift", name, float(sev), Computed(make, len(cell)), y("test", cell),
                                         note=gen_line, fingerprint=fingerprint))
        path = chestmnist_file(Path(data_root), size)
        lines = [f"ChestMNIST {path} at {size} x {size} ({channels} channel{'s' if channels > 1 else ''}): "
                 f"{len(tr)} training images (of {len(splits['train'])}), {len(va)} validation (of {len(splits['val'])}), "
                 f"{len(te)} test (of {len(splits['test'])}); 14 labels",
                 "training label prevalence: " + ", ".join(f"{n} {p:.3f}" for n, p in zip(self.LABELS, prevalence.tolist())),
                 gen_line]
        info = {"lines": lines, "labels": list(self.LABELS), "label_prevalence": prevalence.tolist(),
                "file": str(path), "release": release}
        extras = {"artifacts": {"data.json": json.dumps(info, indent=1).encode()}, "classes": list(self.LABELS),
                  "label_prevalence": prevalence.tolist()}
        return SuiteData(standardise(splits["train"].images[tr], channels), train_y,
                         standardise(splits["val"].images[va], channels), y("val", va), eval_sets, extras=extras)


__all__ = ["ChestMNIST", "MULTILABEL_METHODS", "grey_corrupt", "standardise"]
