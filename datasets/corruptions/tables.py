"""The severity parameters of the three releases of Hendrycks & Dietterich (2019).

Each table is copied from the generator script of its release in hendrycks/robustness
(``ImageNet-C/create_c/``): ``make_cifar_c.py`` (CIFAR-10-C, 32x32), ``make_tinyimagenet_c.py``
(Tiny-ImageNet-C, 64x64) and ``make_imagenet_c.py`` (ImageNet-C, 224x224). ``PARAMS[release][name]``
holds the five severities' parameters; the tuple layout per corruption is in ``FIELDS``.

The releases differ in steps too, not only in numbers; those steps are :class:`Release` fields:
the frost textures are shrunk by 0.2 (CIFAR) or 0.3 (Tiny-ImageNet) or used at full size
(ImageNet), and the elastic parameters are multiples of the image size (``IMSIZE``, 32 or 64) or,
for ImageNet, of 244 (a typo for 224 that the release kept). Glass-blur loop bounds, the fog map
size and the zoom crop follow from the image size (``datasets/corruptions/functions.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

STANDARD = (
    "gaussian_noise", "shot_noise", "impulse_noise",
    "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast",
    "elastic_transform", "pixelate", "jpeg_compression",
)
EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
NAMES = STANDARD + EXTRA

FIELDS = {
    "gaussian_noise": "std of x + N(0, std^2)",
    "shot_noise": "rate: Poisson(rate * x) / rate",
    "impulse_noise": "salt-and-pepper amount",
    "speckle_noise": "std of x + x * N(0, std^2)",
    "gaussian_blur": "sigma",
    "glass_blur": "(sigma, max shift, iterations)",
    "defocus_blur": "(disk radius, alias blur sigma)",
    "motion_blur": "(radius, sigma) of ImageMagick's motion blur",
    "zoom_blur": "(stop, step) of the zoom factors arange(1, stop, step)",
    "snow": "(loc, scale, zoom, threshold, blur radius, blur sigma, blend)",
    "frost": "(image weight, frost weight)",
    "fog": "(strength, wibble decay)",
    "brightness": "added to HSV value",
    "contrast": "scale around the per-channel mean",
    "saturate": "(a, b): HSV saturation * a + b",
    "elastic_transform": "(alpha, sigma, affine) as multiples of Release.elastic_unit",
    "pixelate": "box down-scale factor",
    "jpeg_compression": "JPEG quality",
    "spatter": "(loc, scale, sigma, threshold, intensity, mud?)",
}


@dataclass(frozen=True)
class Release:
    name: str
    size: int                 # the native (square) image size of the release
    script: str               # the original generator in hendrycks/robustness
    frost_scale: float        # cv2.resize factor of the frost textures (1.0: used as they are)
    elastic_unit: float | None  # elastic parameters are multiples of this; None: the image size


RELEASES: dict[str, Release] = {
    "cifar10c": Release("cifar10c", 32, "ImageNet-C/create_c/make_cifar_c.py", 0.2, None),
    "tiny_imagenet_c": Release("tiny_imagenet_c", 64, "ImageNet-C/create_c/make_tinyimagenet_c.py", 0.3, None),
    "imagenet_c": Release("imagenet_c", 224, "ImageNet-C/create_c/make_imagenet_c.py", 1.0, 244.0),
}

PARAMS: dict[str, dict[str, tuple]] = {
    "cifar10c": {
        "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
        "shot_noise": (500, 250, 100, 75, 50),
        "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
        "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),
        "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
        "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
        "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
        "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
        "zoom_blur": ((1.06, 0.01), (1.11, 0.01), (1.16, 0.01), (1.21, 0.01), (1.26, 0.01)),
        "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
                 (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
                 (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)),
        "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
        "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
        "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
        "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
        "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),
        "elastic_transform": ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06),
                              (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)),
        "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
        "jpeg_compression": (80, 65, 58, 50, 40),
        "spatter": ((0.62, 0.1, 0.7, 0.7, 0.5, 0), (0.65, 0.1, 0.8, 0.7, 0.5, 0),
                    (0.65, 0.3, 1, 0.69, 0.5, 0), (0.65, 0.1, 0.7, 0.69, 0.6, 1),
                    (0.65, 0.1, 0.5, 0.68, 0.6, 1)),
    },
    "tiny_imagenet_c": {
        "gaussian_noise": (0.04, 0.08, 0.12, 0.15, 0.18),
        "shot_noise": (250, 100, 50, 30, 15),
        "impulse_noise": (0.01, 0.02, 0.05, 0.08, 0.14),
        "speckle_noise": (0.15, 0.2, 0.25, 0.3, 0.35),
        "gaussian_blur": (0.5, 0.75, 1, 1.25, 1.5),
        "glass_blur": ((0.1, 1, 1), (0.5, 1, 1), (0.6, 1, 2), (0.7, 2, 1), (0.9, 2, 2)),
        "defocus_blur": ((0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)),
        "motion_blur": ((10, 1), (10, 1.5), (10, 2), (10, 2.5), (12, 3)),
        "zoom_blur": ((1.06, 0.01), (1.11, 0.01), (1.16, 0.01), (1.21, 0.01), (1.26, 0.01)),
        "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.8), (0.1, 0.2, 1, 0.5, 10, 4, 0.8),
                 (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.65),
                 (0.3, 0.3, 1.25, 0.65, 14, 12, 0.6)),
        "frost": ((1, 0.3), (0.9, 0.4), (0.8, 0.45), (0.75, 0.5), (0.7, 0.55)),
        "fog": ((0.4, 3), (0.7, 3), (1, 2.5), (1.5, 2), (2, 1.75)),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        "saturate": ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (30, 0.2)),
        "elastic_transform": ((0, 0, 0.08), (0.05, 0.3, 0.06), (0.1, 0.08, 0.06),
                              (0.1, 0.03, 0.03), (0.16, 0.03, 0.02)),
        "pixelate": (0.9, 0.8, 0.7, 0.6, 0.5),
        "jpeg_compression": (65, 58, 50, 40, 25),
        "spatter": ((0.62, 0.1, 0.7, 0.7, 0.6, 0), (0.65, 0.1, 0.8, 0.7, 0.6, 0),
                    (0.65, 0.3, 1, 0.69, 0.6, 0), (0.65, 0.1, 0.7, 0.68, 0.6, 1),
                    (0.65, 0.1, 0.5, 0.67, 0.6, 1)),
    },
    "imagenet_c": {
        "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
        "shot_noise": (60, 25, 12, 5, 3),
        "impulse_noise": (0.03, 0.06, 0.09, 0.17, 0.27),
        "speckle_noise": (0.15, 0.2, 0.35, 0.45, 0.6),
        "gaussian_blur": (1, 2, 3, 4, 6),
        "glass_blur": ((0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)),
        "defocus_blur": ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)),
        "motion_blur": ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15)),
        "zoom_blur": ((1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03)),
        "snow": ((0.1, 0.3, 3, 0.5, 10, 4, 0.8), (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
                 (0.55, 0.3, 4, 0.9, 12, 8, 0.7), (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
                 (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55)),
        "frost": ((1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)),
        "fog": ((1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4)),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        "saturate": ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)),
        "elastic_transform": ((2, 0.7, 0.1), (2, 0.08, 0.2), (0.05, 0.01, 0.02),
                              (0.07, 0.01, 0.02), (0.12, 0.01, 0.02)),  # x 244
        "pixelate": (0.6, 0.5, 0.4, 0.3, 0.25),
        "jpeg_compression": (25, 18, 15, 10, 7),
        "spatter": ((0.65, 0.3, 4, 0.69, 0.6, 0), (0.65, 0.3, 3, 0.68, 0.6, 0),
                    (0.65, 0.3, 2, 0.68, 0.5, 0), (0.65, 0.3, 1, 0.65, 1.5, 1),
                    (0.67, 0.4, 1, 0.65, 1.5, 1)),
    },
}

# The elastic transform of the maintained `imagecorruptions` package (used by the imagenet_c
# table away from 224x224, where the release's 244-based affine + elastic has no meaning): no
# affine; displacement gaussian(uniform(-0.005 H, 0.005 H), 0.01 * (H, W)) * 250 * a.
ELASTIC_ANY_SIZE = (0.05, 0.065, 0.085, 0.1, 0.12)
