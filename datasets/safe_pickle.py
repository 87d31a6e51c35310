"""The one place that unpickles a data file: ``load_array_pickle`` reads the CIFAR-10 python
batches (dicts of bytes, lists and numpy arrays) with an unpickler that builds builtin containers
and numpy arrays and nothing else, so a crafted file cannot make loading run code; any other
global it names is an ``UnpicklingError``. Torch files go through ``bench.torch_files.load_torch``
(``weights_only=True``); no other module of bench/, methods/, datasets/, benchmarks/ or scripts/
unpickles (``tests/test_safe_loading.py`` greps for it)."""
from __future__ import annotations

import pickle
from typing import BinaryIO


class ArrayUnpickler(pickle.Unpickler):
    """Builtin containers (dict, list, tuple, bytes, str, numbers: no global needed), numpy
    arrays, dtypes and scalars, and ``_codecs.encode`` (bytes in protocol 2); nothing else."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"),
               ("_codecs", "encode")}  # bytes in protocol-2 pickles written by Python 3 (torch allows it too)

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} (only containers and numpy arrays are allowed)")


def load_array_pickle(fh: BinaryIO, encoding: str = "bytes"):
    """The object pickled in the open binary file ``fh``, restricted to :class:`ArrayUnpickler`'s
    types (``encoding``: how Python 2 strings are decoded, as in ``pickle.load``)."""
    return ArrayUnpickler(fh, encoding=encoding).load()
