"""``camvid_binary``: binary segmentation (car against the rest) on CamVid under CamVid-C.

The medical PBN paper's segmentation experiments are binary (LIDC-IDRI lung nodules, ISIC skin
lesions; Dice and IoU of the foreground), and neither data set can be had offline. This suite is
the ``camvid`` suite with its label maps reduced to one foreground class, so that the binary
setting, its Dice (:mod:`bench.segmentation_metrics`) and the weighted likelihood
(``--set pbn.class_weights=median_frequency``) can be run: the same images, splits, CamVid-C
corrupted copies (the same ``CamVid-C`` directory: the corruptions act on the images, not the
labels), profiles and networks as ``camvid`` (:class:`bench.suites.segmentation.CamVidC`); only
the label mapping and the two classes differ. Void (11) stays ignored; every other class is 0.

The foreground is ``car`` (CamVid class 8). Measured on SegNet's copy at the native 180 x 240
(labelled pixels; ``docs/segmentation.md`` has the command): cars are 6.1 % of the training
pixels (present in 360 of 367 images), 1.8 % of the validation (101 / 101) and 4.1 % of the test
pixels (223 / 233): an imbalanced foreground, as the paper's lesions, but neither tiny (pedestrian
0.7 %, bicyclist 0.3 %, in 317 and 201 training images, would leave many images empty) nor
dominant (road 33 %, building 24 %, sky 18 %), and nearly every image has some, so the per-image
Dice is rarely decided by the empty-image rule.
"""
from __future__ import annotations

import numpy as np

from bench.suites.base import register_suite
from bench.suites.segmentation import CamVidC
from bench.tasks import segmentation
from datasets.segmentation import CAMVID_CLASSES, IGNORE, camvid_labels

FOREGROUND = "car"
FOREGROUND_ID = CAMVID_CLASSES.index(FOREGROUND)


def camvid_binary_labels(raw: np.ndarray) -> np.ndarray:
    """CamVid label values -> 1 for the foreground class, 0 for the other 10 classes, void ignored."""
    out = camvid_labels(raw)
    return np.where(out == IGNORE, IGNORE, (out == FOREGROUND_ID).astype(np.int64))


@register_suite("camvid_binary")
class CamVidBinaryC(CamVidC):
    description = (f"CamVid reduced to binary segmentation ({FOREGROUND} vs the rest), test images under the "
                   "ImageNet-C corruptions x 5 severities (CamVid-C, shared with camvid); Dice of the foreground")
    task = segmentation(2)
    CLASSES = ("background", FOREGROUND)
    stands_in_for = ("the medical PBN paper's binary segmentation (LIDC-IDRI nodules, ISIC lesions: Dice / IoU of "
                     "the foreground), not available offline")
    # camvid's smoke and quick profiles (budget, resolution, per-method options); quick with PBN's
    # sigma rate raised from 0.01 to 0.1: camvid's PBN with the same 2-epoch VI phase (184 steps,
    # the KL per image) ended with sigma a tenth of its stationary value, Adam's step limit on log sigma
    # at 0.01 (0.9 over the cosine phase) short of the ~3.0 it had to travel (docs/segmentation.md,
    # "PBN's sigma on CamVid"); at 0.1 that travel is a third of the limit. Mean-field VI takes the same
    # rate: at 0.01 its sigma was still rising after 12 epochs (KL weight 1e-4), at 0.1 no candidate
    # is rate-limited. The KL weight of both is static (with the KL per image) and is bench tune's
    # choice on validation over the suite's own space below (seed 0, docs/results/medical.md): the
    # paper's annealed 0.2 -> 0.01 drops the foreground (PBN's optimum: sigma 0.6, Dice 0.02); the
    # smallest weights leave PBN's sigma short of its rest point, the largest leave the fully Bayesian
    # network uninformed (test_camvid_binary ties these values to the kept tuning). PBN's is the choice
    # made on the test-like split (1e-5 since 2026-12-05; 1e-4 on the published split), and so is
    # mean-field VI's (1e-5 on both splits; on the new one the only candidate whose checks pass).
    # VDP++ takes the same sigma rate since 2026-11-29: at 0.01 both of its fits here (KL weight 1 and 1e-2, seed 0) were
    # rate-limited, log sigma 90 % of Adam's ceiling with the KL still pulling up (bench.validity)
    QUICK_PBN_KL_WEIGHT = 1e-5
    QUICK_MFVI_KL_WEIGHT = 1e-5
    # the validation split of quick and paper (since 2026-12-05): drive 0006R0's training frames tune
    # beside the published validation frames (data.val_sequences). On the published split alone (101
    # frames of 0016E5, whose other frames train) the MAP network's validation NLL was half its clean
    # test NLL (0.50, seeds 0-2), so every option chosen there was chosen for another distribution than
    # the test's; with 0006R0 moved there it is 1.02 (seeds 0-2, every check passed; docs/validity.md,
    # "The validation split against the test split"). The board of the published split is kept in
    # docs/records-published-split
    VAL_SEQUENCES = ["0006R0"]
    profiles = {"smoke": CamVidC.profiles["smoke"],
                "quick": {**CamVidC.profiles["quick"],
                          "data": {**CamVidC.profiles["quick"]["data"], "val_sequences": VAL_SEQUENCES},
                          "note": (CamVidC.profiles["quick"]["note"] + "; validated on the published validation "
                                   "frames with drive 0006R0's training frames moved beside them "
                                   "(data.val_sequences), a split like the test split"),
                          "methods": {**CamVidC.profiles["quick"]["methods"],
                                      "pbn": {**CamVidC.profiles["quick"]["methods"]["pbn"], "rho_lr": 0.1,
                                              "beta_start": QUICK_PBN_KL_WEIGHT,
                                              "beta_end": QUICK_PBN_KL_WEIGHT},
                                      "mfvi": {**CamVidC.profiles["quick"]["methods"]["mfvi"], "rho_lr": 0.1,
                                               "beta_start": QUICK_MFVI_KL_WEIGHT,
                                               "beta_end": QUICK_MFVI_KL_WEIGHT},
                                      "vdp": {**CamVidC.profiles["quick"]["methods"]["vdp"], "rho_lr": 0.1}}}}
    # bench tune's space for the two VI methods here: a static KL weight (the KL per image) over four
    # decades, at the profile's sigma rate. The global space (annealed from 0.01 or 0.2) holds only
    # weights that drop the foreground here (the paper's 0.2 -> 0.01 did). PBN's reached the medical
    # PBN paper's own static weight for classification, 0.01, until 2026-12-05 (below); mean-field VI's
    # sits at 1e-6 .. 1e-3, since at 1e-4 the fully Bayesian network was already uninformed and at
    # 1e-5, then the space's smallest, it passed every check (a choice at the edge)
    # VDP++'s KL weight (since 2026-12-05) a decade below the global space: over 1e-4 .. 0.1 its tune
    # chose 1e-4, the smallest (validation NLL falling steeply towards it), a choice at the edge.
    # PBN's (since 2026-12-05) a decade lower than it was (1e-5 .. 1e-2): on the test-like validation
    # split its tune chose 1e-5, the smallest, where 1e-2 failed its checks on both splits
    tuning_spaces = {"pbn": {"beta_start+beta_end": [1e-6, 1e-5, 1e-4, 1e-3]},
                     "mfvi": {"beta_start+beta_end": [1e-6, 1e-5, 1e-4, 1e-3]},
                     "vdp": {"kl_weight": [1e-5, 1e-4, 1e-3, 1e-2]}}
    profiles["paper"] = {
        # the medical PBN paper's segmentation set-up (Sec. 3.1): UNet, SGD at a fixed lr 0.01, weight
        # decay 1e-5, batch 10, 50 epochs, class-weighted cross-entropy; PBN with 1 % of the weights,
        # its KL weight annealed from 0.2 to 0.01 (the method's defaults) and 5 posterior samples
        "models": ["unet_pbn"], "seeds": [0, 1, 2],
        "train": {"epochs": 50, "batch_size": 10, "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5,
                  "schedule": "constant"},
        "data": {"val_sequences": VAL_SEQUENCES},
        "methods": {"pbn": {"r_bayes": 0.01, "class_weights": "median_frequency"},
                    "mfvi": {"class_weights": "median_frequency"}},
        "note": ("the medical PBN paper's UNet optimiser and budget (SGD lr 0.01 fixed, weight decay 1e-5, batch 10, "
                 "50 epochs; momentum is not stated there: 0.9 here) and its class-weighted ELBO "
                 "(median-frequency weights) on CamVid cars at the native 180 x 240; the MAP network and the "
                 "other methods train unweighted; validated as quick (drive 0006R0's training frames beside "
                 "the published validation frames)"),
    }

    def splits(self, root, cfg):
        splits, _ = super().splits(root, cfg)
        return splits, camvid_binary_labels


__all__ = ["CamVidBinaryC", "camvid_binary_labels"]
