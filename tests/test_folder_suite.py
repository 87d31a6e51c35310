"""The ``folder`` suite (issue 37, item 2) on an ImageFolder tree of small PNGs written here: a smoke
run through the CLI (a record per clean / corruption / severity / OOD set, the report's banner), the
corrupted cells against an independent computation of Gaussian noise and against the clean images,
deterministic regeneration, class order, the validation split, the normalisation, and exit code 2
with nothing written for a missing or malformed tree."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.cli import main

CLASSES = ("ant", "bee", "cow")
N_TRAIN, N_TEST, SIDE = 30, 10, 16


def pattern(k: int, rng: np.random.Generator, side: int = SIDE) -> np.ndarray:
    """A learnable image of class ``k``: texture in 20..80, channel ``k`` raised by 120."""
    img = rng.integers(20, 80, (side, side, 3)).astype(np.uint8)
    img[:, :, k] += 120
    return img


def make_tree(root: Path, classes=CLASSES, n_train: int = N_TRAIN, n_test: int = N_TEST, n_val: int = 0,
              seed: int = 0) -> Path:
    """``root/{train,[val],test}/<class>/<k>.png``: 16 x 16 RGB PNGs of :func:`pattern`."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        for k, c in enumerate(classes):
            if n == 0:
                continue
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(pattern(k % 3, rng)).save(d / f"{i:03d}.png")
    return root


def decode32(path: Path) -> np.ndarray:
    """A 16 x 16 test image as the suite should see it: RGB, bilinear resize to 32 x 32."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB").resize((32, 32), Image.BILINEAR), dtype=np.uint8)


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One smoke run (MAP network only) on a 3-class tree with an OOD folder, two corruptions x
    severities 1 / 3 / 5 given in the issue's comma syntax."""
    base = tmp_path_factory.mktemp("folder")
    tree = make_tree(base / "tree")
    ood = base / "ood"
    ood.mkdir()
    rng = np.random.default_rng(9)
    for i in range(12):  # flat folder of other-looking images
        Image.fromarray(rng.integers(0, 255, (20, 24, 3)).astype(np.uint8)).save(ood / f"o{i}.jpg")
    root, out = base / "root", base / "results"
    code = main(["run", "--suite", "folder", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                 "--methods", "deterministic", "--quiet", "--set", f"data.path={tree}",
                 "--set", "data.corruptions=gaussian_noise,defocus_blur", "--set", "data.severities=1,3,5",
                 "--set", f"data.ood={ood}"])
    assert code == 0
    recs = [json.loads(p.read_text()) for p in out.glob("folder/records/**/*.json")]
    cache = next((root / "ImageFolder-C").iterdir())
    return {"tree": tree, "root": root, "out": out, "recs": recs, "cache": cache, "ood": ood}


def test_smoke_run_writes_a_record_per_clean_corrupted_and_ood_set(smoke):
    recs = smoke["recs"]
    assert recs and all(r["status"] == "ok" for r in recs)
    cells = sorted((r["kind"], r["shift"], r["severity"]) for r in recs if r["kind"] != "val")
    assert cells == sorted([("id", "clean", 0.0), ("ood", "ood", None)]
                           + [("shift", c, float(s)) for c in ("gaussian_noise", "defocus_blur") for s in (1, 3, 5)])
    clean = next(r for r in recs if r["kind"] == "id")
    assert clean["num_classes"] == 3 and clean["n"] == 3 * N_TEST
    assert clean["data_config"]["severities"] == [1, 3, 5]
    assert f"your ImageFolder tree at {smoke['tree']}" in clean["eval_note"]
    shift = [r for r in recs if r["kind"] == "shift"]
    assert {r["data_fingerprint"] for r in shift} == {shift[0]["data_fingerprint"]}
    assert shift[0]["data_fingerprint"].startswith("regenerated bench-corruptions-2.0 cifar10c seed 0 test ")
    assert next(r for r in recs if r["kind"] == "ood")["n"] == 12
    # the report says whose data this is, and the data section has the gallery
    html = (smoke["out"].parent / "reports" / "folder" / "index.html").read_text()
    assert "YOUR DATA: your ImageFolder tree at " + str(smoke["tree"]) in html
    info = json.loads((smoke["out"] / "folder" / "artifacts" / "smoke" / "data.json").read_text())
    assert info["classes"] == list(CLASSES) and info["release"] == "cifar10c"
    assert any("no val/ directory" in line for line in info["lines"])
    assert (smoke["out"] / "folder" / "artifacts" / "smoke" / "gallery.png").stat().st_size > 1000


def test_corrupted_cells_are_the_clean_test_images_under_the_corruption(smoke):
    """Gaussian noise recomputed from its definition (CIFAR-10-C's std per severity, the cell's
    seeded stream, truncation to uint8) equals the cached cell exactly; the noise raises the
    pixel variance with the severity and defocus blur lowers the neighbour differences."""
    cache = smoke["cache"]
    files = [p for c in CLASSES for p in sorted((smoke["tree"] / "test" / c).glob("*.png"))]
    clean = np.stack([decode32(p) for p in files])
    cls = [c for c in CLASSES for _ in range(N_TEST)]
    names = [f"{i:06d}.png" for i in range(len(files))]

    def cell(name, sev):
        return np.stack([np.asarray(Image.open(cache / name / str(sev) / c / f)) for c, f in zip(cls, names)])

    manifest = json.loads((cache / "GENERATED.json").read_text())
    assert manifest["format"] == "PNG" and manifest["release"] == "cifar10c"
    resid_var = []
    for sev, std in ((1, 0.04), (3, 0.08), (5, 0.10)):
        rng = np.random.default_rng(np.random.SeedSequence([0, zlib.crc32(b"gaussian_noise"), sev]))
        expected = np.floor(np.clip(clean / 255.0 + rng.normal(scale=std, size=clean.shape), 0, 1) * 255)
        noisy = cell("gaussian_noise", sev)
        np.testing.assert_array_equal(noisy, expected.astype(np.uint8))
        resid_var.append(float((noisy.astype(float) - clean).var()))
    assert resid_var[0] < resid_var[1] < resid_var[2] and resid_var[0] > 5
    assert cell("gaussian_noise", 5).astype(float).var() > clean.astype(float).var()

    def roughness(x):
        return float(np.abs(np.diff(x.astype(float), axis=2)).mean())

    blurred = [roughness(cell("defocus_blur", s)) for s in (1, 3, 5)]
    assert blurred[0] < roughness(clean) and blurred[2] < blurred[0]


def test_regeneration_is_deterministic_and_cached(smoke, tmp_path):
    """The same tree generates the same bytes into a fresh cache; a second load writes nothing."""
    from bench.suites.folder import FolderSuite

    cfg = {"path": str(smoke["tree"]), "corruptions": ["gaussian_noise", "defocus_blur"], "severities": [1, 3, 5],
           "cache": str(tmp_path / "again")}
    FolderSuite().load(tmp_path, cfg)
    first = {p.relative_to(smoke["cache"]): p.read_bytes() for p in smoke["cache"].rglob("*.png")}
    again = {p.relative_to(tmp_path / "again"): p.read_bytes() for p in (tmp_path / "again").rglob("*.png")}
    assert len(first) == 6 * 3 * N_TEST and first == again
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "again").rglob("*")}
    data = FolderSuite().load(tmp_path, cfg)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "again").rglob("*")} == stamps
    # the clean set is the test images resized to 32 x 32, normalised with the training images' statistics
    info = json.loads(data.extras["artifacts"]["data.json"])
    assert torch.allclose(data.train_x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(data.train_x.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-2)
    files = [p for c in CLASSES for p in sorted((smoke["tree"] / "test" / c).glob("*.png"))]
    clean = torch.from_numpy(np.stack([decode32(p) for p in files])).permute(0, 3, 1, 2).double() / 255
    mean, std = torch.tensor(info["mean"]).view(1, 3, 1, 1), torch.tensor(info["std"]).view(1, 3, 1, 1)
    torch.testing.assert_close(data.id_set().x[:].double(), (clean - mean) / std, atol=1e-5, rtol=0)
    assert data.id_set().y.tolist() == [k for k in range(3) for _ in range(N_TEST)]


def test_classes_splits_and_options(tmp_path):
    """Labels are positions in train/'s sorted class list in every split; val/ is used when present
    (else a seeded fraction per class); a class absent from test/ is named in the data lines;
    ImageNet normalisation and larger sizes pick their corruption release."""
    from bench.suites.folder import FolderSuite, default_release
    from datasets.imagenet import MEAN, STD

    tree = make_tree(tmp_path / "t", classes=("zebra", "ape", "mole"), n_train=4, n_test=2, n_val=2)
    for p in (tree / "test" / "mole").iterdir():
        p.unlink()
    (tree / "test" / "mole").rmdir()
    suite = FolderSuite()
    assert suite.task.kind == "classification" and suite.classes is None
    data = suite.load(tmp_path, {"path": "t", "corruptions": "contrast", "severities": 2, "normalize": "imagenet"})
    assert suite.classes == ["ape", "mole", "zebra"] and suite.task.num_outputs == 3
    assert data.train_y.tolist() == [0] * 4 + [1] * 4 + [2] * 4 and data.val_y.tolist() == [0] * 2 + [1] * 2 + [2] * 2
    assert data.id_set().y.tolist() == [0, 0, 2, 2]  # ape is 0 and zebra 2 in test/ too
    info = json.loads(data.extras["artifacts"]["data.json"])
    assert info["mean"] == list(MEAN) and info["std"] == list(STD)
    assert any("classes without test images: mole" in line for line in info["lines"])
    assert any(f"validation: {tree / 'val'}" in line for line in info["lines"])
    assert default_release(32) == "cifar10c" and default_release(64) == "tiny_imagenet_c"
    assert default_release(224) == "imagenet_c" and FolderSuite().input_shape({"size": 48}) == (3, 48, 48)
    # no val/: a seeded tenth of each class (at least one) is split off, the same every time
    from bench.suites.folder import split_fraction

    labels = np.repeat(np.arange(3), [30, 5, 1])
    fit, val = split_fraction(labels, 0.1, 0)
    assert np.bincount(labels[val], minlength=3).tolist() == [3, 1, 0]
    assert sorted(np.concatenate([fit, val]).tolist()) == list(range(36))
    assert np.array_equal(val, split_fraction(labels, 0.1, 0)[1])


def _bad_tree(case: str, tree: Path) -> str:
    """Break a fresh tree as ``case`` says; return a string the error must contain."""
    if case == "missing root":
        return str(tree)
    make_tree(tree, n_train=3, n_test=2)
    if case == "no test split":
        for p in sorted(tree.joinpath("test").rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        tree.joinpath("test").rmdir()
        return "no test/ directory"
    if case == "no classes":
        for c in CLASSES:
            for p in (tree / "train" / c).iterdir():
                p.rename(tree / "train" / f"{c}-{p.name}")
            (tree / "train" / c).rmdir()
        return "no classes"
    if case == "one class":
        for c in CLASSES[1:]:
            for p in (tree / "train" / c).iterdir():
                p.unlink()
            (tree / "train" / c).rmdir()
        return "one class"
    if case == "class not in train":
        (tree / "test" / "yak").mkdir()
        Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tree / "test" / "yak" / "0.png")
        return "'yak' of test/ not in train/"
    if case == "empty train class":
        for p in (tree / "train" / "bee").iterdir():
            p.unlink()
        return "'bee' of train/ hold no image"
    if case == "unreadable image":
        (tree / "test" / "cow" / "001.png").write_bytes(b"\x89PNG not really")
        return str(tree / "test" / "cow" / "001.png")
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing root", "no test split", "no classes", "one class", "class not in train",
                                  "empty train class", "unreadable image"])
def test_a_missing_or_malformed_tree_is_exit_2_naming_it_and_nothing_is_written(case, tmp_path, capsys):
    tree = tmp_path / "tree"
    needle = _bad_tree(case, tree)
    root, out = tmp_path / "root", tmp_path / "results"
    code, text = _run(["run", "--suite", "folder", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--methods", "deterministic", "--set", f"data.path={tree}"], capsys)
    assert code == 2, text
    assert needle in text and "Layout:" in text and "train/<class>/<image>" in text, text
    assert not out.exists() and not root.exists()


def test_an_unknown_corruption_or_severity_is_exit_2(tmp_path, capsys):
    tree = make_tree(tmp_path / "tree", n_train=2, n_test=1)
    for bad, needle in (("data.corruptions=gaussian_noise,rain", "unknown corruption"),
                        ("data.severities=0,3", "severities are integers 1..5"),
                        ("data.size=16", "size=16 must be an integer >= 32")):
        code, text = _run(["run", "--suite", "folder", "--profile", "smoke", "--data-root", str(tmp_path / "root"),
                           "--out", str(tmp_path / "out"), "--methods", "deterministic", "--set", f"data.path={tree}",
                           "--set", bad], capsys)
        assert code == 2 and needle in text, text
    assert not (tmp_path / "out").exists() and not (tmp_path / "root").exists()


def test_bench_list_shows_the_suite(capsys):
    code, text = _run(["list"], capsys)
    assert code == 0
    assert "  folder: your images: an ImageFolder tree" in text
    assert "generated from the test images by datasets.corruptions" in text
