"""The cifar10c suite: loaders (real layouts, generated fixtures), subsets, augmentation,
ResNets, entropy by correctness, and a smoke run end to end with the report."""
import io
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.errors import BenchError
from datasets.cifar10 import (MEAN, STD, NormalizedImages, load_cifar10, load_svhn_test, normalize,
                              write_cifar_batch)
from datasets.errors import DatasetNotFoundError
from synthetic import TouchOnUnpickle

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------- fixtures


def _images(rng, labels):
    """Learnable fake CIFAR images (N, 3, 32, 32): a bright horizontal bar whose row encodes the label."""
    x = rng.integers(0, 60, (len(labels), 3, 32, 32)).astype(np.uint8)
    for i, lab in enumerate(labels):
        x[i, int(lab) % 3, 2 + 3 * lab: 4 + 3 * lab, 4:28] = 240
    return x


def make_fake_cifar(root: Path, n_train: int = 1100, n_test: int = 200, seed: int = 0):
    """CIFAR-10 in the official pickle layout; returns (train_x, train_y, test_x, test_y) as written."""
    rng = np.random.default_rng(seed)
    tr_y = np.arange(n_train) % 10
    rng.shuffle(tr_y)
    te_y = np.arange(n_test) % 10
    rng.shuffle(te_y)
    tr_x, te_x = _images(rng, tr_y), _images(rng, te_y)
    d = root / "cifar-10-batches-py"
    for b, part in enumerate(np.array_split(np.arange(n_train), 5)):
        write_cifar_batch(d / f"data_batch_{b + 1}", tr_x[part], tr_y[part])
    write_cifar_batch(d / "test_batch", te_x, te_y)
    return tr_x, tr_y, te_x, te_y


def make_fake_cifar10c(root: Path, te_x_nchw, te_y, names=("gaussian_noise", "contrast"), manifest: dict | None = None):
    """CIFAR-10-C in the official layout: <name>.npy (5N, 32, 32, 3) uint8, severity s block =
    the test images with pixel value offset 10 * s (so a cell can be traced back), labels.npy."""
    d = root / "CIFAR-10-C"
    d.mkdir(parents=True, exist_ok=True)
    nhwc = te_x_nchw.transpose(0, 2, 3, 1).astype(np.int32)
    for k, name in enumerate(names):
        blocks = [np.clip(nhwc + 10 * s + k, 0, 255).astype(np.uint8) for s in range(1, 6)]
        np.save(d / f"{name}.npy", np.concatenate(blocks))
    np.save(d / "labels.npy", np.tile(np.asarray(te_y, dtype=np.uint8), 5))
    if manifest is not None:
        (d / "GENERATED.json").write_text(json.dumps(manifest))
    return d


def _stub_generator(monkeypatch, calls=None):
    """A stand-in for datasets.cifar10c.generate (written by another part of the project):
    ensure_cifar10c writes the official layout plus a manifest; gallery_png returns a PNG."""
    mod = types.ModuleType("datasets.cifar10c.generate")

    def ensure_cifar10c(root, test_images_uint8, test_labels, corruptions=None, seed=0, progress=False):
        d = Path(root) / "CIFAR-10-C"
        todo = [n for n in corruptions if not (d / f"{n}.npy").exists()]
        if todo:  # like the real one: only what is missing (or stale) is generated
            if calls is not None:
                calls.append((todo, seed, test_images_uint8.shape))
            done = sorted(set(todo) | {p.stem for p in d.glob("*.npy")} - {"labels"})
            make_fake_cifar10c(Path(root), test_images_uint8.transpose(0, 3, 1, 2), test_labels, names=todo,
                               manifest={"generator_version": "stub-1", "seed": seed,
                                         "corruptions": {n: {"generator_version": "stub-1"} for n in done}})
        return d

    def gallery_png(image, seed=0):
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.tile(image, (2, 2, 1))).save(buf, format="PNG")
        return buf.getvalue()

    mod.ensure_cifar10c, mod.gallery_png = ensure_cifar10c, gallery_png
    pkg = types.ModuleType("datasets.cifar10c")
    pkg.__path__ = []
    pkg.generate = mod
    monkeypatch.setitem(sys.modules, "datasets.cifar10c", pkg)
    monkeypatch.setitem(sys.modules, "datasets.cifar10c.generate", mod)
    return mod


# ------------------------------------------------------------------------------------ loaders


def test_cifar10_loader_reads_the_pickle_layout(tmp_path):
    tr_x, tr_y, te_x, te_y = make_fake_cifar(tmp_path, n_train=50, n_test=20)
    x, y = load_cifar10(tmp_path, "train")
    assert x.dtype == torch.uint8 and x.shape == (50, 3, 32, 32) and y.dtype == torch.int64
    assert np.array_equal(x.numpy(), tr_x) and np.array_equal(y.numpy(), tr_y)  # batch order kept
    xt, yt = load_cifar10(tmp_path, "test", layout="nhwc")
    assert xt.shape == (20, 32, 32, 3) and np.array_equal(xt.numpy(), te_x.transpose(0, 2, 3, 1))
    assert np.array_equal(yt.numpy(), te_y)


def test_cifar10_loader_errors_name_the_files(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load_cifar10(tmp_path, "train", download=False)
    msg = str(e.value)
    assert "data_batch_1" in msg and "cifar-10-batches-py" in msg and "unpack.sh" in msg
    make_fake_cifar(tmp_path, n_train=50, n_test=20)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(DatasetNotFoundError, match="malformed"):
        load_cifar10(tmp_path, "test")


@pytest.mark.parametrize("sub", ["SVHN", ""])
def test_svhn_loader_reads_the_mat_layout(tmp_path, sub):
    import scipy.io

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 32, 3, 7)).astype(np.uint8)
    y = np.array([[1], [2], [10], [5], [10], [9], [3]], dtype=np.uint8)
    path = tmp_path / sub / "test_32x32.mat"
    path.parent.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(str(path), {"X": x, "y": y})
    images, labels = load_svhn_test(tmp_path)
    assert images.shape == (7, 3, 32, 32) and images.dtype == torch.uint8
    assert np.array_equal(images[2].numpy(), x[:, :, :, 2].transpose(2, 0, 1))
    assert labels.tolist() == [1, 2, 0, 5, 0, 9, 3]  # label 10 is the digit 0
    assert load_svhn_test(tmp_path, layout="nhwc")[0].shape == (7, 32, 32, 3)


def test_svhn_missing_names_both_places(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load_svhn_test(tmp_path)
    assert str(tmp_path / "SVHN" / "test_32x32.mat") in str(e.value) and str(tmp_path / "test_32x32.mat") in str(e.value)


def test_normalized_images_match_normalize():
    raw = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    lazy = NormalizedImages(raw)
    assert len(lazy) == 6 and lazy.shape == raw.shape
    assert torch.equal(lazy[1:4], normalize(raw[1:4]))
    assert torch.equal(lazy[torch.tensor([5, 0])], normalize(raw[[5, 0]]))
    # black and white pixels land on the standardised ends
    assert torch.allclose(normalize(torch.zeros(1, 3, 1, 1, dtype=torch.uint8)).flatten(),
                          torch.tensor([-m / s for m, s in zip(MEAN, STD)]))


# ------------------------------------------------------------------------------------- suite


def _suite():
    from bench.suites import SUITES

    return SUITES.get("cifar10c")()


def test_balanced_subset_is_balanced_fixed_and_sorted():
    from bench.suites.cifar10c import balanced_subset

    y = torch.arange(1000) % 10
    a, b = balanced_subset(y, 105, seed=3), balanced_subset(y, 105, seed=3)
    assert torch.equal(a, b) and torch.equal(a, a.sort().values) and len(torch.unique(a)) == 105
    counts = torch.bincount(y[a], minlength=10)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 105
    assert not torch.equal(a, balanced_subset(y, 105, seed=4))
    assert torch.equal(balanced_subset(y, None, seed=0), torch.arange(1000))


def test_suite_load_on_fixture_root(tmp_path):
    _, tr_y, te_x, te_y = make_fake_cifar(tmp_path)
    make_fake_cifar10c(tmp_path, te_x, te_y)
    suite = _suite()
    cfg = {"n_val": 100, "n_test": None, "n_per_cell": 50, "corruptions": ["gaussian_noise", "contrast"],
           "severities": [1, 2, 3, 4, 5]}
    data = suite.load(tmp_path, cfg, download=False)
    assert data.train_x.shape == (1000, 3, 32, 32) and data.val_x.shape == (100, 3, 32, 32)
    assert torch.equal(data.val_y, torch.from_numpy(tr_y[-100:]))  # the last n_val training images
    ids = [e for e in data.eval_sets if e.kind == "id"]
    shifts = [e for e in data.eval_sets if e.kind == "shift"]
    assert len(ids) == 1 and ids[0].shift == "clean" and ids[0].severity == 0 and ids[0].n == 200
    assert [(e.shift, e.severity) for e in shifts] == [(n, float(s)) for n in ("gaussian_noise", "contrast") for s in range(1, 6)]
    assert not any(e.kind == "ood" for e in data.eval_sets)  # no SVHN in the fixture
    assert "no OOD set" in ids[0].note
    cell_labels = shifts[0].y
    assert all(e.n == 50 and torch.equal(e.y, cell_labels) for e in shifts)  # one subset for every cell
    assert torch.bincount(cell_labels, minlength=10).tolist() == [5] * 10  # class-balanced
    # a cell holds the fixture's images of that severity (offset 10 * severity + corruption index)
    e = next(e for e in shifts if e.shift == "contrast" and e.severity == 4.0)
    raw = e.x.uint8(slice(None)).numpy().astype(int)  # memory-mapped, read on demand
    from bench.suites.cifar10c import balanced_subset

    sel = balanced_subset(torch.from_numpy(te_y), 50, seed=3).numpy()
    assert np.array_equal(raw, np.clip(te_x[sel].astype(int) + 41, 0, 255))
    assert e.x[:3].dtype == torch.float32 and "official" in e.note
    prov = data.extras["cifar10c"]
    assert prov["source"] == "official"
    info = json.loads(data.extras["artifacts"]["data.json"])
    assert any("official" in line for line in info["lines"]) and any("no OOD set" in line for line in info["lines"])


def test_suite_generates_missing_cifar10c_once_and_records_it(tmp_path, monkeypatch):
    make_fake_cifar(tmp_path)
    calls = []
    _stub_generator(monkeypatch, calls)
    suite = _suite()
    cfg = {"n_val": 100, "n_per_cell": 20, "corruptions": ["gaussian_noise", "fog"], "severities": [2]}
    data = suite.load(tmp_path, cfg, download=False)
    assert calls == [(["gaussian_noise", "fog"], 0, (200, 32, 32, 3))]  # the full test set, NHWC
    assert (tmp_path / "CIFAR-10-C" / "fog.npy").exists()
    assert data.extras["cifar10c"]["source"] == "regenerated"
    assert data.extras["cifar10c"]["generator_version"] == "stub-1"
    shift = [e for e in data.eval_sets if e.kind == "shift"]
    assert len(shift) == 2 and all("generator version stub-1" in e.note for e in shift)
    assert data.extras["artifacts"]["gallery.png"].startswith(b"\x89PNG")
    suite.load(tmp_path, cfg, download=False)
    assert len(calls) == 1  # reused, not regenerated


def test_suite_rejects_unknown_corruption_and_option(tmp_path):
    suite = _suite()
    with pytest.raises(BenchError, match="unknown corruption"):
        suite.load(tmp_path, {"corruptions": ["rain"]}, download=False)
    with pytest.raises(BenchError, match="unknown data option"):
        suite.data_cfg({"n_per_cel": 3})


def test_ood_set_from_svhn_when_present(tmp_path):
    import scipy.io

    _, _, te_x, te_y = make_fake_cifar(tmp_path)
    make_fake_cifar10c(tmp_path, te_x, te_y, names=("contrast",))
    rng = np.random.default_rng(1)
    (tmp_path / "SVHN").mkdir()
    scipy.io.savemat(str(tmp_path / "SVHN" / "test_32x32.mat"),
                     {"X": rng.integers(0, 256, (32, 32, 3, 40)).astype(np.uint8), "y": np.ones((40, 1), np.uint8)})
    data = _suite().load(tmp_path, {"n_val": 100, "corruptions": ["contrast"], "n_ood": 30}, download=False)
    ood = [e for e in data.eval_sets if e.kind == "ood"]
    assert len(ood) == 1 and ood[0].shift == "svhn" and ood[0].n == 30 and ood[0].y is None


# ------------------------------------------------------------------------------ augmentation


def test_augment_is_seeded_and_shape_preserving():
    from bench.suites.cifar10c import make_augment

    aug = make_augment()
    x = torch.randn(16, 3, 32, 32)
    a = aug(x, torch.Generator().manual_seed(7))
    b = aug(x, torch.Generator().manual_seed(7))
    c = aug(x, torch.Generator().manual_seed(8))
    assert a.shape == x.shape and a.dtype == x.dtype and torch.equal(a, b) and not torch.equal(a, c)


def test_augment_is_a_crop_of_the_padded_image_or_its_mirror():
    from bench.suites.cifar10c import make_augment

    x = torch.randn(64, 3, 32, 32)
    out = make_augment(pad=4)(x, torch.Generator().manual_seed(0))
    black = torch.tensor([-m / s for m, s in zip(MEAN, STD)]).view(3, 1, 1)
    padded = black.expand(64, 3, 40, 40).clone()
    padded[:, :, 4:36, 4:36] = x
    flips = 0
    for i in range(64):
        hits = [(dy, dx, f) for dy in range(9) for dx in range(9) for f in (False, True)
                if torch.equal(out[i], (padded[i, :, dy:dy + 32, dx:dx + 32].flip(-1) if f else padded[i, :, dy:dy + 32, dx:dx + 32]))]
        assert hits, f"image {i} is not a crop"
        flips += hits[0][2]
    assert 10 < flips < 54  # about half are mirrored
    # no padding, no flip: the identity
    assert torch.equal(make_augment(pad=0, flip=False)(x, torch.Generator().manual_seed(0)), x)


def test_training_loader_with_augment_is_reproducible():
    from bench.data import TensorLoader
    from bench.suites.cifar10c import make_augment

    x, y = torch.randn(40, 3, 32, 32), torch.arange(40) % 10
    runs = [[xb for xb, _ in TensorLoader(x, y, 16, seed=3, augment=make_augment())] for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))


# ------------------------------------------------------------------------------------ models


def test_resnet_shapes_and_parameter_counts():
    from bench.models import build_model, count_params

    x = torch.randn(3, 3, 32, 32)
    small = build_model("resnet_small", (3, 32, 32), 10)
    assert small(x).shape == (3, 10)
    # stem 3*16*9 + BN 32; blocks (c_in, c_out): 3x3 convs, BN (2 c_out each), 1x1 projection + BN; fc
    block = lambda ci, co: ci * co * 9 + co * co * 9 + ci * co + 3 * 2 * co  # noqa: E731
    expected = 432 + 32 + block(16, 16) + block(16, 32) + block(32, 64) + block(64, 64) + 64 * 10 + 10
    assert count_params(small) == expected == 156_538
    wide = build_model("resnet_small_x2", (3, 32, 32), 10)
    assert wide(x).shape == (3, 10)
    expected_wide = 3 * 32 * 9 + 64 + block(32, 32) + block(32, 64) + block(64, 128) + block(128, 128) + 128 * 10 + 10
    assert count_params(wide) == expected_wide
    r18 = build_model("resnet18_cifar", (3, 32, 32), 10, dropout=0.2)
    assert count_params(r18) == 11_173_962  # the standard CIFAR ResNet-18 (He et al. 2016 widths)
    assert count_params(build_model("resnet18_pbn", (3, 32, 32), 10)) == 11_173_962 + 64 * 3 * (49 - 9)
    assert sum(isinstance(m, torch.nn.Dropout) for m in r18.modules()) == 9  # 8 blocks + before the fc
    assert not any(isinstance(m, torch.nn.Dropout) for m in small.modules())  # p = 0: none


def test_mc_dropout_samples_differ_on_a_resnet():
    from methods.mc_dropout import split_at_first, stochastic_forward

    torch.manual_seed(0)
    from bench.models import build_model

    net = build_model("resnet_small", (3, 32, 32), 10, dropout=0.3).eval()
    for m in net.modules():
        if isinstance(m, torch.nn.Dropout):
            m.train()
    prefix, rest = split_at_first(net, torch.nn.Dropout)
    assert len(prefix) == 4  # the stem; the first residual block holds a dropout
    out = stochastic_forward(prefix, rest, torch.randn(5, 3, 32, 32), samples=3)
    assert out.shape == (3, 5, 10) and not torch.allclose(out[0], out[1])


def test_partial_vi_samples_on_a_resnet_match_functional_calls():
    """PBN / mfvi on a residual network: each of the S batched posterior samples equals the
    plain network evaluated at that sample's weights (skip connections included)."""
    from torch.func import functional_call

    from bench.models import build_model
    from bench.subnet.partial_vi import PartialVI
    from bench.subnet.selection import candidate_indices

    torch.manual_seed(0)
    net = build_model("resnet_small", (3, 32, 32), 10).eval()
    cand = candidate_indices(net)
    idx = cand[torch.randperm(len(cand), generator=torch.Generator().manual_seed(1))[:5000]]
    vi = PartialVI(net, idx, rho_init_mean=-2.0).eval()
    x = torch.randn(4, 3, 32, 32)
    eps = vi.sample_eps(3, torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = vi(x, 3, eps=eps)
        params = vi.sample_params(3, eps=eps)
        buffers = dict(net.named_buffers())
        for s in range(3):
            ref = functional_call(net, ({k: v[s] for k, v in params.items()}, buffers), (x,))
            assert torch.allclose(out[s], ref, atol=1e-5)
        assert not torch.allclose(out[0], out[1])


def test_deep_ensemble_vectorised_matches_loop_on_a_resnet():
    from types import SimpleNamespace

    from bench.models import build_model
    from methods.deep_ensemble import DeepEnsemble

    torch.manual_seed(0)
    ens = DeepEnsemble.__new__(DeepEnsemble)
    ens.members = [build_model("resnet_small", (3, 32, 32), 10).eval() for _ in range(3)]
    for m in ens.members:  # non-trivial running statistics
        for b in m.modules():
            if isinstance(b, torch.nn.BatchNorm2d):
                b.running_mean.uniform_(-0.5, 0.5)
                b.running_var.uniform_(0.5, 2.0)
    ens._stacked, ens.ctx = None, SimpleNamespace()
    x = torch.randn(5, 3, 32, 32)
    assert torch.allclose(ens.member_outputs(x, vectorised=True), ens.member_outputs(x, vectorised=False), atol=1e-5)


# ----------------------------------------------------------------------------------- metrics


def test_entropy_by_correctness_against_hand_values():
    from bench.metrics import classification_metrics, entropy_by_correctness

    probs = torch.tensor([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.7, 0.3]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 0])  # argmax: 0, 1, 1, 0 -> correct, wrong, wrong, correct
    h = lambda p: -(p * math.log(p) + (1 - p) * math.log(1 - p))  # noqa: E731
    got = entropy_by_correctness(probs, y)
    assert got["entropy_correct"] == pytest.approx((h(0.9) + h(0.7)) / 2, abs=1e-12)
    assert got["entropy_incorrect"] == pytest.approx((h(0.6) + h(0.8)) / 2, abs=1e-12)
    assert entropy_by_correctness(probs[:1], y[:1])["entropy_incorrect"] is None
    metrics, curves = classification_metrics(probs, y)
    assert metrics["entropy_correct"] == pytest.approx(got["entropy_correct"])
    assert sum(curves["entropy_hist_correct"]["counts"]) == 2 and sum(curves["entropy_hist_incorrect"]["counts"]) == 2


# --------------------------------------------------------------------------------- end to end

#: the smoke profile's grid on fewer images (256 training, 120 validation, 50 clean test, 30 per
#: corrupted cell instead of 512 / 500 / 200 / 100): what the end-to-end runs check (every method
#: runs and is recorded per cell, the report's figures, stale records redone) does not depend on
#: how many images each set holds. Still more validation images than the Laplace methods' smoke
#: val_examples (100), so that their prior search takes its seeded subset as on the profile's 500.
FEWER_IMAGES = ["--set", "data.n_train=256", "--set", "data.n_val=120", "--set", "data.n_test=50",
                "--set", "data.n_per_cell=30"]


def test_smoke_run_end_to_end_with_report(tmp_path, monkeypatch):
    from bench.cli import main
    from bench.store import load_records

    data_root = tmp_path / "data"
    make_fake_cifar(data_root)
    _stub_generator(monkeypatch)  # CIFAR-10-C absent: generated by the (stub) generator
    out, rep = tmp_path / "results", tmp_path / "reports"
    args = ["run", "--suite", "cifar10c", "--profile", "smoke", "--quiet", "--data-root", str(data_root),
            "--out", str(out), "--report-dir", str(rep), *FEWER_IMAGES]
    assert main(args) == 0
    df = load_records(out)
    from bench.suites import SUITES

    methods = set(SUITES.get("cifar10c").default_methods)
    failed = df[df["status"] != "ok"]
    assert failed.empty, failed[["method", "error"]].to_string()
    assert set(df["method"]) == methods
    per_method = df.groupby("method").size()
    assert (per_method == 1 + 2 * 3 + 1).all()  # clean + 2 corruptions x 3 severities + validation, no OOD set
    shift = df[df["kind"] == "shift"]
    assert set(shift["shift"]) == {"gaussian_noise", "contrast"} and set(shift["severity"]) == {1.0, 3.0, 5.0}
    assert shift["metrics.entropy_correct"].notna().any() and "metrics.entropy_incorrect" in df.columns
    assert shift["eval_note"].str.contains("regenerated").all()
    assert (out / "cifar10c" / "artifacts" / "smoke" / "gallery.png").exists()
    figures = {p.name for p in (rep / "cifar10c" / "figures").glob("*.png")}
    for fig in ("resnet_small-shift-boxes.png", "resnet_small-shift-heatmap.png",
                "resnet_small-entropy-correctness.png", "data-smoke-gallery.png"):
        assert fig in figures, (fig, figures)
    html = (rep / "cifar10c" / "index.html").read_text()
    assert "generator version stub-1" in html and "no OOD set" in html
    # the report rebuilds from the results alone (data root gone)
    import shutil

    shutil.rmtree(data_root)
    assert main(["report", "--results", str(out), "--out", str(tmp_path / "rep2")]) == 0
    assert (tmp_path / "rep2" / "cifar10c" / "figures" / "data-smoke-gallery.png").exists()


# two training steps of 16 images: this CPU has no bfloat16 instructions, so each bfloat16 step of the
# ResNet-18 is slow (three steps of 64 took 3 minutes of the test suite)
FEW_BF16_STEPS = ["--set", "data.n_train=32", "--set", "train.batch_size=16"]


def test_the_gpu_profile_trains_in_bfloat16_channels_last_and_says_so_in_its_records(tmp_path, monkeypatch):
    """cifar10c's gpu profile (the fast GPU recipe) on the CPU at toy size, with its own ResNet-18: its
    training options reach the training (bfloat16 autocast, channels-last) and every record's training
    configuration; the profile's own values are the recipe's. resnet_small, whose last block runs a
    stride-2 convolution on a 1x1 map, is a failed cell that says why (oneDNN's bfloat16 weight
    gradient there is NaN at random on the CPU), not a divergence of the method."""
    from bench.cli import main
    from bench.store import load_records
    from bench.suites import SUITES

    gpu = SUITES.get("cifar10c").profiles["gpu"]
    assert gpu["train"]["precision"] == "bf16" and gpu["train"]["channels_last"] is True
    assert gpu["models"] == SUITES.get("cifar10c").profiles["paper"]["models"]  # the paper's network
    entered = []
    real = torch.autocast

    class Recording(real):
        def __enter__(self):
            entered.append(self.fast_dtype)
            return super().__enter__()

    monkeypatch.setattr(torch, "autocast", Recording)
    data_root = tmp_path / "data"
    make_fake_cifar(data_root, n_train=300)
    _stub_generator(monkeypatch)
    out = tmp_path / "results"
    assert main(["run", "--suite", "cifar10c", "--profile", "gpu", "--quiet", "--no-report", "--data-root",
                 str(data_root), "--out", str(out), "--methods", "deterministic", "--seeds", "0",
                 "--set", "train.epochs=1", "--set", "data.corruptions=gaussian_noise", "--set", "data.severities=[1]",
                 *FEWER_IMAGES, *FEW_BF16_STEPS]) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and len(df) > 0 and set(df["model"]) == {"resnet18_pbn"}
    assert all(tc["precision"] == "bf16" and tc["channels_last"] is True for tc in df["train_config"])
    assert entered and set(entered) == {torch.bfloat16}  # the training steps ran under autocast

    assert main(["run", "--suite", "cifar10c", "--profile", "gpu", "--quiet", "--no-report", "--data-root",
                 str(data_root), "--out", str(tmp_path / "small"), "--methods", "deterministic", "--seeds", "0",
                 "--set", "models=resnet_small", "--set", "train.epochs=1",
                 "--set", "data.corruptions=gaussian_noise", "--set", "data.severities=[1]",
                 *FEWER_IMAGES, *FEW_BF16_STEPS]) == 1
    failed = load_records(tmp_path / "small")
    assert (failed["status"] == "failed").all() and len(failed) > 0
    assert failed["error"].str.contains("layer 7.conv1 has a 1x1 input and stride 2x2").all()


# ---------------------------------------------------------------------------------- real data


def _real_cifar_root():
    import os

    root = Path(os.environ.get("BENCH_DATA_ROOT", ROOT / "data"))
    return root if (root / "cifar-10-batches-py" / "test_batch").exists() else None


@pytest.mark.real_data
def test_real_cifar10():
    root = _real_cifar_root()
    if root is None:
        pytest.skip("real CIFAR-10 not unpacked (run ../shared/data/unpack.sh data)")
    x, y = load_cifar10(root, "train")
    xt, yt = load_cifar10(root, "test")
    assert x.shape == (50000, 3, 32, 32) and xt.shape == (10000, 3, 32, 32)
    assert torch.bincount(y).tolist() == [5000] * 10 and torch.bincount(yt).tolist() == [1000] * 10
    # the training images' channel means are the normalisation constants
    means = (x.double() / 255).mean(dim=(0, 2, 3))
    assert torch.allclose(means, torch.tensor(MEAN, dtype=torch.float64), atol=1e-3)


@pytest.mark.real_data
def test_real_suite_smoke_load():
    """The smoke profile's data on the real CIFAR-10 and an existing CIFAR-10-C (never generated here)."""
    root = _real_cifar_root()
    needed = [root / "CIFAR-10-C" / f"{n}.npy" for n in ("gaussian_noise", "contrast", "labels")] if root else []
    if root is None or not all(p.exists() for p in needed):
        pytest.skip("real CIFAR-10 / CIFAR-10-C (gaussian_noise, contrast) not under the data root")
    manifest = root / "CIFAR-10-C" / "GENERATED.json"
    if manifest.exists():  # regenerated: loading would regenerate cells made by another generator
        from datasets.cifar10c import GENERATOR_VERSION

        entries = json.loads(manifest.read_text()).get("corruptions", {})
        stale = [n for n in ("gaussian_noise", "contrast")
                 if (entries.get(n, {}).get("generator_version"), entries.get(n, {}).get("seed"),
                     entries.get(n, {}).get("n")) != (GENERATOR_VERSION, 0, 10000)]
        if stale:
            pytest.skip(f"the CIFAR-10-C under the data root was made by another generator version or seed "
                        f"({', '.join(stale)}); loading it would regenerate them, which this test never does")
    suite = _suite()
    data = suite.load(root, suite.profiles["smoke"]["data"], download=False)
    shifts = [e for e in data.eval_sets if e.kind == "shift"]
    assert len(shifts) == 6 and all(e.n == 100 for e in shifts)
    xt, yt = load_cifar10(root, "test")
    from bench.suites.cifar10c import balanced_subset

    sel = balanced_subset(yt, 100, seed=3)
    assert all(torch.equal(e.y, yt[sel]) for e in shifts)
    # corruption moves the images away from the clean ones, more at higher severity
    err = [float((e.x.uint8(slice(None)).float() - xt[sel].float()).abs().mean()) for e in shifts
           if e.shift == "gaussian_noise"]
    assert 0 < err[0] < err[1] < err[2]
    assert data.extras["cifar10c"]["source"] in ("official", "regenerated")


def test_cifar10_batches_of_the_wrong_structure_or_with_code_are_malformed_not_run(tmp_path):
    import pickle

    make_fake_cifar(tmp_path, n_train=50, n_test=20)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    good = batch.read_bytes()
    marker = tmp_path / "code-ran"
    bad = {
        "a list, not a dict": pickle.dumps([1, 2, 3]),
        "a dict without data": pickle.dumps({b"labels": [1]}),
        "labels that are not a list": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": 5}),
        "code": pickle.dumps({b"data": TouchOnUnpickle(marker), b"labels": [0]}),
    }
    rng = np.random.default_rng(0)
    for i in range(40):  # fuzzed headers
        b = bytearray(good)
        b[rng.integers(0, 64)] = rng.integers(0, 256)
        bad[f"fuzz {i}"] = bytes(b)
    for what, blob in bad.items():
        batch.write_bytes(blob)
        try:
            load_cifar10(tmp_path, "test")
        except DatasetNotFoundError as exc:
            assert "malformed" in str(exc), what
        # a fuzzed byte may leave a valid batch: then it loads, which is fine
    assert not marker.exists()


def test_records_made_from_another_generator_version_are_redone_without_refitting(tmp_path, monkeypatch, capsys):
    """A CIFAR-10-C file regenerated by another generator version makes its shift records stale:
    the next run redoes exactly those (with the fitted method, not a new fit) and keeps the rest;
    a record from before records stored a fingerprint counts by the version its note names."""
    from bench.cli import main

    data_root = tmp_path / "data"
    tr_x, tr_y, te_x, te_y = make_fake_cifar(data_root)
    manifest = {"generator_version": "gen-1", "seed": 0,
                "corruptions": {n: {"generator_version": "gen-1", "seed": 0} for n in ("gaussian_noise", "contrast")}}
    make_fake_cifar10c(data_root, te_x, te_y, manifest=manifest)
    _stub_generator(monkeypatch)
    out = tmp_path / "results"
    args = ["run", "--suite", "cifar10c", "--profile", "smoke", "--data-root", str(data_root), "--out", str(out),
            "--methods", "deterministic", "--no-report", *FEWER_IMAGES]
    assert main(args) == 0
    recs = {p: json.loads(p.read_text()) for p in out.glob("cifar10c/records/**/*.json")}
    shift = {p: r for p, r in recs.items() if r["kind"] == "shift"}
    assert shift and all(r["data_fingerprint"] == "regenerated gen-1 seed 0" for r in shift.values())
    assert all("data_fingerprint" not in r for r in recs.values() if r["kind"] != "shift")
    # a legacy record (no fingerprint; its note names gen-1): current, kept
    legacy = next(p for p, r in shift.items() if r["shift"] == "contrast")
    old = dict(shift[legacy])
    del old["data_fingerprint"]
    legacy.write_text(json.dumps(old))
    # gaussian_noise regenerated by gen-2
    manifest["corruptions"]["gaussian_noise"]["generator_version"] = "gen-2"
    (data_root / "CIFAR-10-C" / "GENERATED.json").write_text(json.dumps(manifest))
    before = {p: p.stat().st_mtime_ns for p in recs}
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "3 record(s) were made from other data" in err and "loaded fitted checkpoint" in err
    after = {p: json.loads(p.read_text()) for p in recs}
    for p, r in after.items():
        redone = p.stat().st_mtime_ns != before[p]
        assert redone == (r["kind"] == "shift" and r["shift"] == "gaussian_noise"), (p.name, redone)
        if redone:
            assert r["data_fingerprint"] == "regenerated gen-2 seed 0"
    assert "data_fingerprint" not in after[legacy]  # kept as it was


def test_the_paper_profile_trains_every_bayesian_network_the_appendixs_100_epochs():
    """PBN paper App. H.3.2: 50 epochs, 100 for the Bayesian and partially Bayesian networks. Every
    method that trains a variational network of its own (PBN's phase, mean-field VI, SSVI, VDP++) gets
    the 100; the others the profile's 50. SSVI's own paper trains 200: its rows stay unverified."""
    from bench.budget import paper_epochs
    from bench.config import resolve_plan
    from bench.suites import SUITES
    from methods import METHODS

    suite = SUITES.get("cifar10c")()
    vi = ["pbn", "mfvi", "ssvi", "vdp"]
    plan = resolve_plan(suite, "paper", [*vi, "mc_dropout"], {}, method_registry=METHODS)
    assert plan.train.epochs == 50
    assert {m: plan.methods[m][0]["epochs"] for m in vi} == dict.fromkeys(vi, 100)
    assert "epochs" not in plan.methods["mc_dropout"][0]
    assert paper_epochs("ssvi", "resnet18_pbn") == 200  # above the 100: phase_budget reads it unverified
