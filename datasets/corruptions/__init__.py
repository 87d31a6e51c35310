"""The corruptions of Hendrycks & Dietterich (2019): one implementation, three parameter tables.

``corrupt(images_uint8 (n, H, W, 3), name, severity, seed=0, release="cifar10c")`` applies one of
the 19 corruptions (``NAMES`` = ``STANDARD`` + ``EXTRA``) with the severity parameters of a
release (``RELEASES``: ``cifar10c`` 32x32, ``tiny_imagenet_c`` 64x64, ``imagenet_c`` 224x224;
``PARAMS[release][name]`` holds the five severities). Any image size of at least 32x32 works; at a
release's own size its original steps are reproduced. ``ensure_image_folder_c`` writes an
ImageNet-C-style folder tree (``datasets/corruptions/folder.py``). docs/corruptions.md has the
provenance, every deviation and the comparison with the `imagecorruptions` package.
"""
from datasets.corruptions.functions import (CORRUPTIONS, GENERATOR_VERSION, check_name_severity, corrupt,
                                            make_rng)
from datasets.corruptions.tables import EXTRA, NAMES, PARAMS, RELEASES, STANDARD

__all__ = ["CORRUPTIONS", "EXTRA", "GENERATOR_VERSION", "NAMES", "PARAMS", "RELEASES", "STANDARD",
           "check_name_severity", "corrupt", "make_rng", "ensure_image_folder_c", "read_image_folder_c"]


def __getattr__(name):  # lazy: the folder writer is not needed to corrupt arrays
    if name in ("ensure_image_folder_c", "read_image_folder_c"):
        from datasets.corruptions import folder
        return getattr(folder, name)
    raise AttributeError(f"module 'datasets.corruptions' has no attribute {name!r}")
