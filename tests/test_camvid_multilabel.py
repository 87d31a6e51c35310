"""The ``camvid_multilabel`` suite (issue 39, part 2): presence targets against a hand-worked 4 x 4
label map (the void label neither a class nor in the share's denominator, the threshold inclusive),
the suite on a tiny CamVid tree written here (targets, prevalence, the CamVid-C cells reused from the
camvid suite's directory), a smoke run through the CLI, and on the real data the training prevalences
that docs/medical.md and the suite's docstring state."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.cli import main
from datasets.presence import class_presence, pixel_shares
from datasets.segmentation import CAMVID_CLASSES, LabelFiles, camvid_labels

REAL = Path(__file__).resolve().parents[1] / "data"
ROOT = Path(__file__).resolve().parents[1]

#: CamVid values as stored (11 = void): 16 pixels, 5 of them void, 11 labelled;
#: class 0 has 6 pixels (6/11 = 0.545), class 1 has 2 (2/11 = 0.182; 2/16 = 0.125 of all pixels),
#: class 3 has 3 (3/11 = 0.273); no other class has a pixel
RAW = np.array([[0, 0, 0, 0],
                [0, 0, 1, 1],
                [3, 3, 3, 11],
                [11, 11, 11, 11]], dtype=np.uint8)


def _hand(present: set[int]) -> list[float]:
    return [1.0 if k in present else 0.0 for k in range(len(CAMVID_CLASSES))]


def _label_png(tmp_path: Path, raw: np.ndarray = RAW) -> Path:
    path = tmp_path / "map.png"
    Image.fromarray(raw).save(path)
    return path


def test_shares_leave_void_out(tmp_path):
    y = LabelFiles([_label_png(tmp_path)], camvid_labels)[:]  # read as the suite reads it: 11 -> 255
    shares = pixel_shares(y, 11, 255)[0]
    np.testing.assert_allclose(shares[[0, 1, 3]], [6 / 11, 2 / 11, 3 / 11])
    assert shares.sum() == pytest.approx(1.0) and (shares[[2, 4, 5, 6, 7, 8, 9, 10]] == 0).all()


@pytest.mark.parametrize("threshold, present", [
    (0.15, {0, 1, 3}),       # class 1: 2/11 = 0.18 passes (2/16 = 0.125 of all pixels would not)
    (0.2, {0, 3}),           # class 1 fails
    (3 / 11, {0, 3}),        # class 3 exactly at the threshold counts as present (>=)
    (0.3, {0}),
    (0.6, set()),
    (1e-9, {0, 1, 3}),       # a class without pixels is never present
])
def test_presence_against_the_hand_worked_map(tmp_path, threshold, present):
    y = LabelFiles([_label_png(tmp_path)], camvid_labels)[:]
    got = class_presence(y, 11, threshold, 255)
    assert got.dtype == torch.float32 and got.shape == (1, 11)
    assert got[0].tolist() == _hand(present)


def test_the_void_label_is_not_a_class():
    """An image that is all void has no class present, whatever the threshold; void never lands in a column."""
    y = torch.full((1, 4, 4), 255)
    assert class_presence(y, 11, 1e-9, 255).sum() == 0
    with pytest.raises(ValueError, match="outside 0..10"):
        class_presence(torch.full((1, 2, 2), 11), 11, 0.5, 255)  # an unmapped 11 is an error, not a 12th class


# ------------------------------------------------------------------- the suite on a tiny tree


def make_camvid(root: Path, n=(6, 2, 4), seed: int = 0) -> Path:
    """``root/CamVid/{train,val,test}{,annot}/*.png``: 48 x 64 RGB images, label maps of stripes whose
    widths vary per image (so presence varies), a void band at the bottom."""
    rng = np.random.default_rng(seed)
    for split, count in zip(("train", "val", "test"), n):
        (root / "CamVid" / split).mkdir(parents=True, exist_ok=True)
        (root / "CamVid" / f"{split}annot").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            lab = np.full((48, 64), 3, np.uint8)  # road everywhere
            lab[:12] = 0  # sky: 12 rows
            lab[12:12 + int(rng.integers(0, 8)), :] = 1  # building: 0-7 rows
            lab[:, : int(rng.integers(0, 3))] = 9  # pedestrian: 0-2 columns
            lab[44:] = 11  # void
            img = (rng.integers(0, 255, (48, 64, 3))).astype(np.uint8)
            Image.fromarray(img).save(root / "CamVid" / split / f"f{i:03d}.png")
            Image.fromarray(lab).save(root / "CamVid" / f"{split}annot" / f"f{i:03d}.png")
    return root


def test_suite_targets_and_cells_on_a_tiny_tree(tmp_path):
    from bench.suites import SUITES

    root = make_camvid(tmp_path / "root")
    suite = SUITES.get("camvid_multilabel")()
    cfg = {"size": [48, 64], "corruptions": ["gaussian_noise"], "severities": [2], "presence_threshold": 0.02}
    d = suite.load(root, cfg, download=False)
    assert suite.task.kind == "multilabel" and suite.task.num_outputs == 11
    # by hand from the label maps: share over the non-void pixels, present at >= 0.02
    hand = []
    for p in sorted((root / "CamVid" / "trainannot").glob("*.png")):
        raw = np.asarray(Image.open(p)).astype(int)
        lab = raw[raw != 11]
        hand.append([float((lab == k).sum() / lab.size >= 0.02) for k in range(11)])
    assert d.train_y.tolist() == hand
    assert d.extras["label_prevalence"] == pytest.approx(np.mean(hand, 0).tolist())
    assert json.loads(d.extras["artifacts"]["data.json"])["presence_threshold"] == 0.02
    assert [(e.kind, e.shift, e.severity, e.n) for e in d.eval_sets] == [("id", "clean", 0.0, 4),
                                                                         ("shift", "gaussian_noise", 2.0, 4)]
    shift = d.eval_sets[1]
    assert torch.equal(shift.y, d.eval_sets[0].y)  # the corrupted copies keep their image's targets
    # the cells are the camvid suite's directory at this size (one generated copy for both suites)
    assert Path(shift.x.paths[0]).parts[-5:-3] == ("CamVid-C-48x64", "gaussian_noise")
    assert SUITES.get("camvid")().c_dir(SUITES.get("camvid")().data_cfg({"size": [48, 64]})) == "CamVid-C-48x64"


def test_augmentation_is_off_by_default_and_shifts_and_flips_when_on(tmp_path):
    """data.augment: training batches shifted by up to AUGMENT_PAD pixels (a padded crop) and
    flipped left-right; off by default, so the kept records' data is unchanged."""
    from bench.suites import SUITES

    root = make_camvid(tmp_path / "root")
    suite = SUITES.get("camvid_multilabel")()
    cfg = {"size": [48, 64], "corruptions": ["gaussian_noise"], "severities": [2]}
    assert suite.load(root, cfg, download=False).augment is None
    d = suite.load(root, {**cfg, "augment": True}, download=False)
    x = d.train_x[:4]
    seen_flip = False
    for seed in range(20):
        out = d.augment(x, torch.Generator().manual_seed(seed))
        assert out.shape == x.shape
        # every output image is its input, shifted by at most the pad, possibly mirrored
        for i in range(len(x)):
            inner = out[i, :, suite.AUGMENT_PAD:-suite.AUGMENT_PAD, suite.AUGMENT_PAD:-suite.AUGMENT_PAD]
            found = False
            for src, flipped in ((x[i], False), (x[i].flip(-1), True)):
                for dy in range(-suite.AUGMENT_PAD, suite.AUGMENT_PAD + 1):
                    for dx in range(-suite.AUGMENT_PAD, suite.AUGMENT_PAD + 1):
                        r0, c0 = suite.AUGMENT_PAD + dy, suite.AUGMENT_PAD + dx
                        cand = src[:, r0:r0 + inner.shape[1], c0:c0 + inner.shape[2]]
                        if torch.equal(cand, inner):
                            found, seen_flip = True, seen_flip or flipped
            assert found
    assert seen_flip


def test_missing_camvid_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", "--suite", "camvid_multilabel", "--profile", "smoke", "--data-root", str(tmp_path / "none"),
                 "--out", str(out), "--methods", "deterministic", "--quiet"])
    text = capsys.readouterr()
    assert code == 2 and "CamVid" in text.out + text.err
    assert not out.exists() or not any(out.rglob("*"))
    assert not (tmp_path / "none").exists()


def test_smoke_run_through_the_cli(tmp_path, capsys):
    from methods import METHODS

    if "multilabel" not in METHODS.get("deterministic").tasks:
        pytest.skip("the methods do not accept multilabel tasks yet")
    root, out = make_camvid(tmp_path / "root", n=(8, 2, 4)), tmp_path / "out"
    code = main(["run", "--suite", "camvid_multilabel", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                 "--methods", "deterministic", "--quiet"])
    text = capsys.readouterr()
    assert code == 0, text.out + text.err
    recs = [json.loads(p.read_text()) for p in out.glob("camvid_multilabel/records/**/*.json")]
    evals = sorted((r["kind"], r["shift"], r["severity"]) for r in recs if r.get("kind") in ("id", "shift"))
    assert evals == sorted([("id", "clean", 0.0)] + [("shift", c, float(s)) for c in ("gaussian_noise", "contrast")
                                                     for s in (1, 3)])
    assert all(r["task"] == "multilabel" and r["num_labels"] == 11 for r in recs if r.get("kind") == "id")


# ------------------------------------------------------------ unet_presence: a pretrained backbone


def test_the_quick_profiles_subnet_laplace_fits_its_memory_guard_on_the_presence_unet():
    """The quick profile's subnet Laplace options, on the profile's network at its image size, pass the
    method's memory guard at 5 GB (a quarter of the free memory of the 2-core machine it runs on): at
    the method's default batches the estimate was ~136 GB and the fit was refused (seed 0, 2026-11-29)."""
    from bench.config import resolve_plan
    from bench.laplace.memory import MemoryGuardError, check_memory
    from bench.models import MODELS
    from bench.suites import SUITES
    from methods import METHODS
    from methods.subnet_laplace import memory_terms

    suite = SUITES.get("camvid_multilabel")()
    (c,) = resolve_plan(suite, "quick", ["subnet_laplace"], {}, method_registry=METHODS).methods["subnet_laplace"]
    (model_name,) = suite.profiles["quick"]["models"]
    net = MODELS.get(model_name)(suite.in_shape, len(CAMVID_CLASSES))
    x1 = torch.zeros(2, *suite.in_shape)
    s = c["n_subnet"] or METHODS.get("subnet_laplace").DEFAULT_SUBNET
    limit = 5 * 2**30
    check_memory(limit=limit, what="quick", backend="subnet", s=s, **memory_terms(c, net, x1))
    defaults = METHODS.get("subnet_laplace").defaults
    own_batches = {**c, "batch_size": defaults["batch_size"], "predict_batch_size": defaults["predict_batch_size"]}
    with pytest.raises(MemoryGuardError):  # the method's own batches do not fit (the guard can fail here)
        check_memory(limit=limit, what="defaults", backend="subnet", s=s, **memory_terms(own_batches, net, x1))


def test_presence_unet_starts_as_the_segmentation_tasks_presence_rule():
    """At initialisation a class predicted on a share s of the pixels gets probability
    s / (s + t): sigmoid(log s - log t), t the threshold (hand-worked on a network whose every pixel
    has the same softmax)."""
    from bench.models import PresenceUNet

    t = 0.02
    net = PresenceUNet((3, 16, 24), 4, threshold=t)
    head = net.seg[2]
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([0.0, 1.0, -2.0, 3.0]))
    share = torch.softmax(head.bias.detach(), 0)
    probs = torch.sigmoid(net(torch.randn(2, 3, 16, 24))).detach()
    assert torch.allclose(probs, (share / (share + t)).expand(2, 4), atol=1e-6)


def test_the_backbone_is_loaded_named_in_the_identity_and_checked_when_planned(tmp_path, capsys):
    from bench.errors import BenchError
    from bench.models import unet_small
    from bench.suites import SUITES

    suite = SUITES.get("camvid_multilabel")()
    torch.manual_seed(0)
    seg = unet_small((3, 48, 64), 11)
    f = tmp_path / "camvid_map.pt"
    torch.save({"model": seg.state_dict(), "seed": 0}, f)  # the layout of a camvid MAP checkpoint
    cfg = {"size": [48, 64], "backbone": str(f)}
    for dropout in (0.0, 0.2):  # MC dropout's network loads the same weights
        net = suite.build_model("unet_presence", cfg, dropout=dropout)
        assert all(torch.equal(a, b) for a, b in zip(net.seg.state_dict().values(), seg.state_dict().values()))
    fresh = suite.build_model("unet_presence", {"size": [48, 64]})
    assert not torch.equal(fresh.seg[2].weight, seg[2].weight)
    ident = suite.model_identity("unet_presence", cfg)
    torch.manual_seed(1)
    torch.save({"model": unet_small((3, 48, 64), 11).state_dict()}, f)  # same path, other weights
    assert suite.model_identity("unet_presence", cfg) != ident
    with pytest.raises(BenchError, match="unet_presence"):
        suite.build_model("resnet_small", cfg)
    with pytest.raises(BenchError, match="does not exist"):
        suite.build_model("unet_presence", {**cfg, "backbone": str(tmp_path / "none.pt")})
    torch.save({"model": unet_small((3, 48, 64), 2).state_dict()}, f)  # camvid_binary's: 2 outputs
    with pytest.raises(BenchError, match="do not fit"):
        suite.build_model("unet_presence", cfg)
    # through the CLI: exit 2 when the run is planned, nothing written
    root, out = make_camvid(tmp_path / "root", n=(8, 2, 4)), tmp_path / "out"
    code = main(["run", "--suite", "camvid_multilabel", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                 "--methods", "deterministic", "--set", "models=unet_presence", "--set", f"data.backbone={f}", "--quiet"])
    assert code == 2 and "do not fit" in capsys.readouterr().err
    assert not (out / "camvid_multilabel" / "records").exists()


def test_the_camvid_backbone_is_made_first_in_the_same_results_and_named_in_the_records(tmp_path, capsys):
    """data.backbone=camvid:<profile>: bench run trains the camvid suite's MAP UNet (seed 0) in the same
    --out first, starts unet_presence from it (its weights' hash in the records), and a second run
    reuses it; a camvid profile that does not exist is exit 2 before anything is written."""
    from bench.errors import BenchError
    from bench.models import weights_provenance
    from bench.store import load_records
    from bench.suites import SUITES

    root, out = make_camvid(tmp_path / "root", n=(8, 2, 4)), tmp_path / "out"
    args = ["run", "--suite", "camvid_multilabel", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
            "--methods", "deterministic", "--set", "models=unet_presence", "--set", "data.size=[48,64]",
            "--no-report", "--quiet"]
    assert main([*args, "--set", "data.backbone=camvid:nope"]) == 2
    assert "no profile 'nope'" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--set", "data.backbone=camvid:smoke"]) == 0
    made = sorted((out / "camvid" / "checkpoints" / "map" / "unet_small").glob("*/seed0.pt"))
    assert len(made) == 1  # the camvid MAP network of seed 0, trained by this run
    camvid = load_records(out, "camvid")
    assert set(camvid["method"]) == {"deterministic"} and set(camvid["seed"]) == {0}
    suite = SUITES.get("camvid_multilabel")()
    suite.results_dir = out
    assert suite.camvid_backbone_path({"backbone": "camvid:smoke", "size": [48, 64]}) == made[0]
    recs = load_records(out, "camvid_multilabel")
    sha = weights_provenance(made[0])["sha256_16"]
    assert set(recs["model_identity.backbone_sha256_16"]) == {sha}
    assert set(recs["data_config"].map(lambda d: d["backbone"])) == {"camvid:smoke"}  # portable: no path
    # every unet_presence network of the run starts from exactly those weights
    seg = torch.load(made[0], weights_only=False)["model"]
    net = suite.build_model("unet_presence", {"size": [48, 64], "backbone": "camvid:smoke"})
    assert all(torch.equal(net.seg.state_dict()[k], v) for k, v in seg.items())
    stamp = made[0].stat().st_mtime_ns
    assert main([*args, "--set", "data.backbone=camvid:smoke", "--force"]) == 0  # refits the cell, not the backbone
    assert made[0].stat().st_mtime_ns == stamp
    # outside a run (no results folder) the keyword cannot be resolved: an error naming why
    with pytest.raises(BenchError, match="results folder"):
        SUITES.get("camvid_multilabel")().build_model("unet_presence", {"size": [48, 64], "backbone": "camvid"})


# ------------------------------------------------------------------------------ the real data


@pytest.mark.real_data
def test_real_training_prevalence_at_the_default_threshold():
    """The prevalences docs/medical.md and the suite's docstring state (120 x 160, threshold 0.01)."""
    if not (REAL / "CamVid" / "trainannot").is_dir():
        pytest.skip("CamVid not unpacked (../shared/data/unpack.sh data CamVid-240x180)")
    from bench.suites.camvid_multilabel import PRESENCE_THRESHOLD
    from datasets.segmentation import camvid_split

    pairs = camvid_split(REAL, "train")
    y = LabelFiles([lab for _, lab in pairs], camvid_labels, (120, 160))[:]
    prev = class_presence(y, 11, PRESENCE_THRESHOLD, 255).double().mean(0).numpy()
    stated = [0.99, 0.96, 0.40, 1.00, 0.83, 0.84, 0.40, 0.28, 0.79, 0.22, 0.09]
    np.testing.assert_allclose(prev, stated, atol=0.005 + 1e-9)
    assert len(y) == 367


def test_the_kept_backbone_is_where_bench_run_looks_for_it():
    """The camvid MAP UNet kept in git (docs/medical.md: `keep_records.py restore camvid` puts it back)
    lies under the key the quick profile's data.backbone=camvid resolves to now: a change to the camvid
    quick profile or its key would leave it unused (and every later run on a new backbone), so it fails
    here; its digest is the one docs/medical.md names."""
    from bench.models import weights_provenance
    from bench.suites import SUITES

    suite = SUITES.get("camvid_multilabel")()
    suite.results_dir = ROOT / "docs" / "records"
    cfg = suite.data_cfg(suite.profiles["quick"].get("data", {}))
    path = suite.camvid_backbone_path(cfg)
    assert path.is_file(), path
    digest = weights_provenance(path)["sha256_16"]
    assert digest in (ROOT / "docs" / "medical.md").read_text()
    assert suite.model_identity("unet_presence", suite.profiles["quick"].get("data", {})) == \
        {"backbone_sha256_16": digest}
