"""The `imagenetc` suite on fixtures in the official layouts: ImageNet validation as an ImageFolder
tree, ImageNet-C as <corruption>/<severity>/<wnid>/<file>.JPEG, a tiny "pretrained" weights file;
the mCE arithmetic by hand; the streamed sources against torchvision's own transforms."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.cli import main
from datasets.imagenet import imagenet_wnids

WNIDS = [imagenet_wnids()[i] for i in (3, 500, 999)]


def make_fake_imagenet(root: Path, per_class: int = 6, **kw):
    """ImageNet val (ImageFolder tree, images of several sizes and one greyscale: the 256 / 224
    resize-crop runs) and ImageNet-C cells (224 x 224, the same file names) for three real ids."""
    from datasets.imagenet import write_fixture

    return write_fixture(root, WNIDS, per_class, **kw)


def _weights(tmp_path: Path) -> Path:
    from bench.models import build_model

    torch.manual_seed(0)
    net = build_model("resnet_small", (3, 224, 224), 1000)
    path = tmp_path / "weights.pt"
    torch.save(net.state_dict(), path)
    return path


@pytest.fixture
def fake_root(tmp_path):
    make_fake_imagenet(tmp_path / "data")
    return tmp_path / "data"


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_imagenetc_smoke_run_on_the_official_layout(fake_root, tmp_path, capsys):
    out = tmp_path / "results"
    w = _weights(tmp_path)
    code, text = _run(["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(fake_root),
                       "--out", str(out), "--methods", "deterministic,pbn,mfvi", "--quiet",
                       "--loader-workers", "1", "--set", f"data.weights={w}"], capsys)
    assert code == 0, text
    recs = [json.loads(p.read_text()) for p in out.glob("imagenetc/records/**/*.json")]
    methods = {r["method"] for r in recs}
    assert methods == {"deterministic", "pbn"}  # mfvi trains from scratch: skipped
    assert all(r["status"] == "ok" for r in recs)
    assert all("skipped: mfvi" in r["eval_note"] for r in recs)
    det = [r for r in recs if r["method"] == "deterministic"]
    kinds = sorted((r["kind"], r["shift"], r["severity"]) for r in det)
    assert ("id", "clean", 0.0) in kinds and ("val", "validation", None) in kinds
    assert sum(k == "shift" for k, _, _ in kinds) == 6  # 2 corruptions x severities 1, 3, 5
    idr = next(r for r in det if r["kind"] == "id")
    assert idr["n"] == 9  # 3 test images per class x 3 classes
    assert "top5_accuracy" in idr["metrics"]
    assert idr["pretrained_weights"]["path"] == str(w) and len(idr["pretrained_weights"]["sha256_16"]) == 16
    # the deterministic network is exactly the weights file (no training happened)
    from bench.models import build_model, load_pretrained
    from datasets.imagenet import MEAN, STD
    from datasets.sources import ImageFiles

    net = build_model("resnet_small", (3, 224, 224), 1000)
    load_pretrained(net, w)
    net.eval()
    files = sorted((fake_root / "ImageNet" / "val").glob("*/*.JPEG"))
    with torch.no_grad():
        p = torch.softmax(net(ImageFiles(files, 224, MEAN, STD, resize=256)[:]), -1)
    assert 0.0 <= idr["metrics"]["accuracy"] <= 1.0 and torch.isfinite(p).all()
    # the report has the mCE table (2 of 15 standard corruptions, not all severities: no mCE)
    code, text = _run(["report", "--results", str(out), "--out", str(tmp_path / "rep")], capsys)
    assert code == 0, text


def test_imagenetc_missing_data_is_exit_2_with_layout_and_nothing_written(tmp_path, capsys):
    w = _weights(tmp_path)
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(tmp_path / "none"),
                       "--out", str(out), "--methods", "deterministic", "--set", f"data.weights={w}"], capsys)
    assert code == 2
    assert "val/<wnid>/*.JPEG" in text and "ILSVRC2012_img_val.tar" in text and "image-net.org" in text
    assert not out.exists() or not any(out.rglob("*.json"))


def test_imagenetc_missing_corruption_cell_names_zenodo(fake_root, tmp_path, capsys):
    import shutil

    shutil.rmtree(fake_root / "ImageNet-C" / "contrast" / "3")
    w = _weights(tmp_path)
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(fake_root),
                       "--out", str(out), "--methods", "deterministic", "--set", f"data.weights={w}"], capsys)
    assert code == 2
    assert "ImageNet-C" in text and "zenodo.org/record/2235448" in text and "contrast/3" in text
    assert not any(out.rglob("*.json")) if out.exists() else True


def test_imagenetc_missing_weights_is_exit_2(fake_root, tmp_path, capsys):
    code, text = _run(["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(fake_root),
                       "--out", str(tmp_path / "r"), "--methods", "deterministic",
                       "--set", f"data.weights={tmp_path / 'absent.pt'}"], capsys)
    assert code == 2 and "absent.pt" in text
    code, text = _run(["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(fake_root),
                       "--out", str(tmp_path / "r"), "--methods", "mfvi,ssvi"], capsys)
    assert code == 2 and "trains from scratch" in text


def test_image_files_match_torchvision_resize_and_centre_crop(tmp_path):
    """ImageFiles(resize=256, size=224) = torchvision's Resize(256) + CenterCrop(224) + ToTensor +
    Normalize (the ImageNet-C recipe), on images wider, taller and greyscale."""
    import torchvision.transforms as T

    from datasets.imagenet import MEAN, STD
    from datasets.sources import ImageFiles

    rng = np.random.default_rng(1)
    paths = []
    for i, (h, w, mode) in enumerate([(300, 260, "RGB"), (260, 333, "RGB"), (257, 256, "L"), (224, 224, "RGB")]):
        arr = rng.integers(0, 255, (h, w, 3) if mode == "RGB" else (h, w)).astype(np.uint8)
        p = tmp_path / f"{i}.png"  # lossless: both paths decode the same pixels
        Image.fromarray(arr).save(p)
        paths.append(p)
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    ref = torch.stack([tf(Image.open(p).convert("RGB")) for p in paths])
    got = ImageFiles(paths, 224, MEAN, STD, resize=256)[:]
    assert got.shape == ref.shape == (4, 3, 224, 224)
    assert torch.allclose(got, ref, atol=1e-6)


def test_batches_with_workers_equal_batches_in_process(tmp_path):
    from bench.data import batches
    from datasets.imagenet import MEAN, STD
    from datasets.sources import ImageFiles

    rng = np.random.default_rng(2)
    paths = []
    for i in range(7):
        p = tmp_path / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (64, 64, 3)).astype(np.uint8)).save(p)
        paths.append(p)
    src = ImageFiles(paths, 64, MEAN, STD)
    state = torch.random.get_rng_state()
    a = torch.cat(list(batches(src, 3, "cpu", workers=0)))
    b = torch.cat(list(batches(src, 3, "cpu", workers=2)))
    assert torch.equal(a, b) and len(a) == 7
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is untouched (sampling methods)


def test_corruption_errors_by_hand():
    """Hendrycks & Dietterich's CE / relative CE on a hand-worked case."""
    from bench.mce import ALEXNET_CLEAN_ERR, ALEXNET_ERR, corruption_errors

    sev = (1.0, 2.0, 3.0, 4.0, 5.0)
    # a network with AlexNet's errors on every corruption and AlexNet's clean error: CE = rCE = 1
    cells = {c: {s: e for s in sev} for c, e in ALEXNET_ERR.items()}
    out = corruption_errors(ALEXNET_CLEAN_ERR, cells)
    assert out["n_corruptions"] == 15 and out["mce"] == pytest.approx(1.0) and out["relative_mce"] == pytest.approx(1.0)
    # hand-worked: gaussian noise errors 0.5..0.9 (mean 0.7), clean error 0.2
    g = {s: e for s, e in zip(sev, (0.5, 0.6, 0.7, 0.8, 0.9))}
    out = corruption_errors(0.2, {"gaussian_noise": g, "contrast": {1.0: 0.3}})  # contrast lacks severities
    assert out["ce.gaussian_noise"] == pytest.approx(3.5 / (5 * 0.886428))
    assert out["rce.gaussian_noise"] == pytest.approx((3.5 - 5 * 0.2) / (5 * (0.886428 - 0.4345)))
    assert out["n_corruptions"] == 1 and "ce.contrast" not in out
    # unnormalised (no reference network): the mean error and its increase over clean
    out = corruption_errors(0.2, {"gaussian_noise": g, "speckle_noise": g}, reference=None)
    assert out["mce"] == pytest.approx(0.7) and out["relative_mce"] == pytest.approx(0.5)


def make_fake_tiny_imagenet(root: Path, per_class: int = 8, seed: int = 0) -> list[str]:
    """tiny-imagenet-200 in its published layout: wnids.txt, val/images/val_<i>.JPEG (64 x 64, one
    greyscale), val/val_annotations.txt (file, wnid, box)."""
    rng = np.random.default_rng(seed)
    d = root / "tiny-imagenet-200"
    (d / "val" / "images").mkdir(parents=True)
    (d / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    lines, k = [], 0
    for ci, wnid in enumerate(WNIDS):
        for j in range(per_class):
            img = rng.integers(0, 60, (64, 64, 3)).astype(np.uint8)
            img[:, :, ci] += 150
            name = f"val_{k}.JPEG"
            Image.fromarray(img[:, :, 0] if k == 0 else img).save(d / "val" / "images" / name, quality=90)
            lines.append(f"{name}\t{wnid}\t0\t0\t63\t63")
            k += 1
    (d / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return WNIDS


def test_tinyimagenetc_smoke_generates_tiny_imagenet_c_once_in_the_published_layout(tmp_path, capsys):
    root = tmp_path / "data"
    make_fake_tiny_imagenet(root)
    out = tmp_path / "results"
    args = ["run", "--suite", "tinyimagenetc", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
            "--methods", "deterministic,mc_dropout", "--quiet", "--loader-workers", "0"]
    code, text = _run(args, capsys)
    assert code == 0, text
    c = root / "Tiny-ImageNet-C"
    manifest = json.loads((c / "GENERATED.json").read_text())
    assert manifest  # the regenerated copy says so
    cells = sorted(p.relative_to(c) for p in c.glob("*/*/*/*.JPEG"))
    # smoke: 2 corruptions x severities 1, 3, 5 x the test part (2 of 8 images per class x 3 classes)
    assert len(cells) == 2 * 3 * 6 and {p.parts[0] for p in cells} == {"gaussian_noise", "contrast"}
    assert {p.parts[2] for p in cells} <= set(WNIDS)
    recs = [json.loads(p.read_text()) for p in out.glob("tinyimagenetc/records/**/*.json")]
    assert recs and all(r["status"] == "ok" for r in recs)
    shift = [r for r in recs if r["kind"] == "shift"]
    assert len(shift) == 2 * 6 and all(r["n"] == 6 for r in shift)  # 2 methods x 6 cells
    assert all("regenerated" in r["eval_note"] for r in shift)
    # the cells are the test part's files: the same names as the clean images of that part
    from datasets.splits import split_per_class
    from datasets.tiny_imagenet import load_tiny_imagenet_val

    imgs, labels, wnids, names = load_tiny_imagenet_val(root)
    _, _, test = split_per_class(labels, (4, 1, 2), seed=0)
    assert {p.name for p in cells} == {names[i] for i in test}
    # a second run generates nothing and redoes nothing
    stamp = {p: p.stat().st_mtime_ns for p in c.rglob("*.JPEG")}
    code, text = _run(args, capsys)
    assert code == 0 and {p: p.stat().st_mtime_ns for p in c.rglob("*.JPEG")} == stamp


@pytest.mark.real_data
def test_tinyimagenetc_smoke_on_the_real_tiny_imagenet(tmp_path, capsys):
    """The smoke profile on the real Tiny-ImageNet validation set; its Tiny-ImageNet-C cells are
    generated in a temporary data root (the real one is only read)."""
    from tests.conftest import real_data_root

    real = real_data_root()
    if real is None or not (real / "tiny-imagenet-200" / "val" / "val_annotations.txt").exists():
        pytest.skip("real Tiny-ImageNet not unpacked (run ../shared/data/unpack.sh data)")
    root = tmp_path / "data"
    root.mkdir()
    (root / "tiny-imagenet-200").symlink_to(real / "tiny-imagenet-200")
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "tinyimagenetc", "--profile", "smoke", "--data-root", str(root), "--out",
                       str(out), "--methods", "deterministic", "--quiet"], capsys)
    assert code == 0, text
    recs = {(r["kind"], r["shift"], r["severity"]): r for r in
            (json.loads(p.read_text()) for p in out.glob("tinyimagenetc/records/**/*.json"))}
    clean = recs[("id", "clean", 0.0)]
    assert clean["n"] == 400 and clean["metrics"]["accuracy"] >= 0.0  # 2 test images x 200 classes
    assert "top5_accuracy" in clean["metrics"]
    assert len([k for k in recs if k[0] == "shift"]) == 6
    assert len(list((root / "Tiny-ImageNet-C").glob("*/*/*/*.JPEG"))) == 6 * 400
