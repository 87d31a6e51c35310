"""Rotated MNIST (Ovadia et al. 2019), as used by the PBN and subnetwork-Laplace papers.

Train on MNIST train minus its last 10,000 images (validation split), test on MNIST test
rotated by 0..180 degrees in 15-degree steps; FashionMNIST test is the OOD set.
"""
from __future__ import annotations

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
            "models": ["lenet_300_100", "lenet5"], "seeds": [0, 1, 2],
            "train": {"epochs": 5, "batch_size": 128, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-5,
                      "schedule": "cosine"},
            "data": {},
            # No per-method tuning here: a hyperparameter a method needs tuned is swept with --set
            # and chosen on the validation split by bench/selection.py (one procedure for all).
            "methods": {},
            "note": "",
        },
        "paper": {
            # PBN paper, Appendix H.2.1: SGD lr 0.01, momentum 0.9, L2 1e-5, batch 50, 50 epochs
            "models": ["lenet_300_100", "lenet5"], "seeds": [0, 1, 2, 3, 4],
            "train": {"epochs": 50, "batch_size": 50, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
            "data": {},
            # SSVI: the official code's values (methods/ssvi.py PAPER_OPTIONS, docs/ssvi.md)
            "methods": {"ssvi": {"mu_init": 0.01, "weight_decay": 5e-4}},
            "note": "",
        },
    }
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
        return SuiteData(normalize(sp["train_x"]), sp["train_y"], normalize(sp["val_x"]), sp["val_y"], eval_sets)
