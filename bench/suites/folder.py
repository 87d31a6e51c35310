"""Your images: any ImageFolder tree, tested clean, under generated corruptions and against an
optional out-of-distribution folder (issue 37, "Your model, your data").

The tree (``data.path``, absolute or relative to the data root; unset: the data root itself) is
``train/<class>/<image>``, optionally ``val/<class>/<image>``, and ``test/<class>/<image>``
(:mod:`datasets.image_folder`). The classes are train/'s directories in sorted order, in every
split; the task is classification over them, so the suite's task is known once the tree is listed
(:attr:`FolderSuite.task`). Every image is resized to ``data.size`` (shorter side, bilinear, then the
centre crop: torchvision's ``Resize`` + ``CenterCrop``) and normalised with the training images'
per-channel mean and standard deviation (``data.normalize=train``, the default) or ImageNet's
(``data.normalize=imagenet``, for a network pretrained on ImageNet). Without ``val/`` a seeded
``data.val_fraction`` of each class's training images is split off as the validation set.

The shift sets are the test images under ``data.corruptions`` x ``data.severities``, made by the
project's corruption generator (:mod:`datasets.corruptions`, the code CIFAR-10-C and Tiny-ImageNet-C
are regenerated with) with the severity parameters of ``data.release`` (``auto``: the release whose
image size is nearest ``data.size``: CIFAR-10-C at 32, Tiny-ImageNet-C at 64, ImageNet-C at 224).
They are generated once and cached on disk (``datasets.corruptions.ensure_image_folder_c``: one
directory per cell, a manifest, a lock, a cell regenerated only when the generator version, the
release, the seed or the test images change) as lossless PNGs, so a cell differs from the clean test
set by the corruption alone. Every record carries a fingerprint of the images it was made from.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import torch

from bench.data import EvalSet, SuiteData
from bench.errors import BenchError
from bench.options import Check, OneOf, Range
from bench.suites.base import CLASSIFICATION_METHODS, Suite, register_suite
from bench.suites.cifar10c import SEVERITIES, corruption_names, make_augment
from bench.suites.imagenetc import subset_per_class
from bench.tasks import Task, classification

#: the default shift sets: one corruption of each family of Hendrycks & Dietterich (2019) (noise,
#: blur, weather, digital) and JPEG compression
DEFAULT_CORRUPTIONS = ["gaussian_noise", "defocus_blur", "fog", "contrast", "jpeg_compression"]
CACHE_DIR = "ImageFolder-C"
#: the id set's note starts with this; the report's banner quotes the note from here on
MARKER = "your ImageFolder tree at"


def _severity_list(value) -> list[int]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v not in SEVERITIES for v in values):
        raise ValueError(f"severities are integers 1..5 (one, or a list), got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"a severity is named twice in {value!r}")
    return [int(v) for v in values]


def _corruption_list(value) -> list[str]:
    names = corruption_names(value)
    if not names:
        raise ValueError("no corruption given")
    if len(set(names)) != len(names):
        raise ValueError(f"a corruption is named twice in {value!r}")
    return names


def _path_or_none(value) -> None:
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise ValueError(f"a directory (absolute, or relative to the data root) or unset, got {value!r}")


def under_root(data_root: Path, path: str | None) -> Path:
    """``path`` (absolute, ``~``, or relative to the data root); the data root itself when None."""
    if path is None:
        return Path(data_root)
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(data_root) / p


def default_release(size: int) -> str:
    """The corruption release whose native image size is nearest ``size`` (on a log scale)."""
    from datasets.corruptions.tables import RELEASES

    return min(RELEASES, key=lambda r: abs(math.log(size / RELEASES[r].size)))


def cache_path(data_root: Path, tree: Path, cache: str | None) -> Path:
    """Where the corrupted copies of ``tree``'s test images live: ``data.cache``, else
    ``<data root>/ImageFolder-C/<tree name>-<hash of the tree's absolute path>``."""
    if cache:
        return under_root(data_root, cache)
    resolved = Path(tree).resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    return Path(data_root) / CACHE_DIR / f"{resolved.name or 'tree'}-{key}"


def channel_stats(images_nhwc: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of uint8 images in [0, 1] (std at least 1/255, so a
    constant channel does not divide by zero)."""
    x = images_nhwc.reshape(-1, images_nhwc.shape[-1])
    n = float(len(x))
    s1 = np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for start in range(0, len(x), 1 << 20):  # float64 sums, chunked: memory stays small
        chunk = x[start:start + (1 << 20)].astype(np.float64) / 255.0
        s1[0][:] += chunk.sum(0)
        s1[1][:] += (chunk * chunk).sum(0)
    mean = s1[0] / n
    std = np.sqrt(np.maximum(s1[1] / n - mean * mean, 0.0))
    return tuple(round(float(m), 6) for m in mean), tuple(round(max(float(s), 1 / 255), 6) for s in std)


def digest16(images: np.ndarray, names) -> str:
    """16 hex digits of the SHA-256 of images (uint8, their shape) and names: what a set was made from."""
    from datasets.corruptions.folder import source_digest

    return source_digest(images, [str(n) for n in names], [str(n) for n in names])[:16]


@register_suite("folder")
class FolderSuite(Suite):
    description = ("your images: an ImageFolder tree (train/, optional val/, test/; data.path), tested under "
                   "corruptions generated by datasets.corruptions (data.corruptions x data.severities), optional "
                   "OOD folder (data.ood)")
    default_methods = CLASSIFICATION_METHODS
    in_shape = (3, 32, 32)
    shift_label = "corruption severity"
    profiles = {
        "smoke": {
            "models": ["resnet_small"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
            "data": {"corruptions": ["gaussian_noise", "contrast"], "severities": [1, 3, 5], "eval_batch_size": 100},
            "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4},
                        "pbn": {"train_samples": 2, "predict_samples": 2},
                        "mfvi": {"train_samples": 2, "predict_samples": 2}},
            "note": "smoke profile: one epoch, 2 corruptions at severities 1/3/5; numbers are meaningless",
        },
        "quick": {
            # cifar10c's quick recipe (the PBN paper's small ResNet, SGD 0.05 cosine) on the whole
            # training split of the tree: its time grows with the tree (docs/your_model.md)
            "models": ["resnet_small"], "seeds": [0, 1, 2],
            "train": {"epochs": 20, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4,
                      "schedule": "cosine"},
            "data": {},
            "methods": {"pbn": {"r_bayes": 0.05, "lr": 0.005, "epochs": 2}},
            "note": ("quick profile: cifar10c's small-ResNet recipe (20 epochs, SGD 0.05 cosine) on your training "
                     "split, not tuned for your data: check the MAP network's clean accuracy and the validity marks"),
        },
        "paper": {
            "models": ["resnet18_pbn"], "seeds": [0, 1, 2],
            "train": {"epochs": 100, "batch_size": 128, "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
                      "schedule": "cosine"},
            "data": {},
            "methods": {"pbn": {"r_bayes": 0.05}},
            "note": ("no paper has a protocol for your data: tinyimagenetc's ResNet-18 recipe (100 epochs, SGD 0.1 "
                     "cosine) with the PBN paper's CIFAR-10 subnetwork (5 %), a GPU budget"),
        },
    }
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test", "n_per_cell", "n_ood", "ood", "corruptions", "severities",
                                             "release", "generator_seed", "cache"}
    DEFAULT_DATA = {"path": None, "size": 32, "normalize": "train", "val_fraction": 0.1, "split_seed": 0,
                    "n_train": None, "n_test": None, "n_per_cell": None, "n_ood": None, "ood": None,
                    "corruptions": list(DEFAULT_CORRUPTIONS), "severities": list(SEVERITIES), "release": "auto",
                    "generator_seed": 0, "cache": None, "augment": False, "eval_batch_size": 500}
    data_constraints = {
        "path": Check(_path_or_none, "a directory (absolute, or relative to the data root) or unset (the data root "
                                     "is the tree)", optional=True),
        "ood": Check(_path_or_none, "an image folder (absolute, or relative to the data root) or unset", optional=True),
        "cache": Check(_path_or_none, "a directory for the generated corruptions or unset", optional=True),
        "size": Range(32, 1024, integer=True),  # the corruptions need 32 x 32 at least (datasets.corruptions)
        "normalize": OneOf("train", "imagenet"),
        "val_fraction": Range(0, 1, lo_open=True, hi_open=True),
        "split_seed": Range(0, integer=True),
        "n_per_cell": Range(1, integer=True, optional=True),
        "corruptions": Check(_corruption_list, "all, standard, extra, a corruption name or a list of them"),
        "severities": Check(_severity_list, "a severity 1..5 or a list of them"),
        "release": Check(lambda v: None if v == "auto" else _release(v),
                         "auto, or a release whose severity parameters to use: cifar10c, tiny_imagenet_c, imagenet_c"),
        "generator_seed": Range(0, integer=True),
    }

    #: the data root of the run, when ``bench run`` sets it before the plan is resolved: a model spec
    #: (``MODULE:FACTORY``) is built with the tree's number of classes then (``check_model``)
    data_root: Path | None = None

    def __init__(self):
        self._classes: list[str] | None = None

    # ------------------------------------------------------------------ the task and the networks

    @property
    def task(self) -> Task:
        """Classification over the tree's classes, known once the tree is listed (``load``, or the
        plan's check of a model spec); before that, a classification task of unknown size (0 classes)."""
        return classification(len(self._classes)) if self._classes else Task("classification", 0)

    @property
    def classes(self) -> list[str] | None:
        """The class names (train/'s directories, sorted) once the tree is listed, else None."""
        return None if self._classes is None else list(self._classes)

    def input_shape(self, data_cfg: dict) -> tuple[int, ...]:
        size = int(self.data_cfg(data_cfg)["size"])
        return (3, size, size)

    def check_model(self, model_name: str, data_cfg: dict) -> str:
        """A model spec is built for the tree's classes: the tree is listed now (a registered name
        needs nothing)."""
        from bench.models import MODELS

        if model_name not in MODELS and self._classes is None:
            from datasets.image_folder import scan_tree
            from datasets.roots import resolve_data_root

            root = self.data_root if self.data_root is not None else resolve_data_root(None)
            self._classes = scan_tree(under_root(root, self.data_cfg(data_cfg)["path"])).classes
        return super().check_model(model_name, data_cfg)

    # ------------------------------------------------------------------------------ listing

    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        names = _corruption_list(cfg["corruptions"])
        sev = ",".join(map(str, _severity_list(cfg["severities"])))
        per = f", {cfg['n_per_cell']} images per cell" if cfg["n_per_cell"] else ""
        return ["clean test/ split of your tree (data.path; in-distribution)",
                f"{len(names)} corruptions ({', '.join(names)}) x severities {sev}{per}, generated from the test images "
                "by datasets.corruptions",
                "OOD: data.ood (an image folder), when given"]

    @classmethod
    def data_banner(cls, records) -> str | None:
        """The report's overview line: whose images the records come from (the clean test records'
        notes, from :data:`MARKER` on)."""
        if records is None or len(records) == 0 or "eval_note" not in records:
            return None
        notes = []
        for note in records.loc[records["kind"] == "id", "eval_note"].dropna():
            note = str(note)
            if MARKER in note:
                text = note[note.index(MARKER):]
                if text not in notes:
                    notes.append(text)
        if not notes:
            return None
        return ("YOUR DATA: " + " | ".join(notes) + ". Not a published benchmark: the shift sets are corruptions "
                "generated from these test images (datasets.corruptions), so the numbers compare methods on "
                "this data only.")

    # ------------------------------------------------------------------------------- loading

    def load(self, data_root: Path, data_cfg: dict, download: bool = False) -> SuiteData:
        from datasets.corruptions import GENERATOR_VERSION
        from datasets.image_folder import decode_images, layout, list_ood, scan_tree
        from datasets.imagenet import MEAN as IMAGENET_MEAN, STD as IMAGENET_STD
        from datasets.sources import ImageFiles, StandardisedImages

        cfg = self.data_cfg(data_cfg)
        root = Path(data_root)
        tree_dir = under_root(root, cfg["path"]).absolute()
        size = int(cfg["size"])
        names = _corruption_list(cfg["corruptions"])
        severities = _severity_list(cfg["severities"])
        release = default_release(size) if cfg["release"] == "auto" else cfg["release"]
        seed = int(cfg["generator_seed"])

        tree = scan_tree(tree_dir)  # nothing is written before the tree and every image were read
        self._classes = list(tree.classes)
        k = len(tree.classes)
        train, test = tree.splits["train"], tree.splits["test"]

        # validation: val/, else a seeded fraction of each class's training images
        if "val" in tree.splits:
            fit_idx = np.arange(len(train))
            val_files, val_y = tree.splits["val"].files, tree.splits["val"].labels
            val_line = f"validation: {tree_dir / 'val'} ({len(val_files)} images)"
        else:
            fit_idx, val_idx = split_fraction(train.labels, float(cfg["val_fraction"]), int(cfg["split_seed"]))
            if len(val_idx) == 0:
                raise BenchError(f"{tree_dir}: no val/ directory and every class of train/ has a single image, so "
                                 f"no validation part can be split off; add {tree_dir / 'val'}/<class>/<image>")
            val_files, val_y = [train.files[i] for i in val_idx], train.labels[val_idx]
            val_line = (f"validation: no val/ directory, so a seeded {cfg['val_fraction']:.0%} of each class's training "
                        f"images (at least one per class of two or more; data.val_fraction, data.split_seed="
                        f"{cfg['split_seed']}) was split off train/: {len(val_idx)} images")
        n_train_total = len(fit_idx)
        keep = subset_per_class(train.labels[fit_idx], cfg["n_train"], seed=1)
        fit_idx = fit_idx[keep]
        train_files, train_y = [train.files[i] for i in fit_idx], train.labels[fit_idx]

        what, where = f"ImageFolder tree {tree_dir}", layout(tree_dir)
        train_u8 = decode_images(train_files, size, what, where)
        val_u8 = decode_images(val_files, size, what, where)
        test_u8 = decode_images(test.files, size, what, where)
        ood_dir = under_root(root, cfg["ood"]) if cfg["ood"] else None
        if ood_dir is not None:
            ood_base, ood_files = list_ood(ood_dir)
            ood_files = [ood_files[i] for i in
                         (np.sort(np.random.default_rng(4).permutation(len(ood_files))[:cfg["n_ood"]])
                          if cfg["n_ood"] else range(len(ood_files)))]
            ood_u8 = decode_images(ood_files, size, f"OOD images (data.ood) {ood_dir}",
                                   f"{ood_dir}/<image> or {ood_dir}/<class>/<image> (its test/ split when it has one)")

        if cfg["normalize"] == "train":
            mean, std = channel_stats(train_u8)
            norm_line = (f"normalised with the training images' per-channel mean {list(mean)} and standard deviation "
                         f"{list(std)} (data.normalize=train)")
        else:
            mean, std = tuple(IMAGENET_MEAN), tuple(IMAGENET_STD)
            norm_line = "normalised with ImageNet's mean and standard deviation (data.normalize=imagenet)"

        def source(u8_nhwc: np.ndarray) -> StandardisedImages:
            return StandardisedImages(torch.from_numpy(np.ascontiguousarray(u8_nhwc.transpose(0, 3, 1, 2))), mean, std)

        # the corrupted test sets, generated once (every image was read: a bad tree wrote nothing)
        test_names = [f"{i:06d}.png" for i in range(len(test))]
        test_wnids = [tree.classes[c] for c in test.labels]
        cache = cache_path(root, tree_dir, cfg["cache"])
        _check_cache(cache)
        from datasets.corruptions.folder import ensure_image_folder_c, source_digest

        ensure_image_folder_c(cache.parent, cache.name, test_u8, test_wnids, test_names, release=release,
                              corruptions=names, severities=severities, seed=seed, progress=True, image_format="PNG")
        test_digest = source_digest(test_u8, test_wnids, test_names)[:16]
        fingerprint = f"regenerated {GENERATOR_VERSION} {release} seed {seed} test {test_digest}"
        gen_line = (f"corruptions: {', '.join(names)} x severities {', '.join(map(str, severities))}, generated from "
                    f"the {size}x{size} test images by datasets.corruptions (generator {GENERATOR_VERSION}, "
                    f"{release} severity parameters, seed {seed}) and cached as PNG (lossless) in {cache}")

        y = lambda a: torch.from_numpy(np.asarray(a, dtype=np.int64))  # noqa: E731
        clean = subset_per_class(test.labels, cfg["n_test"], seed=2)
        cell = subset_per_class(test.labels, cfg["n_per_cell"], seed=3)
        stats = "the training images' statistics" if cfg["normalize"] == "train" else "ImageNet's statistics"
        note = (f"{MARKER} {tree_dir} ({k} classes; {len(train_files)} training, {len(val_files)} validation, "
                f"{len(test)} test images at {size}x{size}, normalised with {stats})")
        eval_sets = [EvalSet("id", "clean", 0.0, source(test_u8[clean]), y(test.labels[clean]), note=note,
                             fingerprint=f"test {test_digest}")]
        for name in names:
            for sev in severities:
                base = cache / name / str(sev)
                paths = [base / test_wnids[i] / test_names[i] for i in cell]
                eval_sets.append(EvalSet("shift", name, float(sev), ImageFiles(paths, size, mean, std),
                                         y(test.labels[cell]), note=gen_line, fingerprint=fingerprint))
        if ood_dir is not None:
            ood_name = re.sub(r"[^\w.-]+", "_", ood_dir.name).replace("..", "_") or "ood"  # it names record files
            eval_sets.append(EvalSet("ood", ood_name, None, source(ood_u8), None,
                                     fingerprint=f"ood {digest16(ood_u8, [str(p) for p in ood_files])}"))
            ood_line = f"OOD: {len(ood_files)} images of {ood_base} (data.ood)"
        else:
            ood_line = "no OOD set (give an image folder with --set data.ood=DIR)"

        shown = ", ".join(tree.classes[:12]) + (f" and {k - 12} more" if k > 12 else "")
        lines = [f"{MARKER} {tree_dir}: {k} classes ({shown}; train/'s directories, sorted: the label of a class is "
                 f"its position, in every split)",
                 f"training: {len(train_files)} images" + (f" (a seeded, class-balanced subset of {n_train_total}; "
                                                           f"data.n_train)" if len(train_files) < n_train_total else "")
                 + (", with random crop (padding 4) and horizontal flip" if cfg["augment"] else ", not augmented"),
                 val_line,
                 f"test: {len(test)} images; clean test set: {len(clean)}; each corruption cell: {len(cell)}",
                 f"images resized to {size}x{size} (shorter side, bilinear, then the centre crop) and {norm_line}",
                 gen_line, ood_line]
        if test.missing_classes:
            lines.append(f"classes without test images: {', '.join(test.missing_classes)}")
        data_info = {"lines": lines, "tree": str(tree_dir), "classes": list(tree.classes), "release": release,
                     "mean": list(mean), "std": list(std), "cache": str(cache), "captions": {
                         "gallery.png": "The first test image under every corruption (rows) and severity (columns), "
                                        "as read from the generated cells; shown so that a person can check that the "
                                        "corruptions look right at this image size."}}
        artifacts = {}
        try:
            artifacts["gallery.png"] = gallery_png(test_u8[int(cell[0])], cache, names, severities,
                                                   test_wnids[int(cell[0])], test_names[int(cell[0])])
        except Exception as exc:  # noqa: BLE001 - the gallery is an illustration; never lose a run to it
            data_info["lines"].append(f"no corruption gallery ({type(exc).__name__}: {exc})")
        artifacts["data.json"] = json.dumps(data_info, indent=1, default=str).encode()
        augment = make_augment(mean=mean, std=std) if cfg["augment"] else None
        return SuiteData(source(train_u8)[:], y(train_y), source(val_u8)[:], y(val_y), eval_sets, augment=augment,
                         extras={"artifacts": artifacts, "classes": list(tree.classes), "folder": data_info})


def _release(value) -> None:
    from datasets.corruptions.tables import RELEASES

    if value not in RELEASES:
        raise ValueError(f"unknown release {value!r}; valid: auto, {', '.join(RELEASES)}")


def _check_cache(cache: Path) -> None:
    """A cache directory with files bench did not write (no manifest) is never written into."""
    from datasets.corruptions.folder import MANIFEST

    if cache.exists() and not cache.is_dir():
        raise BenchError(f"data.cache {cache} is a file; give a directory for the generated corruptions")
    if cache.is_dir() and not (cache / MANIFEST).exists() and any(not p.name.startswith(".") for p in cache.iterdir()):
        raise BenchError(f"data.cache {cache} holds files bench did not write (no {MANIFEST}); give an empty or new "
                         f"directory for the generated corruptions")


def split_fraction(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(fit, val)`` positions: per class, a seeded permutation of its images, of which
    ``round(fraction * n)`` (at least one, when the class has two or more) go to validation; sorted."""
    rng = np.random.default_rng(seed)
    fit, val = [], []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        members = members[rng.permutation(len(members))]
        n_val = 0 if len(members) < 2 else min(len(members) - 1, max(1, int(round(fraction * len(members)))))
        val.append(members[:n_val])
        fit.append(members[n_val:])
    return np.sort(np.concatenate(fit)).astype(np.int64), np.sort(np.concatenate(val)).astype(np.int64)


def gallery_png(clean: np.ndarray, cache: Path, names, severities, wnid: str, filename: str) -> bytes:
    """PNG of one test image clean and in every generated cell (rows: corruptions, columns: severities)."""
    from PIL import Image

    from datasets.cifar10c.generate import gallery_grid_png

    rows = {}
    for name in names:
        rows[name] = [clean]
        for s in severities:
            with Image.open(cache / name / str(s) / wnid / filename) as im:
                rows[name].append(np.asarray(im.convert("RGB")))
    return gallery_grid_png(rows, list(severities))
