"""The regenerated CIFAR-10-C: shapes, determinism, severity ordering, parameters, on-disk layout."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from datasets.cifar10c import (CORRUPTIONS, EXTRA, GENERATOR_VERSION, NAMES, PARAMS, STANDARD, corrupt,
                               ensure_cifar10c, gallery_png, load_cifar10_test, load_cifar10c, read_manifest)
from datasets.corruptions import ops as C
from datasets.errors import DatasetNotFoundError

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BENCH_DATA_ROOT", ROOT / "data"))
HAS_CIFAR = (DATA / "cifar-10-batches-py" / "test_batch").exists()

DETERMINISTIC = {"defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression",
                 "gaussian_blur", "saturate"}
# Where the original's parameters do not make mean |corrupted - clean| grow with severity (measured on
# CIFAR-10 test images, docs/corruptions.md); each of these has its own test below.
NOT_MONOTONE = {"glass_blur", "motion_blur", "frost", "elastic_transform", "spatter", "saturate"}


def smooth_images(n: int = 12, seed: int = 0) -> np.ndarray:
    """Real-looking synthetic images: smooth colour fields plus a few sharp-edged blocks."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(40, 215, size=(n, 5, 5, 3))
    x = ndimage.zoom(low, (1, 32 / 5, 32 / 5, 1), order=3)[:, :32, :32]
    for img in x:
        for _ in range(3):
            r, c = rng.integers(0, 24, 2)
            h, w = rng.integers(4, 10, 2)
            img[r:r + h, c:c + w] = rng.uniform(20, 235, 3)
    x += ndimage.gaussian_filter(rng.normal(0, 25, size=x.shape), (0, 0.7, 0.7, 0))  # fine texture
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def grey(n: int = 8, value: int = 128) -> np.ndarray:
    return np.full((n, 32, 32, 3), value, dtype=np.uint8)


def distortion(name: str, images: np.ndarray, seed: int = 0) -> list[float]:
    return [float(np.abs(corrupt(images, name, s, seed).astype(np.int16) - images).mean()) for s in range(1, 6)]


@pytest.fixture(scope="module")
def images():
    return smooth_images()


@pytest.fixture(scope="module")
def real_images():
    if not HAS_CIFAR:
        pytest.skip("CIFAR-10 not unpacked (run ../shared/data/unpack.sh data cifar-10-batches-py)")
    return load_cifar10_test(DATA)[0][:16].copy()


# --------------------------------------------------------------------------- registry and API

def test_registry_names():
    assert len(STANDARD) == 15 and len(EXTRA) == 4 and NAMES == STANDARD + EXTRA
    assert set(CORRUPTIONS) == set(NAMES) == set(PARAMS)
    assert all(len(PARAMS[name]) == 5 for name in NAMES)
    assert isinstance(GENERATOR_VERSION, str) and GENERATOR_VERSION


def test_bad_name_and_severity(images):
    with pytest.raises(ValueError, match="gaussian_noise.*saturate"):
        corrupt(images, "rain", 1, 0)
    for bad in (0, 6, 2.5, True):
        with pytest.raises(ValueError, match="severity"):
            corrupt(images, "fog", bad, 0)
    with pytest.raises(ValueError, match="uint8"):
        corrupt(images.astype(np.float32), "fog", 1, 0)


@pytest.mark.parametrize("name", NAMES)
def test_shape_dtype_determinism(name, images):
    a = corrupt(images, name, 3, seed=1)
    assert a.shape == images.shape and a.dtype == np.uint8
    assert np.array_equal(a, corrupt(images, name, 3, seed=1))
    assert not np.array_equal(a, images)
    other = corrupt(images, name, 3, seed=2)
    if name in DETERMINISTIC:
        assert np.array_equal(a, other)
    else:
        assert not np.array_equal(a, other)
    assert corrupt(images[:0], name, 1, 0).shape == (0, 32, 32, 3)


@pytest.mark.parametrize("name", sorted(set(NAMES) - NOT_MONOTONE))
def test_distortion_grows_with_severity(name, images):
    d = distortion(name, images)
    assert all(b > a for a, b in zip(d, d[1:])), d


@pytest.mark.real_data
@pytest.mark.parametrize("name", sorted(set(NAMES) - NOT_MONOTONE))
def test_distortion_grows_with_severity_real(name, real_images):
    d = distortion(name, real_images)
    assert all(b > a for a, b in zip(d, d[1:])), d


# --------------------------------------------------------------------------- noise parameters

@pytest.mark.parametrize("severity", [1, 3, 5])
def test_gaussian_and_speckle_noise_std(severity):
    x = grey(64)
    d = corrupt(x, "gaussian_noise", severity, 0).astype(np.float64) - 128
    expected = np.sqrt((255 * PARAMS["gaussian_noise"][severity - 1]) ** 2 + 1 / 12)  # + truncation
    assert abs(d.std() / expected - 1) < 0.02
    assert abs(d.mean() + 0.5) < 4 * expected / np.sqrt(d.size)  # truncation, as the original's np.uint8
    d = corrupt(x, "speckle_noise", severity, 0).astype(np.float64) - 128
    expected = np.sqrt((128 * PARAMS["speckle_noise"][severity - 1]) ** 2 + 1 / 12)  # std of x * noise
    assert abs(d.std() / expected - 1) < 0.02


@pytest.mark.parametrize("severity", [1, 5])
def test_shot_noise_variance(severity):
    lam = PARAMS["shot_noise"][severity - 1]
    x = grey(64, 102)
    d = corrupt(x, "shot_noise", severity, 0).astype(np.float64)
    expected = np.sqrt(102 / 255 / lam) * 255  # Poisson(x * lam) / lam
    assert abs(d.std() / expected - 1) < 0.03


@pytest.mark.parametrize("severity", [1, 5])
def test_impulse_noise_amount(severity):
    out = corrupt(grey(64), "impulse_noise", severity, 0)
    salt, pepper = (out == 255).mean(), (out == 0).mean()
    amount = PARAMS["impulse_noise"][severity - 1]
    assert abs((salt + pepper) / amount - 1) < 0.05
    assert abs(salt / (salt + pepper) - 0.5) < 0.05
    assert np.isin(out, [0, 128, 255]).all()


# --------------------------------------------------------------------------- blur parameters

@pytest.mark.parametrize("name", ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "gaussian_blur", "pixelate"])
def test_blurs_keep_constant_images(name):
    """A blur keeps a constant image, up to the original's truncation to uint8: its float
    arithmetic may land a hair below the value (float32 zoom blur: 77 -> 76), never above."""
    x = grey(4, 77)
    for s in range(1, 6):
        d = x.astype(int) - corrupt(x, name, s, 0)
        assert d.min() >= 0 and d.max() <= 1, (s, np.unique(d))
        if name in ("motion_blur", "pixelate"):  # ImageMagick rounds; PIL's box filter is exact
            assert not d.any()


@pytest.mark.parametrize("severity", [1, 5])
def test_gaussian_blur_impulse_response(severity):
    sigma = PARAMS["gaussian_blur"][severity - 1]
    x = np.zeros((1, 32, 32, 3), dtype=np.uint8)
    x[0, 16, 16] = 255
    out = corrupt(x, "gaussian_blur", severity, 0)[0, :, :, 0]
    r = int(4 * sigma + 0.5)
    g = np.exp(-np.arange(-r, r + 1) ** 2 / (2 * sigma ** 2))
    g /= g.sum()
    expected = np.floor(255 * np.outer(g, g))
    assert np.array_equal(out[16 - r:17 + r, 16 - r:17 + r], expected)
    assert out.sum() == expected.sum()


def test_motion_blur_kernel_is_one_sided_gaussian():
    """Angle 0: out[y, x] = sum_i k_i img[y, x + i], k_i ~ exp(-i^2 / 2 sigma^2), i = 0..2r (ImageMagick)."""
    x = np.zeros((1, 32, 32, 1))
    x[0, 16, 20] = 1.0
    for radius, sigma in PARAMS["motion_blur"]:
        out = C.motion_blur_batch(x, radius, sigma, np.array([0.0]))[0, :, :, 0]
        k = np.exp(-np.arange(2 * radius + 1) ** 2 / (2 * sigma ** 2))
        k /= k.sum()
        expected = np.zeros(32)
        for i, w in enumerate(k):
            if 20 - i >= 0:
                expected[20 - i] = w
        assert np.allclose(out[16], expected) and np.allclose(np.delete(out, 16, axis=0), 0)
    out = C.motion_blur_batch(x, 6, 2, np.array([90.0]))[0, :, :, 0]  # 90 degrees: along the column
    assert np.allclose(out[:, 20].sum(), 1) and out[16, 20] > out[15, 20] > out[14, 20] > 0


@pytest.mark.parametrize("data", ["synthetic", pytest.param("real", marks=pytest.mark.real_data)])
def test_motion_blur_grows_with_severity_at_fixed_angle(data, images, request):
    x = (images if data == "synthetic" else request.getfixturevalue("real_images")).astype(np.float64)
    for angle in (-40.0, 0.0, 30.0):
        d = [np.abs(C.motion_blur_batch(x, r, s, np.full(len(x), angle)) - x).mean()
             for r, s in PARAMS["motion_blur"]]
        assert all(b > a for a, b in zip(d, d[1:])), (angle, d)


def test_glass_blur_two_iterations_distort_more(images):
    d = distortion("glass_blur", images)
    assert min(d[3:]) > max(d[:3]), d  # severities 4-5 shuffle twice, 1-3 once
    assert d[1] > d[0]  # same shuffle, more blur


def test_zoom_blur_matches_per_image_scipy_zoom(images):
    """The batched zoom (a matrix per factor) equals the original's per-image clipped_zoom built on
    scipy.ndimage.zoom(order=1) on float32: centre crop of ceil(32 / z), zoom, centre trim; the
    float32 mean with the image, truncated. Byte for byte."""
    def clipped_zoom(img, z):
        ch = int(np.ceil(32 / z))
        top = (32 - ch) // 2
        out = ndimage.zoom(img[top:top + ch, top:top + ch], (z, z, 1), order=1)
        trim = (out.shape[0] - 32) // 2
        return out[trim:trim + 32, trim:trim + 32]
    for severity in (2, 5):
        zooms = np.arange(1, *PARAMS["zoom_blur"][severity - 1])
        expected = []
        for img in images[:4]:
            x = (img / 255.).astype(np.float32)
            out = np.zeros_like(x)
            for z in zooms:
                out += clipped_zoom(x, z)
            expected.append(np.uint8(np.clip((x + out) / (len(zooms) + 1), 0, 1) * 255))
        assert np.array_equal(corrupt(images[:4], "zoom_blur", severity, 0), np.stack(expected))


# --------------------------------------------------------------------------- weather

def test_snow_only_brightens(images):
    means = []
    for s in range(1, 6):
        out = corrupt(images, "snow", s, 0)
        # the float32 blend b * x + (1 - b) * x may land a hair below x, truncated (as the original)
        assert (out.astype(int) >= images.astype(int) - 1).all() and (out > images).any()
        means.append(out.mean())
    assert all(b > a for a, b in zip(means, means[1:]))


def _find_crop(target: np.ndarray, textures) -> tuple[int, int, int] | None:
    from numpy.lib.stride_tricks import sliding_window_view
    for t, tex in enumerate(textures):
        windows = sliding_window_view(tex, (32, 32, 3))[:, :, 0]
        hit = np.argwhere((windows[..., 0, 0, 0] == target[0, 0, 0]) & (windows[..., 31, 31, 2] == target[31, 31, 2]))
        for r, c in hit:
            if np.array_equal(windows[r, c], target):
                return t, int(r), int(c)
    return None


@pytest.mark.parametrize("severity", [1, 4])
def test_frost_blends_a_crop_of_a_packaged_texture(severity):
    a, b = PARAMS["frost"][severity - 1]
    textures = C.frost_textures(0.2)
    shrunk = [np.floor(b * tex.astype(np.float64)).astype(np.uint8) for tex in textures]
    dark = corrupt(grey(3, 0), "frost", severity, 5)  # = floor(b * crop)
    found = [_find_crop(img, shrunk) for img in dark]
    assert all(f is not None for f in found)
    x = grey(3, 100)
    out = corrupt(x, "frost", severity, 5)  # same seed: same crops
    for img, (t, r, c) in zip(out, found):
        crop = textures[t][r:r + 32, c:c + 32].astype(np.float64)
        assert np.array_equal(img, np.floor(np.clip(a * 100 + b * crop, 0, 255)).astype(np.uint8))


@pytest.mark.parametrize("severity", [1, 5])
def test_fog_range_on_constant_image(severity):
    """x + s * plasma (plasma spans [0, 1]) rescaled by max / (max + s): from x^2/(x+s) up to x."""
    s = PARAMS["fog"][severity - 1][0]
    x = 150 / 255
    out = corrupt(grey(4, 150), "fog", severity, 0).astype(np.int64)
    assert np.all(np.abs(out.max(axis=(1, 2, 3)) - 150) <= 1)
    assert np.all(np.abs(out.min(axis=(1, 2, 3)) - np.floor(255 * x * x / (x + s))) <= 1)


def test_spatter_water_brightens_and_mud_browns(images):
    d = distortion("spatter", images)
    assert d[0] < d[1] < d[2] and d[3] < d[4], d  # water at 1-3, mud at 4-5
    for s in (1, 2, 3):
        out = corrupt(images, "spatter", s, 0)
        assert (out >= images).all() and (out > images).any()
    mud = np.array([63, 42, 20])
    for s in (4, 5):
        out = corrupt(images, "spatter", s, 0).astype(np.int64)
        changed = (out != images).any(axis=-1)
        assert changed.any()
        before = np.abs(images.astype(np.int64) - mud).sum(-1)[changed]
        after = np.abs(out - mud).sum(-1)[changed]
        assert (after <= before + 3).all() and after.mean() < 0.5 * before.mean()


# --------------------------------------------------------------------------- digital

def _pixel_image(rgb) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (1, 32, 32, 3)).copy()


def _truncated(out, exact) -> bool:
    """out is the truncation of the exact value; at an exact integer k the float arithmetic of
    the original (reproduced bit for bit, see the scikit-image test) may give k or k - 1."""
    exact = np.asarray(exact, dtype=np.float64)
    return bool(np.all((out >= np.floor(exact - 1e-9)) & (out <= np.floor(exact + 1e-9))))


@pytest.mark.parametrize("severity", range(1, 6))
def test_brightness_hand_computed(severity):
    c = PARAMS["brightness"][severity - 1]
    out = corrupt(_pixel_image([51, 102, 153]), "brightness", severity, 0)[0, 0, 0]
    v = 0.6 + c  # HSV value + c; hue and saturation kept, so every channel scales by v / 0.6
    assert _truncated(out, np.array([0.2, 0.4, 0.6]) * v / 0.6 * 255), out
    black = corrupt(_pixel_image([0, 0, 0]), "brightness", severity, 0)[0, 0, 0]
    assert _truncated(black, np.full(3, 255 * c)), black


@pytest.mark.parametrize("severity", range(1, 6))
def test_saturate_hand_computed(severity):
    mult, add = PARAMS["saturate"][severity - 1]
    out = corrupt(_pixel_image([51, 102, 153]), "saturate", severity, 0)[0, 0, 0]
    s = 2 / 3  # (0.6 - 0.2) / 0.6
    s2 = min(max(s * mult + add, 0), 1)
    # value and hue kept: each channel moves towards/away from the value in proportion to S'/S
    expected = 0.6 - (s2 / s) * (0.6 - np.array([0.2, 0.4, 0.6]))
    assert _truncated(out, expected * 255), out


def test_saturate_orders_within_each_direction(images):
    d = distortion("saturate", images)
    assert d[1] > d[0] and d[2] < d[3] < d[4], d  # 1-2 desaturate (x0.3, x0.1), 3-5 saturate


@pytest.mark.parametrize("severity", range(1, 6))
def test_contrast_hand_computed(severity):
    c = PARAMS["contrast"][severity - 1]
    x = grey(1, 51)
    x[0, :16] = 153  # channel mean 0.4
    out = corrupt(x, "contrast", severity, 0)[0]
    assert _truncated(out[:16], ((0.6 - 0.4) * c + 0.4) * 255) and _truncated(out[16:], ((0.2 - 0.4) * c + 0.4) * 255)


@pytest.mark.parametrize("severity", [1, 5])
def test_jpeg_is_pil_round_trip(severity, images):
    q = PARAMS["jpeg_compression"][severity - 1]
    out = corrupt(images, "jpeg_compression", severity, 0)
    for img, got in zip(images, out):
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=q)
        assert np.array_equal(got, np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))


@pytest.mark.parametrize("severity", [1, 5])
def test_pixelate_is_pil_box_down_up(severity, images):
    k = int(32 * PARAMS["pixelate"][severity - 1])
    out = corrupt(images, "pixelate", severity, 0)
    for img, got in zip(images, out):
        expected = Image.fromarray(img).resize((k, k), Image.BOX).resize((32, 32), Image.BOX)
        assert np.array_equal(got, np.asarray(expected))


def test_elastic_local_warp_grows_while_affine_shrinks():
    """Severity 1 is a pure affine warp (alpha 0): a linear ramp stays linear. The local elastic
    displacement (alpha * smoothed noise) grows with severity: the ramp's curvature grows."""
    ramp = np.broadcast_to((np.arange(32) * 7 + 10)[None, :, None], (32, 32, 3)).astype(np.uint8)
    x = np.repeat(ramp[None], 32, axis=0)
    curv = []
    for s in range(1, 6):
        out = corrupt(x, "elastic_transform", s, 0).astype(np.float64)[:, 4:28, 4:28, 0]
        curv.append(np.abs(np.diff(out, 2, axis=2)).mean())
    assert curv[0] < 1.0
    assert curv[1] < curv[2] < curv[3] < curv[4], curv


# --------------------------------------------------------------------------- on disk

def _tiny():
    rng = np.random.default_rng(3)
    return smooth_images(8, seed=3), rng.integers(0, 10, 8)


def test_ensure_writes_the_official_layout_and_reuses(tmp_path, monkeypatch):
    imgs, labels = _tiny()
    names = ["gaussian_noise", "contrast"]
    d = ensure_cifar10c(tmp_path, imgs, labels, names, seed=4)
    assert d == tmp_path / "CIFAR-10-C"
    lab = np.load(d / "labels.npy")
    assert lab.dtype == np.uint8 and np.array_equal(lab, np.tile(labels, 5))
    for name in names:
        arr = np.load(d / f"{name}.npy")
        assert arr.dtype == np.uint8 and arr.shape == (40, 32, 32, 3)
        for s in range(1, 6):
            assert np.array_equal(arr[(s - 1) * 8:s * 8], corrupt(imgs, name, s, seed=4))
    manifest = read_manifest(d)
    assert manifest["generator_version"] == GENERATOR_VERSION and manifest["seed"] == 4 and manifest["n"] == 8
    assert set(manifest["corruptions"]) == set(names)
    assert not list(d.glob("*.tmp"))
    stamps = {p.name: p.stat().st_mtime_ns for p in d.glob("*.npy")}

    import datasets.cifar10c.generate as G

    def boom(*args, **kwargs):
        raise AssertionError("regenerated a file that was present")
    monkeypatch.setattr(G, "corrupt", boom)
    manifest_stamp = (d / "GENERATED.json").stat().st_mtime_ns
    assert ensure_cifar10c(tmp_path, imgs, labels, names, seed=4) == d
    assert stamps == {p.name: p.stat().st_mtime_ns for p in d.glob("*.npy")}
    assert (d / "GENERATED.json").stat().st_mtime_ns == manifest_stamp  # nothing to do: nothing written
    monkeypatch.undo()

    ensure_cifar10c(tmp_path, imgs, labels, ["fog"], seed=4)  # adds one, keeps the others
    assert set(read_manifest(d)["corruptions"]) == {"gaussian_noise", "contrast", "fog"}
    assert stamps["contrast.npy"] == (d / "contrast.npy").stat().st_mtime_ns
    ensure_cifar10c(tmp_path, imgs, labels, ["gaussian_noise"], seed=5)  # another seed: regenerated
    assert np.array_equal(np.load(d / "gaussian_noise.npy")[:8], corrupt(imgs, "gaussian_noise", 1, seed=5))
    assert json.loads((d / "GENERATED.json").read_text())["corruptions"]["gaussian_noise"]["seed"] == 5


def test_official_release_is_never_written(tmp_path):
    imgs, labels = _tiny()
    d = tmp_path / "CIFAR-10-C"
    d.mkdir()
    official = np.zeros((40, 32, 32, 3), dtype=np.uint8)
    np.save(d / "fog.npy", official)
    np.save(d / "labels.npy", np.zeros(40, dtype=np.uint8))
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    assert ensure_cifar10c(tmp_path, imgs, labels, ["fog"]) == d
    with pytest.raises(DatasetNotFoundError, match="snow.npy"):
        ensure_cifar10c(tmp_path, imgs, labels, ["fog", "snow"])
    assert before == {p.name: p.read_bytes() for p in d.iterdir()}
    images, lab = load_cifar10c(tmp_path, "fog", 2)
    assert images.shape == (8, 32, 32, 3) and lab.dtype == np.int64


def test_load_cifar10c_slices_one_severity(tmp_path):
    imgs, labels = _tiny()
    ensure_cifar10c(tmp_path, imgs, labels, ["brightness"], seed=0)
    for s in (1, 3, 5):
        got, lab = load_cifar10c(tmp_path, "brightness", s)
        assert isinstance(got, np.memmap) and got.shape == (8, 32, 32, 3)
        assert np.array_equal(got, corrupt(imgs, "brightness", s, 0))
        assert np.array_equal(lab, labels)
    got, _ = load_cifar10c(tmp_path / "CIFAR-10-C", "brightness", 2)  # the directory itself works too
    assert np.array_equal(got, corrupt(imgs, "brightness", 2, 0))
    with pytest.raises(ValueError, match="valid names"):
        load_cifar10c(tmp_path, "hail", 1)


def test_missing_directory_error_names_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_cifar10c(tmp_path, "fog", 1)
    msg = str(info.value)
    assert str(tmp_path / "CIFAR-10-C" / "fog.npy") in msg and "labels.npy" in msg
    assert "5*N" in msg and "datasets.cifar10c.generate" in msg
    assert not (tmp_path / "CIFAR-10-C").exists()


def test_gallery_png(images):
    png = gallery_png(images[0], seed=0)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(png)) as im:
        assert im.size[1] > im.size[0] > 400  # 19 rows, 6 columns


@pytest.mark.real_data
def test_real_cifar10c_files_when_generated():
    """When the data root holds a CIFAR-10-C (official or regenerated), its files have the layout."""
    d = DATA / "CIFAR-10-C"
    present = [name for name in NAMES if (d / f"{name}.npy").exists()]
    if not (d / "labels.npy").exists() or not present:
        pytest.skip("no CIFAR-10-C in the data root")
    images, labels = load_cifar10c(DATA, present[-1], 5)
    assert images.shape == (10000, 32, 32, 3) and labels.shape == (10000,)
    if HAS_CIFAR:
        assert np.array_equal(labels, load_cifar10_test(DATA)[1])


# --------------------------------------------------------------------------- reference libraries
# The original generator called scikit-image and OpenCV; both arrive with the `imagecorruptions`
# dependency (frost textures). Where importable, the batched re-implementations must agree.

def test_hsv_and_gaussian_match_scikit_image(images):
    skc = pytest.importorskip("skimage.color")
    skf = pytest.importorskip("skimage.filters")
    x = images / 255.0
    assert np.array_equal(C.rgb_to_hsv(x), skc.rgb2hsv(x))
    hsv = skc.rgb2hsv(x)
    assert np.array_equal(C.hsv_to_rgb(hsv), skc.hsv2rgb(hsv))
    ref = np.stack([skf.gaussian(img, sigma=0.7, channel_axis=-1) for img in x])
    assert np.array_equal(C.gaussian_hw(x, 0.7), ref)


def test_spatter_pieces_match_opencv():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    liquid = C.gaussian_hw(rng.normal(0.65, 0.3, size=(40, 32, 32)), 1.0)
    liquid[liquid < 0.69] = 0
    liquid8 = C.to_u8(liquid)
    edges = C.canny(liquid8, 50, 150)
    ref = np.stack([cv2.Canny(img, 50, 150) for img in liquid8]) > 0
    assert edges.any() and np.array_equal(edges, ref)
    dist = np.where(ref, 0, 255).astype(np.uint8)
    # OpenCV >= 5 uses float chamfer weights, 3/4 the 16-bit fixed point kept here: 1e-4 apart
    ref_d = np.stack([cv2.distanceTransform(img, cv2.DIST_L2, 5) for img in dist])
    assert np.allclose(np.minimum(C.distance_transform_l2_5(dist), 20), np.minimum(ref_d, 20), atol=1e-4)
    img8 = rng.integers(0, 30, size=(40, 32, 32)).astype(np.uint8)
    assert np.array_equal(C.equalize_hist(img8), np.stack([cv2.equalizeHist(i) for i in img8]))
    ker = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)
    ref_f = np.stack([cv2.filter2D(i, cv2.CV_8U, ker) for i in img8])
    assert np.array_equal(np.clip(C.correlate_hw(img8.astype(np.float64), ker.astype(np.float64), "mirror"), 0, 255), ref_f)
    ref_b = np.stack([cv2.blur(i.astype(np.float32) / 7, (3, 3)) for i in img8])
    assert np.array_equal(C.box3_float32(img8.astype(np.float32) / 7), ref_b)
    assert np.array_equal(C.box3_uint8(img8), np.stack([cv2.blur(i, (3, 3)) for i in img8]))


def test_defocus_kernel_and_frost_resize_match_opencv(images):
    """The anti-aliased disk is cv2's float32 kernel bit for bit (every release's entries), the
    correlation is cv2.filter2D's; the frost textures are cv2.resize(fx=fy=0.2) exactly and
    cv2.resize(fx=fy=0.3) within a grey level."""
    cv2 = pytest.importorskip("cv2")
    from datasets.corruptions import PARAMS as ALL

    x = images / 255.0
    entries = {p for table in ALL.values() for p in table["defocus_blur"]}
    for radius, alias in sorted(entries):
        coords = np.arange(-8, 9) if radius <= 8 else np.arange(-radius, radius + 1)
        xx, yy = np.meshgrid(coords, coords)
        disk = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(np.float32)
        ksize = (3, 3) if radius <= 8 else (5, 5)
        disk = cv2.GaussianBlur(disk / disk.sum(), ksize=ksize, sigmaX=alias)
        assert np.array_equal(C.disk_kernel(radius, alias), disk), (radius, alias)
        if (radius, alias) in PARAMS["defocus_blur"]:
            ref = np.stack([np.stack([cv2.filter2D(img[:, :, c], -1, disk) for c in range(3)], -1) for img in x])
            assert np.allclose(C.correlate_hw(x, disk.astype(np.float64), "mirror"), ref, atol=1e-12)
    for scale, tol in ((0.2, 0), (0.3, 1)):
        for name, tex in zip(C.FROST_FILES, C.frost_textures(scale)):
            ref = cv2.resize(cv2.imread(str(C.frost_dir() / name)), (0, 0), fx=scale, fy=scale)[..., [2, 1, 0]]
            assert tex.shape == ref.shape
            assert np.abs(tex.astype(int) - ref).max() <= tol, (scale, name)
