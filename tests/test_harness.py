"""End to end through the CLI on the toy suite (no data) and on a fake MNIST in the real layout."""
import json

import pytest

from bench.cli import main
from bench.store import load_records
from synthetic import TouchOnUnpickle

TOY = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--set", "train.epochs=30"]


def run_cli(args, capsys=None):
    code = main(args)
    return code


def test_toy_run_writes_records_and_resumes(tmp_path):
    out = tmp_path / "results"
    assert main(TOY + ["--out", str(out)]) == 0
    df = load_records(out)
    from bench.suites import SUITES

    methods = set(SUITES.get("toy").default_methods)
    assert {"deterministic", "mc_dropout", "deep_ensemble", "pbn", "mfvi"} <= methods
    assert set(df["method"]) == methods
    assert len(df) == len(methods) * 3 and (df["status"] == "ok").all()  # id, shift, validation per method
    for col in ("git_commit", "versions.torch", "device", "started_at", "finished_at", "config_hash",
                "cost.total_params", "cost.flops_per_example", "cost.train_time_s", "metrics.nll"):
        assert col in df.columns and df[col].notna().all(), col
    assert (df["cost.peak_memory_probe"] == "rss-above-trimmed-start").all()  # how the train peak was taken
    # beside every timing: the machine's load while the fit ran, the fit's threads and the CPUs
    import os

    import torch

    assert (df["cost.torch_threads"] == torch.get_num_threads()).all() and (df["cost.host_cpus"] == os.cpu_count()).all()
    assert (df["cost.timed_on"] == "cpu").all() and (df["cost.host_load_1m"] >= 0).all()
    from bench.provenance import cpu_model  # the CPU's model: times on two models are not comparable

    assert (df["cost.cpu_model"] == cpu_model()).all()
    # and what the fit's process did with its wall time (bench.measurement.ThreadUsage: not stopped);
    # the methods built on a MAP network, what its training did (from the network's checkpoint)
    assert (df["cost.fit_paused_fraction"] < 0.05).all() and (df["cost.fit_cores_used"] > 0).all()
    assert df["cost.fit_run_delay_fraction"].between(0, 1).all()
    # and, per record, those of its set's prediction (beside predict_time_per_example_s)
    assert (df["cost.predict_paused_fraction"] < 0.05).all() and df["cost.predict_run_delay_fraction"].between(0, 1).all()
    on_map = df["cost.upstream_train_time_s"] > 0
    assert on_map.any() and (df.loc[on_map, "cost.upstream_paused_fraction"] < 0.05).all()
    from bench.allocator import allocator_settings  # and the C allocator's settings (bench/allocator.py)

    assert (df["cost.allocator"] == allocator_settings()).all()
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("records/**/*.json")}

    # a second run finds every cell finished and rewrites nothing
    from bench import harness

    assert main(TOY + ["--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("records/**/*.json")} == stamps

    # a run killed during evaluation: the fitted checkpoint exists, one record is missing
    victim = next(p for p in stamps if "mc_dropout" in str(p) and p.name.startswith("shift"))
    victim.unlink()
    calls = []
    orig_fit = harness.Harness.run_cell

    def spy(self, *a, **k):
        r = orig_fit(self, *a, **k)
        calls.append((self.summary.fitted, self.summary.loaded, self.summary.records))
        return r

    harness.Harness.run_cell = spy
    try:
        assert main(TOY + ["--out", str(out)]) == 0
    finally:
        harness.Harness.run_cell = orig_fit
    assert calls[-1] == (0, 1, 1)  # nothing refitted, one checkpoint loaded, one record written
    assert victim.exists()
    # the reloaded cell keeps the probe its fit was measured with (in its checkpoint)
    assert json.loads(victim.read_text())["cost"]["peak_memory_probe"] == "rss-above-trimmed-start"
    untouched = [p for p in stamps if p != victim]
    assert all(p.stat().st_mtime_ns == stamps[p] for p in untouched)


def test_same_seed_same_numbers(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    args = TOY + ["--methods", "mc_dropout,deep_ensemble"]
    assert main(args + ["--out", str(a)]) == 0
    assert main(args + ["--out", str(b)]) == 0
    da = load_records(a).sort_values(["method", "kind"]).reset_index(drop=True)
    db = load_records(b).sort_values(["method", "kind"]).reset_index(drop=True)
    for col in ("metrics.rmse", "metrics.nll", "metrics.mean_std"):
        assert da[col].tolist() == db[col].tolist()


def test_diverging_run_is_recorded_as_failed(tmp_path):
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "mc_dropout,deterministic", "--set", "train.optimizer=sgd", "--set", "train.lr=1e30",
            "--set", "train.epochs=5"]
    assert main(args) == 1  # the grid finishes; every cell failed: exit code 1
    df = load_records(out)
    assert (df["status"] == "failed").sum() == 2
    assert df.loc[df["status"] == "failed", "error"].str.contains("non-finite").all()
    # a re-run skips the failed cells instead of crashing or retraining
    assert main(args) == 0
    assert len(load_records(out)) == 2


def test_the_summary_counts_failure_records_as_written(tmp_path, capsys):
    args = ["run", "--suite", "toy", "--profile", "smoke", "--no-report", "--out", str(tmp_path / "r"),
            "--methods", "mc_dropout,deterministic", "--set", "train.optimizer=sgd", "--set", "train.lr=1e30"]
    assert main(args) == 1  # both cells failed
    assert "2 failed, 2 records written; every cell failed (exit code 1)" in capsys.readouterr().err


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    cases = [
        (["--suite", "nope"], "valid suites: "),
        (["--suite", "toy", "--methods", "deterministic,bogus"], "valid methods:"),
        (["--suite", "toy", "--profile", "fast"], "valid profiles: smoke, quick, paper"),
        (["--suite", "toy", "--set", "mc_dropout.q=1", "--methods", "mc_dropout"], "valid: ['p', 'samples']"),
        (["--suite", "mnist_rotated", "--data-root", str(tmp_path / "nodata"), "--no-download"],
         str(tmp_path / "nodata" / "MNIST" / "raw")),
    ]
    for extra, needle in cases:
        code = main(["run", "--quiet", "--out", str(out)] + extra)
        err = capsys.readouterr().err
        assert code == 2, extra
        assert needle in err, (extra, err)
        if extra[1] == "nope":
            assert "mnist_rotated" in err and "toy" in err
    assert not out.exists()


def test_mnist_pipeline_on_fixture_with_report(fake_mnist, tmp_path):
    out, rep = tmp_path / "results", tmp_path / "reports"
    args = ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--quiet", "--data-root", str(fake_mnist),
            "--out", str(out), "--report-dir", str(rep), "--set", "data.n_val=100", "--set", "data.n_train=500",
            "--set", "data.n_test=100", "--set", "data.n_ood=100", "--set", "train.epochs=3"]
    assert main(args) == 0
    df = load_records(out)
    assert set(df["kind"]) == {"id", "shift", "ood", "val"}
    assert sorted(df.loc[df["method"] == "deterministic", "severity"].dropna()) == [0, 60, 120, 180]
    det = df[(df["method"] == "deterministic") & (df["kind"] == "id")].iloc[0]
    assert det["metrics.accuracy"] > 0.5  # the fake digits are learnable
    ood = df[(df["kind"] == "ood")]
    assert ood["metrics.auroc"].between(0, 1).all()
    html = (rep / "mnist_rotated" / "index.html").read_text()
    assert "data:image/png;base64," in html and "deep_ensemble" in html


def test_list_and_help(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mnist_rotated" in out and "deep_ensemble" in out and "rotation 15 deg" in out
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    assert "--set" in capsys.readouterr().out


def test_non_finite_predictive_is_recorded_as_failed(tmp_path, monkeypatch):
    """A method whose fit succeeds but whose predictive holds NaN is one failed record, and the
    grid goes on to the next method."""
    import torch

    from methods.deterministic import Deterministic

    real_predict = Deterministic.predict

    def nan_predict(self, x):
        pred = real_predict(self, x)
        pred.mean = torch.full_like(pred.mean, float("nan"))
        return pred

    monkeypatch.setattr(Deterministic, "predict", nan_predict)
    assert_only_deterministic_failed(tmp_path, "non-finite predictive mean")


def assert_only_deterministic_failed(tmp_path, error: str) -> None:
    """Run the toy grid (deterministic, mc_dropout): the deterministic cell is the one failed
    record, with ``error`` in its message, and the grid went on to mc_dropout."""
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "deterministic,mc_dropout"]
    assert main(args) == 0
    df = load_records(out)
    failed = df[df["status"] == "failed"]
    assert list(failed["method"]) == ["deterministic"]
    assert failed["error"].str.contains(error).all()
    assert (df.loc[df["method"] == "mc_dropout", "status"] == "ok").all()


def test_a_method_that_cannot_form_its_posterior_is_a_failed_cell(tmp_path, monkeypatch):
    """A MethodFailedError in fit (e.g. a subnetwork the data never touches) is recorded as a
    failed cell; the grid goes on to the next method."""
    from bench.subnet.selection import DegenerateSubnetError
    from methods.deterministic import Deterministic

    def degenerate_fit(self, train, val):
        raise DegenerateSubnetError("all subnet weights have zero curvature")

    monkeypatch.setattr(Deterministic, "fit", degenerate_fit)
    assert_only_deterministic_failed(tmp_path, "zero curvature")


def _toy(out, *extra):
    return ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "deterministic", *extra]


def test_a_damaged_record_is_named_moved_aside_and_its_cell_redone(tmp_path, caplog):
    out = tmp_path / "r"
    assert main(_toy(out)) == 0
    records = sorted(out.rglob("records/**/*.json"))
    first = load_records(out)
    records[0].write_text("")  # empty (e.g. a full disk)
    records[1].write_text('{"suite": "toy"')  # truncated
    records[2].write_text(json.dumps({**json.loads(records[2].read_text()), "suite": "../escaped"}))
    # reading skips them and names them; nothing is moved by a read
    with caplog.at_level("WARNING"):
        df = load_records(out)
    assert len(df) == len(first) - 3
    assert all(str(p) in caplog.text for p in records[:3])
    # the next run moves them aside and redoes exactly those evaluation sets
    assert main(_toy(out)) == 0
    assert all(p.with_name(p.name + ".bad").exists() for p in records[:3])
    again = load_records(out)
    assert len(again) == len(first) and set(again["suite"]) == {"toy"}
    key = ["kind", "shift", "severity"]
    merged = first.merge(again, on=key, suffixes=("", "_new"))
    assert (merged["metrics.nll"] == merged["metrics.nll_new"]).all()  # same fit (checkpoint), same numbers


def test_a_successful_retry_with_force_supersedes_the_failure_record(tmp_path, monkeypatch):
    from methods.deterministic import Deterministic

    out = tmp_path / "r"
    fit = Deterministic.fit

    def failing(self, train, val):
        raise FloatingPointError("boom")

    monkeypatch.setattr(Deterministic, "fit", failing)
    assert main(_toy(out)) == 1  # the grid's one cell failed
    assert list(load_records(out)["status"]) == ["failed"]
    monkeypatch.setattr(Deterministic, "fit", fit)
    assert main(_toy(out)) == 0  # without --force the failed cell is skipped
    assert list(load_records(out)["status"]) == ["failed"]
    assert main(_toy(out, "--force")) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and len(df) > 1


def test_damaged_or_crafted_checkpoints_are_set_aside_and_recomputed_without_running_code(tmp_path):
    import torch

    out = tmp_path / "r"
    assert main(_toy(out)) == 0
    first = load_records(out).sort_values(["kind", "shift", "severity"])["metrics.nll"].tolist()
    fitted = next(out.rglob("checkpoints/fitted/**/seed0.pt"))
    map_ckpt = next(out.rglob("checkpoints/map/**/seed0.pt"))
    marker = tmp_path / "code-ran"
    torch.save({"method": TouchOnUnpickle(marker), "fit_cost": {}}, fitted)  # crafted
    map_ckpt.write_bytes(map_ckpt.read_bytes()[:100])  # truncated
    for rec in out.rglob("records/**/*.json"):
        rec.unlink()  # the cell must be redone, from the checkpoints
    assert main(_toy(out)) == 0
    assert not marker.exists()
    assert fitted.with_name("seed0.pt.bad").exists() and map_ckpt.with_name("seed0.pt.bad").exists()
    again = load_records(out).sort_values(["kind", "shift", "severity"])["metrics.nll"].tolist()
    assert again == first  # refitted from a retrained MAP network: the same numbers


def test_a_damaged_resume_checkpoint_restarts_training_from_scratch(tmp_path):
    import torch
    from torch import nn

    from bench.data import TensorLoader
    from bench.training import TrainConfig, train_model

    def run(resume):
        torch.manual_seed(0)
        net = nn.Linear(3, 2)
        x, y = torch.randn(64, 3), torch.randint(0, 2, (64,))
        loader = TensorLoader(x, y, 16, shuffle=True, seed=0)
        loss = lambda m, xb, yb, frac: nn.functional.cross_entropy(m(xb), yb)  # noqa: E731
        train_model(net, loader, TrainConfig(epochs=2, batch_size=16, lr=0.1), loss, resume_path=resume)
        return net.weight.detach().clone()

    clean = run(None)
    partial = tmp_path / "x.partial"
    partial.write_bytes(b"\x80\x04 not a checkpoint")
    assert torch.equal(run(partial), clean)
    assert partial.with_name("x.partial.bad").exists()


@pytest.mark.parametrize("where", ["fit", "predict"])
def test_any_exception_in_a_method_is_a_failed_cell_with_its_traceback(tmp_path, monkeypatch, where):
    """Not only divergence / numerics: a bug in a plugin (here a KeyError) fails its cell, the
    record keeps the traceback and says it was unexpected, and the grid goes on."""
    from methods.deterministic import Deterministic

    def broken(self, *args):
        raise KeyError("no such option")

    monkeypatch.setattr(Deterministic, where, broken)
    assert_only_deterministic_failed(tmp_path, "KeyError")
    rec = load_records(tmp_path / "r")
    failed = rec[rec["status"] == "failed"].iloc[0]
    assert "def broken" not in failed["traceback"] and "broken" in failed["traceback"]
    assert failed["expected"] == False  # noqa: E712 - a numpy bool


def test_a_cell_another_process_is_running_is_skipped_not_duplicated(tmp_path, capsys):
    from bench.locks import file_lock

    out = tmp_path / "r"
    assert main(_toy(out)) == 0
    lock = next(out.rglob("locks/**/seed0.lock"))
    for rec in out.rglob("records/**/*.json"):
        rec.unlink()
    with file_lock(lock, wait=False) as held:  # stands for a concurrent run holding the cell
        assert held
        assert main([a for a in _toy(out) if a != "--quiet"]) == 0
        assert not list(out.rglob("records/**/*.json"))
    assert "being run by another process" in capsys.readouterr().err
    assert main(_toy(out)) == 0  # released: the cell runs
    assert list(out.rglob("records/**/*.json"))


def test_a_diverged_map_network_is_trained_once_for_all_its_dependants(tmp_path, monkeypatch):
    """deterministic and deep_ensemble members (seed 0) and PBN all start from the MAP network of
    seed 0: when it diverges, it is trained once, and each dependant records the failure."""
    import bench.checkpoints as ck

    calls = []
    real = ck.train_model

    def counting(model, loader, cfg, *a, **kw):
        calls.append(kw.get("desc"))
        return real(model, loader, cfg, *a, **kw)

    monkeypatch.setattr(ck, "train_model", counting)
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "deterministic,pbn", "--set", "train.optimizer=sgd", "--set", "train.lr=1e30"]
    assert main(args) == 1  # every cell failed
    df = load_records(out)
    assert sorted(df["method"]) == ["deterministic", "pbn"] and (df["status"] == "failed").all()
    assert calls == ["MAP seed 0"]
    assert df["error"].str.contains("non-finite|failed to train earlier").all()
    assert main(args + ["--force"]) == 1  # --force retries it, once (and it diverges again)
    assert calls == ["MAP seed 0"] * 2


def test_the_report_follows_the_results_directory(tmp_path):
    base = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--methods", "deterministic"]
    assert main(base + ["--out", str(tmp_path / "a" / "results")]) == 0
    assert (tmp_path / "a" / "reports" / "toy" / "index.html").exists()  # the README's layout
    assert main(base + ["--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "reports" / "toy" / "index.html").exists()  # never a shared ./reports
    assert main(["report", "--results", str(tmp_path / "b"), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "toy" / "index.html").exists()


def test_an_unwritable_results_directory_is_an_error_before_training(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--methods", "deterministic"]
    assert main(args + ["--no-report", "--out", str(blocker / "results")]) == 2
    assert "results directory (--out)" in (err := capsys.readouterr().err) and "cannot be created" in err
    assert main(args + ["--out", str(tmp_path / "ok"), "--report-dir", str(blocker)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "ok").exists()  # nothing trained or written


def test_grid_progress_counts_every_cell_and_estimates_from_the_cells_that_ran():
    from bench.harness import GridProgress

    g = GridProgress(total=4)
    g.cell_done(10.0, worked=True)
    g.cell_done(0.0, worked=False)  # skipped: no time, not in the mean
    assert g.done == 2 and g.eta_s() == 20.0  # 2 cells left x 10 s
    assert "2/4 cells done" in g.line() and "ETA 0:00:20" in g.line()
    g.cell_done(30.0, worked=True)
    assert g.eta_s() == 20.0  # mean 20 s x 1 left



def test_the_grid_clock_starts_before_the_first_cell(tmp_path, monkeypatch):
    import bench.harness as H

    started_before_cell = []
    run_cell = H.Harness.run_cell

    def spy(self, *args):
        started_before_cell.append(self.grid_progress is not None)
        return run_cell(self, *args)

    monkeypatch.setattr(H.Harness, "run_cell", spy)
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(tmp_path / "r"),
            "--methods", "deterministic"]
    assert main(args) == 0
    assert started_before_cell == [True]


def test_run_prints_the_grid_progress(tmp_path, capsys):
    args = ["run", "--suite", "toy", "--profile", "smoke", "--no-report", "--out", str(tmp_path / "r"),
            "--methods", "deterministic,mc_dropout"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "grid: 1/2 cells done" in err and "grid: 2/2 cells done" in err and "ETA" in err


def test_the_harness_charges_the_map_networks_a_fit_used(tmp_path):
    """No plugin reports its upstream cost: the MAP networks a fit asked the cache for are charged
    to it (deep ensemble: its 3 members; deterministic: its own seed; MC dropout: none), also
    when the fitted method is loaded from its checkpoint later."""
    from bench.checkpoints import load_torch

    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "deterministic,deep_ensemble,mc_dropout"]
    assert main(args) == 0
    times = {int(p.stem[4:]): load_torch(p)["train_time_s"] for p in out.rglob("checkpoints/map/**/seed*.pt")}
    assert sorted(times) == [0, 1, 2]  # deep_ensemble members: seeds 0..2 (seed 0 x M + m)

    def upstream():
        df = load_records(out)
        return df[df["kind"] == "id"].set_index("method")["cost.upstream_train_time_s"].to_dict()

    up = upstream()
    assert up["deterministic"] == pytest.approx(times[0])
    assert up["deep_ensemble"] == pytest.approx(sum(times.values()))
    assert up["mc_dropout"] == 0
    for rec in out.rglob("records/**/*.json"):
        rec.unlink()
    assert main(args) == 0  # loaded from the fitted checkpoints: the same charges
    assert upstream() == pytest.approx(up)


def test_a_sweep_over_a_predict_only_option_reuses_one_fit(tmp_path):
    """mc_dropout.samples only changes prediction: samples=4 and samples=16 share one fitted
    network (one fit, the same fit seed), so the two rows differ by S, not by training noise."""
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "mc_dropout", "--set", "mc_dropout.samples=4,16"]
    assert main(args) == 0
    fitted = list(out.rglob("checkpoints/fitted/**/seed0.pt"))
    assert len(fitted) == 1
    df = load_records(out)
    assert df["config_hash"].nunique() == 2  # two configurations, two sets of records
    assert main(args + ["--set", "mc_dropout.p=0.2"]) == 0  # a fit option makes a new fit
    assert len(list(out.rglob("checkpoints/fitted/**/seed0.pt"))) == 2


def test_callback_state_survives_an_interrupted_training(tmp_path, monkeypatch):
    """An on_epoch_end callback keeps its state in ``callback_state``: killed after epoch 2 and
    resumed, the state holds every epoch once, as in an uninterrupted run."""
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")  # a checkpoint after every epoch
    import torch
    from torch import nn

    from bench.data import TensorLoader
    from bench.training import TrainConfig, train_model

    def run(resume, stop_at=None):
        torch.manual_seed(0)
        net = nn.Linear(3, 2)
        loader = TensorLoader(torch.randn(64, 3), torch.randint(0, 2, (64,)), 16, shuffle=True, seed=0)
        state = {}

        def on_epoch_end(epoch):
            state.setdefault("seen", []).append(epoch)
            state["norm"] = float(net.weight.norm())
            if epoch == stop_at:
                raise KeyboardInterrupt

        loss = lambda m, xb, yb, frac: nn.functional.cross_entropy(m(xb), yb)  # noqa: E731
        train_model(net, loader, TrainConfig(epochs=4, batch_size=16, lr=0.1), loss, resume_path=resume,
                    on_epoch_end=on_epoch_end, callback_state=state)
        return state

    whole = run(None)
    partial = tmp_path / "t.partial"
    with pytest.raises(KeyboardInterrupt):
        run(partial, stop_at=2)  # the epoch-1 checkpoint exists, epoch 2's never written
    resumed = run(partial)
    assert whole["seen"] == [0, 1, 2, 3] and resumed == whole


def test_changing_an_evaluation_only_data_option_re_evaluates_without_training(tmp_path):
    """Suite.EVAL_ONLY_DATA (here the toy suite's n_test): a new cell identity (new records), the
    same fitted methods and MAP networks (loaded, not trained again)."""
    from bench import harness as H
    from bench.events import read_events

    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1",
            "--methods", "deterministic,mc_dropout,pbn", "--out", str(out)]
    assert main(args) == 0
    summaries = []
    orig = H.Harness.run

    def spy(self):
        s = orig(self)
        summaries.append((s.fitted, s.loaded))
        return s

    H.Harness.run = spy
    try:
        assert main(args + ["--set", "data.n_test=300"]) == 0
    finally:
        H.Harness.run = orig
    assert summaries == [(0, 3)]  # every fitted method loaded, none fitted again
    events = read_events(out / "toy" / "events.jsonl")
    assert sum(e["event"] == "map_trained" for e in events) == 1 and sum(e["event"] == "fitted" for e in events) == 3
    df = load_records(out)
    assert df.groupby("method")["config_hash"].nunique().eq(2).all()  # two cells each: old and new n_test
    ids = df.loc[df["kind"] == "id", "n"]
    assert 300 in set(ids) and ids.nunique() == 2  # evaluated on the new test set as well
    assert (df.groupby("method")["fit_hash"].nunique() == 1).all()


def test_map_networks_cached_under_the_older_key_are_still_found(tmp_path):
    """Older code keyed the MAP cache with every data option (the toy smoke profile's n_test
    included): such a cache is loaded, not trained again."""
    from bench.config import parse_sets, resolve_plan
    from bench.events import read_events
    from bench.store import config_hash
    from bench.suites import SUITES
    from methods import METHODS

    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--threads", "1", "--out", str(out)]
    assert main(args + ["--methods", "deterministic"]) == 0
    suite = SUITES.get("toy")()
    plan = resolve_plan(suite, "smoke", ["deterministic"], parse_sets([]), method_registry=METHODS)
    key = {"suite": "toy", "model": plan.models[0], "train": plan.train.to_dict()}
    root = out / "toy" / "checkpoints" / "map" / plan.models[0]
    new, old = root / config_hash({**key, "data": suite.fit_data(plan.data)}), root / config_hash({**key, "data": plan.data})
    assert new != old and new.exists()
    new.rename(old)  # the layout older code left
    assert main(args + ["--methods", "pbn"]) == 0
    assert sum(e["event"] == "map_trained" for e in read_events(out / "toy" / "events.jsonl")) == 1
    assert not (new / "seed0.pt").exists()  # loaded from the old place, not written anew


def test_a_fit_resumed_after_a_kill_records_the_whole_training_time(tmp_path, monkeypatch):
    """Killed mid-fit and run again, a cell resumes from its partial checkpoint; the fit time it
    records counts the epochs the killed process finished (here at least 2 x 0.4 s of sleep), not
    only the rest (a few milliseconds of toy training): a VDP++ cell on Tiny-ImageNet-C once
    recorded a 9 s fit for a 7-minute training."""
    monkeypatch.setenv("BENCH_CHECKPOINT_INTERVAL_S", "0")  # a checkpoint after every epoch
    import time

    import methods.mc_dropout as mcd

    real = mcd.train_model
    plan = {"sleep": 0.4, "kill_at": 2}

    def slow_then_killed(*a, **k):
        def on_epoch_end(epoch):
            time.sleep(plan["sleep"])
            if epoch == plan["kill_at"]:
                raise KeyboardInterrupt  # the checkpoint of epochs 0-1 is on disk, epoch 2's never

        return real(*a, on_epoch_end=on_epoch_end, **k)

    monkeypatch.setattr(mcd, "train_model", slow_then_killed)
    out = tmp_path / "r"
    args = ["run", "--suite", "toy", "--profile", "smoke", "--quiet", "--no-report", "--out", str(out),
            "--methods", "mc_dropout", "--set", "train.epochs=5", "--threads", "1"]
    assert main(args) != 0  # interrupted
    assert list(out.rglob("partial/**/*.partial")) and not list(out.rglob("records/**/*.json"))
    plan.update(sleep=0.0, kill_at=None)
    assert main(args) == 0
    cost = load_records(out)
    assert (cost["status"] == "ok").all()
    resumed, fit = cost["cost.fit_resumed_s"].iloc[0], cost["cost.fit_time_s"].iloc[0]
    assert 0.8 <= resumed < 5 and fit >= resumed
    assert cost["cost.train_time_s"].iloc[0] >= resumed  # the total the leaderboard shows
    # what the killed process did with its part came along: it slept through most of it, so the whole
    # fit used well under a core (the resumed part alone, a few ms of training, would say one)
    assert cost["cost.fit_cores_used"].iloc[0] < 0.5 and cost["cost.fit_paused_fraction"].iloc[0] < 0.05
    from bench.events import read_events

    fitted = [e for e in read_events(out / "toy" / "events.jsonl") if e["event"] == "fitted"]
    assert len(fitted) == 1 and fitted[0]["resumed_seconds"] == resumed and fitted[0]["seconds"] >= resumed
    assert fitted[0]["paused_fraction"] == cost["cost.fit_paused_fraction"].iloc[0]  # the event says it too


def test_readme_main_job_runs_at_smoke_scale(fake_mnist, tmp_path):
    """The README's main job, exactly its suite and profile (tour), shrunk by --set to a fixture
    and two epochs: the command a new user types runs, writes records of its profile and a report."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "# the main job" in x)
    args = shlex.split(line.split("#", 1)[0])
    assert args[:3] == ["bash", "scripts/bench.sh", "run"], line
    args = args[2:]
    assert "--profile" in args and args[args.index("--profile") + 1] == "tour", line
    args[args.index("--data-root") + 1] = str(fake_mnist)
    out, rep = tmp_path / "results", tmp_path / "reports"
    small = ["--set", "data.n_val=100", "--set", "data.n_train=300", "--set", "data.n_test=100",
             "--set", "data.n_ood=100", "--set", "train.epochs=2", "--seeds", "0", "--quiet",
             "--methods", "deterministic,pbn,subnet_laplace", "--set", "subnet_laplace.swag_n_snapshots=4",
             "--out", str(out), "--report-dir", str(rep)]
    assert main(args + small) == 0
    df = load_records(out)
    assert set(df["profile"]) == {"tour"} and (df["status"] == "ok").all()
    html = (rep / "mnist_rotated" / "index.html").read_text()
    assert "TOUR PROFILE" in html and re.search(r'<table class="leaderboard-', html)
    assert "trained 2 epochs on 300 training images (a subset)" in html    # the banner says the scale


def _perturbed_fit(monkeypatch, shift):
    """Deterministic's fit, its weights moved by ``shift``: a refit that differs from the first fit
    (as a refit on another machine, or after a change, does)."""
    import torch

    from methods.deterministic import Deterministic

    fit = Deterministic.fit

    def moved(self, train, val):
        fit(self, train, val)
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(shift)

    monkeypatch.setattr(Deterministic, "fit", moved)


def _loud(args):
    return [a for a in args if a != "--quiet"]


def _fits(out):
    """{record file name: fit_digest} of the toy's one cell, and the fitted checkpoint's digest."""
    import torch

    recs = {p.name: json.loads(p.read_text()) for p in out.rglob("records/**/*.json")}
    ckpt = torch.load(next(out.rglob("checkpoints/fitted/**/seed0.pt")), weights_only=True)
    return recs, ckpt["fit_digest"]


def test_a_force_method_run_stopped_during_evaluation_is_finished_from_its_own_fit(tmp_path, monkeypatch, capsys):
    """--force-method refits and re-evaluates; stopped after its first record, the cell holds every
    record, the rest from the earlier fit. A plain re-run must not take it as done: it re-evaluates
    those records from the new fit's checkpoint, so that every record comes from one fit."""
    from bench.store import ResultsStore

    out = tmp_path / "r"
    assert main(_toy(out)) == 0
    before, old_digest = _fits(out)
    assert len(before) == 3 and {r["fit_digest"] for r in before.values()} == {old_digest}

    _perturbed_fit(monkeypatch, 0.05)
    write, written = ResultsStore.write, []

    def stop_after_one(self, run_dir, record):
        if written:
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) during the evaluation
        written.append(record["shift"])
        return write(self, run_dir, record)

    monkeypatch.setattr(ResultsStore, "write", stop_after_one)
    assert main(_toy(out, "--force-method", "deterministic")) == 130
    monkeypatch.setattr(ResultsStore, "write", write)
    mixed, new_digest = _fits(out)
    assert new_digest != old_digest and len(mixed) == 3
    assert sorted(r["fit_digest"] for r in mixed.values()) == sorted([new_digest, old_digest, old_digest])

    capsys.readouterr()
    assert main(_loud(_toy(out))) == 0  # the same command without --force-method
    assert "2 record(s) stand on an earlier fit than the cell's newest record" in capsys.readouterr().err
    after, digest = _fits(out)
    assert digest == new_digest and {r["fit_digest"] for r in after.values()} == {new_digest}
    for name, rec in after.items():  # re-evaluated: the moved weights give other numbers
        assert rec["metrics"]["nll"] != before[name]["metrics"]["nll"], name
    # and the cell is now done: another run rewrites nothing
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("records/**/*.json")}
    assert main(_toy(out)) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("records/**/*.json")} == stamps


def test_a_method_fitted_again_re_evaluates_the_records_of_another_fit(tmp_path, monkeypatch, capsys):
    """A cell with a missing record and no fitted checkpoint (deleted, or set aside as damaged) is
    fitted again: when the refit repeats the first bit for bit (one machine, one thread count) only
    the missing set is evaluated; when it differs, every set is, from the one new fit."""
    out = tmp_path / "r"
    assert main(_toy(out)) == 0
    before, first = _fits(out)
    ckpt = next(out.rglob("checkpoints/fitted/**/seed0.pt"))
    victim = next(p for p in out.rglob("records/**/*.json") if p.name.startswith("shift"))
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("records/**/*.json") if p != victim}

    victim.unlink()
    ckpt.unlink()
    assert main(_toy(out)) == 0  # the same fit again: the same digest, the others left alone
    again, digest = _fits(out)
    assert digest == first and victim.exists() and again == before | {victim.name: again[victim.name]}
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())

    victim.unlink()
    ckpt.unlink()
    _perturbed_fit(monkeypatch, 0.05)
    capsys.readouterr()
    assert main(_loud(_toy(out))) == 0
    assert "2 record(s) stand on another fit than the one used now" in capsys.readouterr().err
    after, digest = _fits(out)
    assert digest != first and {r["fit_digest"] for r in after.values()} == {digest}
    assert all(after[n]["metrics"]["nll"] != before[n]["metrics"]["nll"] for n in after)


@pytest.mark.parametrize("executor", [[], ["--executor", "dask", "--workers", "1"]], ids=["local", "dask"])
def test_redo_predating_refits_only_the_cells_whose_records_predate_a_check(tmp_path, executor, capsys):
    """A finished cell whose clean-test record predates a check a refit measures (mean-field VI's record
    without the per-epoch validation curve that vi_converged reads, as records made before the check were)
    is skipped by a plain run and refitted by --redo-predating, which then measures it; a cell its checks
    can judge (MAP's) is left alone, and so is one that fails a check already (a refit would fail it again);
    a second --redo-predating has nothing to redo. The same through
    a Dask cluster: the driver sends the cell, the worker refits it."""
    import json

    from bench.validity import predating_checks

    out = tmp_path / "r"
    # a mean-field VI fit that passes every check but the two a refit measures (its stationarity, vi_converged)
    fit = ["--set", "train.epochs=100", "--set", "mfvi.prior_scale=0.1", "--set", "mfvi.sigma_init=0.03",
           "--set", "mfvi.rho_lr=0.05"]
    argv = [*TOY, "--methods", "deterministic,mfvi", "--seeds", "0", "--out", str(out), *fit]
    assert main(argv) == 0

    def id_record(method):
        (path,) = [p for p in (out / "toy" / "records").rglob("id*.json") if f"/{method}-" in p.as_posix()]
        return path, json.loads(path.read_text())

    path, rec = id_record("mfvi")
    assert rec["diagnostics"]["train"]["epoch_stats"] and predating_checks(rec) == []
    for p in path.parent.glob("*.json"):  # every record of the cell as older code wrote them
        r = json.loads(p.read_text())
        for e in ((r.get("diagnostics") or {}).get("train") or {}).get("epoch_stats") or []:
            e.pop("val_nll", None)
        (r.get("diagnostics") or {}).pop("sigma_stationarity", None)
        p.write_text(json.dumps(r))
    old = json.loads(path.read_text())
    assert predating_checks(old) == ["vi_stationarity", "vi_converged"]
    map_before = id_record("deterministic")[1]
    assert main(argv) == 0 and id_record("mfvi")[1] == old  # a plain run skips it
    # a cell that already fails a check its record measures is not refitted: its refit would fail it again
    failing = json.loads(json.dumps(old))
    failing["diagnostics"]["train"]["rho_adam_travel_ratio"] = 0.9  # `vi_rate_limit` fails: at Adam's ceiling
    assert predating_checks(failing) == []
    path.write_text(json.dumps(failing))
    capsys.readouterr()
    assert main([*_loud(argv), "--redo-predating", *executor]) == 0 and id_record("mfvi")[1] == failing
    if not executor:  # the reason, where the cell is planned (a Dask worker's output stays there)
        assert ("they predate vi_stationarity, vi_converged but fail vi_rate_limit, which a refit would fail "
                "again, skipped") in capsys.readouterr().err
    path.write_text(json.dumps(old))
    if not executor:  # what --plan says of the cell (it reads the store as the run does)
        capsys.readouterr()
        assert main([*argv, "--redo-predating", "--plan"]) == 0
        assert ("mfvi[prior_scale=0.1,rho_lr=0.05,sigma_init=0.03] seed 0 | refit (--redo-predating: its records "
                "predate vi_stationarity, vi_converged), then evaluate 3 of 3 evaluation sets |"
                ) in capsys.readouterr().out
    assert main([*argv, "--redo-predating", *executor]) == 0
    new = id_record("mfvi")[1]
    assert predating_checks(new) == [] and "residual" in new["diagnostics"]["sigma_stationarity"]
    assert new["cost"]["fit_time_s"] != old["cost"]["fit_time_s"]  # fitted again, not loaded from its checkpoint
    assert all(isinstance(e.get("val_nll"), float) for e in new["diagnostics"]["train"]["epoch_stats"])
    assert id_record("deterministic")[1] == map_before
    assert main([*argv, "--redo-predating", *executor]) == 0 and id_record("mfvi")[1] == new


def test_plan_says_what_a_run_would_do_with_each_cell_and_writes_nothing(tmp_path, capsys):
    """bench run --plan reads the store as a run does: a finished cell has nothing to do, a cell missing an
    evaluation record is evaluated from its fitted checkpoint (the run that follows loads it, fitting
    nothing), a cell with a stopped training resumes it, a new cell is fitted, training its seed's MAP
    network first (named once, on the first cell that needs it), a cell whose lock a process here holds is
    skipped; and the plan writes nothing."""
    import os
    from pathlib import Path

    from bench.locks import file_lock

    out = tmp_path / "r"
    argv = [*TOY, "--methods", "deterministic,mfvi", "--out", str(out)]

    def plan(*extra):
        capsys.readouterr()
        assert main([*argv, "--seeds", "0,1", "--plan", *extra]) == 0
        return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].rstrip(" |")
                for line in capsys.readouterr().out.splitlines() if line.startswith("| mlp_100")}

    assert plan() == {"mlp_100 deterministic seed 0": "fit, then evaluate 3 of 3 evaluation sets; trains the MAP "
                                                      "network of seed(s) 0 first",
                      "mlp_100 deterministic seed 1": "fit, then evaluate 3 of 3 evaluation sets; trains the MAP "
                                                      "network of seed(s) 1 first",
                      "mlp_100 mfvi seed 0": "fit, then evaluate 3 of 3 evaluation sets",
                      "mlp_100 mfvi seed 1": "fit, then evaluate 3 of 3 evaluation sets"}
    assert not out.exists()
    assert main([*argv, "--seeds", "0"]) == 0
    (record,) = (out / "toy" / "records").rglob("mfvi-*/seed0/id*.json")
    record.unlink()
    (fitted,) = (out / "toy" / "checkpoints" / "fitted").rglob("mfvi-*/seed0.pt")
    stopped = out / "toy" / "checkpoints" / "partial" / "mlp_100" / fitted.parent.name / "seed1" / "mfvi.partial"
    stopped.parent.mkdir(parents=True)
    stopped.write_bytes(b"")
    files = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    rows = plan()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == files  # nothing written
    assert rows == {"mlp_100 deterministic seed 0": "nothing to do: all 3 evaluation records exist",
                    "mlp_100 deterministic seed 1": "fit, then evaluate 3 of 3 evaluation sets; trains the MAP "
                                                    "network of seed(s) 1 first",
                    "mlp_100 mfvi seed 0": "evaluate 1 of 3 evaluation sets from its fitted checkpoint",
                    "mlp_100 mfvi seed 1": "fit, resuming the training a run stopped (mfvi.partial), then evaluate "
                                           "3 of 3 evaluation sets"}
    lock = out / "toy" / "locks" / "mlp_100" / record.parent.parent.name / "seed1.lock"
    if Path("/proc/locks").is_file():
        with file_lock(lock, wait=False) as held:
            assert held and plan()["mlp_100 mfvi seed 1"] == (f"skipped: being run by another process now "
                                                              f"(pid {os.getpid()})")
    stopped.unlink()
    capsys.readouterr()
    assert main([*_loud(argv), "--seeds", "0"]) == 0  # the run does what the plan said
    err = capsys.readouterr().err
    assert "mlp_100 mfvi seed 0: loaded fitted checkpoint" in err and "0 fitted, 1 loaded, 1 skipped" in err
    # the MAP networks not kept: a cell on seed 0's trains it again, and the plan names the network the
    # cells here stand on, with which the new one pairs only if it repeats that fit
    import shutil

    from bench.reporting.data import map_network

    (det,) = (out / "toy" / "records").rglob("deterministic-*/seed0/id*.json")
    sha = map_network(json.loads(det.read_text())["diagnostics"])[0]
    shutil.rmtree(out / "toy" / "checkpoints" / "map")
    capsys.readouterr()
    assert main([*TOY, "--methods", "pbn", "--seeds", "0", "--out", str(out), "--plan"]) == 0
    assert (f"trains the MAP network of seed(s) 0 first: cells here stand on seed 0's network {sha}, with which a "
            f"network trained again pairs only if it repeats that fit bit for bit") in capsys.readouterr().out
    # kept records, packed: the tables read them, a run does not, and the plan says so
    from bench.store import PACK_NAME, atomic_write_bytes, pack_bytes

    packed = {det.relative_to(out).as_posix(): json.loads(det.read_text())}
    atomic_write_bytes(out / "toy" / PACK_NAME, pack_bytes(packed))
    assert main([*TOY, "--methods", "pbn", "--seeds", "0", "--out", str(out), "--plan"]) == 0
    assert "the packed records under" in capsys.readouterr().out
    assert main([*TOY, "--methods", "deterministic", "--seeds", "0", "--out", str(out)]) == 0  # a run says it too
    assert "warning: the packed records under" in capsys.readouterr().err


def test_held_here_reads_the_kernel_table_of_locks_without_taking_one(tmp_path):
    """bench.locks.held_here finds a lock file's flock in a /proc/locks-format table by its device and inode
    (major:minor in hex, as Linux writes it), returns its holder's line of the lock file, and None for a
    table without it, a POSIX (not flock) lock on the same inode, or no lock file."""
    import json
    import os

    from bench.locks import held_here

    lock = tmp_path / "seed0.lock"
    lock.write_text(json.dumps({"host": "node1", "pid": 4242, "beat": 1.0}))
    st = os.stat(lock)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    table = tmp_path / "locks"
    table.write_text(f"1: POSIX  ADVISORY  WRITE 99 {ident} 0 EOF\n"
                     f"2: FLOCK  ADVISORY  WRITE 4242 fe:01:{st.st_ino + 1} 0 EOF\n")
    assert held_here(lock, table) is None
    table.write_text(table.read_text() + f"3: FLOCK  ADVISORY  WRITE 4242 {ident} 0 EOF\n")
    assert held_here(lock, table)["pid"] == 4242
    assert held_here(tmp_path / "absent.lock", table) is None
