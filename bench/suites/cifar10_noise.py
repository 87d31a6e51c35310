"""CIFAR-10 with additive Gaussian noise at a range of signal-to-noise ratios: the VDP++ paper's
noise-robustness experiment (Fig. 1c, Fig. 3) on CIFAR-10, the analogue of ``mnist_noise``.

Training and validation data, augmentation, normalisation and models are those of the
``cifar10c`` suite (CIFAR-10 train minus its last 5,000 images; random crop with padding 4 and
horizontal flip, off in the quick profile as in ``cifar10c``'s; CIFAR-10 mean / std normalisation;
``resnet_small``), through the shared
helpers of :mod:`bench.suites.cifar10c`. The shifted sets are the clean test set plus zero-mean
Gaussian noise, added exactly as ``mnist_noise`` adds it: in the **normalised** domain, per
image, ``noise variance = mean(x^2) / 10^(SNR / 10)`` with ``x`` the normalised image, no
clipping (:func:`bench.suites.mnist_noise.add_noise`). Every level has its own seeded
generator, so the noisy sets are identical across methods, seeds and runs. SVHN test is the
OOD set when present (as in ``cifar10c``).

The clean test set is the in-distribution set, recorded at severity ``CLEAN_SEVERITY`` = 40
(its SNR is infinite; see ``mnist_noise``).
"""
from __future__ import annotations

from pathlib import Path


from bench.data import EvalSet, SuiteData
from bench.errors import BenchError
from bench.seeding import derive_seed
from bench.suites.base import Suite, register_suite
from bench.suites.cifar10c import Cifar10C, balanced_subset, load_cifar10_splits, load_svhn_ood, make_augment
from bench.suites.mnist_noise import CLEAN_SEVERITY, SNR_LEVELS_DB, add_noise
from bench.tasks import classification
from datasets.cifar10 import NormalizedImages, normalize
from datasets.sources import Computed


@register_suite("cifar10_noise")
class Cifar10Noise(Suite):
    description = "CIFAR-10, test with additive Gaussian noise at SNR 30 .. -6 dB; SVHN as OOD (VDP++ paper)"
    task = classification(10)
    in_shape = (3, 32, 32)
    shift_label = "SNR (dB)"
    default_methods = ("deterministic", "vdp", "mfvi")
    profiles = {
        "smoke": {
            "models": ["resnet_small"], "seeds": [0],
            "train": dict(Cifar10C.profiles["smoke"]["train"]),
            "data": {"n_train": 512, "n_val": 500, "n_test": 200, "n_ood": 200, "snr_db": [20, 0, -6]},
            "methods": {"mfvi": {"train_samples": 2, "predict_samples": 2},
                        "deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 4}},
            "note": "smoke profile: tiny subsets, one epoch, 3 SNR levels; numbers are meaningless",
        },
        "quick": {
            # the cifar10c quick recipe (resnet_small, 12 epochs, SGD 0.05 cosine, batch 128, not
            # augmented: augmented, 12 epochs are short), so the two CIFAR-10 suites' numbers are
            # comparable; every noise level uses the whole test set
            "models": ["resnet_small"], "seeds": [0, 1, 2],
            "train": dict(Cifar10C.profiles["quick"]["train"]),
            "data": {"augment": Cifar10C.profiles["quick"]["data"]["augment"]},
            "methods": {},
            "note": "",
        },
        "paper": {
            # cifar10c's paper profile (ResNet-18, App. H.3.2 of the PBN paper); the VDP++ paper's
            # CIFAR-10 recipe is not given beyond the architecture family
            "models": ["resnet18_pbn"], "seeds": [0, 1, 2],
            "train": dict(Cifar10C.profiles["paper"]["train"]),
            "data": {"eval_batch_size": 200},
            "methods": {"mfvi": {"epochs": 100}},
            "note": "cifar10c's paper profile (ResNet-18); the VDP++ paper gives no CIFAR-10 optimiser or schedule",
        },
    }
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test", "n_ood", "snr_db"}
    DEFAULT_DATA = {"n_val": 5000, "n_train": None, "n_test": None, "n_ood": None,
                    "snr_db": list(SNR_LEVELS_DB), "eval_batch_size": 500, "augment": True}


    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        return (["clean test (in-distribution; recorded at severity %g)" % CLEAN_SEVERITY]
                + [f"Gaussian noise, SNR {s:g} dB" for s in cfg["snr_db"]] + ["OOD: SVHN test (when present)"])

    def load(self, data_root: Path, data_cfg: dict, download: bool, progress: bool = False) -> SuiteData:
        cfg = self.data_cfg(data_cfg)
        root = Path(data_root)
        levels = [float(s) for s in cfg["snr_db"]]
        if any(s >= CLEAN_SEVERITY for s in levels):
            raise BenchError(f"SNR levels must be below {CLEAN_SEVERITY:g} dB, the clean set's plotting position")
        (tr_x, tr_y), (val_x, val_y), (te_x, te_y), n_train_total = load_cifar10_splits(root, cfg, download)
        idx = balanced_subset(te_y, cfg["n_test"], seed=2)  # cifar10c's clean subset
        te_x, te_y = te_x[idx], te_y[idx]
        eval_sets = [EvalSet("id", "clean", CLEAN_SEVERITY, NormalizedImages(te_x), te_y,
                             note=f"clean test set, no noise (SNR = inf); severity {CLEAN_SEVERITY:g} is its plotting position")]
        for snr in levels:  # computed when read (123 MB per level for 10,000 images): one level at a time
            noisy = Computed(lambda snr=snr: add_noise(normalize(te_x), snr, derive_seed("cifar10_noise", snr)), len(te_x))
            eval_sets.append(EvalSet("shift", "gaussian_noise_snr", snr, noisy, te_y,
                                     note="Gaussian noise added to the normalised image, "
                                          "variance = mean(x^2) / 10^(SNR/10) per image, no clipping"))
        ood_x, ood_note = load_svhn_ood(root, cfg["n_ood"])
        if ood_x is not None:
            eval_sets.append(EvalSet("ood", "svhn", None, NormalizedImages(ood_x), None))
        else:
            eval_sets[0].note += f"; {ood_note}"
        n_val = len(val_x)
        extras = {"val_split": {"first": n_train_total - n_val, "n": n_val}}
        return SuiteData(normalize(tr_x), tr_y, normalize(val_x), val_y, eval_sets,
                         augment=make_augment() if cfg["augment"] else None, extras=extras)


__all__ = ["Cifar10Noise", "CLEAN_SEVERITY", "SNR_LEVELS_DB"]
