"""Laplace-approximation machinery shared by the Laplace plugins (methods/subnet_laplace.py,
laplace_diag.py, laplace_last_layer.py; their base class is methods/_laplace_base.py), kept apart
from the plugins as laplace-torch keeps its curvature backends apart from its posteriors.

* :mod:`bench.laplace.subnet_jacobians` -- a laplace-torch GGN backend that builds only the
  subnetwork's Jacobian columns;
* :mod:`bench.laplace.memory` -- the memory estimate and guard of a full-covariance Laplace;
* :mod:`bench.laplace.prior` -- the prior-precision grid search every variant uses;
* :mod:`bench.laplace.predictive` -- probit and Monte Carlo of the linearised predictive;
* :mod:`bench.laplace.diag_glm` -- the linearised predictive of a diagonal posterior without
  per-example Jacobians of all weights;
* :mod:`bench.laplace.swag` -- diagonal SWAG, the variance estimate of the Wasserstein criterion.

Modules import laplace-torch lazily (importing it is slow).
"""
