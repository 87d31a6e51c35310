"""In-memory tensor batching for training and evaluation.

Suites decode and preprocess their data once into tensors; every method then trains and
evaluates on those tensors, so no method pays for decoding, rotation or corruption.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch


class TensorLoader:
    """Mini-batches of (x, y) from in-memory tensors, moved to ``device``.

    ``augment`` (optional) maps an input batch to an augmented batch (on the device) and
    draws its randomness from the loader's generator, so a seed fixes the whole stream.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, device: torch.device | str = "cpu", drop_last: bool = False,
                 augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None):
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
        self.x, self.y = x, y
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last, self.augment = shuffle, drop_last, augment
        self.device = torch.device(device)
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        n, b = len(self.x), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    @property
    def num_examples(self) -> int:
        return len(self.x)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.x)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else None
        for i in range(len(self)):
            sl = slice(i * self.batch_size, min((i + 1) * self.batch_size, n))
            if order is None:
                xb, yb = self.x[sl], self.y[sl]
            else:
                idx = order[sl]
                xb, yb = self.x[idx], self.y[idx]
            xb = xb.to(self.device, non_blocking=True)
            yb = yb.to(self.device, non_blocking=True)
            if self.augment is not None:
                xb = self.augment(xb, self.generator)
            yield xb, yb

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


@dataclass
class EvalSet:
    """One evaluation set: in-distribution test, one shift at one severity, or an OOD set."""

    kind: str  # "id" | "shift" | "ood" | "val" (the held-out validation split, for tuning only)
    shift: str  # shift family ("rotation", a corruption name, "clean") or OOD dataset name
    severity: float | None
    x: torch.Tensor
    y: torch.Tensor | None  # None for OOD sets without labels in the task's label space
    note: str = ""

    @property
    def n(self) -> int:
        return len(self.x)


@dataclass
class SuiteData:
    """Everything a suite provides for one profile, decoded once."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    eval_sets: list[EvalSet]
    augment: Callable | None = None
    extras: dict = field(default_factory=dict)  # suite-specific (e.g. the toy band grid)

    def id_set(self) -> EvalSet:
        return next(e for e in self.eval_sets if e.kind == "id")
