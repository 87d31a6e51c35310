"""Rotated MNIST (Ovadia et al. 2019), as used by the PBN and subnetwork-Laplace papers.

Train on MNIST train minus its last 10,000 images (validation split), test on MNIST test
rotated by 0..180 degrees in 15-degree steps; FashionMNIST test is the OOD set.
"""
from __future__ import annotations

import json
from pathlib import Path

from bench.data import EvalSet, SuiteData
from bench.suites.base import CLASSIFICATION_METHODS, Suite, register_suite
from bench.tasks import classification
from datasets.mnist import load_mnist_splits, normalize
from datasets.shifts import rotate_images
from datasets.sources import Computed


@register_suite("mnist_rotated")
class MnistRotated(Suite):
    description = "MNIST, test rotated 0-180 degrees; FashionMNIST as OOD (Ovadia et al. 2019)"
    default_methods = CLASSIFICATION_METHODS
    task = classification(10)
    in_shape = (1, 28, 28)
    shift_label = "rotation (degrees)"
    profiles = {
        "smoke": {
            "models": ["lenet_300_100"], "seeds": [0],
            "train": {"epochs": 1, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5},
            "data": {"n_train": 2000, "n_val": 500, "n_test": 500, "n_ood": 500, "angles": [0, 60, 120, 180]},
            "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 5}},
            "note": "smoke profile: tiny subsets, one epoch; numbers are meaningless",
        },
        "quick": {
            # 15 epochs: at 5 the MAP network of seed 1 still improved 2.2 % in its last epoch; at 10
            # it passed map_converged on one machine and failed it on another (2.2 % over its last
            # fifth against the 2 % limit): the budget sat at the check's edge, and a refit flipped
            # every verdict built on it. At 15 the last fifth improves on the best validation NLL
            # before it by 0.4 %, -0.1 % and -3.1 % (MAP, seeds 0-2; negative: no new best), a
            # margin the 2 % limit keeps across refits (docs/validity.md). The kept 5- and 10-epoch
            # records (docs/records, docs/tuning-10-epochs, docs/ablations) keep their own identity:
            # the budget is part of a cell's.
            "models": ["lenet_300_100", "lenet5"], "seeds": [0, 1, 2],
            "train": {"epochs": 15, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5,
                      "schedule": "cosine"},
            "data": {},
            # No per-method tuning here: a hyperparameter a method needs tuned is swept with --set
            # and chosen on the validation split by bench/selection.py (one procedure for all).
            "methods": {},
            "note": "",
        },
        "tour": {
            # The README's main job: every default method, three seeds, about 20 minutes on 2 CPU
            # cores (measured from a fresh clone, docs/running.md). The training set is a fixed
            # 10,000-image subset so that every method fits three times; the evaluation sets are
            # complete. Options the tuning protocol chose on the quick profile's validation split at
            # its earlier 10 epochs (docs/tuning-10-epochs, python -m bench tune) are the methods'
            # settings here.
            # 25 epochs: at 15 the MAP network still improved 2.9 % over its last fifth (map_converged);
            # at 25 the MAP networks of seeds 0-2 pass.
            "models": ["lenet_300_100"], "seeds": [0, 1, 2],
            "train": {"epochs": 25, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5,
                      "schedule": "cosine"},
            # 8,000 training images and 5,000 test images per angle: with 10,000 / all 10,000 the
            # grid took 25 min (subnet Laplace alone 9); the test subset is a fixed, seeded random one
            # (datasets.splits.subset), its accuracy standard error ~0.3 points per angle
            "data": {"n_train": 8_000, "n_val": 5_000, "n_test": 5_000},
            # docs/tuning-10-epochs/mnist_rotated/tuning/quick.json (the other tuned methods chose
            # their defaults)
            "methods": {"pbn": {"beta_start": 0.01, "rho_lr": 0.05}, "mfvi": {"beta_start": 0.01, "rho_lr": 0.05},
                        "vdp": {"kl_weight": 0.01}},
            "note": ("tour profile: the 20-minute main job; 8,000 training images (a fixed subset), 5,000 "
                     "validation images, 5,000 test images per rotation, the complete OOD set"),
        },
        "paper": {
            # PBN paper, Appendix H.2.1: SGD lr 0.01, momentum 0.9, L2 1e-5, batch 50, 50 epochs.
            # resnet18_cifar is the subnetwork-Laplace paper's setting (Daxberger et al. 2021: a
            # ResNet-18 "with over 11 million weights", 11,172,810 here on one input channel, inference
            # over "42 thousand ... around 0.38 %" of them); the paper text we hold gives no training
            # recipe, so it trains by this profile's. Its subnetwork is the paper's size (model_methods),
            # with laplace-torch's 40 SWAG snapshots for the Wasserstein selection (its mask's default;
            # this project's 256, one an epoch, are 256 epochs of a ResNet-18 on the GPU, more than a lent
            # call), and curvature and predict batches of 32 so that the Jacobians stay small (5.4 GB; the
            # default predict batch of 1,000 would take 167 GB; batches of 8 save nothing in the estimate,
            # which counts the larger of fit and predict, at four times the test predictive's passes). At
            # that size the float64 s x s matrices (GGN, Cholesky factor, scale) take 40.2 GB
            # (bench.laplace.memory's estimate: 45.7 GB in all): within the default limit on an 80 GB GPU
            # (80 % of its free memory); elsewhere the guard refuses the cell and names the largest size
            # that fits (memory_limit_gb raises the limit; docs/device.md)
            "models": ["lenet_300_100", "lenet5", "resnet18_cifar"], "seeds": [0, 1, 2, 3, 4],
            "train": {"epochs": 50, "batch_size": 50, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
            "data": {},
            # SSVI: the official code's values (methods/ssvi.py PAPER_OPTIONS, docs/ssvi.md)
            "methods": {"ssvi": {"mu_init": 0.01, "weight_decay": 5e-4}},
            "model_methods": {"resnet18_cifar": {"subnet_laplace": {"n_subnet": 42_000, "swag_n_snapshots": 40,
                                                                  "batch_size": 32, "predict_batch_size": 32}}},
            "note": "",
        },
    }
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test", "n_ood", "angles"}
    DEFAULT_DATA = {"n_val": 10_000, "n_train": None, "n_test": None, "n_ood": None,
                    "angles": list(range(0, 181, 15)), "eval_batch_size": 1000}


    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        return [f"rotation {a} deg" + (" (in-distribution)" if a == 0 else "") for a in cfg["angles"]] + ["OOD: FashionMNIST test"]

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        cfg = self.data_cfg(data_cfg)
        sp = load_mnist_splits(data_root, cfg, download)
        te_x, te_y, ood_x = sp["test_x"], sp["test_y"], sp["ood_x"]
        test01 = te_x.float() / 255.0

        def rotated(angle):  # computed when the set is read (one rotation in memory at a time)
            return lambda: (rotate_images(test01, angle) - 0.1307) / 0.3081

        eval_sets = [EvalSet("id" if angle == 0 else "shift", "rotation", float(angle),
                             Computed(rotated(angle), len(te_x)), te_y) for angle in cfg["angles"]]
        eval_sets.append(EvalSet("ood", "fashion_mnist", None, normalize(ood_x), None))
        lines = [f"MNIST from {Path(data_root) / 'MNIST'} (torchvision layout): {len(sp['train_x']):,} training images "
                 f"(the training set minus its last {int(cfg['n_val']):,}, which are the validation split), "
                 f"{len(te_x):,} test images",
                 f"shift: the test set rotated by {', '.join(f'{a:g}' for a in cfg['angles'])} degrees (bilinear, "
                 f"zero fill; 0 = the clean in-distribution set), computed when read",
                 f"OOD: FashionMNIST test, {len(ood_x):,} images (from {Path(data_root) / 'FashionMNIST'})",
                 "inputs scaled to [0, 1] and normalised with MNIST's mean 0.1307 and std 0.3081"]
        artifacts = {"data.json": json.dumps({"lines": lines, "captions": {
            "gallery.png": "The first test image at every rotation angle of the suite, and the first OOD image."}},
            indent=1).encode(), "gallery.png": rotation_gallery(test01[0], ood_x[0], cfg["angles"])}
        return SuiteData(normalize(sp["train_x"]), sp["train_y"], normalize(sp["val_x"]), sp["val_y"], eval_sets,
                         extras={"artifacts": artifacts})


def rotation_gallery(image, ood_image, angles) -> bytes:
    """PNG: ``image`` (1 x 28 x 28 in [0, 1]) at every angle, then the OOD image."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from bench.reporting.plots import to_png

    fig = Figure(figsize=(1.1 * (len(angles) + 1), 1.5))
    axes = fig.subplots(1, len(angles) + 1, squeeze=False)[0]
    for ax, angle in zip(axes, angles):
        ax.imshow(rotate_images(image[None].float(), angle)[0, 0].numpy(), cmap="gray", vmin=0, vmax=1)
        ax.set_title(f"{angle:g}°", fontsize=8)
    axes[-1].imshow(ood_image.float().squeeze().numpy() / 255.0, cmap="gray", vmin=0, vmax=1)
    axes[-1].set_title("OOD", fontsize=8)
    for ax in axes:
        ax.axis("off")
    return to_png(fig)
