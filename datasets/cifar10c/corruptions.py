"""The 19 CIFAR-10-C corruptions of Hendrycks & Dietterich (2019), with CIFAR's parameters.

Every corruption takes a batch of uint8 images ``(n, 32, 32, 3)``, a severity 1..5 and a
``numpy.random.Generator`` and returns the corrupted uint8 batch. The arithmetic follows the
original CIFAR-10-C generator (``make_cifar_c.py`` of hendrycks/robustness) step by step, but
vectorised over the batch with numpy / scipy.ndimage / PIL instead of per-image OpenCV,
scikit-image and ImageMagick calls; ``docs/cifar10c_generator.md`` lists every piece and every
known difference. Use :func:`corrupt` (seeded, chunked) rather than the functions directly.
"""
from __future__ import annotations

import io
import math
import zlib
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image
from scipy import ndimage

# Bump whenever the output of any corruption changes for the same (images, seed).
GENERATOR_VERSION = "bench-cifar10c-1.0"
SIZE = 32
CHUNK = 1000  # images per internal step: bounds memory; part of the generator (random streams)

STANDARD = (
    "gaussian_noise", "shot_noise", "impulse_noise",
    "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast",
    "elastic_transform", "pixelate", "jpeg_compression",
)
EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
NAMES = STANDARD + EXTRA

# The CIFAR-10-C severity parameters (severity 1..5), as in ../shared/cifar10c-parameters.md.
PARAMS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),                      # std
    "shot_noise": (500, 250, 100, 75, 50),                                 # Poisson rate
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),                       # s&p amount
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),  # radius, alias blur
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),  # sigma, shift, iters
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),          # radius, sigma
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),                           # arange(1, this, 0.01)
    "snow": ((0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
             (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9), (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
             (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)),  # loc, scale, zoom, threshold, blur radius, sigma, blend
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),  # image weight, frost weight
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),         # strength, wibble decay
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),                             # HSV value + c
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),                               # scale around channel mean
    "elastic_transform": ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06),
                          (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)),           # x32: alpha, sigma, affine
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),                             # box downscale factor
    "jpeg_compression": (80, 65, 58, 50, 40),                              # quality
    "speckle_noise": (0.06, 0.1, 0.12, 0.16, 0.2),                         # std of x * noise
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),                            # sigma
    "spatter": ((0.62, 0.1, 0.7, 0.7, 0.5, 0), (0.65, 0.1, 0.8, 0.7, 0.5, 0),
                (0.65, 0.3, 1, 0.69, 0.5, 0), (0.65, 0.1, 0.7, 0.69, 0.6, 1),
                (0.65, 0.1, 0.5, 0.68, 0.6, 1)),  # loc, scale, sigma, threshold, intensity, mud?
    "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),      # HSV saturation * a + b
}

FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")  # the original draws 1-5


# --------------------------------------------------------------------------- conversions

def _f(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float64) / 255.0


def _u8(x: np.ndarray) -> np.ndarray:
    """[0, 1] floats to uint8 by truncation, like the original's ``np.uint8(clip(x) * 255)``.

    The 1e-6 keeps values that are integers up to float round-off (e.g. an unchanged pixel)."""
    return np.floor(np.clip(x, 0.0, 1.0) * 255.0 + 1e-6).astype(np.uint8)


def _u8_255(x: np.ndarray) -> np.ndarray:
    return np.floor(np.clip(x, 0.0, 255.0) + 1e-6).astype(np.uint8)


def _p(name: str, severity: int):
    return PARAMS[name][severity - 1]


# --------------------------------------------------------------------------- helpers

def _blur(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """skimage.filters.gaussian on each image of a batch: spatial axes only (channels untouched)."""
    sig = [0.0] * x.ndim
    sig[1] = sig[2] = sigma
    return ndimage.gaussian_filter(x, sigma=sig, mode=mode, truncate=truncate)


def _correlate_hw(x: np.ndarray, kernel: np.ndarray, mode: str) -> np.ndarray:
    """2-D correlation over the spatial axes (1, 2) of a (n, h, w[, c]) batch."""
    k = kernel[None, :, :, None] if x.ndim == 4 else kernel[None]
    return ndimage.correlate(x, k, mode=mode)


def _box3(x: np.ndarray) -> np.ndarray:
    """cv2.blur(x, (3, 3)): normalised 3x3 box, border reflect-101."""
    return _correlate_hw(x.astype(np.float64), np.full((3, 3), 1.0 / 9.0), "mirror")


def rgb_to_hsv(x: np.ndarray) -> np.ndarray:
    """skimage.color.rgb2hsv on (..., 3) floats in [0, 1]."""
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    v = x.max(-1)
    delta = v - x.min(-1)
    safe_v = np.where(v > 0, v, 1.0)
    s = np.where(delta > 0, delta / safe_v, 0.0)
    d = np.where(delta > 0, delta, 1.0)
    h = (g - b) / d                                   # red is the max (lowest priority on ties)
    h = np.where(g == v, 2.0 + (b - r) / d, h)
    h = np.where(b == v, 4.0 + (r - g) / d, h)
    h = np.where(delta > 0, (h / 6.0) % 1.0, 0.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(x: np.ndarray) -> np.ndarray:
    """skimage.color.hsv2rgb on (..., 3)."""
    h, s, v = x[..., 0], x[..., 1], x[..., 2]
    hi = np.floor(h * 6.0)
    f = h * 6.0 - hi
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    hi = hi.astype(np.int64) % 6
    r = np.choose(hi, (v, q, p, p, t, v))
    g = np.choose(hi, (t, v, v, q, p, p))
    b = np.choose(hi, (p, p, t, v, v, q))
    return np.stack([r, g, b], axis=-1)


def motion_kernel(radius: float, sigma: float) -> np.ndarray:
    """ImageMagick's one-sided motion-blur weights: exp(-i^2 / 2 sigma^2), i = 0..2*ceil(r), normalised."""
    width = 2 * int(math.ceil(radius)) + 1
    k = np.exp(-np.arange(width, dtype=np.float64) ** 2 / (2.0 * sigma * sigma))
    return k / k.sum()


def motion_offsets(width: int, angles_deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dy, dx) integer offsets (n, width) of the i-th tap along each angle, as ImageMagick's
    MotionBlurImage (and imagecorruptions' re-implementation) round them."""
    a = np.deg2rad(np.asarray(angles_deg, dtype=np.float64))
    py, px = width * np.sin(a), width * np.cos(a)
    hyp = np.hypot(py, px)[:, None]
    i = np.arange(width, dtype=np.float64)[None, :]
    dy = np.ceil(i * py[:, None] / hyp - 0.5).astype(np.int64)
    dx = np.ceil(i * px[:, None] / hyp - 0.5).astype(np.int64)
    return dy, dx


def motion_blur_batch(x: np.ndarray, radius: float, sigma: float, angles_deg: np.ndarray) -> np.ndarray:
    """out[y, x] = sum_i k_i * img[y + dy_i, x + dx_i], edge pixels replicated; one angle per image."""
    k = motion_kernel(radius, sigma)
    width = len(k)
    dy, dx = motion_offsets(width, angles_deg)
    n, h, w = x.shape[:3]
    pad = [(0, 0), (width, width), (width, width)] + [(0, 0)] * (x.ndim - 3)
    xp = np.pad(x, pad, mode="edge")
    out = np.zeros(x.shape, dtype=np.float64)
    nn = np.arange(n)[:, None, None]
    ar_h, ar_w = np.arange(h)[None, :], np.arange(w)[None, :]
    for i in range(width):
        rows = width + ar_h + dy[:, i:i + 1]
        cols = width + ar_w + dx[:, i:i + 1]
        out += k[i] * xp[nn, rows[:, :, None], cols[:, None, :]]
    return out


@lru_cache(maxsize=None)
def _zoom_matrix(size: int, z: float) -> tuple[np.ndarray, int, int]:
    """The linear map of the original's ``clipped_zoom`` along one axis: centre crop of
    ceil(size / z) pixels, scipy.ndimage.zoom(order=1) by z, centre trim back to size."""
    ch = int(np.ceil(size / z))
    top = (size - ch) // 2
    a = ndimage.zoom(np.eye(ch), (z, 1.0), order=1)  # scipy itself defines the sampling grid
    trim = (a.shape[0] - size) // 2
    return a[trim:trim + size], top, ch


def clipped_zoom(x: np.ndarray, z: float) -> np.ndarray:
    """Batch version of the original's clipped_zoom on (n, h, w, c) (square images)."""
    a, top, ch = _zoom_matrix(x.shape[1], float(z))
    crop = np.moveaxis(x[:, top:top + ch, top:top + ch], 3, 1)  # (n, c, ch, ch)
    return np.moveaxis(a @ crop @ a.T, 1, 3)


def plasma_fractal(n: int, rng: np.random.Generator, mapsize: int = 32, wibbledecay: float = 3) -> np.ndarray:
    """Diamond-square height maps (n, mapsize, mapsize) in [0, 1], the original's algorithm batched."""
    assert mapsize & (mapsize - 1) == 0
    m = np.zeros((n, mapsize, mapsize))
    step, wibble = mapsize, 100.0

    def wibbled_mean(a):
        return a / 4 + wibble * rng.uniform(-wibble, wibble, a.shape)

    while step >= 2:
        half = step // 2
        corner = m[:, 0:mapsize:step, 0:mapsize:step]
        sq = corner + np.roll(corner, -1, axis=1)
        sq = sq + np.roll(sq, -1, axis=2)
        m[:, half:mapsize:step, half:mapsize:step] = wibbled_mean(sq)
        dr = m[:, half:mapsize:step, half:mapsize:step]
        ul = m[:, 0:mapsize:step, 0:mapsize:step]
        lt = dr + np.roll(dr, 1, axis=1) + ul + np.roll(ul, -1, axis=2)
        m[:, 0:mapsize:step, half:mapsize:step] = wibbled_mean(lt)
        tt = dr + np.roll(dr, 1, axis=2) + ul + np.roll(ul, -1, axis=1)
        m[:, half:mapsize:step, 0:mapsize:step] = wibbled_mean(tt)
        step //= 2
        wibble /= wibbledecay
    m -= m.min(axis=(1, 2), keepdims=True)
    return m / m.max(axis=(1, 2), keepdims=True)


def _extend(idx: np.ndarray, size: int, mode: str) -> np.ndarray:
    """Out-of-range integer indices folded back: 'reflect101' (cv2 BORDER_REFLECT_101, scipy
    'mirror') or 'reflect' (half-sample symmetric, scipy 'reflect'); valid for |overshoot| < size."""
    if mode == "reflect101":
        idx = np.where(idx < 0, -idx, idx)
        return np.where(idx > size - 1, 2 * (size - 1) - idx, idx)
    idx = np.where(idx < 0, -idx - 1, idx)
    return np.where(idx > size - 1, 2 * size - 1 - idx, idx)


def bilinear(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, mode: str) -> np.ndarray:
    """Sample each image of x (n, h, w, c) at real coordinates rows/cols (n, h, w)."""
    n, h, w = x.shape[:3]
    r0, c0 = np.floor(rows), np.floor(cols)
    fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
    r0, c0 = r0.astype(np.int64), c0.astype(np.int64)
    ra, rb = _extend(r0, h, mode), _extend(r0 + 1, h, mode)
    ca, cb = _extend(c0, w, mode), _extend(c0 + 1, w, mode)
    nn = np.arange(n)[:, None, None]
    return ((1 - fr) * ((1 - fc) * x[nn, ra, ca] + fc * x[nn, ra, cb])
            + fr * ((1 - fc) * x[nn, rb, ca] + fc * x[nn, rb, cb]))


def warp_affine(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """cv2.warpAffine(img, M, (w, h), INTER_LINEAR, BORDER_REFLECT_101) per image, M (n, 2, 3)
    mapping source to destination; source coordinates quantised to 1/32 pixel as OpenCV does."""
    n, h, w = x.shape[:3]
    a, b, c = m[:, 0, 0], m[:, 0, 1], m[:, 0, 2]
    d, e, f = m[:, 1, 0], m[:, 1, 1], m[:, 1, 2]
    det = a * e - b * d
    det = np.where(det != 0, 1.0 / np.where(det != 0, det, 1.0), 0.0)
    i00, i11, i01, i10 = e * det, a * det, -b * det, -d * det
    i02 = -i00 * c - i01 * f
    i12 = -i10 * c - i11 * f
    ys = np.arange(h, dtype=np.float64)[None, :, None]
    xs = np.arange(w, dtype=np.float64)[None, None, :]
    col = lambda v: v[:, None, None]  # noqa: E731
    # OpenCV: AB_BITS = 10, INTER_BITS = 5, round_delta = 16, cvRound = round half to even
    xq = (np.rint((col(i01) * ys + col(i02)) * 1024) + 16 + np.rint(col(i00) * xs * 1024)).astype(np.int64) >> 5
    yq = (np.rint((col(i11) * ys + col(i12)) * 1024) + 16 + np.rint(col(i10) * xs * 1024)).astype(np.int64) >> 5
    return bilinear(x, yq / 32.0, xq / 32.0, "reflect101")


def affine_from_points(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """cv2.getAffineTransform for a batch: src (3, 2), dst (n, 3, 2) -> (n, 2, 3)."""
    p = np.concatenate([src, np.ones((3, 1))], axis=1)                # (3, 3)
    sol = np.linalg.solve(p[None], dst.astype(np.float64))           # (n, 3, 2)
    return np.transpose(sol, (0, 2, 1))


@lru_cache(maxsize=None)
def _disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The original's anti-aliased disk: 17x17 (radius <= 8) binary disk, normalised, then
    cv2.GaussianBlur with a 3x3 kernel of sigma alias_blur (border reflect-101); zero margin cropped."""
    if radius <= 8:
        coords, ksize = np.arange(-8, 9), 3
    else:
        coords, ksize = np.arange(-radius, radius + 1), 5
    xx, yy = np.meshgrid(coords, coords)
    disk = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    t = np.arange(ksize) - (ksize - 1) / 2
    g = np.exp(-t ** 2 / (2 * alias_blur ** 2))
    g /= g.sum()
    disk = ndimage.correlate1d(ndimage.correlate1d(disk, g, axis=0, mode="mirror"), g, axis=1, mode="mirror")
    rows, cols = np.nonzero(disk)
    r = max(abs(rows - len(coords) // 2).max(), abs(cols - len(coords) // 2).max())
    mid = len(coords) // 2
    return disk[mid - r:mid + r + 1, mid - r:mid + r + 1]


def frost_dir() -> Path:
    """The frost textures shipped in the `imagecorruptions` wheel. Located without importing
    that package (its __init__ needs OpenCV and pkg_resources)."""
    spec = find_spec("imagecorruptions")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        folder = Path(loc) / "frost"
        if all((folder / f).exists() for f in FROST_FILES):
            return folder
    raise RuntimeError("frost corruption: the frost textures come from the `imagecorruptions` package "
                       "(pinned in pyproject.toml); install it: pip install imagecorruptions==1.1.2")


@lru_cache(maxsize=None)
def frost_textures() -> tuple[np.ndarray, ...]:
    """Frost images 1-5 as RGB uint8, shrunk by 0.2 like cv2.resize(fx=fy=0.2, INTER_LINEAR):
    at an exact 1/5 scale the bilinear sample of output pixel d is source pixel 5d + 2."""
    out = []
    folder = frost_dir()
    for name in FROST_FILES:
        with Image.open(folder / name) as im:
            img = np.asarray(im.convert("RGB"))
        h, w = img.shape[:2]
        oh, ow = int(np.rint(h * 0.2)), int(np.rint(w * 0.2))
        rows = np.minimum(5 * np.arange(oh) + 2, h - 1)
        cols = np.minimum(5 * np.arange(ow) + 2, w - 1)
        out.append(np.ascontiguousarray(img[rows][:, cols]))
    return tuple(out)


# --------------------------------------------------------------------------- noise

def gaussian_noise(images, severity, rng):
    x = _f(images)
    return _u8(x + rng.normal(scale=_p("gaussian_noise", severity), size=x.shape))


def shot_noise(images, severity, rng):
    lam = _p("shot_noise", severity)
    return _u8(rng.poisson(_f(images) * lam) / lam)


def impulse_noise(images, severity, rng):
    """skimage random_noise(mode='s&p'): each value flipped with probability `amount`, half salt."""
    x = _f(images)
    flipped = rng.random(x.shape) < _p("impulse_noise", severity)
    salted = rng.random(x.shape) < 0.5
    x[flipped & salted] = 1.0
    x[flipped & ~salted] = 0.0
    return _u8(x)


def speckle_noise(images, severity, rng):
    x = _f(images)
    return _u8(x + x * rng.normal(scale=_p("speckle_noise", severity), size=x.shape))


# --------------------------------------------------------------------------- blur

def gaussian_blur(images, severity, rng):
    return _u8(_blur(_f(images), _p("gaussian_blur", severity)))


def defocus_blur(images, severity, rng):
    radius, alias = _p("defocus_blur", severity)
    return _u8(_correlate_hw(_f(images), _disk_kernel(radius, alias), "mirror"))


def glass_blur(images, severity, rng):
    """Blur, shuffle pixels locally, blur. The original's in-place 'swap' of two numpy views
    copies the neighbour into (h, w) and leaves the neighbour as it was, and np.random.randint's
    exclusive upper bound makes the offsets -shift..shift-1; with shift 1 every source pixel is
    read before it is overwritten, so one iteration is exactly a gather, as done here."""
    sigma, shift, iterations = _p("glass_blur", severity)
    assert shift == 1, "the gather form needs non-positive offsets"
    x = np.floor(_blur(_f(images), sigma) * 255.0 + 1e-6).astype(np.uint8)
    n = len(x)
    idx = np.arange(shift + 1, SIZE - shift + 1)  # h, w = 31 .. 2 in the original's loops
    nn = np.arange(n)[:, None, None]
    for _ in range(iterations):
        d = rng.integers(-shift, shift, size=(n, len(idx), len(idx), 2))
        rows = idx[None, :, None] + d[..., 1]
        cols = idx[None, None, :] + d[..., 0]
        x = x.copy()
        x[:, idx[0]:idx[-1] + 1, idx[0]:idx[-1] + 1] = x[nn, rows, cols]
    return _u8(_blur(x / 255.0, sigma))


def motion_blur(images, severity, rng):
    radius, sigma = _p("motion_blur", severity)
    angles = rng.uniform(-45, 45, size=len(images))
    out = motion_blur_batch(images.astype(np.float64), radius, sigma, angles)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)  # ImageMagick rounds to its 8-bit PNG


def zoom_blur(images, severity, rng):
    x = _f(images)
    zooms = np.arange(1, _p("zoom_blur", severity), 0.01)
    out = np.zeros_like(x)
    for z in zooms:
        out += clipped_zoom(x, z)
    return _u8((x + out) / (len(zooms) + 1))


# --------------------------------------------------------------------------- weather

def snow(images, severity, rng):
    loc, scale, zoom, threshold, radius, sigma, blend = _p("snow", severity)
    x = _f(images)
    n = len(x)
    layer = rng.normal(loc=loc, scale=scale, size=(n, SIZE, SIZE, 1))
    layer = clipped_zoom(layer, zoom)
    layer[layer < threshold] = 0
    layer = _u8(layer).astype(np.float64)  # to an 8-bit greyscale PNG
    angles = rng.uniform(-135, -45, size=n)
    layer = np.clip(np.rint(motion_blur_batch(layer, radius, sigma, angles)), 0, 255) / 255.0
    grey = x @ np.array([0.299, 0.587, 0.114])  # cv2.COLOR_RGB2GRAY
    x = blend * x + (1 - blend) * np.maximum(x, grey[..., None] * 1.5 + 0.5)
    return _u8(x + layer + layer[:, ::-1, ::-1])


def frost(images, severity, rng):
    a, b = _p("frost", severity)
    tex = frost_textures()
    n = len(images)
    which = rng.integers(len(tex), size=n)
    heights = np.array([t.shape[0] for t in tex])[which]
    widths = np.array([t.shape[1] for t in tex])[which]
    r0 = rng.integers(0, heights - SIZE)
    c0 = rng.integers(0, widths - SIZE)
    crops = np.empty(images.shape, dtype=np.float64)
    ar = np.arange(SIZE)
    for t, texture in enumerate(tex):
        sel = np.nonzero(which == t)[0]
        if len(sel):
            rows = r0[sel, None] + ar[None]
            cols = c0[sel, None] + ar[None]
            crops[sel] = texture[rows[:, :, None], cols[:, None, :]]
    return _u8_255(a * images.astype(np.float64) + b * crops)


def fog(images, severity, rng):
    strength, decay = _p("fog", severity)
    x = _f(images)
    max_val = x.max(axis=(1, 2, 3), keepdims=True)
    x = x + strength * plasma_fractal(len(x), rng, SIZE, decay)[..., None]
    return _u8(x * max_val / (max_val + strength))


def spatter(images, severity, rng):
    loc, scale, sigma, threshold, intensity, mud = _p("spatter", severity)
    x = _f(images)
    n = len(x)
    liquid = _blur(rng.normal(loc=loc, scale=scale, size=(n, SIZE, SIZE)), sigma)
    liquid[liquid < threshold] = 0
    if mud == 0:  # water: pale turquoise drops with shaded rims
        liquid8 = _u8(liquid)  # the original's astype(uint8); values > 1 (very rare) clipped here
        dist = np.where(canny(liquid8, 50, 150), 0, 255).astype(np.uint8)
        dist = np.minimum(distance_transform_l2_5(dist), 20.0)          # THRESH_TRUNC at 20
        dist = np.floor(_box3(dist) + 1e-9).astype(np.uint8)
        dist = equalize_hist(dist)
        ker = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float64)
        dist = np.clip(_correlate_hw(dist.astype(np.float64), ker, "mirror"), 0, 255)  # CV_8U result
        dist = _box3(dist)
        m = liquid8 * dist
        peak = m.max(axis=(1, 2), keepdims=True)
        m = np.where(peak > 0, m / np.where(peak > 0, peak, 1.0), 0.0) * intensity
        color = np.array([175, 238, 238]) / 255.0
        return _u8(x + m[..., None] * color)
    m = _blur((liquid > threshold).astype(np.float64), intensity)  # mud: brown blotches
    m[m < 0.8] = 0
    color = np.array([63, 42, 20]) / 255.0
    return _u8(x * (1 - m[..., None]) + color * m[..., None])


def canny(img: np.ndarray, low: float, high: float) -> np.ndarray:
    """cv2.Canny(img, low, high) for a uint8 batch (n, h, w): 3x3 Sobel (border replicate), L1
    magnitude, non-maximum suppression in 4 directions (tan 22.5 deg in 15-bit fixed point) and
    8-connected hysteresis. Returns a boolean edge map."""
    p = np.pad(img.astype(np.int64), ((0, 0), (1, 1), (1, 1)), mode="edge")
    gx = (p[:, :-2, 2:] + 2 * p[:, 1:-1, 2:] + p[:, 2:, 2:]) - (p[:, :-2, :-2] + 2 * p[:, 1:-1, :-2] + p[:, 2:, :-2])
    gy = (p[:, 2:, :-2] + 2 * p[:, 2:, 1:-1] + p[:, 2:, 2:]) - (p[:, :-2, :-2] + 2 * p[:, :-2, 1:-1] + p[:, :-2, 2:])
    mag = np.abs(gx) + np.abs(gy)
    mp = np.pad(mag, ((0, 0), (1, 1), (1, 1)))  # zeros outside, as OpenCV's magnitude buffer
    c = mp[:, 1:-1, 1:-1]
    left, right = mp[:, 1:-1, :-2], mp[:, 1:-1, 2:]
    up, down = mp[:, :-2, 1:-1], mp[:, 2:, 1:-1]
    ax, ay = np.abs(gx), np.abs(gy) << 15
    tg22 = ax * 13573                                   # round(tan(22.5 deg) * 2^15)
    tg67 = tg22 + (ax << 16)
    same = (gx ^ gy) >= 0                               # s = +1
    diag = np.where(same, (c > mp[:, :-2, :-2]) & (c > mp[:, 2:, 2:]),
                    (c > mp[:, :-2, 2:]) & (c > mp[:, 2:, :-2]))
    keep = np.where(ay < tg22, (c > left) & (c >= right),
                    np.where(ay > tg67, (c > up) & (c >= down), diag))
    keep &= c > int(np.floor(low))
    strong = keep & (c > int(np.floor(high)))
    if not strong.any():
        return strong
    structure = np.zeros((3, 3, 3), dtype=bool)
    structure[1] = True                                 # 8-connected within each image only
    labels, _ = ndimage.label(keep, structure=structure)
    hit = np.zeros(labels.max() + 1, dtype=bool)
    hit[labels[strong]] = True
    hit[0] = False
    return hit[labels]


def distance_transform_l2_5(img: np.ndarray) -> np.ndarray:
    """cv2.distanceTransform(img, DIST_L2, 5) for a uint8 batch: the 5x5 chamfer distance
    (1, 1.4, 2.1969 in 16-bit fixed point) from each non-zero pixel to the nearest zero pixel;
    outside the image counts as far. Rows are swept with a vectorised min-plus scan."""
    n, h, w = img.shape
    big = np.int64(1) << 40
    a, b, c = 65536, int(round(1.4 * 65536)), int(round(2.1969 * 65536))
    t = np.full((n, h + 4, w + 4), big, dtype=np.int64)
    zero = img == 0
    ramp = np.arange(w, dtype=np.int64) * a
    for i in range(h):                                   # forward pass, top to bottom
        r = i + 2
        u = np.minimum.reduce([
            t[:, r - 2, 1:w + 1] + c, t[:, r - 2, 3:w + 3] + c,
            t[:, r - 1, 0:w] + c, t[:, r - 1, 1:w + 1] + b, t[:, r - 1, 2:w + 2] + a,
            t[:, r - 1, 3:w + 3] + b, t[:, r - 1, 4:w + 4] + c])
        u = np.where(zero[:, i], 0, u)
        # d[j] = min(u[j], d[j-1] + a)  ==  j*a + cummin_k(u[k] - k*a)
        t[:, r, 2:w + 2] = np.minimum.accumulate(u - ramp, axis=1) + ramp
    for i in range(h - 1, -1, -1):                       # backward pass, bottom to top
        r = i + 2
        u = np.minimum.reduce([
            t[:, r, 2:w + 2],
            t[:, r + 2, 3:w + 3] + c, t[:, r + 2, 1:w + 1] + c,
            t[:, r + 1, 4:w + 4] + c, t[:, r + 1, 3:w + 3] + b, t[:, r + 1, 2:w + 2] + a,
            t[:, r + 1, 1:w + 1] + b, t[:, r + 1, 0:w] + c])
        rev = u[:, ::-1]
        scan = (np.minimum.accumulate(rev - ramp, axis=1) + ramp)[:, ::-1]
        t[:, r, 2:w + 2] = scan
    d = t[:, 2:h + 2, 2:w + 2]
    return np.minimum(d, big).astype(np.float64) / 65536.0


def equalize_hist(img: np.ndarray) -> np.ndarray:
    """cv2.equalizeHist per image of a uint8 batch (n, h, w)."""
    n = len(img)
    flat = img.reshape(n, -1).astype(np.int64)
    hist = np.bincount((np.arange(n)[:, None] * 256 + flat).ravel(), minlength=n * 256).reshape(n, 256)
    total = flat.shape[1]
    first = np.argmax(hist > 0, axis=1)
    first_count = hist[np.arange(n), first]
    scale = np.float32(255.0) / np.maximum(total - first_count, 1).astype(np.float32)
    csum = np.cumsum(hist, axis=1) - first_count[:, None]
    lut = np.rint((csum * scale[:, None]).astype(np.float32)).clip(0, 255)
    lut[np.arange(256)[None, :] <= first[:, None]] = 0
    out = np.take_along_axis(lut, flat, axis=1).reshape(img.shape).astype(np.uint8)
    constant = first_count == total
    out[constant] = img[constant]  # a one-valued image stays as it is
    return out


# --------------------------------------------------------------------------- digital

def brightness(images, severity, rng):
    hsv = rgb_to_hsv(_f(images))
    hsv[..., 2] = np.clip(hsv[..., 2] + _p("brightness", severity), 0, 1)
    return _u8(hsv_to_rgb(hsv))


def saturate(images, severity, rng):
    mult, add = _p("saturate", severity)
    hsv = rgb_to_hsv(_f(images))
    hsv[..., 1] = np.clip(hsv[..., 1] * mult + add, 0, 1)
    return _u8(hsv_to_rgb(hsv))


def contrast(images, severity, rng):
    x = _f(images)
    means = x.mean(axis=(1, 2), keepdims=True)  # per image and channel, as the original
    return _u8((x - means) * _p("contrast", severity) + means)


def elastic_transform(images, severity, rng):
    alpha, sigma, affine = (SIZE * v for v in _p("elastic_transform", severity))
    x = images.astype(np.float32) / np.float32(255.0)
    n = len(x)
    centre, half = SIZE // 2, SIZE // 3
    src = np.array([[centre + half, centre + half], [centre + half, centre - half],
                    [centre - half, centre - half]], dtype=np.float32)
    dst = src[None] + rng.uniform(-affine, affine, size=(n, 3, 2)).astype(np.float32)
    x = warp_affine(x.astype(np.float64), affine_from_points(src.astype(np.float64), dst)).astype(np.float32)
    dx = (_blur(rng.uniform(-1, 1, size=(n, SIZE, SIZE)), sigma, mode="reflect", truncate=3) * alpha).astype(np.float32)
    dy = (_blur(rng.uniform(-1, 1, size=(n, SIZE, SIZE)), sigma, mode="reflect", truncate=3) * alpha).astype(np.float32)
    grid = np.arange(SIZE, dtype=np.float64)
    rows = grid[None, :, None] + dy
    cols = grid[None, None, :] + dx
    return _u8(bilinear(x.astype(np.float64), rows, cols, "reflect"))


def pixelate(images, severity, rng):
    small = int(SIZE * _p("pixelate", severity))
    out = np.empty_like(images)
    for i, img in enumerate(images):
        im = Image.fromarray(img).resize((small, small), Image.BOX).resize((SIZE, SIZE), Image.BOX)
        out[i] = np.asarray(im)
    return out


def jpeg_compression(images, severity, rng):
    quality = _p("jpeg_compression", severity)
    out = np.empty_like(images)
    for i, img in enumerate(images):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=quality)
        buf.seek(0)
        with Image.open(buf) as im:
            out[i] = np.asarray(im.convert("RGB"))
    return out


# --------------------------------------------------------------------------- registry

Corruption = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
CORRUPTIONS: dict[str, Corruption] = {name: globals()[name] for name in NAMES}


def make_rng(seed: int, name: str, severity: int) -> np.random.Generator:
    """The random stream of one (seed, corruption, severity) cell."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(name.encode()), int(severity)]))


def check_name_severity(name: str, severity) -> None:
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; valid names: {', '.join(NAMES)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 1 <= severity <= 5:
        raise ValueError(f"severity must be an integer 1..5, got {severity!r}")


def corrupt(images_uint8: np.ndarray, name: str, severity: int, seed: int = 0) -> np.ndarray:
    """Corrupt a batch (n, 32, 32, 3) of uint8 images; deterministic for (images, name, severity, seed)."""
    check_name_severity(name, severity)
    images = np.asarray(images_uint8)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (SIZE, SIZE, 3):
        raise ValueError(f"expected uint8 images of shape (n, {SIZE}, {SIZE}, 3), got {images.dtype} {images.shape}")
    rng = make_rng(seed, name, int(severity))
    fn = CORRUPTIONS[name]
    out = np.empty_like(images)
    for start in range(0, len(images), CHUNK):
        chunk = np.ascontiguousarray(images[start:start + CHUNK])
        out[start:start + CHUNK] = fn(chunk, int(severity), rng)
    return out
