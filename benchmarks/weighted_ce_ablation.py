"""Ablation: the MAP UNet trained with a class-weighted cross-entropy, beside the unweighted one.

Both PBN papers train their segmentation UNets with a weighted cross-entropy against class imbalance
(sensitivity-guided PBN, App. H.4; medical PBN, Sec. 3.1); the benchmark's
profiles train every segmentation network with the unweighted one, because the weighted loss is not
the per-pixel categorical likelihood that the Bayesian methods' posteriors (Laplace's GGN, the
ELBO) and the calibration metrics (NLL, ECE, Brier) assume. This measures what that choice costs
and buys on the suite's own data: the MAP network of one seed, trained twice with the profile's
budget, initialisation and batch order (``bench.checkpoints.MapCache``, the harness's MAP cache) --
once with the loss weighted by median-frequency balancing (Eigen & Fergus 2015, as SegNet's CamVid
weights; computed from the training label maps at the profile's resolution), once unweighted (the
cached network every method of the grid starts from) -- and both scored by the harness's own
segmentation scorer on the validation images, the clean test set and every corrupted cell.

    .venv/bin/python benchmarks/weighted_ce_ablation.py --suite camvid --profile quick --seed 0 \
        --save docs/records/camvid/diagnostics/weighted_ce_seed0.json

The unweighted network's test scores are checked against the grid's ``deterministic`` records of the
same seed when they are in ``--results`` (the same network, the same scorer: they must agree).
``--from-json PATH`` prints a saved result again without recomputing.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.checkpoints import MapCache  # noqa: E402
from bench.class_weights import median_frequency_weights  # noqa: E402  (as pbn / mfvi class_weights)
from bench.data import EvalSet  # noqa: E402
from bench.harness import score_segmentation  # noqa: E402
from experiment_cli import grid_map_cache, run_experiment  # noqa: E402

COLUMNS = ("miou", "pixel_accuracy", "mean_class_accuracy", "nll", "ece", "brier", "error_auroc")


class WeightedTask:
    """The suite's segmentation task with a class-weighted cross-entropy (what MapCache trains with)."""

    def __init__(self, task, weights: torch.Tensor):
        self.task, self.weights = task, weights
        self.kind, self.num_outputs, self.ignore_index = task.kind, task.num_outputs, task.ignore_index

    def loss(self, output, y, reduction: str = "mean"):
        return F.cross_entropy(output, y.reshape(-1), weight=self.weights.to(output.device),
                               ignore_index=self.ignore_index, reduction=reduction)


class Deterministic:
    def __init__(self, net, task):
        self.net, self.task = net, task

    def predict(self, x):
        return self.task.predictive(self.net(x))


def score(net, task, sets, batch_size: int) -> dict:
    out = {}
    for e in sets:
        metrics, _curves, _s = score_segmentation(Deterministic(net, task), e, task, batch_size, "cpu")
        out[f"{e.kind}:{e.shift}:{e.severity:g}"] = {k: metrics[k] for k in COLUMNS + ("iou_per_class",)}
    return out


def summary(cells: dict) -> dict:
    """Validation, clean test, and the mean over the corrupted cells, per column."""
    groups = {"val": [v for k, v in cells.items() if k.startswith("val:")],
              "id": [v for k, v in cells.items() if k.startswith("id:")],
              "shift": [v for k, v in cells.items() if k.startswith("shift:")]}
    return {g: {c: statistics.fmean(r[c] for r in rows if r[c] is not None) for c in COLUMNS}
            for g, rows in groups.items() if rows}


def stored_check(results: Path, suite: str, model: str, seed: int, cells: dict) -> float | None:
    """Largest difference between the unweighted network's scores here and the grid's
    ``deterministic`` records of the seed (None when they are not in ``results``)."""
    recs = sorted((results / suite / "records" / model).glob(f"deterministic-*/seed{seed}/*.json"))
    diffs = []
    for path in recs:
        r = json.loads(path.read_text())
        key = f"{r['kind']}:{r['shift']}:{float(r['severity'] or 0):g}"
        if key in cells:
            diffs += [abs(r["metrics"][c] - cells[key][c]) for c in COLUMNS if r["metrics"].get(c) is not None]
    return max(diffs) if diffs else None


def table(out: dict) -> str:
    names = {"miou": "mIoU ↑", "pixel_accuracy": "pixel acc ↑", "mean_class_accuracy": "class acc ↑",
             "nll": "NLL ↓", "ece": "ECE ↓", "brier": "Brier ↓", "error_auroc": "error AUROC ↑"}
    lines = [f"MAP {out['model']} of {out['suite']} seed {out['seed']} ({out['profile']} profile budget), trained with "
             f"the unweighted and the median-frequency-weighted cross-entropy; validation ({out['n_val']} images), "
             f"clean test ({out['n_test']}), mean over the {out['n_shift_cells']} corrupted cells:", "",
             "| loss | set | " + " | ".join(names[c] for c in COLUMNS) + " |",
             "| :--- | :--- | " + " | ".join("---:" for _ in COLUMNS) + " |"]
    for loss in ("unweighted", "weighted"):
        for g, label in (("val", "validation"), ("id", "clean test"), ("shift", "corrupted")):
            row = out["summary"][loss][g]
            lines.append(f"| {loss} | {label} | " + " | ".join(f"{row[c]:.4f}" for c in COLUMNS) + " |")
    w = ", ".join(f"{n} {v:.2f}" for n, v in zip(out["classes"], out["weights"]))
    lines += ["", f"Class weights (median-frequency, from the training label maps): {w}."]
    iou = {loss: out["cells"][loss][out["id_key"]]["iou_per_class"] for loss in ("unweighted", "weighted")}
    lines += ["", "Clean test IoU per class: " + "; ".join(
        f"{n} {a:.3f} → {b:.3f}" for n, a, b in zip(out["classes"], iou["unweighted"], iou["weighted"]))
        + " (unweighted → weighted)."]
    chk = out.get("stored_check")
    lines += ["", "Unweighted network vs the grid's `deterministic` records of the seed: "
              + ("not in the results directory" if chk is None else f"largest difference {chk:.1e}") + "."]
    return "\n".join(lines)


def compute(a, suite, plan, model, data) -> dict:
    task = suite.task
    weights = median_frequency_weights(data.train_y, task.num_outputs, task.ignore_index)
    grid = grid_map_cache(a, suite, plan, model, data)
    nets = {
        # the grid's MAP network (trained here only when the grid has not cached it)
        "unweighted": grid.get(a.seed),
        "weighted": MapCache(Path(a.results) / suite.name / "ablations" / "checkpoints",
                             {**grid.key, "loss": "weighted_ce_median_frequency"}, grid.build_model,
                             WeightedTask(task, weights), data.train_x, data.train_y, plan.train, torch.device("cpu"),
                             augment=data.augment).get(a.seed),
    }
    sets = [EvalSet("val", "clean", 0.0, data.val_x, data.val_y)] + list(data.eval_sets)
    cells = {loss: score(net, task, sets, a.batch_size) for loss, net in nets.items()}
    id_key = next(k for k in cells["unweighted"] if k.startswith("id:"))
    return {"classes": list(data.extras.get("classes", range(task.num_outputs))), "weights": weights.tolist(),
            "n_val": len(data.val_x), "n_test": data.id_set().n,
            "n_shift_cells": sum(e.kind == "shift" for e in data.eval_sets), "id_key": id_key,
            "summary": {loss: summary(c) for loss, c in cells.items()}, "cells": cells,
            "stored_check": stored_check(Path(a.results), suite.name, model, a.seed, cells["unweighted"])}


def main(argv=None) -> int:
    return run_experiment(
        argv, description=__doc__.splitlines()[0], method="deterministic", compute=compute, table=table,
        task_kind="segmentation",
        add_arguments=lambda p: p.add_argument("--batch-size", type=int, default=8, help="images per scoring batch"))


if __name__ == "__main__":
    sys.exit(main())
