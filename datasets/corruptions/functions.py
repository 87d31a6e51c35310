"""The 19 corruptions of Hendrycks & Dietterich (2019), one implementation for every release.

Each corruption takes a uint8 batch ``(n, H, W, 3)``, its parameters for one severity (a row of
``PARAMS[release][name]``), a ``numpy.random.Generator`` and a :class:`Context` (release, severity,
size), and returns the corrupted uint8 batch. The arithmetic follows the release's original script
step by step (float32 where it computes in float32, truncation to uint8 where it truncates),
vectorised over the batch. At the release's own image size (32, 64 or 224 square) the steps are
the release's; at any other H x W the size-dependent pieces follow the maintained
`imagecorruptions` package (fog map, frost crop, zoom crop, snow layer, ImageNet's elastic,
pixelate's enlargement); see docs/corruptions.md. Use :func:`corrupt` (seeded, chunked) rather than these functions.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

from datasets.corruptions import ops
from datasets.corruptions.ops import f32, f64, to_float, to_float32, to_u8, to_u8_255
from datasets.corruptions.tables import ELASTIC_ANY_SIZE, NAMES, PARAMS, RELEASES, Release

# Bump whenever the output of any corruption changes for the same (images, seed, release).
GENERATOR_VERSION = "bench-corruptions-2.0"
MIN_SIZE = 32          # as imagecorruptions: smaller images break glass blur and the frost crop
CHUNK_PIXELS = 1000 * 32 * 32  # pixels per internal step (1000 CIFAR images): part of the random streams


@dataclass(frozen=True)
class Context:
    release: Release
    severity: int
    h: int
    w: int

    @property
    def native(self) -> bool:
        """True at the release's own (square) image size: the release's steps apply unchanged."""
        return self.h == self.w == self.release.size


# --------------------------------------------------------------------------- noise

def gaussian_noise(images, std, rng, ctx):
    x = to_float(images)
    return to_u8(x + rng.normal(scale=std, size=x.shape))


def shot_noise(images, lam, rng, ctx):
    return to_u8(rng.poisson(to_float(images) * lam) / lam)


def impulse_noise(images, amount, rng, ctx):
    """skimage random_noise(mode='s&p'): each value flipped with probability `amount`, half salt."""
    x = to_float(images)
    flipped = rng.random(x.shape) < amount
    salted = rng.random(x.shape) < 0.5
    x[flipped & salted] = 1.0
    x[flipped & ~salted] = 0.0
    return to_u8(x)


def speckle_noise(images, std, rng, ctx):
    x = to_float(images)
    return to_u8(x + x * rng.normal(scale=std, size=x.shape))


# --------------------------------------------------------------------------- blur

def gaussian_blur(images, sigma, rng, ctx):
    return to_u8(ops.gaussian_hw(to_float(images), sigma))


def defocus_blur(images, p, rng, ctx):
    k = ops.disk_kernel(*p)
    nz = np.nonzero(k)
    mid = len(k) // 2
    r = int(max(np.abs(nz[0] - mid).max(), np.abs(nz[1] - mid).max()))
    k = k[mid - r:mid + r + 1, mid - r:mid + r + 1].astype(f64)  # zero margin cropped: same sums
    return to_u8(ops.correlate_hw(to_float(images), k, "mirror"))


def _glass_pass(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """One pass of the original's local shuffle: for h = rows descending, w = cols descending,
    ``x[h, w], x[h+dy, w+dx] = x[h+dy, w+dx], x[h, w]``. On numpy views that 'swap' copies the
    neighbour into (h, w) and leaves the neighbour as it is. A neighbour visited earlier in the
    loop (further down, or to the right on the same row) already holds its own new value, so each
    pixel takes the original value at the end of a chain of such reads: resolved here by following
    the chains for all pixels at once (with offsets -shift..shift-1 they are short; for shift 1
    there are none and a pass is a plain gather)."""
    n, h, w = x.shape[:3]
    nr, nc = len(rows), len(cols)
    sr = rows[None, :, None] + dy                       # (n, nr, nc) source row / column
    sc = cols[None, None, :] + dx
    inside = (sr >= rows[0]) & (sr <= rows[-1]) & (sc >= cols[0]) & (sc <= cols[-1])
    visited_before = inside & ((dy > 0) | ((dy == 0) & (dx > 0)))
    src_flat = (sr * w + sc).reshape(n, -1)             # image index of each pixel's source
    src_region = np.where(inside, (sr - rows[0]) * nc + (sc - cols[0]), 0).reshape(n, -1)
    jump = visited_before.reshape(n, -1)
    ptr = np.broadcast_to(np.arange(nr * nc), (n, nr * nc)).copy()
    active = jump.copy()
    while active.any():
        nxt = np.take_along_axis(src_region, ptr, axis=1)
        ptr = np.where(active, nxt, ptr)
        active = active & np.take_along_axis(jump, ptr, axis=1)
    source = np.take_along_axis(src_flat, ptr, axis=1)   # (n, nr * nc)
    flat = x.reshape(n, h * w, -1)
    out = x.copy()
    out[:, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = np.take_along_axis(
        flat, source[..., None], axis=1).reshape(n, nr, nc, -1)
    return out


def glass_blur(images, p, rng, ctx):
    """Gaussian blur, uint8 (truncated), ``iterations`` local shuffles over rows/cols shift+1 ..
    side-shift with offsets drawn from randint(-shift, shift), Gaussian blur."""
    sigma, shift, iterations = p
    x = np.floor(ops.gaussian_hw(to_float(images), sigma) * 255.0).astype(np.uint8)
    n = len(x)
    rows = np.arange(shift + 1, ctx.h - shift + 1)  # the original's range(h - shift, shift, -1)
    cols = np.arange(shift + 1, ctx.w - shift + 1)
    for _ in range(iterations):
        d = rng.integers(-shift, shift, size=(n, len(rows), len(cols), 2))  # (dx, dy) as drawn
        x = _glass_pass(x, rows, cols, d[..., 1], d[..., 0])
    return to_u8(ops.gaussian_hw(x / 255.0, sigma))


def motion_blur(images, p, rng, ctx):
    """ImageMagick's MotionBlurImage along an angle uniform in [-45, 45] degrees, 8-bit result."""
    radius, sigma = p
    angles = rng.uniform(-45, 45, size=len(images))
    return ops.magick8(ops.motion_blur_batch(images.astype(f64), radius, sigma, angles))


def zoom_blur(images, p, rng, ctx):
    """Mean of the image and its centre zooms by arange(1, stop, step), in float32 as the original."""
    stop, step = p
    x = to_float32(images)
    zooms = np.arange(1, stop, step)
    trim = "centre" if ctx.native else "corner"
    out = np.zeros_like(x)
    for z in zooms:
        out += ops.clipped_zoom(x, z, trim).astype(f32)
    return to_u8((x + out) / (len(zooms) + 1))


# --------------------------------------------------------------------------- weather

def snow(images, p, rng, ctx):
    loc, scale, zoom, threshold, radius, sigma, blend = p
    x = to_float32(images)
    n, h, w = images.shape[:3]
    layer = rng.normal(loc=loc, scale=scale, size=(n, h, w, 1))
    layer = ops.clipped_zoom(layer, zoom, "centre" if ctx.native else "none")
    layer[layer < threshold] = 0
    layer = np.floor(np.clip(layer, 0, 1) * 255.0)  # the 8-bit greyscale PNG handed to ImageMagick
    angles = rng.uniform(-135, -45, size=n)
    layer = ops.magick8(ops.motion_blur_batch(layer, radius, sigma, angles))[:, :h, :w] / 255.0
    grey = ops.rgb_to_gray32(x)[..., None]
    x = blend * x + (1 - blend) * np.maximum(x, grey * 1.5 + 0.5)  # float32, as the original
    return to_u8(x + layer + layer[:, ::-1, ::-1])


def frost(images, p, rng, ctx):
    """a * image + b * a random crop of one of frost images 1-5 (on the 0..255 scale)."""
    a, b = p
    n, h, w = images.shape[:3]
    scale = ctx.release.frost_scale
    tex = ops.frost_textures(scale) if ctx.native else ops.frost_textures_covering(scale, h, w)
    which = rng.integers(len(tex), size=n)
    heights = np.array([t.shape[0] for t in tex])[which]
    widths = np.array([t.shape[1] for t in tex])[which]
    r0 = rng.integers(0, heights - h)
    c0 = rng.integers(0, widths - w)
    crops = np.empty(images.shape, dtype=f64)
    ar_h, ar_w = np.arange(h), np.arange(w)
    for t, texture in enumerate(tex):
        sel = np.nonzero(which == t)[0]
        if len(sel):
            rows = r0[sel, None] + ar_h[None]
            cols = c0[sel, None] + ar_w[None]
            crops[sel] = texture[rows[:, :, None], cols[:, None, :]]
    return to_u8_255(a * images.astype(f64) + b * crops)


def fog(images, p, rng, ctx):
    """x + s * plasma fractal (map side: the next power of two >= the image side), rescaled by
    max(x) / (max(x) + s)."""
    strength, decay = p
    x = to_float(images)
    n, h, w = images.shape[:3]
    mapsize = ops.next_power_of_2(max(h, w))
    max_val = x.max(axis=(1, 2, 3), keepdims=True)
    x = x + strength * ops.plasma_fractal(n, rng, mapsize, decay)[:, :h, :w, None]
    return to_u8(x * max_val / (max_val + strength))


def spatter(images, p, rng, ctx):
    loc, scale, sigma, threshold, intensity, mud = p
    x = to_float32(images)
    n, h, w = images.shape[:3]
    liquid = ops.gaussian_hw(rng.normal(loc=loc, scale=scale, size=(n, h, w)), sigma)
    liquid[liquid < threshold] = 0
    if mud == 0:  # water: pale turquoise drops with shaded rims
        liquid8 = to_u8(liquid)  # the original's astype(uint8) wraps values > 1 (very rare); clipped here
        dist = np.where(ops.canny(liquid8, 50, 150), 0, 255).astype(np.uint8)
        dist = np.minimum(ops.distance_transform_l2_5(dist), 20.0).astype(f32)   # THRESH_TRUNC at 20
        dist = np.floor(ops.box3_float32(dist)).astype(np.uint8)
        dist = ops.equalize_hist(dist)
        ker = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=f64)
        dist = np.clip(ops.correlate_hw(dist.astype(f64), ker, "mirror"), 0, 255)  # filter2D, CV_8U
        dist = ops.box3_uint8(dist).astype(f32)
        m = liquid8.astype(f32) * dist
        peak = m.max(axis=(1, 2), keepdims=True)
        m = np.where(peak > 0, m / np.where(peak > 0, peak, f32(1)), f32(0)) * f32(intensity)
        color = np.array([175 / 255.0, 238 / 255.0, 238 / 255.0], dtype=f32)
        return to_u8(x + m[..., None] * color)
    m = ops.gaussian_hw((liquid > threshold).astype(f32), intensity)  # mud: brown blotches
    m[m < 0.8] = 0
    color = np.array([63 / 255.0, 42 / 255.0, 20 / 255.0], dtype=f32) * m[..., None]
    return to_u8(x * (1 - m[..., None]) + color)


# --------------------------------------------------------------------------- digital

def brightness(images, c, rng, ctx):
    hsv = ops.rgb_to_hsv(to_float(images))
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return to_u8(ops.hsv_to_rgb(hsv))


def saturate(images, p, rng, ctx):
    mult, add = p
    hsv = ops.rgb_to_hsv(to_float(images))
    hsv[..., 1] = np.clip(hsv[..., 1] * mult + add, 0, 1)
    return to_u8(ops.hsv_to_rgb(hsv))


def contrast(images, c, rng, ctx):
    x = to_float(images)
    means = x.mean(axis=(1, 2), keepdims=True)  # per image and channel, as the original
    return to_u8((x - means) * c + means)


def elastic_transform(images, p, rng, ctx):
    """Random affine (3 points moved by up to ``affine``, cv2.warpAffine, reflect-101), then a
    smooth displacement field gaussian(uniform(-1, 1), sigma) * alpha sampled bilinearly
    (map_coordinates(order=1, mode='reflect')). Parameters are multiples of the image side
    (CIFAR, Tiny-ImageNet: their IMSIZE) or of 244 (ImageNet). The imagenet_c table away from
    224 x 224 uses imagecorruptions' elastic instead (:func:`_elastic_any_size`)."""
    if ctx.release.elastic_unit is not None and not ctx.native:
        return _elastic_any_size(images, ELASTIC_ANY_SIZE[ctx.severity - 1], rng)
    n, h, w = images.shape[:3]
    unit = ctx.release.elastic_unit or min(h, w)
    alpha, sigma, affine = (unit * v for v in p)
    x = to_float32(images)
    ch, cw, half = h // 2, w // 2, min(h, w) // 3
    src = np.array([[ch + half, cw + half], [ch + half, cw - half], [ch - half, cw - half]], dtype=f32)
    dst = src[None] + rng.uniform(-affine, affine, size=(n, 3, 2)).astype(f32)
    x = ops.warp_affine(x.astype(f64), ops.affine_from_points(src.astype(f64), dst)).astype(f32)
    dx = (ops.gaussian_hw(rng.uniform(-1, 1, size=(n, h, w)), sigma, mode="reflect", truncate=3) * alpha).astype(f32)
    dy = (ops.gaussian_hw(rng.uniform(-1, 1, size=(n, h, w)), sigma, mode="reflect", truncate=3) * alpha).astype(f32)
    rows = np.arange(h, dtype=f64)[None, :, None] + dy
    cols = np.arange(w, dtype=f64)[None, None, :] + dx
    return to_u8(ops.bilinear(x.astype(f64), rows, cols, "reflect").astype(f32))


def _elastic_any_size(images, a, rng):
    """imagecorruptions' elastic_transform: no affine; displacement gaussian(uniform(-0.005 H,
    0.005 H), sigma = 0.01 * (H, W), reflect, truncate 3) * 250 a, sampled bilinearly."""
    n, h, w = images.shape[:3]
    x = to_float32(images)
    alpha, max_d, sigma = 250 * a, 0.005 * h, (0.01 * h, 0.01 * w)
    dx = (ops.gaussian_hw(rng.uniform(-max_d, max_d, size=(n, h, w)), sigma, mode="reflect", truncate=3) * alpha).astype(f32)
    dy = (ops.gaussian_hw(rng.uniform(-max_d, max_d, size=(n, h, w)), sigma, mode="reflect", truncate=3) * alpha).astype(f32)
    rows = np.arange(h, dtype=f64)[None, :, None] + dy
    cols = np.arange(w, dtype=f64)[None, None, :] + dx
    return to_u8(ops.bilinear(x.astype(f64), rows, cols, "reflect").astype(f32))


def pixelate(images, factor, rng, ctx):
    """Box down-scale by ``factor``, then back up: BOX as the releases, NEAREST (imagecorruptions)
    away from the release's size (identical at 224 x 224; 22 % of the pixels differ at 160 x 240)."""
    return ops.pil_box_down_up(images, factor, Image.BOX if ctx.native else Image.NEAREST)


def jpeg_compression(images, quality, rng, ctx):
    return ops.pil_jpeg(images, quality)


# --------------------------------------------------------------------------- registry and entry point

Corruption = Callable[[np.ndarray, object, np.random.Generator, Context], np.ndarray]
CORRUPTIONS: dict[str, Corruption] = {name: globals()[name] for name in NAMES}


def make_rng(seed: int, name: str, severity: int) -> np.random.Generator:
    """The random stream of one (seed, corruption, severity) cell (the same for every release)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(name.encode()), int(severity)]))


def check_name_severity(name: str, severity, release: str | None = None) -> None:
    """ValueError naming the valid values unless ``name``, ``severity`` (and ``release``, if given) are valid."""
    if release is not None and release not in RELEASES:
        raise ValueError(f"unknown release {release!r}; valid releases: {', '.join(RELEASES)}")
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; valid names: {', '.join(NAMES)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or not 1 <= severity <= 5:
        raise ValueError(f"severity must be an integer 1..5, got {severity!r}")


def chunk_size(h: int, w: int) -> int:
    """Images per internal step: 1000 at 32x32, 250 at 64x64, 20 at 224x224."""
    return max(1, CHUNK_PIXELS // (h * w))


def corrupt(images_uint8: np.ndarray, name: str, severity: int, seed: int = 0,
            release: str = "cifar10c") -> np.ndarray:
    """Corrupt a batch (n, H, W, 3) of uint8 images with ``release``'s parameters; deterministic
    for (images, name, severity, seed, release). H, W >= 32; any size, the release's own size
    reproducing the release's steps."""
    check_name_severity(name, severity, release)
    images = np.asarray(images_uint8)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise ValueError(f"expected uint8 images of shape (n, H, W, 3), got {images.dtype} {images.shape}")
    n, h, w = images.shape[:3]
    if min(h, w) < MIN_SIZE:
        raise ValueError(f"images must be at least {MIN_SIZE}x{MIN_SIZE} pixels, got {h}x{w}")
    severity = int(severity)
    rng = make_rng(seed, name, severity)
    fn, p = CORRUPTIONS[name], PARAMS[release][name][severity - 1]
    ctx = Context(RELEASES[release], severity, h, w)
    out = np.empty_like(images)
    step = chunk_size(h, w)
    for start in range(0, n, step):
        chunk = np.ascontiguousarray(images[start:start + step])
        out[start:start + step] = fn(chunk, p, rng, ctx)
    return out
