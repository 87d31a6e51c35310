"""Tiny-ImageNet's validation set (official layout, fake tree and the real one) and the
Tiny-ImageNet-C folder generator (layout, JPEG settings, manifest, idempotence, official copies)."""
from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datasets.corruptions import GENERATOR_VERSION, corrupt, ensure_image_folder_c, read_image_folder_c
from datasets.corruptions import folder as FOLDER
from datasets.errors import DatasetNotFoundError
from datasets.splits import split_per_class
from datasets.tiny_imagenet import load_tiny_imagenet_val
from test_corruptions import smooth_images

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BENCH_DATA_ROOT", ROOT / "data"))
WNIDS = ["n01443537", "n01629819", "n01641577", "n01644900"]


def make_fake_tiny_imagenet(root: Path, per_class: int = 6, grey_every: int = 5) -> dict:
    """wnids.txt, val/val_annotations.txt and val/images/val_<k>.JPEG (64x64, every
    ``grey_every``-th one greyscale); returns what was written, in file-name order."""
    d = root / "tiny-imagenet-200"
    (d / "val" / "images").mkdir(parents=True)
    (d / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.repeat(np.arange(len(WNIDS)), per_class))
    images = smooth_images(len(labels), 64, 64, seed=5)
    lines, written = [], {}
    for k, (img, lab) in enumerate(zip(images, labels)):
        name = f"val_{k}.JPEG"
        im = Image.fromarray(img)
        if k % grey_every == 0:
            im = im.convert("L")
        im.save(d / "val" / "images" / name, quality=95)
        with Image.open(d / "val" / "images" / name) as back:
            written[name] = (np.asarray(back.convert("RGB")), int(lab))
        lines.append(f"{name}\t{WNIDS[lab]}\t0\t0\t63\t63")
    (d / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return dict(sorted(written.items()))


# --------------------------------------------------------------------------- loader

def test_loader_reads_the_official_layout(tmp_path):
    written = make_fake_tiny_imagenet(tmp_path)
    images, labels, wnids, filenames = load_tiny_imagenet_val(tmp_path)
    assert wnids == WNIDS and filenames == sorted(written) and filenames[:3] == ["val_0.JPEG", "val_1.JPEG", "val_10.JPEG"]
    assert images.dtype == np.uint8 and images.shape == (24, 64, 64, 3) and labels.dtype == np.int64
    for img, lab, name in zip(images, labels, filenames):
        assert np.array_equal(img, written[name][0]) and lab == written[name][1]
    grey = images[filenames.index("val_5.JPEG")]
    assert np.array_equal(grey[..., 0], grey[..., 1]) and np.array_equal(grey[..., 1], grey[..., 2])
    assert load_tiny_imagenet_val(tmp_path / "tiny-imagenet-200", limit=5).images.shape == (5, 64, 64, 3)


def test_loader_errors_name_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load_tiny_imagenet_val(tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "tiny-imagenet-200" / "wnids.txt") in msg and "val_annotations.txt" in msg
    assert "cs231n.stanford.edu/tiny-imagenet-200.zip" in msg
    make_fake_tiny_imagenet(tmp_path)
    (tmp_path / "tiny-imagenet-200" / "val" / "images" / "val_3.JPEG").unlink()
    with pytest.raises(DatasetNotFoundError, match="val_3.JPEG"):
        load_tiny_imagenet_val(tmp_path)
    (tmp_path / "tiny-imagenet-200" / "val" / "images" / "val_3.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(DatasetNotFoundError, match="malformed"):
        load_tiny_imagenet_val(tmp_path)


def test_split_per_class():
    labels = np.repeat(np.arange(5), 50)[np.random.default_rng(1).permutation(250)]
    tr, va, te = split_per_class(labels, (35, 5, 10), seed=0)
    for part, k in ((tr, 35), (va, 5), (te, 10)):
        assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
        assert np.bincount(labels[part], minlength=5).tolist() == [k] * 5
    assert len(np.intersect1d(tr, va)) == len(np.intersect1d(tr, te)) == len(np.intersect1d(va, te)) == 0
    assert all(np.array_equal(a, b) for a, b in zip((tr, va, te), split_per_class(labels, (35, 5, 10), seed=0)))
    assert not np.array_equal(te, split_per_class(labels, (35, 5, 10), seed=1)[2])
    assert [len(p) for p in split_per_class(labels, (10, 10), seed=0)] == [50, 50]
    with pytest.raises(ValueError, match="51 images per class"):
        split_per_class(labels, (40, 5, 6))


@pytest.mark.real_data
def test_real_tiny_imagenet_val():
    if not (DATA / "tiny-imagenet-200" / "val" / "val_annotations.txt").exists():
        pytest.skip("Tiny-ImageNet not under the data root")
    images, labels, wnids, filenames = load_tiny_imagenet_val(DATA)
    assert images.shape == (10000, 64, 64, 3) and len(wnids) == 200 and filenames[0] == "val_0.JPEG"
    assert np.bincount(labels, minlength=200).tolist() == [50] * 200
    modes = []
    for name in filenames:
        with Image.open(DATA / "tiny-imagenet-200" / "val" / "images" / name) as im:
            modes.append(im.mode)
    grey = np.array(modes) == "L"
    assert grey.sum() == 168  # greyscale JPEGs, converted to RGB: three equal channels
    assert np.array_equal(images[grey][..., 0], images[grey][..., 2])
    tr, va, te = split_per_class(labels)
    assert (len(tr), len(va), len(te)) == (7000, 1000, 2000)


# --------------------------------------------------------------------------- the folder generator

def _source(n: int = 8):
    images = smooth_images(n, 64, 64, seed=9)
    wnids = [WNIDS[i % 3] for i in range(n)]
    return images, wnids, [f"val_{i}.JPEG" for i in range(n)]


def _generate(root, names=("contrast", "fog"), severities=(1, 3), seed=0, images=None):
    src = _source() if images is None else images
    return ensure_image_folder_c(root, "Tiny-ImageNet-C", *src, release="tiny_imagenet_c", corruptions=list(names),
                                 severities=list(severities), seed=seed)


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in sorted(d.rglob("*")) if p.is_file()}


def test_folder_layout_jpeg_and_manifest(tmp_path):
    images, wnids, filenames = _source()
    d = _generate(tmp_path)
    assert d == tmp_path / "Tiny-ImageNet-C"
    for name in ("contrast", "fog"):
        for s in (1, 3):
            cells = read_image_folder_c(tmp_path, "Tiny-ImageNet-C", name, s)
            assert [(p.parent.name, p.name) for p, _ in cells] == sorted(zip(wnids, filenames))
            corrupted = corrupt(images, name, s, 0, release="tiny_imagenet_c")
            for img, w, f in zip(corrupted, wnids, filenames):
                path = d / name / str(s) / w / f
                buf = io.BytesIO()
                Image.fromarray(img).save(buf, format="JPEG", quality=85, optimize=True)
                assert path.read_bytes() == buf.getvalue()   # make_tinyimagenet_c.py's JPEG, byte for byte
    m = json.loads((d / "GENERATED.json").read_text())
    assert m["generator_version"] == GENERATOR_VERSION and m["release"] == "tiny_imagenet_c" and m["seed"] == 0
    assert m["n"] == 8 and m["image_size"] == [64, 64] and m["jpeg"] == {"quality": 85, "optimize": True}
    assert m["corruptions"] == {"contrast": [1, 3], "fog": [1, 3]} and set(m["cells"]) == {"contrast/1", "contrast/3", "fog/1", "fog/3"}
    assert m["source_digest"] == FOLDER.source_digest(images, wnids, filenames) == m["cells"]["fog/3"]["source_digest"]
    assert not [p for p in d.rglob("*") if ".tmp" in p.name]


def test_folder_is_written_once_and_regenerated_only_when_stale(tmp_path, monkeypatch):
    d = _generate(tmp_path)
    before = _snapshot(d)

    def boom(*args, **kwargs):
        raise AssertionError("regenerated a fresh cell")
    monkeypatch.setattr(FOLDER, "corrupt", boom)
    _generate(tmp_path)
    assert _snapshot(d) == before                       # nothing written at all, manifest included
    monkeypatch.undo()

    calls = []
    real = FOLDER.corrupt

    def counting(images, name, s, seed, release):
        calls.append((name, s))
        return real(images, name, s, seed, release=release)
    monkeypatch.setattr(FOLDER, "corrupt", counting)
    _generate(tmp_path, names=("contrast",), severities=(1, 5))           # one new cell
    assert calls == [("contrast", 5)]
    calls.clear()
    _generate(tmp_path, names=("fog",), severities=(3,), seed=1)          # another seed: that cell only
    assert calls == [("fog", 3)] and json.loads((d / "GENERATED.json").read_text())["cells"]["fog/1"]["seed"] == 0
    calls.clear()
    other = _source()
    other[0][0, 0, 0] ^= 1                                                # another source image
    _generate(tmp_path, names=("contrast",), severities=(3,), images=other)
    assert calls == [("contrast", 3)]
    calls.clear()
    (d / "contrast" / "5" / WNIDS[0] / "val_0.JPEG").unlink()             # a file gone: regenerated
    _generate(tmp_path, names=("contrast",), severities=(5,))
    assert calls == [("contrast", 5)] and (d / "contrast" / "5" / WNIDS[0] / "val_0.JPEG").exists()
    calls.clear()
    monkeypatch.setattr(FOLDER, "GENERATOR_VERSION", "bench-corruptions-0.9")  # another version: regenerated
    _generate(tmp_path, names=("contrast",), severities=(1, 5))
    assert calls == [("contrast", 1), ("contrast", 5)]


def test_concurrent_generation_is_serialised(tmp_path, monkeypatch):
    calls = []
    real = FOLDER.corrupt

    def slow(images, name, s, seed, release):
        calls.append((name, s))
        time.sleep(0.2)
        return real(images, name, s, seed, release=release)
    monkeypatch.setattr(FOLDER, "corrupt", slow)
    threads = [threading.Thread(target=_generate, args=(tmp_path,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(calls) == [("contrast", 1), ("contrast", 3), ("fog", 1), ("fog", 3)]   # each cell once


def test_official_copy_is_read_and_never_written(tmp_path):
    images, wnids, filenames = _source()
    d = tmp_path / "Tiny-ImageNet-C"
    for w, f in zip(wnids, filenames):                  # an "official" fog/2 cell, no manifest
        (d / "fog" / "2" / w).mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[0]).save(d / "fog" / "2" / w / f, quality=85)
    before = _snapshot(d)
    assert _generate(tmp_path, names=("fog",), severities=(2,)) == d
    with pytest.raises(DatasetNotFoundError) as e:
        _generate(tmp_path, names=("fog", "snow"), severities=(2,))
    assert "snow/2" in str(e.value) and "official" in str(e.value)
    assert _snapshot(d) == before and not (d / "GENERATED.json").exists() and not (d / ".generate.lock").exists()
    assert len(read_image_folder_c(tmp_path, "Tiny-ImageNet-C", "fog", 2)) == 8


def test_missing_cell_error_names_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        read_image_folder_c(tmp_path, "Tiny-ImageNet-C", "fog", 4)
    msg = str(e.value)
    assert str(tmp_path / "Tiny-ImageNet-C" / "fog" / "4") in msg and "<corruption>/<severity 1..5>/<wnid>" in msg
    with pytest.raises(ValueError, match="valid names"):
        read_image_folder_c(tmp_path, "Tiny-ImageNet-C", "hail", 1)


def test_bad_source_is_rejected(tmp_path):
    images, wnids, filenames = _source()
    with pytest.raises(ValueError, match="one wnid"):
        ensure_image_folder_c(tmp_path, "X", images, wnids[:-1], filenames, "tiny_imagenet_c", ["fog"])
    with pytest.raises(ValueError, match="unique"):
        ensure_image_folder_c(tmp_path, "X", images, wnids, ["a.JPEG"] * 8, "tiny_imagenet_c", ["fog"])
    with pytest.raises(ValueError, match="valid releases"):
        ensure_image_folder_c(tmp_path, "X", images, wnids, filenames, "tiny", ["fog"])
    assert not (tmp_path / "X").exists()
