"""Subnetwork inference building blocks shared by the subnetwork methods.

* :mod:`bench.subnet.selection` -- which parameters form the subnetwork (criteria with one
  ``select(model, train_loader) -> flat indices`` interface, so any criterion can feed any
  inference scheme: PBN's variational inference, subnetwork Laplace, ...).
* :mod:`bench.subnet.partial_vi` -- mean-field VI over a chosen subset of the weights of an
  unchanged network (PBN; full mean-field VI when every weight is selected).
"""
from bench.subnet.partial_vi import PartialVI, beta_schedule, elbo_loss
from bench.subnet.selection import (
    CRITERIA,
    GradientCriterion,
    MagnitudeCriterion,
    RandomCriterion,
    SubnetCriterion,
    candidate_indices,
    default_param_filter,
    indices_to_masks,
    layer_distribution,
    make_criterion,
    masks_to_indices,
    param_layout,
    resolve_subnet_size,
)

__all__ = [
    "PartialVI", "beta_schedule", "elbo_loss",
    "CRITERIA", "GradientCriterion", "MagnitudeCriterion", "RandomCriterion", "SubnetCriterion",
    "candidate_indices", "default_param_filter", "indices_to_masks", "layer_distribution",
    "make_criterion", "masks_to_indices", "param_layout", "resolve_subnet_size",
]
