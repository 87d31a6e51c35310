"""Batched numeric pieces of the corruptions: each reproduces one library call of the original
generators (scikit-image, OpenCV, ImageMagick, scipy) on a batch ``(n, H, W[, C])``, for any H, W.

``tests/test_cifar10c_corruptions.py`` and ``tests/test_corruptions_imagenet.py`` compare them with
the libraries where those import (OpenCV and scikit-image arrive with `imagecorruptions`).
"""
from __future__ import annotations

import io
import math
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

f32, f64 = np.float32, np.float64

# --------------------------------------------------------------------------- conversions


def to_float(images: np.ndarray) -> np.ndarray:
    """uint8 -> float64 in [0, 1], as the original's ``np.array(x) / 255.``."""
    return images.astype(f64) / 255.0


def to_float32(images: np.ndarray) -> np.ndarray:
    """``(np.array(x) / 255.).astype(np.float32)``."""
    return (images.astype(f64) / 255.0).astype(f32)


def to_u8(x: np.ndarray) -> np.ndarray:
    """``np.uint8(np.clip(x, 0, 1) * 255)``: truncation, in the dtype of ``x`` (float32 stays
    float32, as in the original's float32 corruptions)."""
    return np.floor(np.clip(x, 0, 1) * x.dtype.type(255)).astype(np.uint8)


def to_u8_255(x: np.ndarray) -> np.ndarray:
    """``np.uint8(np.clip(x, 0, 255))``."""
    return np.floor(np.clip(x, 0, 255)).astype(np.uint8)


def magick8(b: np.ndarray) -> np.ndarray:
    """ImageMagick's (Q16) result of a blur ``b`` on the 0..255 scale, written as an 8-bit PNG:
    the quantum is rint(257 b), then the 8-bit value floor(quantum / 257). This reproduces 99.98 %
    of ImageMagick's values; rint(b) only 51 % (half a grey level too bright on average)."""
    q = np.clip(np.rint(b * 257.0), 0, 65535)
    return np.floor(q / 257.0).astype(np.uint8)


# --------------------------------------------------------------------------- filters

def gaussian_hw(x: np.ndarray, sigma, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """skimage.filters.gaussian on each image of a batch: spatial axes (1, 2) only; ``sigma`` a
    scalar or (sigma_h, sigma_w). Output in the dtype of ``x`` (scipy rounds after each pass)."""
    sh, sw = (sigma, sigma) if np.isscalar(sigma) else sigma
    sig = [0.0] * x.ndim
    sig[1], sig[2] = float(sh), float(sw)
    return ndimage.gaussian_filter(x, sigma=sig, mode=mode, truncate=truncate)


def correlate_hw(x: np.ndarray, kernel: np.ndarray, mode: str) -> np.ndarray:
    """2-D correlation over the spatial axes (1, 2) of a (n, h, w[, c]) batch."""
    k = kernel[None, :, :, None] if x.ndim == 4 else kernel[None]
    return ndimage.correlate(x, k, mode=mode)


def box3_sum(x: np.ndarray) -> np.ndarray:
    """The 3x3 sums of cv2.blur (border reflect-101), in float64 (exact for our inputs)."""
    return correlate_hw(x.astype(f64), np.ones((3, 3)), "mirror")


def box3_float32(x: np.ndarray) -> np.ndarray:
    """cv2.blur(x, (3, 3)) on float32: double sums times 1/9, stored as float32."""
    return (box3_sum(x) * (1.0 / 9.0)).astype(f32)


def box3_uint8(x: np.ndarray) -> np.ndarray:
    """cv2.blur(x, (3, 3)) on uint8: the mean rounded to the nearest integer."""
    return np.rint(box3_sum(x) / 9.0).astype(np.uint8)


# --------------------------------------------------------------------------- colour

def rgb_to_hsv(x: np.ndarray) -> np.ndarray:
    """skimage.color.rgb2hsv on (..., 3) floats in [0, 1], operation for operation."""
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


def rgb_to_gray32(x: np.ndarray) -> np.ndarray:
    """cv2.cvtColor(float32 RGB, COLOR_RGB2GRAY)."""
    return x[..., 0] * f32(0.299) + x[..., 1] * f32(0.587) + x[..., 2] * f32(0.114)


# --------------------------------------------------------------------------- motion blur

def motion_kernel(radius: float, sigma: float) -> np.ndarray:
    """ImageMagick's one-sided motion-blur weights: exp(-i^2 / 2 sigma^2), i = 0..2*ceil(r), normalised."""
    width = 2 * int(math.ceil(radius)) + 1
    k = np.exp(-np.arange(width, dtype=f64) ** 2 / (2.0 * sigma * sigma))
    return k / k.sum()


def motion_offsets(width: int, angles_deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dy, dx) integer offsets (n, width) of the i-th tap along each angle, as ImageMagick's
    MotionBlurImage (and imagecorruptions' re-implementation) round them."""
    a = np.deg2rad(np.asarray(angles_deg, dtype=f64))
    py, px = width * np.sin(a), width * np.cos(a)
    hyp = np.hypot(py, px)[:, None]
    i = np.arange(width, dtype=f64)[None, :]
    dy = np.ceil(i * py[:, None] / hyp - 0.5).astype(np.int64)
    dx = np.ceil(i * px[:, None] / hyp - 0.5).astype(np.int64)
    return dy, dx


def motion_blur_batch(x: np.ndarray, radius: float, sigma: float, angles_deg: np.ndarray) -> np.ndarray:
    """out[y, x] = sum_i k_i * img[y + dy_i, x + dx_i], edge pixels replicated; one angle per image.
    Float64 on the scale of ``x``; :func:`magick8` turns it into ImageMagick's 8-bit result."""
    k = motion_kernel(radius, sigma)
    width = len(k)
    dy, dx = motion_offsets(width, angles_deg)
    n, h, w = x.shape[:3]
    pad = [(0, 0), (width, width), (width, width)] + [(0, 0)] * (x.ndim - 3)
    xp = np.pad(x, pad, mode="edge")
    out = np.zeros(x.shape, dtype=f64)
    nn = np.arange(n)[:, None, None]
    ar_h, ar_w = np.arange(h)[None, :], np.arange(w)[None, :]
    for i in range(width):
        rows = width + ar_h + dy[:, i:i + 1]
        cols = width + ar_w + dx[:, i:i + 1]
        out += k[i] * xp[nn, rows[:, :, None], cols[:, None, :]]
    return out


# --------------------------------------------------------------------------- zoom

@lru_cache(maxsize=None)
def zoom_matrix(size: int, z: float) -> tuple[np.ndarray, int, int]:
    """The linear map of ``scipy.ndimage.zoom(order=1)`` by ``z`` on the centre crop of
    ceil(size / z) samples of an axis: (matrix (round(ch * z), ch), crop start, ch)."""
    ch = int(np.ceil(size / z))
    top = (size - ch) // 2
    a = ndimage.zoom(np.eye(ch), (z, 1.0), order=1)  # scipy itself defines the sampling grid
    return a, top, ch


def clipped_zoom(x: np.ndarray, z: float, trim: str) -> np.ndarray:
    """The original's ``clipped_zoom`` on a batch (n, H, W, C): centre crop of ceil(side / z) per
    axis, ``scipy.ndimage.zoom(order=1)`` by z, then ``trim``: "centre" (the original: the centre
    H x W of the zoomed crop), "corner" (imagecorruptions: its top-left H x W) or "none" (the whole
    zoomed crop, round(ceil(side / z) * z) >= side per axis). Computed in float64."""
    n, h, w, c = x.shape
    ah, th, chh = zoom_matrix(h, float(z))
    aw, tw, chw = zoom_matrix(w, float(z))
    if trim != "none":
        sh = (ah.shape[0] - h) // 2 if trim == "centre" else 0
        sw = (aw.shape[0] - w) // 2 if trim == "centre" else 0
        ah, aw = ah[sh:sh + h], aw[sw:sw + w]
    crop = np.moveaxis(x[:, th:th + chh, tw:tw + chw].astype(f64), 3, 1)  # (n, c, chh, chw)
    return np.moveaxis(ah @ crop @ aw.T, 1, 3)


# --------------------------------------------------------------------------- fog

def next_power_of_2(v: int) -> int:
    return 1 if v == 0 else 2 ** (int(v) - 1).bit_length()


def plasma_fractal(n: int, rng: np.random.Generator, mapsize: int, wibbledecay: float) -> np.ndarray:
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


# --------------------------------------------------------------------------- geometry

def fold(idx: np.ndarray, size: int, mode: str) -> np.ndarray:
    """Integer indices folded into 0..size-1: 'reflect101' (cv2 BORDER_REFLECT_101, scipy
    'mirror'), 'reflect' (half-sample symmetric, scipy 'reflect') or 'edge' (replicate)."""
    if mode == "edge" or size == 1:
        return np.clip(idx, 0, size - 1)
    if mode == "reflect101":
        period = 2 * (size - 1)
        idx = np.mod(idx, period)
        return np.where(idx > size - 1, period - idx, idx)
    idx = np.mod(idx, 2 * size)
    return np.where(idx > size - 1, 2 * size - 1 - idx, idx)


def bilinear(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, mode: str) -> np.ndarray:
    """Sample each image of x (n, h, w, c) at real coordinates rows/cols (n, h', w')."""
    n, h, w = x.shape[:3]
    r0, c0 = np.floor(rows), np.floor(cols)
    fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
    r0, c0 = r0.astype(np.int64), c0.astype(np.int64)
    ra, rb = fold(r0, h, mode), fold(r0 + 1, h, mode)
    ca, cb = fold(c0, w, mode), fold(c0 + 1, w, mode)
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
    ys = np.arange(h, dtype=f64)[None, :, None]
    xs = np.arange(w, dtype=f64)[None, None, :]

    def col(v):
        return v[:, None, None]
    # OpenCV: AB_BITS = 10, INTER_BITS = 5, round_delta = 16, cvRound = round half to even
    xq = (np.rint((col(i01) * ys + col(i02)) * 1024) + 16 + np.rint(col(i00) * xs * 1024)).astype(np.int64) >> 5
    yq = (np.rint((col(i11) * ys + col(i12)) * 1024) + 16 + np.rint(col(i10) * xs * 1024)).astype(np.int64) >> 5
    return bilinear(x, yq / 32.0, xq / 32.0, "reflect101")


def affine_from_points(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """cv2.getAffineTransform for a batch: src (3, 2), dst (n, 3, 2) -> (n, 2, 3)."""
    p = np.concatenate([src, np.ones((3, 1))], axis=1)                # (3, 3)
    sol = np.linalg.solve(p[None], dst.astype(f64))                   # (n, 3, 2)
    return np.transpose(sol, (0, 2, 1))


# --------------------------------------------------------------------------- defocus kernel

def _fma(a: np.ndarray, k: np.float32, acc: np.ndarray) -> np.ndarray:
    """float32 a * k + acc rounded once (a fused multiply-add: the product is exact in float64)."""
    return (a.astype(f64) * f64(k) + acc.astype(f64)).astype(f32)


def _symmetric_pass(img: np.ndarray, g: np.ndarray, axis: int, fused_until: int, centre_last: bool) -> np.ndarray:
    """One pass of OpenCV's float32 symmetric separable filter (border reflect-101) along ``axis``:
    sum_j k_j (s[-j] + s[+j]) accumulated with fused multiply-adds in the SIMD part (indices below
    ``fused_until`` across the other axis) and plainly in the scalar tail."""
    p = len(g) // 2
    n = img.shape[axis]
    pad = [(0, 0), (0, 0)]
    pad[axis] = (p, p)
    q = np.pad(img, pad, mode="reflect")

    def tap(i):
        return q[i:i + n, :] if axis == 0 else q[:, i:i + n]

    pairs = [(tap(p - j) + tap(p + j)).astype(f32) for j in range(1, p + 1)]
    centre = tap(p)
    if centre_last:   # ksize 3 rows: muladd(s0, k0, (s[-1] + s[1]) * k1)
        fused = _fma(centre, g[p], (pairs[0] * g[p + 1]).astype(f32))
        plain = ((centre * g[p]).astype(f32) + (pairs[0] * g[p + 1]).astype(f32)).astype(f32)
    else:             # muladd(pair_j, k_j, ... muladd(pair_1, k_1, s0 * k0))
        fused = plain = (centre * g[p]).astype(f32)
        for j, pair in enumerate(pairs, 1):
            fused = _fma(pair, g[p + j], fused)
            plain = (plain + (pair * g[p + j]).astype(f32)).astype(f32)
    other = 1 - axis
    keep = np.arange(img.shape[other]) < fused_until
    keep = keep[None, :] if other == 1 else keep[:, None]
    return np.where(keep, fused, plain)


def _gaussian_kernel32(ksize: int, sigma: float) -> np.ndarray:
    """cv2.getGaussianKernel(ksize, sigma, CV_32F): double weights, normalised, stored as float32."""
    t = np.arange(ksize) - (ksize - 1) * 0.5
    w = np.exp((-0.5 / (sigma * sigma)) * t * t)
    total = 0.0
    for v in w:
        total += v
    return (w * (1.0 / total)).astype(f32)


@lru_cache(maxsize=None)
def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The original's anti-aliased disk, in float32 as it computes it: a binary disk on a 17x17
    grid (radius <= 8; else 2 * radius + 1), divided by its sum, smoothed by cv2.GaussianBlur with a
    3x3 (else 5x5) kernel of sigma ``alias_blur``, border reflect-101. The float32 arithmetic is
    that of OpenCV 5's x86 SIMD filter (fused multiply-adds, 4-wide rows, 8-wide columns, scalar
    tails); bit-identical to cv2 for every table entry (tests). Radius 8 and 10 disks touch the
    grid's border, so the reflected blur sums to 1.013 / 1.011, as in the original."""
    if radius <= 8:
        coords, ksize = np.arange(-8, 9), 3
    else:
        coords, ksize = np.arange(-radius, radius + 1), 5
    xx, yy = np.meshgrid(coords, coords)
    disk = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(f32)
    disk /= np.sum(disk)
    g = _gaussian_kernel32(ksize, alias_blur)
    n = disk.shape[0]
    if ksize == 3:
        rows = _symmetric_pass(disk, g, 1, n, centre_last=True)
        return _symmetric_pass(rows, g, 0, n, centre_last=False)
    rows = _symmetric_pass(disk, g, 1, (n // 4) * 4, centre_last=False)
    return _symmetric_pass(rows, g, 0, (n // 8) * 8, centre_last=False)


# --------------------------------------------------------------------------- resizing (frost)

def _linear_weights(src: int, dst: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cv2 INTER_LINEAR taps along one axis: (i0, i1, w1 in 1/2048) for dst samples."""
    fx = (np.arange(dst) + 0.5) * scale - 0.5
    i0 = np.floor(fx).astype(np.int64)
    frac = fx - i0
    frac = np.where(i0 < 0, 0.0, frac)
    i0 = np.maximum(i0, 0)
    frac = np.where(i0 >= src - 1, 0.0, frac)
    i0 = np.minimum(i0, src - 1)
    i1 = np.minimum(i0 + 1, src - 1)
    w1 = np.rint(frac * 2048).astype(np.int64)
    return i0, i1, w1


def resize_linear_u8(img: np.ndarray, f: float) -> np.ndarray:
    """cv2.resize(img uint8 (h, w, c), (0, 0), fx=f, fy=f) (INTER_LINEAR): 11-bit fixed-point
    weights, rounded; may differ from OpenCV's SIMD code by one grey level on a few pixels."""
    h, w = img.shape[:2]
    oh, ow = int(np.rint(h * f)), int(np.rint(w * f))
    r0, r1, wr = _linear_weights(h, oh, 1.0 / f)
    c0, c1, wc = _linear_weights(w, ow, 1.0 / f)
    x = img.astype(np.int64)
    rows = (2048 - wc)[None, :, None] * x[:, c0] + wc[None, :, None] * x[:, c1]
    out = (2048 - wr)[:, None, None] * rows[r0] + wr[:, None, None] * rows[r1]
    return ((out + (1 << 21)) >> 22).clip(0, 255).astype(np.uint8)


def _cubic_matrix(src: int, dst: int, scale: float) -> np.ndarray:
    """cv2 INTER_CUBIC (a = -0.75, replicated border) along one axis as a (dst, src) matrix."""
    fx = (np.arange(dst) + 0.5) * scale - 0.5
    i0 = np.floor(fx).astype(np.int64)
    t = fx - i0
    a = -0.75
    w = np.stack([((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                  ((a + 2) * t - (a + 3)) * t * t + 1,
                  ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1], axis=1)
    w = np.concatenate([w, 1 - w.sum(axis=1, keepdims=True)], axis=1)
    m = np.zeros((dst, src))
    for k in range(4):
        np.add.at(m, (np.arange(dst), np.clip(i0 - 1 + k, 0, src - 1)), w[:, k])
    return m


def resize_cubic_u8(img: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """cv2.resize(img, (w', h'), interpolation=INTER_CUBIC) in float64, rounded and saturated
    (OpenCV uses fixed point: a grey level apart at most on some pixels)."""
    h, w = img.shape[:2]
    oh, ow = out_hw
    mh = _cubic_matrix(h, oh, h / oh)
    mw = _cubic_matrix(w, ow, w / ow)
    out = np.einsum("ij,jkc,lk->ilc", mh, img.astype(f64), mw, optimize=True)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")  # the original draws 1-5


def frost_dir() -> Path:
    """The frost textures shipped in the `imagecorruptions` wheels (1.1.2 and imagecorruptions-imaug
    carry the same files). Located without importing that package."""
    spec = find_spec("imagecorruptions")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        folder = Path(loc) / "frost"
        if all((folder / f).exists() for f in FROST_FILES):
            return folder
    raise RuntimeError("frost corruption: the frost textures come from the `imagecorruptions` package "
                       "(pinned in pyproject.toml); install it: pip install imagecorruptions==1.1.2")


@lru_cache(maxsize=None)
def frost_textures(scale: float = 1.0) -> tuple[np.ndarray, ...]:
    """Frost images 1-5 as RGB uint8 (``cv2.imread`` drops the PNGs' alpha, so does
    ``convert("RGB")``), resized by ``scale`` like cv2.resize(fx=fy=scale, INTER_LINEAR)."""
    out = []
    for name in FROST_FILES:
        with Image.open(frost_dir() / name) as im:
            img = np.asarray(im.convert("RGB"))
        out.append(img if scale == 1.0 else resize_linear_u8(img, scale))
    return tuple(np.ascontiguousarray(t) for t in out)


@lru_cache(maxsize=None)
def frost_textures_covering(scale: float, h: int, w: int) -> tuple[np.ndarray, ...]:
    """imagecorruptions' frost for any image size: each texture scaled by 1.1 * max(1, h / th,
    w / tw) (bicubic) so that it covers an h x w image."""
    out = []
    for tex in frost_textures(scale):
        th, tw = tex.shape[:2]
        s = 1.1 * max(1.0, h / th, w / tw)
        out.append(resize_cubic_u8(tex, (int(np.ceil(th * s)), int(np.ceil(tw * s)))))
    return tuple(out)


# --------------------------------------------------------------------------- spatter pieces

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
    return np.minimum(d, big).astype(f64) / 65536.0


def equalize_hist(img: np.ndarray) -> np.ndarray:
    """cv2.equalizeHist per image of a uint8 batch (n, h, w)."""
    n = len(img)
    flat = img.reshape(n, -1).astype(np.int64)
    hist = np.bincount((np.arange(n)[:, None] * 256 + flat).ravel(), minlength=n * 256).reshape(n, 256)
    total = flat.shape[1]
    first = np.argmax(hist > 0, axis=1)
    first_count = hist[np.arange(n), first]
    scale = f32(255.0) / np.maximum(total - first_count, 1).astype(f32)
    csum = np.cumsum(hist, axis=1) - first_count[:, None]
    lut = np.rint((csum * scale[:, None]).astype(f32)).clip(0, 255)
    lut[np.arange(256)[None, :] <= first[:, None]] = 0
    out = np.take_along_axis(lut, flat, axis=1).reshape(img.shape).astype(np.uint8)
    constant = first_count == total
    out[constant] = img[constant]  # a one-valued image stays as it is
    return out


# --------------------------------------------------------------------------- PIL, per image

def pil_box_down_up(images: np.ndarray, factor: float, up=Image.BOX) -> np.ndarray:
    """PIL BOX resize to (int(W * f), int(H * f)) and back with ``up`` (the releases: BOX;
    imagecorruptions: NEAREST; the same pixels when the enlargement is by a whole factor)."""
    n, h, w = images.shape[:3]
    small = (int(w * factor), int(h * factor))
    out = np.empty_like(images)
    for i, img in enumerate(images):
        out[i] = np.asarray(Image.fromarray(img).resize(small, Image.BOX).resize((w, h), up))
    return out


def pil_jpeg(images: np.ndarray, quality: int) -> np.ndarray:
    """PIL JPEG round trip at ``quality``."""
    out = np.empty_like(images)
    for i, img in enumerate(images):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=quality)
        buf.seek(0)
        with Image.open(buf) as im:
            out[i] = np.asarray(im.convert("RGB"))
    return out
