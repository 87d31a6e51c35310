"""datasets.corruptions: the API over the three releases, any image size, and the pieces that
reproduce the original generators' arithmetic (glass-blur shuffle, ImageMagick's 8-bit result,
truncation to uint8)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from datasets.corruptions import (CORRUPTIONS, EXTRA, GENERATOR_VERSION, NAMES, PARAMS, RELEASES, STANDARD,
                                  corrupt)
from datasets.corruptions import functions as F
from datasets.corruptions import ops


def smooth_images(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """Real-looking synthetic images: a smooth colour field, sharp-edged blocks, fine texture."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(30, 225, size=(n, 6, 6, 3))
    x = ndimage.zoom(low, (1, h / 6, w / 6, 1), order=3)[:, :h, :w]
    for img in x:
        for _ in range(5):
            r, c = rng.integers(0, h - h // 5), rng.integers(0, w - w // 5)
            bh, bw = rng.integers(h // 10, h // 4), rng.integers(w // 10, w // 4)
            img[r:r + bh, c:c + bw] = rng.uniform(10, 245, 3)
    x += ndimage.gaussian_filter(rng.normal(0, 20, size=x.shape), (0, 0.8, 0.8, 0))
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- API

def test_api_and_tables():
    assert NAMES == STANDARD + EXTRA and len(NAMES) == 19 and set(CORRUPTIONS) == set(NAMES)
    assert set(RELEASES) == set(PARAMS) == {"cifar10c", "tiny_imagenet_c", "imagenet_c"}
    assert [RELEASES[r].size for r in ("cifar10c", "tiny_imagenet_c", "imagenet_c")] == [32, 64, 224]
    for table in PARAMS.values():
        assert set(table) == set(NAMES) and all(len(v) == 5 for v in table.values())
    assert GENERATOR_VERSION == "bench-corruptions-2.0"


def test_bad_arguments():
    x = smooth_images(2, 32, 32)
    with pytest.raises(ValueError, match="valid releases"):
        corrupt(x, "fog", 1, 0, release="cifar100c")
    with pytest.raises(ValueError, match="valid names"):
        corrupt(x, "rain", 1, 0, release="imagenet_c")
    with pytest.raises(ValueError, match="severity"):
        corrupt(x, "fog", 6, 0, release="imagenet_c")
    with pytest.raises(ValueError, match="uint8"):
        corrupt(x.astype(np.float32), "fog", 1, 0)
    with pytest.raises(ValueError, match="at least 32x32"):
        corrupt(smooth_images(1, 24, 40), "fog", 1, 0)


@pytest.mark.parametrize("release,h,w", [("imagenet_c", 40, 56), ("tiny_imagenet_c", 48, 33), ("cifar10c", 64, 64)])
def test_any_size(release, h, w):
    """Every corruption accepts any size >= 32 with any table: shape, dtype, determinism."""
    x = smooth_images(2, h, w, seed=1)
    for name in NAMES:
        out = corrupt(x, name, 3, seed=5, release=release)
        assert out.shape == x.shape and out.dtype == np.uint8, name
        assert np.array_equal(out, corrupt(x, name, 3, seed=5, release=release)), name


def test_releases_differ_and_the_cifar_wrapper_is_the_cifar_table():
    from datasets import cifar10c

    x = smooth_images(3, 32, 32, seed=2)
    for name in ("gaussian_noise", "brightness", "zoom_blur", "frost"):
        assert np.array_equal(cifar10c.corrupt(x, name, 4, seed=1), corrupt(x, name, 4, seed=1, release="cifar10c"))
        assert not np.array_equal(corrupt(x, name, 4, seed=1, release="imagenet_c"),
                                  corrupt(x, name, 4, seed=1, release="cifar10c"))
    assert cifar10c.PARAMS is PARAMS["cifar10c"] and cifar10c.GENERATOR_VERSION == GENERATOR_VERSION


def test_random_draws_follow_the_batch_position():
    """One stream per (seed, corruption, severity), consumed chunk by chunk (CHUNK_PIXELS: the
    chunk size is part of the generator): an image's draws depend on its position, not its content."""
    assert F.chunk_size(32, 32) == 1000 and F.chunk_size(64, 64) == 250 and F.chunk_size(224, 224) == 20
    x = smooth_images(4, 64, 64, seed=3)
    whole = corrupt(x, "gaussian_noise", 2, seed=0, release="tiny_imagenet_c")
    assert np.array_equal(whole[:2], corrupt(x[:2], "gaussian_noise", 2, seed=0, release="tiny_imagenet_c"))
    assert not np.array_equal(whole[1], corrupt(x[1:2], "gaussian_noise", 2, seed=0, release="tiny_imagenet_c")[0])


# --------------------------------------------------------------------------- arithmetic of the original

def test_truncation_has_no_allowance():
    """np.uint8(clip(x) * 255) truncates: a value a hair below an integer k (k - 1e-14) gives k - 1."""
    x = np.array([0.2, 30 / 255 - 1e-15, 30 / 255, 1.5, -0.1])
    assert ops.to_u8(x).tolist() == [51, 29, 30, 255, 0]
    x32 = np.array([77 / 255], dtype=np.float32)
    assert ops.to_u8(x32)[0] == np.uint8(np.clip(x32, 0, 1) * np.float32(255))  # float32 product kept
    assert ops.to_u8_255(np.array([12.9999999, 300.0, -3.0])).tolist() == [12, 255, 0]


def test_magick8_is_imagemagick_q16_to_8_bit():
    """A blur value b (0..255 scale) becomes the quantum rint(257 b), written as floor(q / 257):
    about truncation, not rounding (rint(b) is half a grey level brighter on average)."""
    b = np.array([10.0, 10.4, 10.6, 10.998, 10.9985, 254.9999, 255.0])  # 11 from 11 - 0.5 / 257 on
    assert ops.magick8(b).tolist() == [10, 10, 10, 10, 11, 255, 255]
    rng = np.random.default_rng(0)
    b = rng.uniform(0, 255, 100000)
    assert abs((ops.magick8(b) - b).mean() + 0.5) < 0.01
    assert abs((np.rint(b) - b).mean()) < 0.01


def _glass_loop(x: np.ndarray, shift: int, d: np.ndarray) -> np.ndarray:
    """The original's loop, literally, on one image; d[h-idx, w-idx] = (dx, dy) as drawn."""
    x = x.copy()
    h, w = x.shape[:2]
    for hh in range(h - shift, shift, -1):
        for ww in range(w - shift, shift, -1):
            dx, dy = d[hh - shift - 1, ww - shift - 1]
            hp, wp = hh + dy, ww + dx
            x[hh, ww], x[hp, wp] = x[hp, wp], x[hh, ww]   # numpy views: a copy, not a swap
    return x


@pytest.mark.parametrize("shift", [1, 2, 4])
def test_glass_shuffle_pass_equals_the_original_loop(shift):
    rng = np.random.default_rng(shift)
    x = rng.integers(0, 256, size=(3, 36, 41, 3)).astype(np.uint8)
    rows, cols = np.arange(shift + 1, 36 - shift + 1), np.arange(shift + 1, 41 - shift + 1)
    d = rng.integers(-shift, shift, size=(3, len(rows), len(cols), 2))
    got = F._glass_pass(x, rows, cols, d[..., 1], d[..., 0])
    for i in range(3):
        assert np.array_equal(got[i], _glass_loop(x[i], shift, d[i])), i


def test_motion_blur_kernel_matches_imagemagick_formula():
    for radius, sigma in [(10, 3), (20, 15), (12, 3)]:
        k = ops.motion_kernel(radius, sigma)
        assert len(k) == 2 * radius + 1 and np.isclose(k.sum(), 1) and np.all(np.diff(k) < 0)


def test_motion_blur_is_imagemagick_rounded():
    """The 8-bit result is floor(rint(257 b) / 257) of the float blur b at the image's angle."""
    x = smooth_images(3, 48, 48, seed=4)
    rng = F.make_rng(0, "motion_blur", 2)
    angles = rng.uniform(-45, 45, size=3)
    b = ops.motion_blur_batch(x.astype(np.float64), *PARAMS["tiny_imagenet_c"]["motion_blur"][1], angles)
    expected = np.floor(np.rint(257 * b) / 257).astype(np.uint8)
    assert np.array_equal(corrupt(x, "motion_blur", 2, seed=0, release="tiny_imagenet_c"), expected)


def test_non_native_sizes_use_imagecorruptions_geometry():
    """Away from a release's size: the fog map is the next power of two of the longer side, the
    zoom keeps the top-left H x W of the zoomed centre crop; at the native size the centre."""
    x = smooth_images(2, 48, 80, seed=6)
    ctx = F.Context(RELEASES["imagenet_c"], 1, 48, 80)
    assert not ctx.native and F.Context(RELEASES["imagenet_c"], 1, 224, 224).native
    z = 1.3
    full = ops.clipped_zoom(x.astype(np.float64), z, "none")
    assert full.shape[1:3] == (round(np.ceil(48 / z) * z), round(np.ceil(80 / z) * z))
    assert np.array_equal(ops.clipped_zoom(x.astype(np.float64), z, "corner"), full[:, :48, :80])
    ref = ndimage.zoom(x[0, 5:5 + 37, 9:9 + 62].astype(np.float64), (z, z, 1), order=1)  # centre crop ceil(48/z) x ceil(80/z)
    assert np.allclose(full[0], ref, atol=1e-9)
