"""The plugin contract, checked on every registered method (docs/plugins.md): a reload from
``state_dict`` predicts exactly what the fitted method predicts, predictions do not depend on how
the inputs are batched, tasks a method does not support are refused when the run is planned,
and no option silently replaces the profile's training budget."""
from __future__ import annotations

import os
import traceback

import pytest
import torch

from bench.checkpoints import MapCache
from bench.config import resolve_plan
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.models import build_model
from bench.plugins import load_plugins, static_contract_problems
from bench.seeding import seed_everything
from bench.tasks import classification
from bench.training import TrainConfig
from methods import METHODS
from synthetic import bar_classes
from methods.base import Method, MethodContext

# plugins outside the repository are checked too: installed ones (entry-point group bench.methods)
# and the files of BENCH_PLUGINS (os.pathsep-separated); `python -m bench check-plugin FILE` sets it
# and BENCH_CONTRACT_METHODS (tests/conftest.py: only these methods' tests)
load_plugins([f for f in os.environ.get("BENCH_PLUGINS", "").split(os.pathsep) if f])

IN_SHAPE, K = (1, 8, 8), 3
#: methods whose randomness is drawn per example (dropout masks), so that a different batching
#: draws different masks: for them the batch check compares the mean over many draws
PER_EXAMPLE_RANDOMNESS = {"mc_dropout"}
#: small budgets so that every method fits in seconds
TINY = {"deep_ensemble": {"members": 2}, "subnet_laplace": {"n_subnet": 50, "swag_n_snapshots": 8},
        "mc_dropout": {"samples": 4}, "vdp": {"epochs": 1}}


def data(n=96, seed=0):
    return bar_classes(n, seed, K, IN_SHAPE)


def context(tmp_path, seed=0, device=torch.device("cpu")) -> MethodContext:
    task = classification(K)
    cfg = TrainConfig(epochs=2, batch_size=32, lr=0.05)
    x, y = data()

    def build(dropout=0.0):
        return build_model("lenet_300_100", IN_SHAPE, K, dropout=dropout)

    cache = MapCache(tmp_path / "map", {"model": "contract"}, build, task, x.to(device), y.to(device), cfg, device)
    return MethodContext(task=task, build_model=build, train=cfg, device=device, seed=seed,
                         map_cache=cache, num_train=len(x), work_dir=tmp_path / "work")


def fitted(name, tmp_path, device=torch.device("cpu")):
    ctx = context(tmp_path, device=device)
    seed_everything(0)
    m = METHODS.get(name)(ctx, **TINY.get(name, {}))
    x, y = data()
    val = tuple(t.to(device) for t in data(48, seed=1))
    m.fit(TensorLoader(x, y, 32, shuffle=True, seed=0, device=device), val)
    return ctx, m


def predict(m, x, seed=123):
    seed_everything(seed)
    with torch.no_grad():
        return m.predict(x).probs


@pytest.mark.parametrize("name", METHODS.names())
def test_reload_and_batching_give_the_same_predictions(name, tmp_path):
    ctx, m = fitted(name, tmp_path)
    x, _ = data(40, seed=2)
    p = predict(m, x)
    assert p.shape == (40, K) and torch.allclose(p.sum(-1), torch.ones(40), atol=1e-5)
    fresh = METHODS.get(name)(ctx, **TINY.get(name, {}))
    fresh.load_state_dict(m.state_dict())
    assert torch.equal(predict(fresh, x), p), "a reload from state_dict predicts differently"
    halves = torch.cat([predict(m, x[:17]), predict(m, x[17:])])
    if name in PER_EXAMPLE_RANDOMNESS:
        many = lambda xs: torch.stack([predict(m, xs, seed=s) for s in range(30)]).mean(0)  # noqa: E731
        assert torch.allclose(torch.cat([many(x[:17]), many(x[17:])]), many(x), atol=0.1)
    else:
        assert torch.allclose(halves, p, atol=1e-5), "predictions depend on the batch size"


@pytest.mark.parametrize("name", [n for n in METHODS.names() if "regression" not in METHODS.get(n).tasks])
def test_an_unsupported_task_is_refused_when_the_run_is_planned(name):
    from bench.suites import SUITES

    with pytest.raises(BenchError, match="does not support regression"):
        resolve_plan(SUITES.get("toy")(), "smoke", [name], {}, method_registry=METHODS)


@pytest.mark.parametrize("name", METHODS.names())
def test_no_option_silently_replaces_the_training_budget(name):
    """An option named like a budget field (epochs, lr, ...) overrides the profile's budget
    (Method.train_config); its default must be None (the profile's) unless the method declares
    the replacement, with its reason, in OWN_BUDGET (shown by bench list)."""
    cls = METHODS.get(name)
    silent = {k for k in Method.TRAIN_OVERRIDES if k in cls.defaults and cls.defaults[k] is not None}
    assert silent <= set(cls.OWN_BUDGET), f"{name}: {sorted(silent - set(cls.OWN_BUDGET))} undeclared"
    assert all(isinstance(why, str) and why for why in cls.OWN_BUDGET.values())


@pytest.mark.parametrize("name", METHODS.names())
def test_static_contract_rules(name):
    """The rules bench run checks at plan time (bench.plugins.static_contract_problems): declared
    options exist, PREDICT_OPTIONS is a tuple of names, no budget option is silent, a method that
    uses ctx.map_cache declares STARTS_FROM, every abstract method is implemented."""
    assert static_contract_problems(METHODS.get(name)) == []


@pytest.mark.parametrize("name", sorted(METHODS.names()))
def test_starts_from_says_which_map_networks_a_fit_uses(name, tmp_path):
    """``starts_from`` decides whether a method can run on a pretrained MAP network (imagenetc):
    "map" fits use the seed's MAP network and no other, "maps" several, "scratch" none."""
    ctx, m = fitted(name, tmp_path)
    used = set(ctx.map_cache.requested)
    kind = METHODS.get(name).starts_from(m.config)
    if kind == "map":
        assert used == {ctx.seed}, used
    elif kind == "maps":
        assert len(used) > 1, used
    else:
        assert kind == "scratch" and not used, used
    # the executors train exactly these networks ahead of the cell (docs/scaleout.md)
    assert set(METHODS.get(name).map_seeds(m.config, ctx.seed)) == used, used


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA: runs on a lent GPU machine (python -m bench.device_session, docs/device.md)")
    return torch.device("cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("name", METHODS.names())
def test_a_cuda_fit_predicts_on_the_cpu_what_it_predicts_on_cuda(name, tmp_path):
    """Fitted on CUDA, reloaded from its state_dict on the CPU: the same predictions (float
    tolerance; methods that draw per prediction: the mean over many draws, as their generators
    differ between devices)."""
    dev = _cuda()
    _, m = fitted(name, tmp_path / "cuda", device=dev)
    x, _ = data(40, seed=2)
    p_cuda = predict(m, x.to(dev))
    assert p_cuda.device.type == "cuda"
    cpu_ctx = context(tmp_path / "cpu")
    on_cpu = METHODS.get(name)(cpu_ctx, **TINY.get(name, {}))
    on_cpu.load_state_dict({k: v.cpu() if torch.is_tensor(v) else v for k, v in m.state_dict().items()})
    p_cpu = predict(on_cpu, x)
    if name in PER_EXAMPLE_RANDOMNESS or METHODS.get(name).PREDICT_OPTIONS:
        many = lambda mm, xs: torch.stack([predict(mm, xs, seed=s).cpu() for s in range(30)]).mean(0)  # noqa: E731
        assert torch.allclose(many(m, x.to(dev)), many(on_cpu, x), atol=0.1)
    else:
        assert torch.allclose(p_cuda.cpu(), p_cpu, atol=1e-3), (p_cuda.cpu() - p_cpu).abs().max()


@pytest.mark.cuda
@pytest.mark.parametrize("name", METHODS.names())
def test_predict_on_cuda_does_not_synchronise_with_the_host(name, tmp_path):
    """No host-device copy or synchronisation inside predict (torch.cuda.set_sync_debug_mode):
    each one stalls the GPU once per evaluation batch."""
    import warnings

    dev = _cuda()
    _, m = fitted(name, tmp_path, device=dev)
    x = data(40, seed=2)[0].to(dev)
    predict(m, x)  # warm-up: lazy initialisation may synchronise once
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            predict(m, x)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # "called a synchronizing CUDA operation"; not the notice that the debug mode is a prototype,
    # which torch gives on its first use in a process (it failed the first method tested once)
    syncs = [str(w.message).splitlines()[0] for w in caught if "called a synchronizing" in str(w.message)]
    assert not syncs, syncs


#: the Python-level reads of a tensor's value on the host: each one is a CUDA synchronisation
HOST_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


@pytest.mark.parametrize("name", METHODS.names())
def test_predict_reads_no_tensor_value_on_the_host(name, tmp_path, monkeypatch):
    """The CPU stand-in of the CUDA test above, run everywhere: predict reads no tensor's value into
    Python (``.item()``, ``float(t)``, ``if t:`` ...), each a synchronisation per batch on a GPU. It
    finds what the device found (laplace-torch's Kronecker posterior precision, rebuilt per batch,
    read its Hessian factor with ``float``); syncs inside C++ kernels only the CUDA test sees."""
    _, m = fitted(name, tmp_path)
    x = data(40, seed=2)[0]
    predict(m, x)  # warm-up, as on CUDA
    reads = []
    for attr in HOST_READS:
        orig = getattr(torch.Tensor, attr)

        def spy(self, *a, _orig=orig, _attr=attr, **k):
            reads.append(f"Tensor.{_attr}\n" + "".join(traceback.format_stack(limit=4)[:-1]))
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, attr, spy)
    predict(m, x)
    monkeypatch.undo()
    assert not reads, reads[0]


def test_last_layer_laplace_reuses_its_posterior_precision_until_the_prior_changes(tmp_path):
    """The cache behind the host-read fix: one precision per posterior and prior, the variances
    laplace-torch's own property gives, a new precision (and new variances) for a new prior."""
    from bench.laplace.kron_diag import last_layer_kron_variance

    _, m = fitted("laplace_last_layer", tmp_path)
    x = data(40, seed=2)[0]
    p = m.posterior_precision()
    assert m.posterior_precision() is p
    torch.testing.assert_close(m.glm_moments(x)[1], last_layer_kron_variance(m.la, x, m.la.posterior_precision)[1])
    before = m.glm_moments(x)[1]
    m.la.prior_precision = float(m.la.prior_precision.reshape(-1)[0]) * 10
    assert m.posterior_precision() is not p
    after = m.glm_moments(x)[1]
    torch.testing.assert_close(after, last_layer_kron_variance(m.la, x, m.la.posterior_precision)[1])
    assert (after < before).all()  # a tighter prior: smaller variances
