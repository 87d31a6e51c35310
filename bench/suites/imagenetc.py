"""ImageNet -> ImageNet-C (Hendrycks & Dietterich 2019), the PBN paper's large-scale protocol
(Sec. 4.5, Fig. 7: ResNet-50, 1 % Bayesian weights), and its runnable stand-in Tiny-ImageNet-C.

Both suites split the 50 validation images of every class into fixed parts (``data.parts``:
a part to fit the posterior on, a validation part for tuning, a test part) by a seeded
permutation per class (``datasets.tiny_imagenet.split_per_class``), so that nothing a method
fits or tunes on is ever tested on. The test part is evaluated clean (kind ``id``) and under
every (corruption, severity 1..5) cell (kind ``shift``); the corrupted copy of a test image is
the file of the same name in the corruption's folder. Every evaluation set is read from disk per
batch (:class:`datasets.sources.ImageFiles`, decoded by ``--loader-workers`` loader processes), so the
memory of a run does not grow with the number of cells.

``imagenetc``: the validation images as an ``ImageFolder`` tree (or the official archives) and
ImageNet-C in its published layout (``datasets.imagenet``); clean images resized to 256 and
centre-cropped to 224, as ImageNet-C was made; the MAP network is a pretrained one (torchvision's
ResNet-50 weights, or ``--set data.weights=FILE``), so only methods that start from the MAP
network run (the others train from scratch and are skipped, with a note in the report).

``tinyimagenetc``: Tiny-ImageNet's validation set (200 classes x 50, 64 x 64), a small network
trained from scratch on the fit part, and Tiny-ImageNet-C generated once from the test part with
the parameters of the original ``make_tinyimagenet_c.py`` (``datasets.corruptions``), written in
Tiny-ImageNet-C's published layout with a ``GENERATED.json``; an official Tiny-ImageNet-C copy
(no manifest) is read as it is.

Both record the mean corruption error: ``imagenetc`` normalised by AlexNet's published errors
(:mod:`bench.mce`), ``tinyimagenetc`` unnormalised (no published reference network exists).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bench.data import EvalSet, SuiteData
from bench.errors import BenchError
from bench.options import Check, ListOf, OneOf, Range
from bench.suites.base import CLASSIFICATION_METHODS, Suite, register_suite
from bench.suites.cifar10c import ALL, EXTRA, SEVERITIES, STANDARD, corruption_names, make_augment
from bench.tasks import classification
from datasets.errors import DatasetNotFoundError
from datasets.imagenet import MEAN, STD, corrupted_cell_paths, imagenet_val_files, list_class_folders, wnid_index
from datasets.sources import ImageFiles, StandardisedImages

__all__ = ["ImageNetC", "TinyImageNetC", "ALL", "STANDARD", "EXTRA"]


def _parts(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value) and value[0] > 0 and value[2] > 0


def per_class_split(labels: np.ndarray, parts, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fit, val, test)`` indices: per class, a seeded permutation of its images (in the
    given order) cut into ``parts`` counts (:func:`datasets.splits.split_per_class`)."""
    from datasets.splits import split_per_class

    try:
        return tuple(np.asarray(a, dtype=np.int64) for a in split_per_class(labels, tuple(parts), seed=seed))
    except ValueError as exc:
        raise BenchError(f"data.parts={list(parts)}: {exc}") from None


def subset_per_class(labels: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """Positions of a fixed, seeded subset of ``n`` rows spread evenly over the classes (all rows
    when ``n`` is None or not smaller), sorted."""
    total = len(labels)
    if n is None or n >= total:
        return np.arange(total)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    per = {c: n // len(classes) + (1 if i < n % len(classes) else 0) for i, c in enumerate(classes)}
    picked = [rng.permutation(np.flatnonzero(labels == c))[:per[c]] for c in classes]
    return np.sort(np.concatenate(picked))


def ood_source(root: Path, ood_dir: str | None, n_ood: int | None, size: int, resize: int):
    """An optional OOD set: every image of an ImageFolder tree (``data.ood_dir``, relative to the
    data root or absolute; labels unused), a seeded subset of ``n_ood``; ``(source, note)``."""
    if not ood_dir:
        return None, "no OOD set (give an ImageFolder tree with --set data.ood_dir=DIR, e.g. ImageNet-O or Textures)"
    d = Path(ood_dir) if Path(ood_dir).is_absolute() else Path(root) / ood_dir
    if not d.is_dir():
        raise DatasetNotFoundError("OOD set", [d], "<dir>/<class>/*.JPEG (an ImageFolder tree; class names unused)",
                                   "put the images there, or leave data.ood_dir unset")
    files = [d / w / f for w, f in list_class_folders(d)]
    if not files:
        raise DatasetNotFoundError("OOD set", [d], "<dir>/<class>/*.JPEG", "put the images there", reason="empty")
    keep = np.sort(np.random.default_rng(4).permutation(len(files))[:n_ood]) if n_ood else np.arange(len(files))
    return ImageFiles([files[i] for i in keep], size, MEAN, STD, resize=resize), ""


class _CorruptedValSuite(Suite):
    """What both suites share: the per-class split, the corruption cells, the OOD set."""

    default_methods = CLASSIFICATION_METHODS
    shift_label = "corruption severity"
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_per_cell", "n_ood", "ood_dir", "corruptions", "severities"}
    C_DIR = "?"
    IMAGE_SIZE = 224
    data_constraints = {
        "parts": Check(_parts, "three non-negative integers [fit, val, test] per class, fit and test > 0"),
        "corruptions": Check(corruption_names, "all, standard, extra, a corruption name or a list of them"),
        "severities": ListOf(OneOf(*SEVERITIES)),
        "n_per_cell": Range(1, integer=True, optional=True),
        "ood_dir": Check(lambda v: v is None or isinstance(v, str), "a directory (ImageFolder tree) or unset"),
        "split_seed": Range(0, integer=True),
    }

    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        names = corruption_names(cfg["corruptions"])
        per = f", {cfg['n_per_cell']} images per cell" if cfg["n_per_cell"] else ""
        return [f"clean test part ({cfg['parts'][2]} images per class; in-distribution)",
                f"{self.C_DIR}: {len(names)} corruptions x severities {','.join(map(str, cfg['severities']))}{per}",
                "OOD: data.ood_dir (an ImageFolder tree), when given"]

    def _cells(self, root: Path, cfg: dict, files: list[tuple[str, str]], y: torch.Tensor, line: str,
               fingerprint: str = "") -> list[EvalSet]:
        names = corruption_names(cfg["corruptions"])
        sets = []
        for name in names:
            for sev in cfg["severities"]:
                paths = corrupted_cell_paths(root, self.C_DIR, name, int(sev), files)
                sets.append(EvalSet("shift", name, float(sev), ImageFiles(paths, self.IMAGE_SIZE, MEAN, STD), y, note=line,
                                    fingerprint=fingerprint))
        return sets


@register_suite("imagenetc")
class ImageNetC(_CorruptedValSuite):
    description = ("ImageNet validation, test under the 19 ImageNet-C corruptions x 5 severities; a pretrained "
                   "ResNet-50 as the MAP network (PBN paper, Sec. 4.5)")
    task = classification(1000)
    in_shape = (3, 224, 224)
    C_DIR = "ImageNet-C"
    # the methods that start from the pretrained network and whose predictive is affordable at
    # 1,000 classes (subnet_laplace / laplace_diag need 1,000 backward passes a batch: docs/imagenetc.md)
    default_methods = ("deterministic", "temperature_scaling", "pbn", "laplace_last_layer")
    pretrained_map = True
    mce_reference = "alexnet"  # the report's mCE table (bench.mce)
    profiles = {
        "smoke": {
            # a tiny network whose "pretrained" weights a test writes (data.weights); fixture data
            "models": ["resnet_small"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 4, "lr": 0.001, "momentum": 0.9, "weight_decay": 1e-4},
            "data": {"parts": [2, 1, 3], "corruptions": ["gaussian_noise", "contrast"], "severities": [1, 3, 5],
                     "eval_batch_size": 8},
            "methods": {"pbn": {"train_samples": 2, "predict_samples": 2}},
            "note": "smoke profile: a fixture's few classes and images; numbers are meaningless",
        },
        "quick": {
            # the PBN paper's network; one image per class and cell (1,000) keeps a method's
            # evaluation at ~96,000 ResNet-50 passes (hours on CPU, minutes on one GPU)
            "models": ["resnet50"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 64, "lr": 0.001, "momentum": 0.9, "weight_decay": 1e-4},
            "data": {"n_per_cell": 1000},
            "methods": {"pbn": {"r_bayes": 0.01}},
            "note": ("quick profile: every ImageNet-C cell is evaluated on the same fixed, seeded subset of 1,000 test "
                     "images (one per class); the clean test part is complete"),
        },
        "paper": {
            # PBN paper Sec. 4.5 / Fig. 7: ResNet-50, "Partial 1 %"; the paper gives no ImageNet fine-tuning
            # schedule: one epoch over the fit part at lr 1e-3 (the MAP network is already trained)
            "models": ["resnet50"], "seeds": [0, 1, 2],
            "train": {"epochs": 1, "batch_size": 128, "lr": 0.001, "momentum": 0.9, "weight_decay": 1e-4},
            "data": {},
            "methods": {"pbn": {"r_bayes": 0.01}},
            "note": "PBN paper Sec. 4.5: pretrained ResNet-50, 1 % Bayesian weights; every test image in every cell",
        },
    }
    DEFAULT_DATA = {"parts": [10, 5, 35], "n_per_cell": None, "n_ood": None, "ood_dir": None,
                    "corruptions": "all", "severities": list(SEVERITIES), "imagenet_dir": "ImageNet",
                    "weights": None, "split_seed": 0, "eval_batch_size": 128}

    def pretrained_weights(self, model_name: str, data_cfg: dict, download: bool) -> dict:
        """``{"path", "bytes", "sha256_16"}`` of ``model_name``'s pretrained weights (a BenchError
        naming where they must go when absent)."""
        from bench.models import pretrained_weights_path, weights_provenance

        return weights_provenance(pretrained_weights_path(model_name, self.data_cfg(data_cfg)["weights"], download))

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        cfg = self.data_cfg(data_cfg)
        root = Path(data_root)
        val_dir, files = imagenet_val_files(root, cfg["imagenet_dir"])
        index = wnid_index()
        labels = np.asarray([index[w] for w, _ in files], dtype=np.int64)
        fit, val, test = per_class_split(labels, cfg["parts"], seed=int(cfg["split_seed"]))
        cell = test[subset_per_class(labels[test], cfg["n_per_cell"], seed=3)]

        def images(idx):  # clean validation images: resize 256, centre crop 224 (ImageNet-C's recipe)
            return ImageFiles([val_dir / files[i][0] / files[i][1] for i in idx], 224, MEAN, STD, resize=256)

        y = lambda idx: torch.from_numpy(labels[idx])  # noqa: E731
        line = f"ImageNet-C: {root / self.C_DIR} (official layout)"
        eval_sets = [EvalSet("id", "clean", 0.0, images(test), y(test))]
        eval_sets += self._cells(root, cfg, [files[i] for i in cell], y(cell), line)
        ood, note = ood_source(root, cfg["ood_dir"], cfg["n_ood"], 224, 256)
        if ood is not None:
            eval_sets.append(EvalSet("ood", Path(cfg["ood_dir"]).name, None, ood, None))
        else:
            eval_sets[0].note = note
        n_cls = len(np.unique(labels))
        lines = [f"ImageNet validation: {len(files)} images of {n_cls} classes ({val_dir}); per class "
                 f"{cfg['parts'][0]} to fit on, {cfg['parts'][1]} to tune on, {cfg['parts'][2]} to test on "
                 f"(a seeded permutation per class, seed {cfg['split_seed']})",
                 f"clean test part: {len(test)} images; each ImageNet-C cell: {len(cell)} of them", line, note or
                 f"OOD: {cfg['ood_dir']}, {len(ood)} images"]
        extras = {"artifacts": {"data.json": json.dumps({"lines": [x for x in lines if x]}, indent=1).encode()}}
        return SuiteData(images(fit), y(fit), images(val), y(val), eval_sets, extras=extras)


@register_suite("tinyimagenetc")
class TinyImageNetC(_CorruptedValSuite):
    description = ("Tiny-ImageNet validation split per class (fit / tune / test), test under Tiny-ImageNet-C "
                   "(19 corruptions x 5 severities, regenerated when absent); the runnable ImageNet-C stand-in")
    task = classification(200)
    in_shape = (3, 64, 64)
    stands_in_for = "ImageNet-C (suite imagenetc: ImageNet val, 1,000 classes, a pretrained ResNet-50)"
    C_DIR = "Tiny-ImageNet-C"
    IMAGE_SIZE = 64
    mce_reference = "none"  # no published reference network: unnormalised errors
    profiles = {
        "smoke": {
            "models": ["resnet_small"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
            "data": {"parts": [4, 1, 2], "corruptions": ["gaussian_noise", "contrast"], "severities": [1, 3, 5],
                     "eval_batch_size": 100},
            "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4},
                        "pbn": {"train_samples": 2, "predict_samples": 2},
                        "mfvi": {"train_samples": 2, "predict_samples": 2}},
            "note": "smoke profile: 7 images per class, one epoch; numbers are meaningless",
        },
        "quick": {
            # cifar10c's quick recipe (resnet_small, SGD 0.05 cosine, batch 128) on 7,000 images of 200
            # classes: a few minutes per network on 2 CPU cores; accuracy is low at this size (see README)
            "models": ["resnet_small"], "seeds": [0, 1, 2],
            "train": {"epochs": 30, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4,
                      "schedule": "cosine"},
            # every corruption cell on a fixed, seeded subset of 1,000 of the 2,000 test images (5 per class),
            # as cifar10c's quick profile takes 1,000 per cell: evaluation (95 cells, S samples for the
            # sampling methods) is most of a cell's time here; the clean test set stays complete
            "data": {"n_per_cell": 1000},
            # 200 classes: the diagonal and subnetwork Laplace draw their linearised predictive with one
            # Jacobian-vector product per sample (glm_sampler=jvp, 20 samples) instead of forming
            # J Sigma J^T from 200 backward passes a batch (docs/imagenetc.md)
            "methods": {"pbn": {"r_bayes": 0.05, "lr": 0.005, "epochs": 3},
                        "subnet_laplace": {"link_approx": "mc", "glm_sampler": "jvp", "n_samples": 20},
                        "laplace_diag": {"link_approx": "mc", "glm_sampler": "jvp", "n_samples": 20}},
            "note": ("quick profile: 35 images per class to train on, 5 to tune on, 10 to test on (every corruption "
                     "cell on the same seeded 1,000 of them); a small network trained from scratch on 7,000 "
                     "images of 200 classes: low accuracy, see README"),
        },
        "paper": {
            "models": ["resnet18_pbn"], "seeds": [0, 1, 2],
            "train": {"epochs": 100, "batch_size": 128, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
                      "schedule": "cosine"},
            "data": {},
            "methods": {"pbn": {"r_bayes": 0.01}},
            "note": "no paper runs Tiny-ImageNet-C: the PBN recipe of cifar10c's paper profile with 1 % Bayesian weights",
        },
    }
    EVAL_ONLY_DATA = _CorruptedValSuite.EVAL_ONLY_DATA | {"generator_seed"}
    DEFAULT_DATA = {"parts": [35, 5, 10], "n_per_cell": None, "n_ood": None, "ood_dir": None,
                    "corruptions": "all", "severities": list(SEVERITIES), "generator_seed": 0, "split_seed": 0,
                    "eval_batch_size": 500, "augment": True}
    data_constraints = {**_CorruptedValSuite.data_constraints, "generator_seed": Range(0, integer=True)}

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        from datasets.tiny_imagenet import load_tiny_imagenet_val

        cfg = self.data_cfg(data_cfg)
        root = Path(data_root)
        images, labels, wnids, names = load_tiny_imagenet_val(root)
        images, labels = np.asarray(images), np.asarray(labels, dtype=np.int64)
        fit, val, test = per_class_split(labels, cfg["parts"], seed=int(cfg["split_seed"]))
        nchw = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        files = [(wnids[labels[i]], names[i]) for i in range(len(names))]
        names_c = corruption_names(cfg["corruptions"])
        line, fingerprint = self._ensure_c(root, cfg, images, labels, wnids, names, test, names_c)
        cell = test[subset_per_class(labels[test], cfg["n_per_cell"], seed=3)]
        y = lambda idx: torch.from_numpy(labels[idx])  # noqa: E731
        std = lambda idx: StandardisedImages(nchw[torch.from_numpy(idx)], MEAN, STD)  # noqa: E731
        eval_sets = [EvalSet("id", "clean", 0.0, std(test), y(test))]
        eval_sets += self._cells(root, cfg, [files[i] for i in cell], y(cell), line, fingerprint)
        ood, note = ood_source(root, cfg["ood_dir"], cfg["n_ood"], 64, 64)
        if ood is not None:
            eval_sets.append(EvalSet("ood", Path(cfg["ood_dir"]).name, None, ood, None))
        else:
            eval_sets[0].note = note
        lines = [f"Tiny-ImageNet validation: {len(labels)} images of {len(wnids)} classes; per class {cfg['parts'][0]} "
                 f"to train on (random crop, padding 4, and horizontal flip), {cfg['parts'][1]} to tune on, "
                 f"{cfg['parts'][2]} to test on (a seeded permutation per class, seed {cfg['split_seed']})",
                 f"clean test part: {len(test)} images; each Tiny-ImageNet-C cell: {len(cell)} of them", line,
                 note or f"OOD: {cfg['ood_dir']}, {len(ood)} images"]
        extras = {"artifacts": {"data.json": json.dumps({"lines": [x for x in lines if x]}, indent=1).encode()}}
        train_x = std(fit)[:]  # float, in memory: a TensorLoader augments it on the device
        return SuiteData(train_x, y(fit), std(val)[:], y(val), eval_sets,
                         augment=make_augment(mean=MEAN, std=STD) if cfg["augment"] else None, extras=extras)

    def _ensure_c(self, root, cfg, images, labels, wnids, names, test, corruptions) -> tuple[str, str]:
        """Generate the missing (or stale) Tiny-ImageNet-C cells of the test part once; the
        provenance line and the cells' data fingerprint."""
        from datasets.corruptions import GENERATOR_VERSION
        from datasets.corruptions.folder import ensure_image_folder_c, is_official_copy

        d = Path(root) / self.C_DIR
        official = is_official_copy(d)
        # an official copy is only checked for the requested cells; a regenerated one is completed
        ensure_image_folder_c(root, self.C_DIR, images[test], [wnids[labels[i]] for i in test],
                              [names[i] for i in test], release="tiny_imagenet_c", corruptions=corruptions,
                              severities=[int(s) for s in cfg["severities"]], seed=int(cfg["generator_seed"]),
                              progress=True)
        if not official:
            return (f"Tiny-ImageNet-C: regenerated from the test part by datasets.corruptions (generator "
                    f"{GENERATOR_VERSION}, Tiny-ImageNet-C parameters, seed {cfg['generator_seed']}), {d}",
                    f"regenerated {GENERATOR_VERSION} seed {cfg['generator_seed']}")
        return f"Tiny-ImageNet-C: official release files ({d})", "official"
