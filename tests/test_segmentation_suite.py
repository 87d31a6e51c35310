"""The segmentation task and suites: pixels as examples (PixelRows + the task's loss with an ignore
label, against a hand computation), CamVid and Cityscapes read in their published layouts
(fixtures), the corrupted copies generated once, and whole smoke runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from bench.cli import main


def _png(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def make_fake_camvid(root: Path, n=(8, 3, 4), size=(60, 80), seed=0) -> None:
    """SegNet's CamVid layout: <split>/*.png (RGB), <split>annot/*.png (0-10, 11 = void)."""
    rng = np.random.default_rng(seed)
    h, w = size
    for split, count in zip(("train", "val", "test"), n):
        lines = []
        for i in range(count):
            lab = rng.integers(0, 12, (h, w)).astype(np.uint8)
            img = (lab[..., None] * 20 + rng.integers(0, 15, (h, w, 3))).astype(np.uint8)
            name = f"{split}_{i:04d}.png"
            _png(root / "CamVid" / split / name, img)
            _png(root / "CamVid" / f"{split}annot" / name, lab)
            lines.append(f"{split}/{name} {split}annot/{name}")
        (root / "CamVid" / f"{split}.txt").write_text("\n".join(lines) + "\n")


def make_fake_cityscapes(root: Path, n=(3, 2), size=(64, 128), seed=0) -> None:
    """leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png and the gtFine labelIds."""
    rng = np.random.default_rng(seed)
    h, w = size
    for split, count in zip(("train", "val"), n):
        for i in range(count):
            city = "aachen" if split == "train" else "frankfurt"
            stem = f"{city}_{i:06d}_000019"
            ids = rng.choice([0, 7, 8, 11, 21, 23, 24, 26, 33], (h, w)).astype(np.uint8)
            _png(root / "cityscapes" / "leftImg8bit" / split / city / f"{stem}_leftImg8bit.png",
                 rng.integers(0, 255, (h, w, 3)).astype(np.uint8))
            _png(root / "cityscapes" / "gtFine" / split / city / f"{stem}_gtFine_labelIds.png", ids)


def test_pixel_rows_and_the_segmentation_loss_by_hand():
    from bench.models import PixelRows
    from bench.tasks import segmentation

    torch.manual_seed(0)
    z = torch.randn(2, 3, 4, 5)  # (B, K, H, W)
    rows = PixelRows()(z)
    assert rows.shape == (2 * 4 * 5, 3) and torch.equal(rows[1 * 20 + 2 * 5 + 3], z[1, :, 2, 3])
    y = torch.randint(0, 3, (2, 4, 5))
    y[0, 0, :] = 255
    task = segmentation(3)
    loss = task.loss(rows, y)
    logp = torch.log_softmax(z, dim=1)
    keep = y != 255
    by_hand = -torch.stack([logp[b, y[b, i, j], i, j] for b, i, j in keep.nonzero().tolist()]).mean()
    assert torch.allclose(loss, by_hand, atol=1e-6)
    assert torch.allclose(loss, F.cross_entropy(z, y, ignore_index=255), atol=1e-6)


def test_unet_keeps_the_input_size_and_batch_independence():
    from bench.models import build_model

    torch.manual_seed(0)
    net = build_model("unet_small", (3, 45, 70), 5).eval()
    x = torch.randn(3, 3, 45, 70)
    out = net(x)
    assert out.shape == (3 * 45 * 70, 5)
    assert torch.allclose(net(x[1:2]), out[45 * 70: 2 * 45 * 70], atol=1e-5)


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_camvid_smoke_run_on_the_published_layout(tmp_path, capsys):
    root = tmp_path / "data"
    # 4 training, 1 validation and 3 test images (the smoke profile takes up to 8 and 4): one more
    # test image than the uncertainty maps show, so that their limit is still seen
    n = (4, 1, 3)
    make_fake_camvid(root, n=n)
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--quiet", "--loader-workers", "1"], capsys)
    assert code == 2 and "data.size" in text  # 60 x 80 images, and no data.size: the networks expect 180 x 240
    assert not out.exists()
    # at the suite's resolution
    make_fake_camvid(root, n=n, size=(180, 240))
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--quiet", "--loader-workers", "1", "--methods", "deterministic,mc_dropout,deep_ensemble"], capsys)
    assert code == 0, text
    recs = [json.loads(p.read_text()) for p in out.glob("camvid/records/**/*.json")]
    assert {r["method"] for r in recs} == {"deterministic", "mc_dropout", "deep_ensemble"}
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    det = {(r["kind"], r["shift"], r["severity"]): r for r in recs if r["method"] == "deterministic"}
    assert set(det) == {("id", "clean", 0.0), ("val", "validation", None)} | {
        ("shift", c, s) for c in ("gaussian_noise", "contrast") for s in (1.0, 3.0)}
    m = det[("id", "clean", 0.0)]["metrics"]
    assert 0.0 <= m["miou"] <= 1.0 and m["n_pixels"] > 0 and m["mutual_information"] is None
    # void (label 11) is ignored: the labelled pixels of the 3 test images
    from datasets.segmentation import camvid_labels

    labs = [camvid_labels(np.asarray(Image.open(p))) for p in sorted((root / "CamVid" / "testannot").glob("*.png"))]
    assert m["n_pixels"] == sum(int((lab != 255).sum()) for lab in labs)
    mc = next(r for r in recs if r["method"] == "mc_dropout" and r["kind"] == "id")
    assert mc["metrics"]["mutual_information"] is not None and mc["metrics"]["mutual_information"] >= 0
    # CamVid-C: PNG cells of the 3 test images, with a manifest; the records name the copy
    cells = sorted((root / "CamVid-C").glob("*/*/test/*.png"))
    assert len(cells) == 2 * 2 * 3 and json.loads((root / "CamVid-C" / "GENERATED.json").read_text())["format"] == "PNG"
    assert all(r["data_fingerprint"].startswith("regenerated") for r in recs if r["kind"] == "shift")
    # uncertainty maps: the first 2 test images, clean and under the first corruption, every second pixel
    with_maps = {(r["method"], r["kind"], r["shift"], r["severity"]) for r in recs if (r.get("curves") or {}).get("maps")}
    assert {(k, s, v) for _, k, s, v in with_maps} == {("id", "clean", 0.0), ("shift", "gaussian_noise", 1.0),
                                                        ("shift", "gaussian_noise", 3.0)}
    m = next(r for r in recs if r["method"] == "mc_dropout" and r["kind"] == "id")["curves"]["maps"]
    assert len(m) == 2 and np.asarray(m[0]["pred"]).shape == (90, 120) and m[0]["mi"] is not None
    assert np.asarray(m[0]["entropy"]).max() <= 255
    code, text = _run(["report", "--results", str(out), "--out", str(tmp_path / "rep")], capsys)
    assert code == 0, text
    figure = tmp_path / "rep" / "camvid" / "figures" / "unet_small-smoke-uncertainty-maps.png"
    assert figure.exists()
    # the report defines the per-pixel metrics it shows, and its captions speak of this suite
    html = (tmp_path / "rep" / "camvid" / "index.html").read_text()
    from bench.segmentation_metrics import DEFINITIONS

    assert "<dt>mIoU</dt>" in html and "<dt>Error AUROC (entropy)</dt>" in html
    assert DEFINITIONS["miou"][1:40] in html
    assert "CIFAR-10-C" not in html and "mean entropy on the OOD set" not in html   # no OOD set here
    assert "<dt>AUROC / AUPR</dt>" not in html       # the classification OOD definitions do not apply
    # the records kept in git (scripts/keep_records.py: curves dropped but for the first seed's maps,
    # the images beside them in artifacts/) draw the same figure on a machine without results/
    import importlib.util

    spec = importlib.util.spec_from_file_location("keep_records", Path(__file__).resolve().parents[1] / "scripts" / "keep_records.py")
    keep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keep)
    kept = tmp_path / "kept"
    assert keep.save(out, "camvid", kept) == len(recs)
    assert not any("entropy_hist" in p.read_text() for p in kept.glob("camvid/records/**/*.json"))
    code, text = _run(["report", "--results", str(kept), "--out", str(tmp_path / "rep2")], capsys)
    assert code == 0, text
    assert (tmp_path / "rep2" / "camvid" / "figures" / figure.name).read_bytes() == figure.read_bytes()


def test_cityscapes_smoke_run_maps_label_ids_and_missing_data_is_exit_2(tmp_path, capsys):
    root = tmp_path / "data"
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "cityscapes", "--profile", "smoke", "--data-root", str(root),
                       "--out", str(out), "--methods", "deterministic"], capsys)
    assert code == 2 and "leftImg8bit" in text and "gtFine_labelIds" in text and "cityscapes-dataset.com" in text
    assert not out.exists() or not any(out.rglob("*.json"))
    make_fake_cityscapes(root, size=(128, 256))
    # one corrupted cell (not the smoke profile's four): only the clean record's pixels are checked
    code, text = _run(["run", "--suite", "cityscapes", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--methods", "deterministic", "--quiet", "--set", "data.corruptions=contrast",
                       "--set", "data.severities=[1]"], capsys)
    assert code == 0, text
    recs = [json.loads(p.read_text()) for p in out.glob("cityscapes/records/**/*.json")]
    assert recs and all(r["status"] == "ok" for r in recs)
    from datasets.segmentation import LabelFiles, cityscapes_labels

    gt = sorted((root / "cityscapes" / "gtFine" / "val").glob("*/*_labelIds.png"))
    raw = np.asarray(Image.open(gt[0]))
    mapped = LabelFiles([gt[0]], cityscapes_labels)[0].numpy()
    assert (mapped[raw == 26] == 13).all() and (mapped[raw == 7] == 0).all() and (mapped[raw == 0] == 255).all()
    idr = next(r for r in recs if r["kind"] == "id")
    # the labels are resized to 256 x 512 by nearest neighbour: the ignored share is kept
    resized = LabelFiles(gt, cityscapes_labels, (256, 512))[:]
    assert idr["metrics"]["n_pixels"] == int((resized != 255).sum())


@pytest.mark.real_data
def test_spread_subset_by_hand():
    from bench.suites.segmentation import spread_subset

    assert spread_subset(10, 4, first=2) == [0, 1, 2, 6]  # 2 kept, then 8 images / 2 = every 4th
    assert spread_subset(233, 30, first=2)[:3] == [0, 1, 2] and len(set(spread_subset(233, 30, first=2))) == 30
    assert spread_subset(233, 30, first=2)[-1] == 2 + int(27 * 231 / 28)  # the last sequence is reached
    assert spread_subset(5, None) == spread_subset(5, 9) == [0, 1, 2, 3, 4]
    assert spread_subset(7, 1, first=2) == [0]


def test_camvid_resized_with_a_subset_per_cell(tmp_path, capsys):
    """data.size resizes every split and builds the networks at that size; the corrupted copies are
    generated at that size in their own folder (the native copy untouched), every test image
    corrupted once, and each corrupted cell scores data.n_per_cell of them (the clean set all)."""
    from datasets.segmentation import camvid_labels

    root = tmp_path / "data"
    make_fake_camvid(root, n=(4, 2, 6), size=(60, 80))
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--quiet", "--loader-workers", "1", "--methods", "deterministic", "--set", "data.size=[32,48]",
                       "--set", "data.n_per_cell=4", "--set", "data.n_test=6", "--set", "data.corruptions=contrast",
                       "--set", "data.severities=[1]"], capsys)
    assert code == 0, text
    assert not (root / "CamVid-C").exists()
    cells = sorted((root / "CamVid-C-32x48" / "contrast" / "1" / "test").glob("*.png"))
    assert len(cells) == 6 and all(Image.open(p).size == (48, 32) for p in cells)
    recs = {r["kind"]: r for r in (json.loads(p.read_text()) for p in out.glob("camvid/records/**/*.json"))}

    def labelled(indices):
        files = sorted((root / "CamVid" / "testannot").glob("*.png"))
        return sum(int((camvid_labels(np.asarray(Image.open(files[i]).resize((48, 32), Image.NEAREST))) != 255).sum())
                   for i in indices)

    assert recs["id"]["metrics"]["n_pixels"] == labelled(range(6))
    assert recs["shift"]["metrics"]["n_pixels"] == labelled([0, 1, 2, 4])  # the first two, then every 2nd of the rest
    assert recs["shift"]["n"] == 4 and "4 of the 6 test images per cell" in recs["shift"]["eval_note"]
    assert recs["id"]["data_config"]["size"] == [32, 48]


def test_camvid_smoke_on_the_real_copy(tmp_path, capsys):
    from tests.conftest import real_data_root

    real = real_data_root()
    if real is None or not (real / "CamVid" / "testannot").is_dir():
        pytest.skip("real CamVid not unpacked (run ../shared/data/unpack.sh data)")
    root = tmp_path / "data"
    root.mkdir()
    (root / "CamVid").symlink_to(real / "CamVid")
    out = tmp_path / "results"
    # one corrupted cell (not the smoke profile's four): only the clean record is checked
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--methods", "deterministic", "--quiet", "--set", "data.corruptions=contrast",
                       "--set", "data.severities=[1]"], capsys)
    assert code == 0, text
    idr = next(json.loads(p.read_text()) for p in out.glob("camvid/records/**/id-*.json"))
    assert idr["n"] == 4 and 0.5 * 4 * 180 * 240 < idr["metrics"]["n_pixels"] <= 4 * 180 * 240


def _one_severity_run(tmp_path, capsys, methods: str, *sets: str) -> list[dict]:
    """Every record of a smoke run of ``methods`` on a 4 / 2 / 2-image CamVid fixture of 44 x 60
    images, one corruption at one severity (``sets``: more ``--set`` values). data.size builds the
    networks at that size (the native 180 x 240 is run end to end by the published-layout test;
    nothing checked here depends on the resolution); 44 x 60, like 180 x 240, is no multiple of
    the UNet's 8, so its padding and cropping stay in the path."""
    root = tmp_path / "data"
    make_fake_camvid(root, n=(4, 2, 2), size=(44, 60))
    out = tmp_path / "results"
    extra = [a for kv in sets for a in ("--set", kv)]
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--quiet", "--methods", methods, "--set", "data.size=[44,60]", "--set", "data.severities=[1]",
                       "--set", "data.corruptions=contrast", *extra], capsys)
    assert code == 0, text
    return [json.loads(p.read_text()) for p in out.glob("camvid/records/**/*.json")]


def test_pbn_mfvi_and_ssvi_run_per_pixel(tmp_path, capsys):
    """The partial / full / sparse-subspace mean-field VI of PBN, mfvi and SSVI on a UNet: S samples
    of B H W pixel rows, the ELBO over labelled pixels; mutual information recorded."""
    recs = _one_severity_run(tmp_path, capsys, "pbn,mfvi,ssvi")
    assert {r["method"] for r in recs} == {"pbn", "mfvi", "ssvi"} and all(r["status"] == "ok" for r in recs)
    for r in recs:
        if r["kind"] == "id" and r["method"] != "ssvi":  # SSVI's one smoke epoch leaves its sigmas at ~0
            assert r["metrics"]["mutual_information"] is not None and r["metrics"]["mutual_information"] > 0


def test_last_layer_laplace_per_pixel(tmp_path, capsys):
    """The last-layer KFAC Laplace on the UNet's 1x1 classifier, pixels as observations: fitted,
    its prior precision searched on the validation pixels (ignored ones left out), predictions per
    pixel row."""
    recs = _one_severity_run(tmp_path, capsys, "laplace_last_layer", "laplace_last_layer.val_examples=2")
    assert recs and all(r["status"] == "ok" for r in recs)
    idr = next(r for r in recs if r["kind"] == "id")
    d = idr["diagnostics"]
    assert d["prior_search"]["log10_grid"] and len(d["prior_precision"]) == 1
    assert idr["cost"]["stochastic_params"] == 16 * 11 + 11  # the 1x1 classifier: weights + biases


def test_weight_space_laplace_per_pixel(tmp_path, capsys):
    """The diagonal and the subnetwork Laplace on the UNet, pixels as observations: their GGN from
    labels drawn per pixel (backend "sampled"), the prior precision searched on the validation
    pixels, a linearised predictive drawn by Jacobian-vector products that is not the MAP network's
    (mutual information > 0 per pixel)."""
    recs = _one_severity_run(tmp_path, capsys, "laplace_diag,subnet_laplace")
    assert {r["method"] for r in recs} == {"laplace_diag", "subnet_laplace"}
    assert all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    for r in recs:
        if r["kind"] != "id":
            continue
        d = r["diagnostics"]
        assert d["backend"] == "sampled" and d["glm_sampler"] == "jvp" and d["prior_search"]["log10_grid"]
        assert d["ggn_samples"] == (4 if r["method"] == "subnet_laplace" else 1)
        assert r["metrics"]["mutual_information"] > 0
        if r["method"] == "subnet_laplace":
            assert r["cost"]["stochastic_params"] == 50 and d["n_zero_curvature"] < 50


def test_every_method_supports_segmentation():
    """No method is refused on the segmentation suites any more (the report lists refused methods
    with their reasons; the refusal itself is checked for every method in test_method_contract)."""
    from bench.reporting.build import _unsupported_methods
    from bench.suites.segmentation import SEGMENTATION_METHODS
    from methods import METHODS

    assert _unsupported_methods(["segmentation"]) == []
    assert set(SEGMENTATION_METHODS) == set(METHODS)


def test_temperature_scaling_on_the_labelled_pixels():
    """T minimises the NLL of the labelled validation pixels: against a brute-force grid over T of
    that NLL (void pixels left out), on pixels whose labels were drawn at temperature 1/3."""
    from bench.models import PixelRows
    from bench.tasks import segmentation
    from bench.training import TrainConfig
    from methods.base import MethodContext
    from methods.temperature_scaling import TemperatureScaling

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), PixelRows()).eval()
    x = torch.randn(6, 3, 8, 10)
    with torch.no_grad():
        logits = net(x)
    g = torch.Generator().manual_seed(1)
    y = torch.multinomial(torch.softmax(3 * logits, -1), 1, generator=g).reshape(6, 8, 10)
    void = torch.rand(6, 8, 10, generator=g) < 0.4
    y[void] = 255  # void pixels: their "label" must not count

    class Cache:
        def get(self, seed):
            return net

    ctx = MethodContext(task=segmentation(4), build_model=lambda dropout=0.0: net, train=TrainConfig(),
                        device=torch.device("cpu"), seed=0, map_cache=Cache())
    ts = TemperatureScaling(ctx).fit(None, (x, y))
    keep = y.reshape(-1) != 255
    lf, t = logits[keep].double(), y.reshape(-1)[keep]
    grid = torch.linspace(-3, 2, 5001, dtype=torch.float64).exp()
    nll = torch.stack([F.cross_entropy(lf / T, t) for T in grid])
    best = float(grid[nll.argmin()])
    assert abs(ts.diagnostics()["temperature"] - best) < 0.01 * best, (ts.diagnostics(), best)
    assert 0.2 < best < 0.5  # the labels' temperature (1/3), roughly


def test_vdp_runs_on_the_unet_with_pixels_as_observations(tmp_path, capsys):
    """VDP++ on segmentation: moments through the UNet (bench/vdp/unet.py), the ELBO over the
    labelled training pixels (void left out), sigma learned, an output variance per pixel."""
    root = tmp_path / "data"
    # 44 x 60 images (data.size; no multiple of 8: the moments are padded and cropped as at 180 x 240),
    # one corrupted cell: nothing checked here depends on the resolution or on the cells
    make_fake_camvid(root, n=(4, 2, 2), size=(44, 60))
    out = tmp_path / "results"
    code, text = _run(["run", "--suite", "camvid", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
                       "--quiet", "--loader-workers", "1", "--methods", "vdp", "--set", "data.size=[44,60]",
                       "--set", "data.corruptions=contrast", "--set", "data.severities=[1]"], capsys)
    assert code == 0, text
    recs = [json.loads(p.read_text()) for p in out.glob("camvid/records/**/*.json")]
    assert recs and all(r["status"] == "ok" for r in recs), [r.get("error") for r in recs]
    idr = next(r for r in recs if r["kind"] == "id")
    assert 0.0 <= idr["metrics"]["miou"] <= 1.0
    d = idr["diagnostics"]
    assert d["sigma_final"]["mean"] != pytest.approx(d["sigma_init"]["mean"], rel=1e-6)  # sigma moved
    assert d["num_train"] % (44 * 60) == 0 and d["num_train"] > 44 * 60   # the ELBO's N: training pixels


def test_vdp_loss_leaves_ignored_pixels_out():
    import torch

    from bench.vdp.loss import data_nll, vdp_loss

    class Net(torch.nn.Module):
        def forward(self, x):
            return x, torch.full_like(x, 0.1)

        def kl(self, prior_scale):
            return torch.zeros(())

    y = torch.randint(0, 5, (2, 3, 4))      # 2 images of 3 x 4 pixels
    y[0, 0, :] = 255
    keep = y.reshape(-1) != 255
    for likelihood in ("cross_entropy", "gaussian"):
        x = torch.randn(2 * 3 * 4, 5, requires_grad=True)  # a row per pixel
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss = vdp_loss(100, kl_weight=1.0, likelihood=likelihood, ignore_index=255)(Net(), x, y, 0.0)
        # the mean over the kept pixels is masked, not selected: selecting them (nonzero) waits for a GPU
        assert not {e.key for e in prof.key_averages()} & {"aten::nonzero", "aten::masked_select"}
        (grad,) = torch.autograd.grad(loss, x)
        xr = x.detach().clone().requires_grad_(True)
        want = data_nll(xr[keep], torch.full_like(xr[keep], 0.1), y.reshape(-1)[keep], likelihood).mean()
        (want_grad,) = torch.autograd.grad(want, xr)
        assert torch.allclose(loss, want) and torch.allclose(grad, want_grad)
        assert grad[~keep].abs().max() == 0
    # a batch whose pixels are all ignored has no data term (not the mean of nothing, NaN)
    none = vdp_loss(100, kl_weight=1.0, ignore_index=255)(Net(), torch.randn(12, 5), torch.full((1, 3, 4), 255), 0.0)
    assert none.item() == 0.0


def test_evaluation_batches_default_to_the_suites_own_size():
    """A profile that does not set data.eval_batch_size evaluates in the suite's default batches
    (CamVid: 8 images), not 1,000 images at once (20 GB for MC dropout's copies of a UNet's maps)."""
    from bench.config import resolve_plan
    from bench.harness import eval_batch_size
    from bench.suites import SUITES
    from methods import METHODS

    suite = SUITES.get("camvid")()
    plan = resolve_plan(suite, "quick", ["deterministic"], {}, method_registry=METHODS)
    assert "eval_batch_size" not in plan.data
    assert eval_batch_size(suite, plan) == suite.DEFAULT_DATA["eval_batch_size"] == 8


def _named_camvid(root: Path, frames: dict, size=(48, 64)) -> None:
    """SegNet's layout with frames named by sequence, as SegNet's copy names them
    (``frames``: split -> [sequence, ...], one frame each)."""
    rng = np.random.default_rng(0)
    for split, seqs in frames.items():
        for i, seq in enumerate(seqs):
            name = f"{seq}_f{i:05d}.png"
            _png(root / "CamVid" / split / name, rng.integers(0, 255, (*size, 3)).astype(np.uint8))
            _png(root / "CamVid" / f"{split}annot" / name, rng.integers(0, 11, size).astype(np.uint8))


def test_val_sequences_move_whole_training_drives_to_the_validation_frames(tmp_path):
    """data.val_sequences: the named drives' training frames tune beside the published validation
    frames, every other training frame trains, the test split is untouched; a sequence with no
    training frame (a test-only one, or none) is exit 2 naming the valid ones;
    camvid_multilabel's camvid backbone is trained on the same split, so it never sees the frames its
    suite tunes on."""
    from bench.errors import BenchError
    from bench.suites import SUITES

    root = tmp_path / "data"
    _named_camvid(root, {"train": ["0001TP", "0006R0", "0006R0", "0016E5"], "val": ["0016E5", "0016E5"],
                         "test": ["0001TP", "Seq05VD"]})
    suite = SUITES.get("camvid")()
    cfg = suite.data_cfg({"size": [48, 64]})

    def seqs(pairs):
        return sorted(p.name.split("_")[0] for p, _ in pairs)

    (train, val, test), *_ = suite.split_files(root, cfg)
    assert seqs(val) == ["0016E5"] * 2 and len(train) == 4   # the published split
    (train, val, test), *_ = suite.split_files(root, {**cfg, "val_sequences": ["0006R0"]})
    assert seqs(val) == ["0006R0", "0006R0", "0016E5", "0016E5"]
    assert seqs(train) == ["0001TP", "0016E5"] and seqs(test) == ["0001TP", "Seq05VD"]
    assert not {p for p, _ in train} & {p for p, _ in val}
    for bad in (["Seq05VD"], ["nope"]):
        with pytest.raises(BenchError, match="they have: 0001TP, 0006R0, 0016E5"):
            suite.split_files(root, {**cfg, "val_sequences": bad})
    with pytest.raises(BenchError, match="leaves no training image"):
        suite.split_files(root, {**cfg, "val_sequences": ["0001TP", "0006R0", "0016E5"]})
    binary = SUITES.get("camvid_binary")()
    (_, val, _), *_ = binary.split_files(root, {**binary.data_cfg({"size": [48, 64]}), "val_sequences": ["0006R0"]})
    assert seqs(val) == ["0006R0", "0006R0", "0016E5", "0016E5"]
    multi = SUITES.get("camvid_multilabel")()
    run = multi.backbone_run({"backbone": "camvid", "val_sequences": ["0006R0"]})
    assert run["sets"]["data.val_sequences"] == [["0006R0"]]
    assert "data.val_sequences" not in multi.backbone_run({"backbone": "camvid"})["sets"]


def test_val_sequences_that_are_not_a_list_of_names_are_exit_2(tmp_path, capsys):
    code, text = _run(["run", "--suite", "camvid_binary", "--profile", "smoke", "--data-root", str(tmp_path),
                       "--out", str(tmp_path / "out"), "--set", "data.val_sequences=3", "--quiet"], capsys)
    assert code == 2 and "val_sequences" in text and "list of CamVid sequence names" in text, text
    assert not (tmp_path / "out").exists()
