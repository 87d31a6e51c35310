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

Modules import laplace-torch lazily (importing it is slow), through :func:`import_laplace`.
"""

import importlib
import sys
import warnings

#: the FutureWarning torch (2.14) raises for every ``@torch.jit.script`` function a module defines
TORCH_JIT_SCRIPT_DEPRECATED = r"`torch\.jit\.script` is deprecated"


def import_laplace():
    """``import laplace`` (laplace-torch), without the torch.jit FutureWarnings of its imports.

    Importing laplace-torch imports its curvature backends, and with them ASDL
    (``asdl/precondition/psgd.py``: ten ``@torch.jit.script`` functions) and Curvlinops'
    dependency linear_operator (``linear_operator/utils/linear_cg.py``: two). Since torch 2.14
    each ``torch.jit.script`` call warns "`torch.jit.script` is deprecated. Please switch to
    `torch.compile` or `torch.export`." (FutureWarning), once per function, at import time:
    the dependencies' code (ASDL's PSGD preconditioner, linear_operator's conjugate gradients;
    still compiled and working under torch 2.14), not ours, and nothing a user can act on.
    Exactly that warning is ignored here, around the import only; every other warning
    of the import, and any later torch.jit warning, is shown as usual. Every lazy import of
    laplace-torch in bench/ and methods/ calls this first (tests/test_subnet_laplace.py checks
    that a subnet Laplace fit in a fresh process raises no FutureWarning)."""
    if "laplace" in sys.modules:
        return sys.modules["laplace"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=TORCH_JIT_SCRIPT_DEPRECATED, category=FutureWarning)
        return importlib.import_module("laplace")
