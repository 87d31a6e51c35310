"""MNIST with additive Gaussian noise at a range of signal-to-noise ratios (VDP++ paper, Fig. 1c
and Fig. 3, after Dera et al.): the noise-robustness experiment.

Training, validation and OOD data are those of ``mnist_rotated`` (MNIST train minus its last
10,000 images; FashionMNIST test as OOD). The shifted sets are the MNIST test set plus
zero-mean Gaussian noise; the severity is the SNR in dB, defined per image on the normalised
image ``x``: ``noise variance = mean(x^2) / 10^(SNR / 10)``. Every level uses its own seeded
generator, so the noisy sets are identical across methods, seeds and runs.

The clean test set is the in-distribution set. Its SNR is infinite; because the report places
shift records by their severity (and an id record without one at 0, which here would be
0 dB), it is recorded at severity ``CLEAN_SEVERITY`` = 40, above the noisiest-to-cleanest grid,
with a note saying that no noise was added.
"""
from __future__ import annotations

from pathlib import Path

import torch

from bench.data import EvalSet, SuiteData
from bench.seeding import derive_seed
from bench.suites.base import Suite, register_suite
from bench.suites.mnist_rotated import MnistRotated
from bench.tasks import classification
from datasets.mnist import load_mnist_splits, normalize
from datasets.sources import Computed

#: plotting position (dB) of the clean, noise-free test set
CLEAN_SEVERITY = 40.0
SNR_LEVELS_DB = [30, 20, 10, 6, 3, 0, -3, -6]


def add_noise(x: torch.Tensor, snr_db: float, seed: int) -> torch.Tensor:
    """``x`` (N, ...) plus Gaussian noise at ``snr_db`` per image: var = mean(x^2) / 10^(snr/10)."""
    gen = torch.Generator().manual_seed(int(seed))
    power = x.float().pow(2).flatten(1).mean(1)
    std = (power / 10.0 ** (float(snr_db) / 10.0)).sqrt().view(-1, *([1] * (x.dim() - 1)))
    return x + std * torch.randn(x.shape, generator=gen, dtype=torch.float32)


@register_suite("mnist_noise")
class MnistNoise(Suite):
    description = "MNIST, test with additive Gaussian noise at SNR 30 .. -6 dB; FashionMNIST as OOD (VDP++ paper)"
    task = classification(10)
    in_shape = (1, 28, 28)
    shift_label = "SNR (dB)"
    default_methods = ("deterministic", "vdp", "mfvi")
    profiles = {
        "smoke": {
            "models": ["lenet_300_100"], "seeds": [0],
            "train": dict(MnistRotated.profiles["smoke"]["train"]),
            "data": {"n_train": 2000, "n_val": 500, "n_test": 500, "n_ood": 500, "snr_db": [20, 0, -6]},
            "methods": {"deep_ensemble": {"members": 2}, "mc_dropout": {"samples": 5}},
            "note": "smoke profile: tiny subsets, one epoch; numbers are meaningless",
        },
        "quick": {
            # the mnist_rotated quick budget, so the two suites' numbers are comparable
            "models": ["lenet_300_100", "lenet5"], "seeds": [0, 1, 2],
            "train": dict(MnistRotated.profiles["quick"]["train"]),
            "data": {},
            "methods": {},
            "note": "",
        },
        "paper": {
            # VDP++ paper, Sec. 3: LeNet on MNIST, five models per method, batch size 512. The paper
            # gives no optimiser, learning rate or epoch count; these are mnist_rotated's paper
            # profile (SGD lr 0.01, momentum 0.9, 50 epochs) with the VDP++ batch size.
            "models": ["lenet5"], "seeds": [0, 1, 2, 3, 4],
            "train": {"epochs": 50, "batch_size": 512, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5},
            "data": {},
            "methods": {},
            "note": "VDP++ paper: LeNet-5, 5 seeds, batch 512; optimiser, lr and epochs not given by the paper",
        },
    }
    EVAL_ONLY_DATA = Suite.EVAL_ONLY_DATA | {"n_test", "n_ood", "snr_db"}
    DEFAULT_DATA = {**MnistRotated.DEFAULT_DATA, "snr_db": list(SNR_LEVELS_DB)}
    DEFAULT_DATA.pop("angles")


    def describe_shifts(self, data_cfg):
        cfg = self.data_cfg(data_cfg)
        return (["clean test (in-distribution; recorded at severity %g)" % CLEAN_SEVERITY]
                + [f"Gaussian noise, SNR {s:g} dB" for s in cfg["snr_db"]] + ["OOD: FashionMNIST test"])

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        cfg = self.data_cfg(data_cfg)
        levels = [float(s) for s in cfg["snr_db"]]
        if any(s >= CLEAN_SEVERITY for s in levels):
            raise ValueError(f"SNR levels must be below {CLEAN_SEVERITY:g} dB, the clean set's plotting position")
        sp = load_mnist_splits(data_root, cfg, download)  # the split of mnist_rotated
        te_x, te_y = sp["test_x"], sp["test_y"]
        clean = normalize(te_x)
        eval_sets = [EvalSet("id", "clean", CLEAN_SEVERITY, clean, te_y,
                             note=f"clean test set, no noise (SNR = inf); severity {CLEAN_SEVERITY:g} is its plotting position")]
        for snr in levels:  # computed when read: one noise level in memory at a time
            noisy = Computed(lambda snr=snr: add_noise(clean, snr, derive_seed("mnist_noise", snr)), len(clean))
            eval_sets.append(EvalSet("shift", "gaussian_noise_snr", snr, noisy, te_y))
        eval_sets.append(EvalSet("ood", "fashion_mnist", None, normalize(sp["ood_x"]), None))
        return SuiteData(normalize(sp["train_x"]), sp["train_y"], normalize(sp["val_x"]), sp["val_y"], eval_sets)
