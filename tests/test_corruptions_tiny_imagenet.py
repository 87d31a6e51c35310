"""The tiny_imagenet_c table (make_tinyimagenet_c.py, 64x64): hand-checked properties per corruption."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from datasets.corruptions import NAMES, PARAMS, RELEASES, corrupt
from datasets.corruptions import ops
from test_corruptions import smooth_images

R = "tiny_imagenet_c"
P = PARAMS[R]
DETERMINISTIC = {"defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression",
                 "gaussian_blur", "saturate"}
# mean |corrupted - clean| does not grow at every step under the release's parameters (measured on
# synthetic and on Tiny-ImageNet validation images, docs/corruptions.md); each has a test below
NOT_MONOTONE = {"glass_blur", "frost", "elastic_transform", "spatter", "saturate"}


@pytest.fixture(scope="module")
def images():
    return smooth_images(12, 64, 64, seed=7)


def grey(n: int = 8, value: int = 128) -> np.ndarray:
    return np.full((n, 64, 64, 3), value, dtype=np.uint8)


def tiny(x, name, s, seed=0):
    return corrupt(x, name, s, seed, release=R)


def distortion(x, name, seed=0):
    return [float(np.abs(tiny(x, name, s, seed).astype(int) - x).mean()) for s in range(1, 6)]


def test_parameters_are_the_original_scripts():
    """Hand-picked entries of make_tinyimagenet_c.py."""
    assert RELEASES[R].size == 64 and RELEASES[R].frost_scale == 0.3 and RELEASES[R].elastic_unit is None
    assert P["gaussian_noise"] == (0.04, 0.08, 0.12, 0.15, 0.18)
    assert P["shot_noise"] == (250, 100, 50, 30, 15)
    assert P["glass_blur"][3] == (0.7, 2, 1) and P["glass_blur"][4] == (0.9, 2, 2)
    assert P["defocus_blur"][3] == (2.5, 0.01)
    assert P["motion_blur"][4] == (12, 3)
    assert P["saturate"][4] == (30, 0.2)            # ImageNet-C: (20, 0.2)
    assert P["jpeg_compression"] == (65, 58, 50, 40, 25)
    assert P["pixelate"] == (0.9, 0.8, 0.7, 0.6, 0.5)
    assert P["fog"][0] == (0.4, 3) and P["frost"][4] == (0.7, 0.55)
    assert P["snow"][2] == (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7)
    assert P["elastic_transform"][4] == (0.16, 0.03, 0.02)  # x IMSIZE = 64
    assert P["spatter"][4] == (0.65, 0.1, 0.5, 0.67, 0.6, 1)


@pytest.mark.parametrize("name", NAMES)
def test_shape_dtype_determinism(name, images):
    a = tiny(images, name, 4, seed=1)
    assert a.shape == images.shape and a.dtype == np.uint8 and not np.array_equal(a, images)
    assert np.array_equal(a, tiny(images, name, 4, seed=1))
    assert np.array_equal(a, tiny(images, name, 4, seed=2)) == (name in DETERMINISTIC)


@pytest.mark.parametrize("name", sorted(set(NAMES) - NOT_MONOTONE))
def test_distortion_grows_with_severity(name, images):
    d = distortion(images, name)
    assert all(b > a for a, b in zip(d, d[1:])), d


def test_the_non_monotone_ones_follow_their_parameters(images):
    glass = distortion(images, "glass_blur")
    # one pass of shift 1 at 1-2; two passes at 3; shift 2 at 4 (one pass) and 5 (two)
    assert min(glass[2:]) > max(glass[:2]) and glass[4] > max(glass[2], glass[3]), glass
    spatter = distortion(images, "spatter")
    assert spatter[0] < spatter[1] < spatter[2] and spatter[3] < spatter[4]  # water at 1-3, mud at 4-5
    sat = distortion(images, "saturate")
    assert sat[1] > sat[0] and sat[2] < sat[3] < sat[4]                    # x0.3, x0.1, then x2, x5, x30
    frost = distortion(images, "frost")
    assert min(frost) > 30                                                  # the texture dominates at every level


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_noise_std_is_the_tables(severity):
    d = tiny(grey(32), "gaussian_noise", severity).astype(np.float64) - 128
    expected = np.sqrt((255 * P["gaussian_noise"][severity - 1]) ** 2 + 1 / 12)
    assert abs(d.std() / expected - 1) < 0.03
    lam = P["shot_noise"][severity - 1]
    d = tiny(grey(32, 102), "shot_noise", severity).astype(np.float64)
    assert abs(d.std() / (np.sqrt(102 / 255 / lam) * 255) - 1) < 0.04
    d = tiny(grey(32), "speckle_noise", severity).astype(np.float64) - 128
    assert abs(d.std() / np.sqrt((128 * P["speckle_noise"][severity - 1]) ** 2 + 1 / 12) - 1) < 0.03
    out = tiny(grey(32), "impulse_noise", severity)
    assert abs(np.isin(out, [0, 255]).mean() / P["impulse_noise"][severity - 1] - 1) < 0.06


@pytest.mark.parametrize("severity", [1, 5])
def test_gaussian_blur_impulse_response(severity):
    sigma = P["gaussian_blur"][severity - 1]
    x = np.zeros((1, 64, 64, 3), dtype=np.uint8)
    x[0, 32, 32] = 255
    out = tiny(x, "gaussian_blur", severity)[0, :, :, 1].astype(np.float64)
    r = int(4 * sigma + 0.5)
    g = np.exp(-np.arange(-r, r + 1) ** 2 / (2 * sigma ** 2))
    g /= g.sum()
    assert np.abs(out[32 - r:33 + r, 32 - r:33 + r] - 255 * np.outer(g, g)).max() < 1


def test_motion_blur_streaks_one_way_with_the_tables_radius():
    """ImageMagick's kernel: width 2 * radius + 1 (21 at 1-4, 25 at 5), one-sided, on a dot."""
    x = np.zeros((40, 64, 64, 3), dtype=np.uint8)
    x[:, 32, 32] = 255
    for s in (1, 5):
        out = tiny(x, "motion_blur", s).astype(int)[..., 0]
        ys, xs = np.nonzero(out.sum(0))
        reach = max(np.abs(ys - 32).max(), np.abs(xs - 32).max())
        assert reach <= 2 * P["motion_blur"][s - 1][0]
        assert out[:, 32, 32].min() > 0 and out.sum(axis=(1, 2)).max() <= 255


def test_zoom_blur_is_the_originals_float32_mean(images):
    def clipped_zoom(img, z):
        ch = int(np.ceil(64 / z))
        top = (64 - ch) // 2
        out = ndimage.zoom(img[top:top + ch, top:top + ch], (z, z, 1), order=1)
        trim = (out.shape[0] - 64) // 2
        return out[trim:trim + 64, trim:trim + 64]
    zooms = np.arange(1, *P["zoom_blur"][4])
    expected = []
    for img in images[:3]:
        x = (img / 255.).astype(np.float32)
        out = np.zeros_like(x)
        for z in zooms:
            out += clipped_zoom(x, z)
        expected.append(np.uint8(np.clip((x + out) / (len(zooms) + 1), 0, 1) * 255))
    assert np.array_equal(tiny(images[:3], "zoom_blur", 5), np.stack(expected))


def test_frost_is_a_crop_of_a_texture_shrunk_by_0_3():
    from numpy.lib.stride_tricks import sliding_window_view

    a, b = P["frost"][0]                           # (1, 0.3)
    textures = ops.frost_textures(0.3)
    assert [t.shape[:2] for t in textures] == [(180, 270), (94, 168), (94, 168), (105, 158), (148, 198)]
    out = tiny(grey(3, 0), "frost", 1, seed=4)    # = floor(0.3 * crop)
    for img in out:
        found = False
        for tex in textures:
            shrunk = np.floor(b * tex.astype(np.float64)).astype(np.uint8)
            win = sliding_window_view(shrunk, (64, 64, 3))[:, :, 0]
            hits = np.argwhere((win[..., 0, 0, 0] == img[0, 0, 0]) & (win[..., 63, 63, 2] == img[63, 63, 2]))
            found = found or any(np.array_equal(win[r, c], img) for r, c in hits)
        assert found


@pytest.mark.parametrize("severity", [1, 5])
def test_fog_range_on_a_constant_image(severity):
    s = P["fog"][severity - 1][0]
    x = 150 / 255
    out = tiny(grey(4, 150), "fog", severity).astype(np.int64)
    assert np.all(np.abs(out.max(axis=(1, 2, 3)) - 150) <= 1)     # plasma 1 -> x, its max
    assert np.all(np.abs(out.min(axis=(1, 2, 3)) - np.floor(255 * x * x / (x + s))) <= 1)  # plasma 0


def test_snow_brightens_more_with_severity(images):
    means = [tiny(images, "snow", s).mean() for s in range(1, 6)]
    assert all(b > a for a, b in zip(means, means[1:])) and means[0] > images.mean()


@pytest.mark.parametrize("severity", range(1, 6))
def test_contrast_and_brightness_by_hand(severity):
    c = P["contrast"][severity - 1]
    x = grey(1, 51)
    x[0, :32] = 153                                 # channel mean 0.4
    out = tiny(x, "contrast", severity)[0].astype(int)
    assert abs(out[0, 0, 0] - ((0.6 - 0.4) * c + 0.4) * 255) < 1 and abs(out[-1, 0, 0] - ((0.2 - 0.4) * c + 0.4) * 255) < 1
    v = 0.6 + P["brightness"][severity - 1]         # HSV value + c, hue and saturation kept
    px = tiny(np.broadcast_to(np.array([51, 102, 153], np.uint8), (1, 64, 64, 3)).copy(), "brightness", severity)[0, 0, 0]
    assert np.all(np.abs(px - np.array([0.2, 0.4, 0.6]) * min(v, 1.0) / 0.6 * 255) < 1)


@pytest.mark.parametrize("severity", [1, 5])
def test_pixelate_and_jpeg_are_the_pil_operations(severity, images):
    k = int(64 * P["pixelate"][severity - 1])
    q = P["jpeg_compression"][severity - 1]
    pix, jpg = tiny(images, "pixelate", severity), tiny(images, "jpeg_compression", severity)
    for img, p, j in zip(images, pix, jpg):
        assert np.array_equal(p, np.asarray(Image.fromarray(img).resize((k, k), Image.BOX).resize((64, 64), Image.BOX)))
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=q)
        assert np.array_equal(j, np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))


def test_elastic_severity_1_is_affine_and_the_local_warp_grows():
    """Severity 1 has alpha 0: a pure affine warp keeps a ramp linear; the elastic part grows."""
    ramp = np.broadcast_to((np.arange(64) * 3 + 20)[None, :, None], (64, 64, 3)).astype(np.uint8)
    x = np.repeat(ramp[None], 16, axis=0)
    curv = [np.abs(np.diff(tiny(x, "elastic_transform", s).astype(float)[:, 8:56, 8:56, 0], 2, axis=2)).mean()
            for s in range(1, 6)]
    assert curv[0] < 1.0 and curv[2] > curv[1] and curv[4] > curv[0], curv


def test_spatter_water_then_mud(images):
    for s in (1, 2, 3):
        out = tiny(images, "spatter", s)
        assert (out.astype(int) >= images.astype(int) - 1).all() and (out > images).any()
    mud = np.array([63, 42, 20])
    out = tiny(images, "spatter", 5).astype(int)
    changed = (out != images).any(axis=-1)
    assert changed.any()
    assert np.abs(out - mud).sum(-1)[changed].mean() < 0.5 * np.abs(images.astype(int) - mud).sum(-1)[changed].mean()
