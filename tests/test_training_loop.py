"""The training loop and loader on an accelerator: the loss read on the host every
``divergence_check_steps`` steps, not every step, and in-memory data gathered on the device."""
import collections
import math

import pytest
import torch
from torch import nn

import bench.training as training
from bench.data import TensorLoader
from bench.errors import DivergedError
from bench.tasks import classification
from bench.training import TrainConfig, train_model

#: the Python-level reads of a tensor's value on the host: each one is a CUDA synchronisation
HOST_READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


def _count_host_reads(monkeypatch, only_under: str | None = None) -> list[str]:
    """Record every Python-level read of a tensor's value from now on (HOST_READS); with
    ``only_under``, the reads made by code in files under that folder only (installed packages aside)."""
    import sys

    reads: list[str] = []
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def wrapped(self, *a, _n=name, _original=original, **k):
            caller = sys._getframe(1).f_code.co_filename
            if only_under is None or (caller.startswith(only_under) and "site-packages" not in caller):
                reads.append(f"{_n} {caller}:{sys._getframe(1).f_lineno}")
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, wrapped)
    return reads


def _data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def _recording_loss(seen, nan_from=None):
    task = classification(3)

    def fn(model, x, y, _progress):
        loss = task.loss(model(x), y)
        seen.append((float(loss), len(x)))  # the test's own read, before the loop's counting starts
        if nan_from is not None and len(seen) > nan_from:
            loss = loss * float("nan")
        return loss
    return fn


def test_epoch_loss_is_the_example_weighted_mean_of_the_step_losses():
    x, y = _data(205)
    seen = []
    log = train_model(_net(), TensorLoader(x, y, 20, seed=1), TrainConfig(epochs=2, batch_size=20),
                      _recording_loss(seen))
    steps = math.ceil(205 / 20)
    for e in range(2):
        part = seen[e * steps:(e + 1) * steps]
        want = sum(v * k for v, k in part) / sum(k for _, k in part)  # a Python (float64) sum, as the loop's was
        assert log["epoch_loss"][e] == pytest.approx(want, rel=1e-12, abs=0)


def test_on_the_cpu_a_non_finite_loss_stops_training_at_its_step():
    x, y = _data()
    seen = []
    with pytest.raises(DivergedError, match=r"non-finite loss nan at epoch 0 step 3 "):
        train_model(_net(), TensorLoader(x, y, 20, seed=1), TrainConfig(epochs=1, batch_size=20),
                    _recording_loss(seen, nan_from=3))
    assert len(seen) == 4


def test_between_checks_the_loop_reads_no_tensor_value_and_reports_the_steps_of_a_divergence(monkeypatch):
    """The accelerator's schedule on the CPU: with checks every 4 steps the loop reads the loss
    once per 4 steps (and once at the epoch's end), and a loss that turns non-finite at step 5 is
    caught at step 7, named as steps 4-7."""
    monkeypatch.setattr(training, "divergence_check_steps", lambda device: 4)
    x, y = _data(200)
    seen = []
    reads = _count_host_reads(monkeypatch)
    train_model(_net(), TensorLoader(x, y, 20, seed=1), TrainConfig(epochs=1, batch_size=20),
                _recording_loss(seen))
    loop_reads = len(reads) - len(seen)  # the recording loss function's own float() reads aside
    # 10 steps: checks after steps 3 and 7 and at the last step (9), plus the epoch's mean
    assert loop_reads == 4, reads
    reads.clear()
    seen.clear()
    with pytest.raises(DivergedError, match=r"epoch 0, in steps 4-7"):
        train_model(_net(), TensorLoader(x, y, 20, seed=1), TrainConfig(epochs=1, batch_size=20),
                    _recording_loss(seen, nan_from=5))
    assert len(seen) == 8


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA: runs on a lent GPU machine (python -m bench.device_session, docs/device.md)")
    return torch.device("cuda")


@pytest.mark.cuda
def test_a_cuda_loader_keeps_its_data_on_the_device_and_gives_the_cpu_loaders_batches():
    dev = _cuda()
    x, y = _data(205)
    on_cuda, on_cpu = TensorLoader(x, y, 20, seed=3, device=dev), TensorLoader(x, y, 20, seed=3)
    for _ in range(2):  # two epochs: the same order stream
        for (xa, ya), (xb, yb) in zip(on_cuda, on_cpu, strict=True):
            assert xa.device.type == "cuda" and torch.equal(xa.cpu(), xb) and torch.equal(ya.cpu(), yb)
    assert on_cuda._resident is not None and on_cuda._resident[0].device.type == "cuda"
    assert on_cuda.x.device.type == "cpu"  # the given tensors are left as they were


@pytest.mark.cuda
def test_a_cuda_training_step_does_not_synchronise_with_the_host_between_checks():
    import warnings

    dev = _cuda()
    x, y = _data(2000)
    task = classification(3)
    loader = TensorLoader(x, y, 20, seed=1, device=dev)
    net = _net().to(dev)
    cfg = TrainConfig(epochs=1, batch_size=20)
    train_model(net, loader, cfg, lambda m, xb, yb, _p: task.loss(m(xb), yb))  # warm-up
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            train_model(net, loader, cfg, lambda m, xb, yb, _p: task.loss(m(xb), yb))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "called a synchronizing" in str(w.message)]
    # 100 steps: the checks after steps 49 and 99 and the epoch's mean, not one or two per step
    assert len(syncs) <= 100 // training.DIVERGENCE_CHECK_STEPS + 2, syncs


# -------------------------------------------------------------------- precision and memory layout
def _conv_data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def _conv_net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 3))


def _watch(net, seen):
    """Record, at every training forward pass, the conv's output dtype and whether its weight and input
    are in the channels-last layout."""
    conv = net[0]

    def hook(mod, inp, out):
        if mod.training:
            cl = torch.channels_last
            seen.append((out.dtype, mod.weight.is_contiguous(memory_format=cl) and not mod.weight.is_contiguous(),
                         inp[0].is_contiguous(memory_format=cl) and not inp[0].is_contiguous()))
    conv.register_forward_hook(hook)


@pytest.mark.parametrize("precision,channels_last", [("fp32", False), ("bf16", False), ("fp32", True), ("bf16", True)])
def test_training_steps_run_at_the_configured_precision_and_layout(precision, channels_last):
    """train.precision=bf16: every training step's forward pass runs in bfloat16 (autocast) while the
    weights stay float32; train.channels_last: the weights and inputs are channels-last during the steps
    and the network is back in the usual layout afterwards. The loss still falls as in float32."""
    x, y = _conv_data()
    seen, net = [], _conv_net()
    _watch(net, seen)
    cfg = TrainConfig(epochs=3, batch_size=16, lr=0.1, precision=precision, channels_last=channels_last)
    log = train_model(net, TensorLoader(x, y, 16, seed=1), cfg, training.nll_loss(classification(3)))
    assert len(seen) == 3 * 4
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert {s[0] for s in seen} == {want}
    assert {s[1] for s in seen} == {channels_last} and {s[2] for s in seen} == {channels_last}
    assert all(p.dtype == torch.float32 and p.is_contiguous() for p in net.parameters())
    assert log["epoch_loss"][-1] < log["epoch_loss"][0]
    reference = train_model(_conv_net(), TensorLoader(x, y, 16, seed=1), TrainConfig(epochs=3, batch_size=16, lr=0.1),
                            training.nll_loss(classification(3)))
    assert log["epoch_loss"][-1] == pytest.approx(reference["epoch_loss"][-1], rel=0.05)


@pytest.mark.parametrize("channels_last", [False, True])
def test_bfloat16_on_the_cpu_refuses_a_convolution_whose_input_is_smaller_than_its_stride(channels_last):
    """oneDNN's bfloat16 convolution on the CPU returns NaN weight gradients at random when an input is
    smaller than the stride (a 3x3 stride-2 convolution on a 1x1 map: resnet_small's last block on
    32x32 images). Such a layer stops the training at its first forward pass with a BenchError naming it,
    before any step; the hooks are gone and the layout restored after it; the same network trains in
    float32, and in bfloat16 on inputs at least as large as the stride."""
    from bench.errors import BenchError

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=8, padding=1), nn.ReLU(),
                             nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(8, 3))

    x, y = _conv_data()  # 8x8 -> 1x1 -> a stride-2 convolution on a 1x1 map
    bad = net()
    before = [p.detach().clone() for p in bad.parameters()]
    cfg = TrainConfig(epochs=1, batch_size=16, lr=0.1, precision="bf16", channels_last=channels_last)
    with pytest.raises(BenchError, match=r"layer 2 has a 1x1 input and stride 2x2.*NaN weight gradients"):
        train_model(bad, TensorLoader(x, y, 16, seed=1), cfg, training.nll_loss(classification(3)))
    assert all(torch.equal(a, b) for a, b in zip(before, bad.parameters()))  # refused before any step
    assert not any(m._forward_pre_hooks for m in bad.modules())
    assert all(p.is_contiguous() for p in bad.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # outside training the network is untouched
        bad(x[:2])
    fp32 = TrainConfig(epochs=1, batch_size=16, lr=0.1, channels_last=channels_last)
    assert math.isfinite(train_model(net(), TensorLoader(x, y, 16, seed=1), fp32,
                                   training.nll_loss(classification(3)))["epoch_loss"][0])
    big = torch.randn(64, 3, 16, 16, generator=torch.Generator().manual_seed(1))  # 16x16 -> 2x2: stride 2 fits
    assert math.isfinite(train_model(net(), TensorLoader(big, y, 16, seed=1), cfg,
                                   training.nll_loss(classification(3)))["epoch_loss"][0])


@pytest.mark.cuda
def test_bfloat16_weight_gradients_of_a_convolution_wider_than_its_input_are_finite_on_cuda():
    """The geometry the CPU refuses in bfloat16 (StepFormat: oneDNN's weight gradients are NaN at random
    when an input is smaller than the stride) trains on a GPU: over 100 fresh 3x3 stride-2 convolutions
    on 1x1 maps (resnet_small's last block on 32x32 images), every weight gradient is finite and equals
    the float32 one to bfloat16's precision. Failing here means the guard must cover CUDA too."""
    dev = _cuda()
    torch.manual_seed(0)
    for _ in range(100):
        conv = nn.Conv2d(64, 64, 3, stride=2, padding=1, bias=False).to(dev)
        x = torch.randn(64, 64, 1, 1, device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            conv(x).float().sum().backward()
        g = conv.weight.grad.clone()
        conv.weight.grad = None
        conv(x).sum().backward()
        assert torch.isfinite(g).all() and torch.allclose(g, conv.weight.grad, rtol=2e-2, atol=0.5)


def test_the_later_training_fields_leave_earlier_identities_alone_and_are_checked():
    """At fp32 and the usual layout the two fields are not in the training configuration a cell's
    identity, its MAP key and its records carry (so kept records keep their hashes); set, they are,
    and an unknown precision is refused with the valid ones."""
    from bench.errors import BenchError

    assert "precision" not in TrainConfig().to_dict() and "channels_last" not in TrainConfig().to_dict()
    d = TrainConfig(precision="bf16", channels_last=True).to_dict()
    assert d["precision"] == "bf16" and d["channels_last"] is True
    assert TrainConfig.from_dict(d) == TrainConfig(precision="bf16", channels_last=True)
    with pytest.raises(BenchError, match="precision='fp16' must be one of 'fp32', 'bf16'"):
        TrainConfig(precision="fp16").check()


def test_ssvi_trains_at_the_configured_precision(monkeypatch):
    """SSVI's own loop (drop-and-grow) takes train.precision as train_model does: its steps run under
    bfloat16 autocast."""
    from methods import METHODS
    from methods.base import MethodContext

    entered = []
    real = torch.autocast

    class Recording(real):
        def __enter__(self):
            entered.append((self.device, self.fast_dtype))
            return super().__enter__()

    monkeypatch.setattr(torch, "autocast", Recording)
    x, y = _conv_data(48)
    cls = METHODS.get("ssvi")
    task = classification(3)
    for precision, want in (("fp32", 0), ("bf16", 3 * 3)):
        entered.clear()
        ctx = MethodContext(task=task, device=torch.device("cpu"),
                            build_model=lambda dropout=0.0: _conv_net(), map_cache=None, seed=0,
                            train=TrainConfig(epochs=3, batch_size=16, lr=0.05, precision=precision))
        m = cls(ctx, train_samples=1).fit(TensorLoader(x, y, 16, seed=1), (x[:8], y[:8]))
        assert len(entered) == want and all(e == ("cpu", torch.bfloat16) for e in entered), entered
        assert all(p.dtype == torch.float32 for p in m.model.parameters())


@pytest.mark.parametrize("kind", ["pbn-elbo", "mfvi-elbo-local-reparam", "vdp", "ssvi-lrt"])
def test_a_training_step_of_the_variational_losses_reads_nothing_on_the_host(kind, monkeypatch):
    """The ELBO of PBN / mean-field VI and VDP++'s loss leave their terms (NLL, KL) in ``log`` as
    tensors on the device: a step (loss, backward) reads no value on the host, which on a GPU would
    wait for the step to finish; the terms are read at the epoch's end (host_float). SSVI's network
    (its loop keeps the terms itself) reads nothing either."""
    from bench.subnet.partial_vi import PartialVI, elbo_loss
    from bench.vdp import to_vdp
    from bench.vdp.loss import vdp_loss

    x, y = _data(20)
    log: dict = {}
    if kind == "ssvi-lrt":  # SSVI's own loop: the same terms, its network in local-reparameterisation mode
        from bench.subnet.ssvi import SSVINet

        model = SSVINet(_net(), 0.3, generator=torch.Generator().manual_seed(1))
        task = classification(3)

        def fn(m, xb, yb, _f):
            nll, kl = task.loss(m(xb), yb), m.kl()
            log["nll"], log["kl"] = nll.detach(), kl.detach()
            return nll + 0.5 * kl / 100
    elif kind == "vdp":
        model = to_vdp(_net(), rho_init=-3.0)
        fn = vdp_loss(100, kl_weight=1.0, likelihood="cross_entropy", log=log)
    else:
        net = _net()
        n = sum(p.numel() for p in net.parameters())
        idx = torch.arange(n) if kind.startswith("mfvi") else torch.arange(0, n, 7)
        model = PartialVI(net, idx)
        fn = elbo_loss(classification(3), 100, samples=3, weight_decay=1e-4, log=log,
                       local_reparam=kind.endswith("local-reparam"))
    fn(model, x, y, 0.0).backward()  # warm-up: first-call work may read
    reads = _count_host_reads(monkeypatch)
    fn(model, x, y, 0.5).backward()
    assert reads == [] and {"nll", "kl"} <= set(log)
    monkeypatch.undo()
    assert all(isinstance(training.host_float(log[k]), float) for k in ("nll", "kl"))


@pytest.mark.parametrize("method", ["mc_dropout", "pbn", "mfvi", "vdp", "ssvi"])
def test_a_methods_training_reads_the_host_a_few_times_an_epoch_not_every_step(method, monkeypatch):
    """Each method's fit on the accelerator's schedule (the loss checked every 50 steps), 1 epoch
    against 3 of 16 steps each: the reads of tensor values that the two extra epochs add in this
    project's code (the checks, the epoch's mean loss, the sigma and ELBO-term statistics) stay at
    most 8 an epoch; a read at every step would be at least 16 more. (torch's Adam reads its step
    count, a tensor it keeps on the host, at every step: no wait for the device, and not ours.)"""
    from pathlib import Path

    from bench.models import build_model
    from methods.base import METHODS, MethodContext
    from tests.test_subnet_laplace import StubCache

    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setattr(training, "divergence_check_steps", lambda device: 50)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 1, 6, 6, generator=g), torch.randint(0, 5, (256,), generator=g)

    def build(dropout=0.0):
        torch.manual_seed(0)
        return build_model("lenet_300_100", (1, 6, 6), 5, dropout=dropout)

    def reads_of_fit(epochs):
        cfg = TrainConfig(epochs=epochs, batch_size=16, lr=0.01, momentum=0.9)
        ctx = MethodContext(task=classification(5), build_model=build, train=cfg, device=torch.device("cpu"),
                            seed=0, map_cache=StubCache(build()), num_train=256)
        opts = {"ssvi": {"delta": 10_000}, "mc_dropout": {"samples": 2}}.get(method, {})
        m = METHODS.get(method)(ctx, **opts)
        with pytest.MonkeyPatch.context() as mp:
            reads = _count_host_reads(mp, only_under=root)
            m.fit(TensorLoader(x, y, 16, seed=0), (x[:32], y[:32]))
        return reads

    one, three = reads_of_fit(1), reads_of_fit(3)
    assert len(three) - len(one) <= 2 * 8, collections.Counter(three) - collections.Counter(one)
