"""A profile's ``model_methods``: a method's options on one model of the profile only (e.g. the
subnetwork size a paper gives its own network), beneath ``--set`` and above the profile's ``methods``."""
from __future__ import annotations

import pytest

from bench.cli import main
from bench.config import method_label, parse_sets, resolve_plan
from bench.errors import BenchError
from bench.executors.grid import grid_cells
from bench.suites import SUITES
from conftest import small_mnist_run
from methods import METHODS


def _labels(plan) -> list[tuple[str, str]]:
    return [(model, method_label(method, cfg, METHODS.get(method).defaults)) for model, method, cfg, _ in grid_cells(plan)]


@pytest.fixture
def toy_two_models(monkeypatch):
    toy = SUITES.get("toy")()
    profile = {**toy.profiles["smoke"], "models": ["mlp_100", "lenet_300_100"],
               "methods": {"mc_dropout": {"samples": 4}},
               "model_methods": {"lenet_300_100": {"mc_dropout": {"p": 0.3}}}}
    monkeypatch.setitem(type(toy).profiles, "smoke", profile)
    return toy


def test_a_model_runs_its_own_options_and_the_others_the_profiles(toy_two_models):
    plan = resolve_plan(toy_two_models, "smoke", ["mc_dropout", "deterministic"], {}, seeds=[0],
                        method_registry=METHODS)
    assert _labels(plan) == [("mlp_100", "mc_dropout[samples=4]"), ("mlp_100", "deterministic"),
                             ("lenet_300_100", "mc_dropout[p=0.3,samples=4]"), ("lenet_300_100", "deterministic")]
    # a sweep runs on every model, over each model's own options; --set wins over model_methods
    plan = resolve_plan(toy_two_models, "smoke", ["mc_dropout"], parse_sets(["mc_dropout.samples=2,3"]), seeds=[0],
                        method_registry=METHODS)
    assert _labels(plan) == [("mlp_100", "mc_dropout[samples=2]"), ("mlp_100", "mc_dropout[samples=3]"),
                             ("lenet_300_100", "mc_dropout[p=0.3,samples=2]"),
                             ("lenet_300_100", "mc_dropout[p=0.3,samples=3]")]
    plan = resolve_plan(toy_two_models, "smoke", ["mc_dropout"], parse_sets(["mc_dropout.p=0.2"]), seeds=[0],
                        method_registry=METHODS)
    assert _labels(plan) == [("mlp_100", "mc_dropout[p=0.2,samples=4]"), ("lenet_300_100", "mc_dropout[p=0.2,samples=4]")]
    assert plan.model_configs == {}  # the same configuration everywhere: nothing per model
    # the model alone (--set models=) runs its own options
    plan = resolve_plan(toy_two_models, "smoke", ["mc_dropout"], parse_sets(["models=lenet_300_100"]), seeds=[0],
                        method_registry=METHODS)
    assert _labels(plan) == [("lenet_300_100", "mc_dropout[p=0.3,samples=4]")]


def test_model_methods_are_checked_like_the_profiles_options(toy_two_models, monkeypatch):
    profile = type(toy_two_models).profiles["smoke"]
    monkeypatch.setitem(profile, "model_methods", {"lenet_300_100": {"mc_dropout": {"rate": 0.3}}})
    with pytest.raises(BenchError, match="unknown option.*rate.*valid"):
        resolve_plan(toy_two_models, "smoke", ["mc_dropout"], {}, method_registry=METHODS)
    monkeypatch.setitem(profile, "model_methods", {"lenet5": {"mc_dropout": {"p": 0.3}}})
    with pytest.raises(BenchError, match="model_methods names lenet5, not one of its models"):
        resolve_plan(toy_two_models, "smoke", ["mc_dropout"], {}, method_registry=METHODS)


def test_a_run_records_each_models_own_configuration(fake_mnist, tmp_path, monkeypatch):
    import json

    cls = type(SUITES.get("mnist_rotated")())
    profile = {**cls.profiles["smoke"], "models": ["lenet_300_100", "mlp_100"],
               "model_methods": {"mlp_100": {"mc_dropout": {"samples": 3}}}}
    monkeypatch.setitem(cls.profiles, "smoke", profile)
    out = tmp_path / "out"
    assert main(small_mnist_run(fake_mnist, out, "mc_dropout", epochs=1)) == 0
    seen = {}
    for path in (out / "mnist_rotated" / "records").rglob("id-*.json"):
        rec = json.loads(path.read_text())
        seen[rec["model"]] = (rec["method_label"], rec["method_config"]["samples"])
    assert seen == {"lenet_300_100": ("mc_dropout[samples=5]", 5), "mlp_100": ("mc_dropout[samples=3]", 3)}


def test_tune_takes_one_model_at_a_time_where_a_method_has_options_of_its_own(toy_two_models, tmp_path, capsys):
    code = main(["tune", "--suite", "toy", "--profile", "smoke", "--methods", "mc_dropout", "--out", str(tmp_path)])
    assert code == 2 and "tune one model at a time (--set models=NAME)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_rotated_mnist_paper_profile_holds_the_subnetwork_laplace_papers_resnet18():
    """Daxberger et al. 2021: a ResNet-18 with over 11 million weights, inference over 42 thousand,
    about 0.38 % of them; the LeNets keep the method's default subnetwork."""
    from bench.models import build_model

    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "paper", ["subnet_laplace"], {}, seeds=[0], method_registry=METHODS)
    cfg = {model: c for model, _, c, _ in grid_cells(plan)}
    n_weights = sum(p.numel() for p in build_model("resnet18_cifar", suite.in_shape, 10).parameters())
    assert n_weights > 11_000_000
    assert cfg["resnet18_cifar"]["n_subnet"] == 42_000 and round(100 * 42_000 / n_weights, 2) == 0.38
    assert cfg["lenet_300_100"]["n_subnet"] is None and cfg["lenet5"]["n_subnet"] is None
    assert cfg["resnet18_cifar"]["swag_n_snapshots"] == 40 and cfg["lenet5"]["swag_n_snapshots"] == 256


def test_the_resnet18_subnetwork_laplace_fits_an_80_gb_gpus_default_limit_not_a_quarter_of_it(monkeypatch):
    """The guard's estimate for the paper's 42,000-weight subnetwork on the ResNet-18 (its profile's
    batches) is within the default limit on an H100 with 78 GiB free (80 % of it), and above a quarter
    of it, the limit before (docs/device.md)."""
    import torch

    from bench.laplace.memory import check_memory, default_memory_limit
    from bench.models import build_model
    from methods.subnet_laplace import memory_terms

    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "paper", ["subnet_laplace"], {}, seeds=[0], method_registry=METHODS)
    cfg = {model: c for model, _, c, _ in grid_cells(plan)}["resnet18_cifar"]
    model = build_model("resnet18_cifar", suite.in_shape, 10)
    terms = memory_terms(cfg, model, torch.zeros(2, *suite.in_shape))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (78 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 0)
    limit = default_memory_limit("cuda")
    est = check_memory(limit=limit, what="resnet18", backend="subnet", s=cfg["n_subnet"], **terms)["total"]
    assert 0.25 * 78 * 2**30 < est <= limit
