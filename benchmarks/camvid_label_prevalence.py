"""CamVid's per-class pixel shares on the training label maps, and the presence threshold of the
``camvid_multilabel`` suite chosen from them.

For each training image, each class's share of the labelled pixels (void left out); for each
candidate threshold, the share of training images in which each class is present (its prevalence);
the chosen threshold is the candidate with the most labels that are neither almost never nor almost
always present (prevalence in [0.1, 0.9]), ties broken by the larger mean binary entropy of the 11
prevalences. Read at the suite's resolution (``--size 120 160``, the quick profile's) or natively.

    .venv/bin/python benchmarks/camvid_label_prevalence.py --data-root data --size 120 160

With ``--splits``, the training, validation and test splits side by side instead: each class's pixel
share and its prevalence at the ``camvid_multilabel`` suite's threshold, and the NLL of the predictor
that says the training prevalences for every image, which sees no image (``bench.validation_split``
reads the same split shift off the MAP networks):

    .venv/bin/python benchmarks/camvid_label_prevalence.py --data-root data --size 120 160 --splits
    .venv/bin/python benchmarks/camvid_label_prevalence.py --data-root data --size 120 160 --splits --val-sequences 0006R0
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.multilabel_metrics import prevalence_reference  # noqa: E402
from datasets.presence import class_presence, informative_labels, pixel_shares, prevalence_table  # noqa: E402
from datasets.segmentation import CAMVID_CLASSES, IGNORE, LabelFiles, camvid_labels, camvid_split  # noqa: E402

CANDIDATES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
LOW, HIGH = 0.1, 0.9


def binary_entropy(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return -(q * np.log2(q) + (1 - q) * np.log2(1 - q))


def choose(prev: np.ndarray, candidates=CANDIDATES) -> float:
    """The candidate with the most informative labels, ties to the larger mean binary entropy."""
    n = informative_labels(prev, LOW, HIGH)
    h = binary_entropy(prev).mean(-1)
    return float(candidates[max(range(len(candidates)), key=lambda i: (n[i], h[i]))])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--split", default="train")
    ap.add_argument("--size", type=int, nargs=2, default=None, metavar=("H", "W"),
                    help="resize the label maps (nearest) as the suite does; default: native")
    ap.add_argument("--val-sequences", nargs="+", default=None, metavar="SEQ",
                    help="with --splits: the splits data.val_sequences gives (these training drives' frames "
                         "moved beside the published validation frames)")
    ap.add_argument("--splits", action="store_true",
                    help="the training, validation and test splits side by side (pixel shares, prevalence at the "
                         "camvid_multilabel suite's threshold, the training-prevalence predictor's NLL)")
    args = ap.parse_args(argv)
    if args.splits:
        return splits_table(Path(args.data_root), tuple(args.size) if args.size else None, args.val_sequences)
    pairs = camvid_split(Path(args.data_root), args.split)
    labels = LabelFiles([lab for _, lab in pairs], camvid_labels, tuple(args.size) if args.size else None)[:]
    shares = pixel_shares(labels, len(CAMVID_CLASSES), IGNORE)
    prev = prevalence_table(shares, CANDIDATES)
    h, w = labels.shape[-2:]
    print(f"CamVid {args.split}: {len(labels)} label maps at {h} x {w}; void {float((labels == IGNORE).float().mean()):.1%} "
          f"of the pixels (not a class, not in the share's denominator)\n")
    print("| threshold | " + " | ".join(CAMVID_CLASSES) + f" | labels in [{LOW}, {HIGH}] | mean entropy (bits) |")
    print("| ---: " * (len(CAMVID_CLASSES) + 3) + "|")
    n, ent = informative_labels(prev, LOW, HIGH), binary_entropy(prev).mean(-1)
    for i, t in enumerate(CANDIDATES):
        print(f"| {t:g} | " + " | ".join(f"{p:.2f}" for p in prev[i]) + f" | {n[i]} | {ent[i]:.3f} |")
    present = [np.median(s[s > 0]) if (s > 0).any() else 0.0 for s in shares.T]
    print("\nmedian share where the class has pixels: " +
          ", ".join(f"{c} {m:.4f}" for c, m in zip(CAMVID_CLASSES, present)))
    print(f"chosen threshold: {choose(prev):g}")
    return 0


def splits_table(root: Path, size, val_sequences=None) -> int:
    """Print the per-split table of ``--splits`` (``val_sequences``: as ``data.val_sequences`` splits)."""
    from bench.suites.camvid_multilabel import PRESENCE_THRESHOLD
    from bench.suites.segmentation import tune_on_sequences

    pairs = {split: camvid_split(root, split) for split in ("train", "val", "test")}
    if val_sequences:
        pairs["train"], pairs["val"] = tune_on_sequences(pairs["train"], pairs["val"], pairs["test"], val_sequences)
    # the suite's own targets (class_presence) and reference predictor (prevalence_reference)
    shares, present = {}, {}
    for split in ("train", "val", "test"):
        labels = LabelFiles([lab for _, lab in pairs[split]], camvid_labels, size)[:]
        counts = torch.bincount(labels[labels != IGNORE].flatten(), minlength=len(CAMVID_CLASSES)).numpy()
        shares[split] = counts / max(int(counts.sum()), 1)
        present[split] = class_presence(labels, len(CAMVID_CLASSES), PRESENCE_THRESHOLD, IGNORE)
    print(f"| class | pixel share: train | val | test | present (share >= {PRESENCE_THRESHOLD:g}): train | val | test |")
    print("| --- " + "| ---: " * 6 + "|")
    for i, c in enumerate(CAMVID_CLASSES):
        print(f"| {c} | " + " | ".join(f"{shares[s][i]:.3f}" for s in ("train", "val", "test")) + " | "
              + " | ".join(f"{float(present[s][:, i].mean()):.2f}" for s in ("train", "val", "test")) + " |")
    nll = {s: prevalence_reference(present["train"], present[s])["nll"] for s in ("train", "val", "test")}
    print(f"\nThe training-prevalence predictor's NLL (summed over the {len(CAMVID_CLASSES)} labels, mean over "
          "images): " + ", ".join(f"{s} {v:.2f}" for s, v in nll.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
