import pytest
import torch
from torch import nn

from bench.checkpoints import MapCache
from bench.data import TensorLoader
from bench.errors import BenchError
from bench.models import build_model
from bench.predictive import RegressionPredictive
from bench.tasks import classification
from bench.training import TrainConfig, nll_loss, train_model
from methods import METHODS, MethodContext
from methods.mc_dropout import split_at_first, stochastic_forward


def toy_classification(n=256, d=20, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, k, generator=g)
    return x, (x @ w).argmax(1)


def make_ctx(tmp_path, method_seed=0, epochs=2):
    x, y = toy_classification()
    task = classification(3)
    build = lambda dropout=0.0: build_model("lenet_300_100", (20,), 3, dropout=dropout)  # noqa: E731
    cfg = TrainConfig(epochs=epochs, batch_size=32, lr=0.05)
    cache = MapCache(tmp_path / "ckpt", {"model": "lenet_300_100", "t": 1}, build, task, x, y, cfg, torch.device("cpu"))
    ctx = MethodContext(task=task, build_model=build, train=cfg, device=torch.device("cpu"), seed=method_seed,
                        map_cache=cache, num_train=len(x), work_dir=tmp_path / "work")
    return ctx, x, y


def test_deep_ensemble_vectorised_prediction_equals_member_loop(tmp_path):
    ctx, x, y = make_ctx(tmp_path)
    ens = METHODS.get("deep_ensemble")(ctx, members=3)
    ens.fit(None, None)
    assert ens.member_seeds() == [0, 1, 2]
    with torch.no_grad():
        loop = torch.stack([torch.softmax(m(x), -1) for m in ens.members])
    pred = ens.predict(x)
    torch.testing.assert_close(pred.sample_probs, loop, atol=1e-6, rtol=1e-5)
    vectorised = torch.softmax(ens.member_outputs(x, vectorised=True), -1)  # the GPU path
    torch.testing.assert_close(vectorised, loop, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(pred.probs, loop.mean(0), atol=1e-6, rtol=1e-5)
    # members are distinct networks, and they are the cached MAP networks
    assert not torch.allclose(loop[0], loop[1])
    assert all(ctx.map_cache.path(s).exists() for s in range(3))


def test_mc_dropout_prefix_reuse_matches_full_sampling_in_distribution(tmp_path):
    torch.manual_seed(0)
    model = build_model("lenet_300_100", (20,), 3, dropout=0.3).eval()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.train()
    x = torch.randn(4, 20)
    prefix, rest = split_at_first(model, nn.Dropout)
    assert isinstance(prefix[-1], nn.ReLU)  # the first hidden layer is computed once
    with torch.no_grad():
        fast = torch.softmax(stochastic_forward(prefix, rest, x, 4000), -1)
        slow = torch.stack([torch.softmax(model(x), -1) for _ in range(4000)])
    se = slow.std(0) / 4000 ** 0.5
    assert ((fast.mean(0) - slow.mean(0)).abs() < 5 * se + 1e-6).all()
    assert fast.std(0).min() > 0  # samples differ


def test_mc_dropout_with_p0_is_the_deterministic_network(tmp_path):
    ctx, x, y = make_ctx(tmp_path)
    m = METHODS.get("mc_dropout")(ctx, p=0.0, samples=3)
    m.model.eval()
    pred = m.predict(x)
    with torch.no_grad():
        torch.testing.assert_close(pred.probs, torch.softmax(m.model(x), -1))


def test_method_state_round_trip(tmp_path):
    ctx, x, y = make_ctx(tmp_path)
    loader = TensorLoader(x, y, 32, seed=0)
    for name in ("deterministic", "mc_dropout"):
        a = METHODS.get(name)(ctx, **({"p": 0.0} if name == "mc_dropout" else {}))
        a.fit(loader, (x, y))
        b = METHODS.get(name)(ctx, **({"p": 0.0} if name == "mc_dropout" else {}))
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(a.predict(x).probs, b.predict(x).probs)


def test_training_resume_from_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")  # a checkpoint after every epoch
    x, y = toy_classification()
    task = classification(3)
    cfg = TrainConfig(epochs=3, batch_size=32, lr=0.05, schedule="cosine")

    def fresh():
        torch.manual_seed(0)
        return build_model("lenet_300_100", (20,), 3), TensorLoader(x, y, 32, seed=1)

    model, loader = fresh()
    train_model(model, loader, cfg, nll_loss(task))
    reference = [p.detach().clone() for p in model.parameters()]

    ckpt = tmp_path / "run.partial"
    model, loader = fresh()

    class Killed(Exception):
        pass

    calls = {"n": 0}

    def loss_then_kill(m, xb, yb, frac):
        calls["n"] += 1
        if calls["n"] == len(loader) + 3:  # three steps into the second epoch
            raise Killed
        return task.loss(m(xb), yb)

    with pytest.raises(Killed):
        train_model(model, loader, cfg, loss_then_kill, resume_path=ckpt)
    assert ckpt.exists()
    model, loader = fresh()
    train_model(model, loader, cfg, nll_loss(task), resume_path=ckpt)
    assert not ckpt.exists()
    for p, r in zip(model.parameters(), reference):
        torch.testing.assert_close(p, r)


def test_regression_mixture_moments():
    means = torch.tensor([[0.0], [2.0]])
    variances = torch.tensor([[1.0], [1.0]])
    p = RegressionPredictive.from_samples(means, variances)
    assert p.mean.item() == pytest.approx(1.0)
    assert p.var.item() == pytest.approx(2.0)  # 1 + Var(means) = 1 + 1


def test_deterministic_with_its_own_recipe_trains_its_own_network(tmp_path):
    """``deterministic[optimizer=adam, lr=...]`` is the like-for-like control of a method with
    another recipe: a network of its own, trained with those settings, not the shared MAP one."""
    ctx, x, y = make_ctx(tmp_path, epochs=3)
    shared = METHODS.get("deterministic")(ctx).fit(TensorLoader(x, y, 32, shuffle=True, seed=1), None)
    own = METHODS.get("deterministic")(ctx, optimizer="adam", lr=0.01, weight_decay=0.0)
    own.fit(TensorLoader(x, y, 32, shuffle=True, seed=1), None)
    assert own.meta["train"]["optimizer"] == "adam" and own.meta["train"]["lr"] == 0.01
    assert own.meta["train"]["epoch_loss"][-1] < own.meta["train"]["epoch_loss"][0]  # it trained
    with torch.no_grad():
        assert not torch.allclose(shared.predict(x).probs, own.predict(x).probs)
        acc = (own.predict(x).probs.argmax(-1) == y).float().mean()
    assert acc > 0.8
    assert list(ctx.map_cache.dir.glob("seed*.pt")) == [ctx.map_cache.path(0)]  # only the shared one is cached


def test_training_time_of_a_resumed_training_counts_the_earlier_epochs(tmp_path, monkeypatch):
    """The clock of a resumed training starts from what its checkpoint says the killed process
    spent; the surrounding earlier_training_time block sees that part; blocks nest."""
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")  # a checkpoint after every epoch
    import time

    from bench.measurement import NO_USAGE
    from bench.training import earlier_training_time

    x, y = toy_classification()
    task = classification(3)
    cfg = TrainConfig(epochs=4, batch_size=32, lr=0.05)
    ckpt = tmp_path / "run.partial"

    def run(stop_at=None, pause=0.0):
        torch.manual_seed(0)
        model = build_model("lenet_300_100", (20,), 3)

        def on_epoch_end(epoch):
            time.sleep(pause)
            if epoch == stop_at:
                raise KeyboardInterrupt

        return train_model(model, TensorLoader(x, y, 32, seed=1), cfg, nll_loss(task), resume_path=ckpt,
                           on_epoch_end=on_epoch_end)

    with earlier_training_time() as outer:
        with pytest.raises(KeyboardInterrupt):
            run(stop_at=2, pause=0.3)  # epochs 0 and 1 checkpointed: >= 0.6 s
        with earlier_training_time() as inner:
            log = run()
    assert outer == [0.0, NO_USAGE]  # the resumed training counted in the innermost block only
    assert 0.6 <= inner[0] == log["resumed_seconds"] < 5
    assert log["train_seconds"] >= inner[0]
    # what the killed process did with its time came along: mostly asleep, not stopped
    assert inner[1]["wall_s"] == pytest.approx(inner[0], abs=0.05)
    assert inner[1]["thread_cpu_s"] < 0.5 * inner[1]["wall_s"] and inner[1]["paused_s"] < 0.1
    with earlier_training_time() as fresh:
        log = run()
    assert fresh == [0.0, NO_USAGE] and log["resumed_seconds"] == 0.0 and 0 < log["train_seconds"] < inner[0]


def test_a_training_checkpoints_once_its_interval_has_passed_not_after_every_epoch(tmp_path, monkeypatch):
    """Resume checkpoints follow bench.training.checkpoint_interval: with the default (a minute) a
    training of short epochs writes none; at 0 one after every epoch but the last; on a clock that
    moves 25 s an epoch and an interval of 60 s, after epochs 3 and 6 (75 s and 150 s from the
    start); a bad value is refused with what is valid."""
    import bench.training as T

    x, y = toy_classification()
    task = classification(3)
    written = []
    real_save = T.save_training_state
    monkeypatch.setattr(T, "save_training_state", lambda path, *a, **k: (written.append(k["epoch"]),
                                                                          real_save(path, *a, **k)))

    def train(epochs=8, on_epoch_end=None):
        written.clear()
        torch.manual_seed(0)
        model = build_model("lenet_300_100", (20,), 3)
        T.train_model(model, TensorLoader(x, y, 32, seed=1), TrainConfig(epochs=epochs, batch_size=32, lr=0.05),
                      nll_loss(task), resume_path=tmp_path / "run.partial", on_epoch_end=on_epoch_end)
        return list(written)

    monkeypatch.delenv("BENCH_CHECKPOINT_INTERVAL_S", raising=False)
    assert T.checkpoint_interval() == T.CHECKPOINT_INTERVAL_S == 60.0
    assert train() == []
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")
    assert train() == [1, 2, 3, 4, 5, 6, 7]
    clock = {"t": 1000.0}
    monkeypatch.setattr(T.time, "monotonic", lambda: clock["t"])
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "60")
    assert train(on_epoch_end=lambda epoch: clock.__setitem__("t", clock["t"] + 25.0)) == [3, 6]
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", bad)
        with pytest.raises(BenchError, match="a number >= 0"):
            train(epochs=2)
