"""Your model, your data (issue 37): ``bench.evaluate`` on a network defined here, with layer types
no suite uses (GroupNorm, LayerNorm, GELU, a depthwise convolution), and networks named on the
command line (``--set models=MODULE:FACTORY``, ``timm:NAME``): records, resumption, identity, bad
input. docs/your_model.md is the contract these tests hold."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import bench
from bench.cli import main
from bench.errors import BenchError
from conftest import small_mnist_run

ROOT = Path(__file__).resolve().parents[1]

#: methods that run on an arbitrary nn.Module (a forward of its own) through bench.evaluate
ARBITRARY_MODULE_METHODS = ("deterministic", "deep_ensemble", "temperature_scaling", "pbn", "mfvi", "ssvi",
                            "subnet_laplace", "laplace_last_layer", "laplace_diag", "mc_dropout")
#: methods that convert a network structurally: an nn.Sequential of known layers (the same unusual
#: layer types), refused at plan time on a module with its own forward
SEQUENTIAL_ONLY_METHODS = ("vdp",)
#: options that keep the test to seconds: few samples, a small grid and validation subset, 2 SWAG
#: snapshots (they change how much work a method does, not which code runs; the Laplace variants'
#: curvature backends are their defaults: BackPACK and ASDL cannot take GroupNorm or a custom forward,
#: laplace_diag falls back to Curvlinops, subnet_laplace's subnet-only Jacobians take the Linear and
#: Conv2d weights it selects)
VI = {"train_samples": 1, "predict_samples": 2, "epochs": 1}
OPTIONS = {"laplace_diag": {"grid_size": 3, "val_examples": 20},
           "subnet_laplace": {"n_subnet": 40,
                              "swag_n_snapshots": 2, "swag_snapshot_every": 1, "grid_size": 3, "val_examples": 20},
           "laplace_last_layer": {"grid_size": 3, "val_examples": 20},
           "deep_ensemble": {"members": 2}, "pbn": VI, "mfvi": VI, "ssvi": {"predict_samples": 2, "epochs": 1}}
TRAIN = {"epochs": 2, "batch_size": 50, "optimizer": "adam", "lr": 0.01}


class TinyNet(nn.Module):
    """Layers the suites' networks never use: GroupNorm, a depthwise 3x3 convolution, GELU,
    LayerNorm; a forward of its own (not an nn.Sequential)."""

    def __init__(self, in_shape, num_outputs):
        super().__init__()
        c = in_shape[0]
        self.stem = nn.Conv2d(c, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.act = nn.GELU()
        self.ln = nn.LayerNorm(8)
        self.head = nn.Linear(8, num_outputs)

    def forward(self, x):
        h = self.act(self.norm(self.stem(x)))
        h = self.act(self.depthwise(h)).mean((2, 3))
        return self.head(self.ln(h))


def tiny_sequential(in_shape, num_outputs):
    """TinyNet's layers as an nn.Sequential (what a structural conversion such as VDP++'s follows)."""
    return nn.Sequential(nn.Conv2d(in_shape[0], 8, 3, padding=1), nn.GroupNorm(2, 8), nn.GELU(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.LayerNorm(8), nn.Linear(8, num_outputs))


def bars(n: int, seed: int, noise: float = 0.5, classes: int = 3):
    """``(x, y)``: 1 x 6 x 6 images whose bright row pair encodes the class."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, 1, 6, 6, generator=g) * noise
    for i in range(n):
        x[i, 0, 2 * int(y[i]): 2 * int(y[i]) + 2, :] += 2.0
    return x, y


class PairDataset(torch.utils.data.Dataset):
    """A plain torch Dataset of (x, y) items, as a researcher's would be."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def data():
    tr, va, te = bars(200, 0), bars(40, 1), bars(40, 2)
    return dict(train=PairDataset(*tr), val=torch.utils.data.DataLoader(PairDataset(*va), batch_size=16),
                test={"clean": te}, shifts={"noise": {1: bars(40, 2, noise=1.0), 2: bars(40, 2, noise=2.0)}},
                ood={"blank": torch.randn(30, 1, 6, 6, generator=torch.Generator().manual_seed(3))})


def test_a_user_network_runs_every_method_and_a_second_call_resumes(tmp_path):
    out = tmp_path / "mine"
    kw = dict(model=TinyNet, methods=list(ARBITRARY_MODULE_METHODS), seeds=[0], out=out, train_config=TRAIN,
              method_options=OPTIONS, profile="smoke", quiet=True, report=False, **data())
    r = bench.evaluate(**kw)
    assert r.exit_code == 0 and r.summary.failed == [], r.summary.failed
    assert r.summary.fitted == len(ARBITRARY_MODULE_METHODS)
    df = r.metrics
    assert set(df["method"]) == set(ARBITRARY_MODULE_METHODS) and set(df["model"]) == {"TinyNet"}
    sets = {(k, s, None if sv != sv else sv) for k, s, sv in zip(df["kind"], df["shift"], df["severity"])}
    assert sets == {("id", "clean", 0.0), ("shift", "noise", 1.0), ("shift", "noise", 2.0), ("ood", "blank", None),
                    ("val", "validation", None)}
    assert len(df) == 5 * len(ARBITRARY_MODULE_METHODS) and (df["status"] == "ok").all()
    ok = df[df["kind"] != "ood"]
    assert ok["metrics.nll"].notna().all() and ok["metrics.accuracy"].between(0, 1).all()
    assert df.loc[df["kind"] == "ood", "metrics.auroc"].notna().all()
    # the MAP network trains once per seed: the methods built on it share it (one cached file per seed)
    maps = sorted((out / "custom" / "checkpoints" / "map" / "TinyNet").glob("*/seed*.pt"))
    assert [p.name for p in maps] == ["seed0.pt", "seed1.pt"]  # seed 0 and the ensemble's second member
    # records in the same layout as a suite run, read by the store's loader (the report and the
    # leaderboard: test_the_users_map_checkpoint_...)
    rec = json.loads(r.records[0].read_text())
    assert rec["suite"] == "custom" and rec["profile"] == "smoke" and rec["data_config"]["fit_digest"]
    assert r.report == []
    from bench.store import load_records

    assert len(load_records(out, "custom")) == len(df)
    assert set(r.table("nll").columns) == {"id/clean/0", "shift/noise/1", "shift/noise/2", "val/validation/-"}

    again = bench.evaluate(**kw)  # a second call: every finished cell is skipped
    assert again.summary.skipped == len(ARBITRARY_MODULE_METHODS)
    assert again.summary.fitted == again.summary.loaded == again.summary.records == 0
    assert again.records == r.records


def test_vdp_runs_on_a_sequential_network_and_refuses_a_custom_forward_when_planned(tmp_path):
    d = data()
    with pytest.raises(BenchError, match="vdp on TinyNet: .*no conversion for TinyNet"):
        bench.evaluate(model=TinyNet, methods=list(SEQUENTIAL_ONLY_METHODS), out=tmp_path / "a", **d)
    assert not (tmp_path / "a").exists()
    r = bench.evaluate(model=tiny_sequential, methods=list(SEQUENTIAL_ONLY_METHODS), out=tmp_path / "b",
                       train_config=TRAIN, profile="smoke", quiet=True, report=False, **d)
    assert r.exit_code == 0 and r.summary.failed == [] and set(r.metrics["model"]) == {"tiny_sequential"}
    assert len(r.metrics) == 5 and (r.metrics["status"] == "ok").all()


def test_regression_and_segmentation_networks_through_evaluate(tmp_path):
    from bench.models import PixelRows

    x = torch.linspace(-4, 4, 120).unsqueeze(1)
    y = x[:, 0] ** 3 / 10 + 0.3 * torch.randn(120, generator=torch.Generator().manual_seed(0))
    mlp = lambda in_shape, num_outputs: nn.Sequential(nn.Linear(in_shape[0], 16), nn.GELU(),  # noqa: E731
                                                      nn.Linear(16, num_outputs))
    r = bench.evaluate(model=mlp, model_name="mlp", train=(x, y), val=(x[::4], y[::4]), test=(x[1::4], y[1::4]),
                       shifts={"far": {1: (1.5 * x[::4], (1.5 * x[::4, 0]) ** 3 / 10)}}, task="regression",
                       methods=["deterministic"], out=tmp_path / "reg", quiet=True, report=False,
                       train_config={"epochs": 5, "batch_size": 30, "optimizer": "adam", "lr": 0.01})
    assert r.exit_code == 0 and r.metrics["metrics.rmse"].notna().all() and len(r.metrics) == 3  # id, far, val

    xs = torch.randn(30, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    ys = (xs[:, 0] > 0).long()
    ys[:, 0, 0] = 255  # an ignored pixel
    seg = lambda in_shape, num_classes: nn.Sequential(  # noqa: E731 - one row of logits per pixel
        nn.Conv2d(in_shape[0], 4, 3, padding=1), nn.GroupNorm(2, 4), nn.GELU(), PixelRows(), nn.Linear(4, num_classes))
    r = bench.evaluate(model=seg, model_name="seg", train=(xs, ys), val=(xs[:8], ys[:8]), test=(xs[8:16], ys[8:16]),
                       task="segmentation", methods=["deterministic"], out=tmp_path / "seg", quiet=True,
                       report=False, train_config={"epochs": 1})
    assert r.exit_code == 0 and r.metrics["metrics.miou"].between(0, 1).all()


def test_a_module_template_is_copied_and_reinitialised_per_network(tmp_path):
    from bench.api import build_suite

    template = TinyNet((1, 6, 6), 3)
    before = {k: v.clone() for k, v in template.state_dict().items()}
    suite, plan = build_suite(template, *(bars(40, s) for s in (0, 1, 2)), methods=["deterministic"])
    assert plan.models == ["TinyNet"]
    torch.manual_seed(0)
    a = suite.build_model("TinyNet", plan.data)
    torch.manual_seed(1)
    b = suite.build_model("TinyNet", plan.data)
    torch.manual_seed(0)
    a2 = suite.build_model("TinyNet", plan.data)
    assert a is not template and not torch.equal(a.head.weight, b.head.weight)  # seeds start apart
    assert torch.equal(a.head.weight, a2.head.weight) and torch.equal(a.depthwise.weight, a2.depthwise.weight)
    assert all(torch.equal(v, template.state_dict()[k]) for k, v in before.items())  # the template is untouched


def test_the_users_map_checkpoint_is_the_map_network_and_scratch_methods_are_skipped(tmp_path):
    torch.manual_seed(5)
    net = TinyNet((1, 6, 6), 3)
    ckpt = tmp_path / "map.pt"
    torch.save(net.state_dict(), ckpt)
    d = data()
    r = bench.evaluate(model=TinyNet, methods=["deterministic", "mfvi"], seeds=[0], out=tmp_path / "o",
                       map_checkpoint=ckpt, train_config=TRAIN, quiet=True, **d)
    assert r.exit_code == 0 and set(r.metrics["method"]) == {"deterministic"}  # mfvi trains from scratch
    assert r.report == [tmp_path / "o" / "reports" / "custom" / "index.html"] and r.report[0].is_file()
    assert main(["leaderboard", "--results", str(tmp_path / "o"), "--out", str(tmp_path / "lb")]) == 0
    assert "custom / TinyNet (custom profile)" in (tmp_path / "lb" / "leaderboard.md").read_text()
    rec = json.loads(next(p for p in r.records if p.name.startswith("id-")).read_text())
    assert rec["pretrained_weights"]["sha256_16"] and "skipped: mfvi" in rec["eval_note"]
    x, y = d["test"]["clean"]
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(net.eval()(x), y).item()
    assert rec["metrics"]["nll"] == pytest.approx(nll, rel=1e-4)  # exactly the checkpoint's network
    with pytest.raises(BenchError, match=r"no file for seed\(s\) \[1\]"):
        bench.evaluate(model=TinyNet, seeds=[0, 1], map_checkpoint={0: ckpt}, out=tmp_path / "p", **d)


def test_bad_input_to_evaluate_is_a_bench_error_before_any_training(tmp_path):
    d = data()
    with pytest.raises(BenchError, match=r"outputs \(2, 5\).*must output \(2, 3\)"):
        bench.evaluate(model=lambda: nn.Sequential(nn.Flatten(), nn.Linear(36, 5)), out=tmp_path, **d)
    with pytest.raises(BenchError, match="returned an object of type int"):
        bench.evaluate(model=lambda: 3, out=tmp_path, **d)
    with pytest.raises(BenchError, match="unknown method 'nope'; valid methods: "):
        bench.evaluate(model=TinyNet, methods=["nope"], out=tmp_path, **d)
    with pytest.raises(BenchError, match="severity 'high' is not a number"):
        bench.evaluate(model=TinyNet, out=tmp_path, **{**d, "shifts": {"noise": {"high": bars(10, 0)}}})
    with pytest.raises(BenchError, match="is a registered suite's"):
        bench.evaluate(model=TinyNet, name="toy", out=tmp_path, **d)
    with pytest.raises(BenchError, match=r"inputs of shape \(1, 6, 6\), but train.s are \(1, 5, 5\)"):
        bench.evaluate(model=TinyNet, out=tmp_path, **{**d, "train": (torch.zeros(10, 1, 5, 5), torch.zeros(10))})
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_suite_travels_to_a_worker_without_its_tensors(tmp_path):
    """What a Dask worker does with bench.evaluate's suite (bench/executors/worker.py): unpickle it
    (no tensors inside), read the data file under the results directory, run a cell; the records
    equal a local run's."""
    from bench.api import build_suite, run_suite
    from bench.executors.spec import RunSpec
    from bench.executors.worker import harness_for, run_cell

    d = data()
    suite, plan = build_suite(TinyNet, methods=["deterministic"], train_config=TRAIN, **d)
    local = run_suite(suite, plan, out=tmp_path / "local", quiet=True, report=False)
    path = suite.save_data(tmp_path / "inputs")
    blob = pickle.dumps(suite)
    assert len(blob) < path.stat().st_size / 4  # the tensors stay in the file
    shipped = pickle.loads(blob)
    spec = RunSpec(suite=suite.name, plan=plan, data_root=str(path.parent), out=str(tmp_path / "dist"),
                   quiet=True, suite_object=shipped)
    run_cell(spec, ("TinyNet", "deterministic", plan.methods["deterministic"][0], 0))
    assert harness_for(spec).suite is shipped
    dist = sorted((tmp_path / "dist").rglob("id-*.json"))
    assert len(dist) == 1 and dist[0].relative_to(tmp_path / "dist") == next(
        p for p in local.records if p.name.startswith("id-")).relative_to(tmp_path / "local")
    a = json.loads(dist[0].read_text())["metrics"]
    b = json.loads(next(p for p in local.records if p.name.startswith("id-")).read_text())["metrics"]
    # the same network and data; float32 sums may be ordered differently in the worker process
    # (thread count), hence agreement to 1e-6 rather than bit identity
    assert a.keys() == b.keys() and all(a[k] == b[k] if b[k] is None or isinstance(b[k], (str, dict, list)) else a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-9) for k in a)


# ------------------------------------------------------------------------------ command-line models


def resnet18_gray(num_classes):
    """torchvision's ResNet-18 for 1-channel images: a factory that adapts its stem (named
    ``num_classes``: called with the suite's classes)."""
    import torchvision

    net = torchvision.models.resnet18(num_classes=num_classes)
    net.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    return net


def not_a_network():
    return "resnet"


def test_torchvision_resnet18_through_the_command_line_model_form(fake_mnist, tmp_path):
    out = tmp_path / "r"
    spec = f"{__name__}:resnet18_gray"
    args = small_mnist_run(fake_mnist, out, "deterministic", n_train=64, epochs=1)
    args += ["--set", "data.n_val=20", "--set", "data.n_test=20", "--set", "data.n_ood=20",
             "--set", "data.angles=[0,90]", "--set", f"models={spec}"]
    assert main(args) == 0
    name = spec.replace(":", ".")
    recs = [json.loads(p.read_text()) for p in (out / "mnist_rotated" / "records" / name).rglob("*.json")]
    assert len(recs) == 4 and {r["model"] for r in recs} == {name} and all(r["status"] == "ok" for r in recs)
    assert recs[0]["cost"]["total_params"] == sum(p.numel() for p in resnet18_gray(10).parameters())
    assert list((out / "mnist_rotated" / "checkpoints" / "map" / name).glob("*/seed0.pt"))


def test_an_edited_factory_makes_new_cells_and_retrains(tmp_path, monkeypatch, capsys):
    """The factory's source file is part of the identity: the same spec after an edit is a new cell
    (and MAP network); unchanged, it resumes."""
    mod = tmp_path / "pkg_nets.py"
    mod.write_text("from torch import nn\n\ndef mlp(in_shape, num_outputs):\n"
                   "    return nn.Sequential(nn.Linear(in_shape[0], 16), nn.GELU(), nn.Linear(16, num_outputs))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "o"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--methods", "deterministic", "--quiet", "--no-report",
            "--out", str(out), "--set", "models=pkg_nets:mlp", "--set", "train.epochs=5"]

    def cells():
        return sorted(p.name for p in (out / "toy" / "records" / "pkg_nets.mlp").iterdir())

    assert main(args) == 0
    first = cells()
    assert main(args) == 0 and cells() == first  # unchanged: resumed, no new cell
    mod.write_text(mod.read_text() + "# widened later\n")
    assert main(args) == 0
    assert len(cells()) == 2 and first[0] in cells()  # a new cell beside the old one
    assert len(list((out / "toy" / "checkpoints" / "map" / "pkg_nets.mlp").glob("*/seed0.pt"))) == 2


def test_a_timm_model_with_pretrained_weights_from_a_local_file(tmp_path, capsys):
    pytest.importorskip("timm")
    import timm

    from bench.models import weights_provenance
    from datasets.imagenet import imagenet_wnids, write_fixture

    root = tmp_path / "data"
    write_fixture(root, [imagenet_wnids()[i] for i in (3, 500, 999)], 6)
    torch.manual_seed(0)
    weights = tmp_path / "test_resnet.pt"
    torch.save(timm.create_model("test_resnet", num_classes=1000).state_dict(), weights)
    out = tmp_path / "r"
    base = ["run", "--suite", "imagenetc", "--profile", "smoke", "--data-root", str(root), "--out", str(out),
            "--methods", "deterministic", "--quiet", "--no-report", "--loader-workers", "0",
            "--set", "models=timm:test_resnet", "--set", "data.corruptions=[contrast]", "--set", "data.severities=[3]"]
    assert main(base) == 2  # no weights given: nothing is downloaded
    assert "data.weights" in capsys.readouterr().err
    assert main(base + ["--set", f"data.weights={weights}"]) == 0
    recs = [json.loads(p.read_text()) for p in (out / "imagenetc" / "records" / "timm.test_resnet").rglob("*.json")]
    assert recs and all(r["status"] == "ok" and r["model"] == "timm.test_resnet" for r in recs)
    assert {r["pretrained_weights"]["sha256_16"] for r in recs} == {weights_provenance(weights)["sha256_16"]}
    assert recs[0]["cost"]["total_params"] == sum(p.numel() for p in timm.create_model("test_resnet").parameters())


@pytest.mark.parametrize("spec, says", [
    (f"{__name__}:no_such_factory", "has no attribute 'no_such_factory'; its callables: "),
    (f"{__name__}:not_a_network", "returned an object of type str, not an nn.Module"),
    ("timm:resnet1", "has no model 'resnet1'; close: resnet18"),
    ("lenet6", "models are a registered name (lenet5, lenet_300_100"),
])
def test_bad_model_specs_exit_2_naming_what_is_valid(spec, says, tmp_path, capsys):
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--out", str(tmp_path / "o"),
            "--set", f"models={spec}"]
    assert main(args) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_an_unimportable_module_exits_2_through_python_m_bench(tmp_path):
    p = subprocess.run([sys.executable, "-m", "bench", "run", "--suite", "toy", "--profile", "smoke",
                        "--out", str(tmp_path / "o"), "--set", "models=no_such_module:net"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 2, p.stderr
    assert "module no_such_module cannot be imported" in p.stderr and "MODULE:FACTORY" in p.stderr
    assert "timm:NAME" in p.stderr and "lenet_300_100" in p.stderr


def test_the_run_line_says_the_data_are_in_memory(tmp_path, capsys):
    """bench.evaluate has no data root: its first line says so instead of naming the output folder."""
    r = bench.evaluate(model=TinyNet, methods=["deterministic"], seeds=[0], out=tmp_path / "mine", train_config=TRAIN,
                       profile="smoke", report=False, **data())
    assert r.exit_code == 0
    err = capsys.readouterr().err
    assert "data in memory (bench.evaluate)" in err and "data root" not in err
