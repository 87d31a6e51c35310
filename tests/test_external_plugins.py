"""Method plugins from outside the repository (docs/plugins.md, "Plugins outside the repository"):
``--plugin FILE`` and the ``bench.methods`` entry points, the plugin's source hash in its records and
its cells' identity (an edit re-runs them; built-ins' config hashes unchanged), name collisions and
import failures (exit 2), ``--force-method``, the inferred ``STARTS_FROM`` and the plan-time
contract warnings."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from bench.cli import main
from bench.events import read_events
from bench.store import load_records
from conftest import make_fake_mnist, small_mnist_run

REPO = Path(__file__).resolve().parents[1]

#: a cheap method on the seed's MAP network: its logits divided by a fixed temperature
PLUGIN = '''\
"""An external plugin: the MAP network's logits divided by a fixed temperature."""
import torch

from methods.base import Method, register_method


@register_method("{name}")
class ExternalTemperature(Method):
    description = "MAP logits / t (a plugin outside the repository)"
    tasks = ("classification",)
{starts}    defaults = {defaults}

    def __init__(self, ctx, **config):
        super().__init__(ctx, **config)
        self.model = ctx.build_model(dropout=0.0).to(ctx.device)

    def fit(self, train, val):
        self.model = self.ctx.{cache}.get(self.ctx.seed)
        return self

    @torch.no_grad()
    def predict(self, x):
        return self.ctx.task.predictive(self.model(x) / float(self.config["t"]))

    def state_dict(self):
        return {{"model": self.model.state_dict()}}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.model.eval()

    def modules(self):
        return [self.model]
'''


def plugin_source(name="ext_ts", starts='    STARTS_FROM = "map"\n', defaults='{"t": 1.5}', cache="map_cache"):
    return PLUGIN.format(name=name, starts=starts, defaults=defaults, cache=cache)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def forget_plugins():
    """Every plugin a test loads leaves the registry afterwards (other tests see the built-ins)."""
    yield
    from bench.plugins import reset

    reset()


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    return make_fake_mnist(tmp_path_factory.mktemp("fake") / "data")


def fitted(out, method):
    return [e for e in read_events(Path(out) / "mnist_rotated" / "events.jsonl", "fitted") if e["method"] == method]


def map_trainings(out):
    return len(read_events(Path(out) / "mnist_rotated" / "events.jsonl", "map_trained"))


def test_a_plugin_file_runs_its_records_carry_its_hash_and_an_edit_reruns_its_cells(mnist, tmp_path):
    plugin = write(tmp_path / "elsewhere" / "ext_ts.py", plugin_source())
    out = tmp_path / "results"
    args = small_mnist_run(mnist, out, "deterministic,ext_ts") + ["--plugin", str(plugin)]
    assert main(args) == 0
    df = load_records(out)
    assert (df["status"] == "ok").all() and set(df["method"]) == {"deterministic", "ext_ts"}
    ext, det = df[df["method"] == "ext_ts"], df[df["method"] == "deterministic"]
    sha = hashlib.sha256(plugin.read_bytes()).hexdigest()
    assert set(ext["plugin_source_sha256"]) == {sha} and set(ext["plugin_path"]) == {str(plugin.resolve())}
    assert set(ext["plugin_origin"]) == {"file"}
    # built-ins carry their source hash as provenance only
    assert set(det["plugin_path"]) == {"methods/deterministic.py"} and set(det["plugin_origin"]) == {"builtin"}
    assert set(det["plugin_source_sha256"]) == {hashlib.sha256((REPO / "methods/deterministic.py").read_bytes())
                                                .hexdigest()}
    n_records = len(df)

    assert main(args) == 0  # unchanged: every cell is skipped
    assert len(fitted(out, "ext_ts")) == 1 and len(load_records(out)) == n_records

    plugin.write_text(plugin.read_text().replace("return self\n", "return self  # edited\n"))
    assert main(args) == 0  # edited: its cells run again (the built-in's are still skipped)
    assert len(fitted(out, "ext_ts")) == 2 and len(fitted(out, "deterministic")) == 1
    df = load_records(out)
    ext = df[df["method"] == "ext_ts"]
    assert ext["config_hash"].nunique() == 2  # the same options, two sources: two cells
    assert set(ext["plugin_source_sha256"]) == {sha, hashlib.sha256(plugin.read_bytes()).hexdigest()}
    assert map_trainings(out) == 1


def test_force_method_refits_that_method_alone_and_keeps_the_map_network(mnist, tmp_path, capsys):
    plugin = write(tmp_path / "p" / "ext_ts.py", plugin_source())
    out = tmp_path / "results"
    args = small_mnist_run(mnist, out, "deterministic,ext_ts") + ["--plugin", str(plugin)]
    assert main(args) == 0
    first = load_records(out).groupby("method")["finished_at"].max()
    assert main(args + ["--force-method", "ext_ts"]) == 0
    assert len(fitted(out, "ext_ts")) == 2  # refitted
    assert len(fitted(out, "deterministic")) == 1  # not touched
    assert map_trainings(out) == 1  # the cached MAP network was kept (--force would retrain it)
    df = load_records(out)
    assert len(df) == 12 and df["config_hash"].nunique() == 2  # re-evaluated in place, nothing added
    assert df[df["method"] == "deterministic"]["finished_at"].max() == first["deterministic"]
    assert main(args + ["--force-method", "mc_dropout"]) == 2
    assert "--force-method mc_dropout: not a method of this run" in capsys.readouterr().err


def test_the_plan_warns_about_broken_contract_rules_and_starts_from_is_inferred(mnist, tmp_path, capsys):
    """A plugin that uses ctx.map_cache without declaring STARTS_FROM runs as a "map" method (with a
    warning), and an undeclared budget option is named at plan time."""
    from bench.config import resolve_plan
    from bench.plugins import load_file, static_contract_problems
    from bench.suites import SUITES
    from methods import METHODS

    plugin = write(tmp_path / "p" / "undeclared.py",
                   plugin_source(name="undeclared", starts="", defaults='{"t": 1.5, "epochs": 1}'))
    out = tmp_path / "results"
    assert main(small_mnist_run(mnist, out, "undeclared") + ["--plugin", str(plugin)]) == 0
    err = capsys.readouterr().err
    assert "warning: method undeclared" in err and "does not declare STARTS_FROM" in err
    assert "['epochs'] are named like training-budget fields" in err and str(plugin.resolve()) in err
    cls = METHODS.get("undeclared")
    assert cls.STARTS_FROM is None and cls.starts_from(cls.defaults) == "map" and cls.map_seeds({}, 3) == [3]
    assert load_records(out)["diagnostics"].dropna().iloc[0]["map_training"]  # the harness knew it was "map"
    # on a suite whose MAP network is pretrained it is planned (it was refused as "trains from scratch")
    plan = resolve_plan(SUITES.get("imagenetc")(), "smoke", ["undeclared"], {}, method_registry=METHODS)
    assert "undeclared" in plan.methods and not plan.skipped
    # a method that does not touch the cache is "scratch", silently; a declared one is taken as declared
    scratch = write(tmp_path / "p" / "scratchy.py", plugin_source(name="scratchy", starts="", cache="map_cache_x")
                    .replace("self.ctx.map_cache_x.get(self.ctx.seed)", "self.model"))
    load_file(scratch)
    scratchy = METHODS.get("scratchy")
    assert scratchy.starts_from({}) == "scratch" and static_contract_problems(scratchy) == []
    bad = write(tmp_path / "p" / "bad_opts.py", plugin_source(name="bad_opts").replace(
        "    defaults =", '    PREDICT_OPTIONS = "t"\n    constraints = {"nope": None}\n'
                                                                     '    CONTROLS = {"random": {"nada": 1}}\n    defaults ='))
    load_file(bad)
    problems = " | ".join(static_contract_problems(METHODS.get("bad_opts")))
    assert "PREDICT_OPTIONS must be a tuple" in problems and "constraints names option(s) ['nope']" in problems
    assert "CONTROLS names option(s) ['nada']" in problems
    assert main(["check-plugin", str(bad), "--static"]) == 1
    assert main(["check-plugin", str(scratch), "--static"]) == 0


def test_built_in_config_hashes_are_those_of_the_kept_records():
    """The cells of built-in methods keep their identity: every kept record's config_hash is what
    bench.harness.cell_identity computes for its configuration now (the source hash is provenance)."""
    from bench.config import RunPlan
    from bench.harness import cell_identity
    from bench.store import ResultsStore, find_packs, read_pack
    from bench.suites import SUITES
    from bench.training import TrainConfig
    from methods import METHODS

    checked = set()
    for pack in find_packs(REPO / "docs" / "records"):
        for rec in read_pack(pack).values():
            key = (rec["suite"], rec["method"])
            if key in checked or rec["method"] not in METHODS or rec["suite"] not in SUITES:
                continue
            plan = RunPlan(rec["suite"], rec["profile"], [rec["model"]], [rec["seed"]],
                           TrainConfig.from_dict(rec["train_config"]), rec["data_config"])
            suite = SUITES.get(rec["suite"])()
            if rec.get("model_identity"):  # e.g. a backbone network's digest (data.backbone): its file is
                # in the run's results folder, not in a clone; the method's part of the identity is checked
                suite.model_identity = lambda *_, _ident=rec["model_identity"]: dict(_ident)
            cid = cell_identity(suite, plan, ResultsStore("unused"), METHODS, rec["model"],
                                rec["method"], rec["method_config"], rec["seed"], torch.device("cpu"))
            assert cid.chash == rec["config_hash"], (pack, rec["method"])
            assert "plugin_source_sha256" not in cid.identity and cid.base["plugin_origin"] == "builtin"
            checked.add(key)
    assert len({m for _, m in checked}) >= 8, checked


def test_a_name_collision_exits_2_naming_both_sources(tmp_path, capsys):
    clash = write(tmp_path / "p" / "clash.py", plugin_source(name="temperature_scaling"))
    assert main(["list", "--plugin", str(clash)]) == 2
    err = capsys.readouterr().err
    assert str(clash.resolve()) in err and "methods/temperature_scaling.py" in err and "collides" in err
    one, two = write(tmp_path / "a" / "one.py", plugin_source(name="twin")), write(tmp_path / "b" / "two.py",
                                                                                      plugin_source(name="twin"))
    assert main(["list", "--plugin", str(one), "--plugin", str(two)]) == 2
    err = capsys.readouterr().err
    assert str(one.resolve()) in err and str(two.resolve()) in err
    from methods import METHODS

    assert METHODS.get("temperature_scaling").__module__ == "methods.temperature_scaling"  # the built-in kept


@pytest.mark.parametrize("body, what", [
    ("import not_a_package_anywhere_xyz\n", "ModuleNotFoundError"),
    ("def broken(:\n", "SyntaxError"),
    ("x = 1\nraise RuntimeError('plugin set-up failed')\n", "plugin set-up failed"),
])
def test_a_plugin_that_fails_to_import_exits_2_with_the_file_and_the_error(tmp_path, capsys, body, what):
    bad = write(tmp_path / "p" / "bad.py", body)
    assert main(["list", "--plugin", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad.resolve()) in err and what in err and "line" in err
    assert main(["list", "--plugin", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def _distribution(site: Path, dist: str, module: str, source: str, entry_points: str) -> None:
    write(site / f"{module}.py", source)
    info = site / f"{dist}-0.1.dist-info"
    write(info / "METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    write(info / "entry_points.txt", f"[bench.methods]\n{entry_points}\n")


def test_entry_point_plugins_are_found_without_a_flag(tmp_path, monkeypatch, capsys):
    import sys

    from bench.harness import cell_identity
    from bench.config import resolve_plan
    from bench.store import ResultsStore
    from bench.suites import SUITES
    from methods import METHODS

    site = tmp_path / "site"
    _distribution(site, "ext_dist", "ext_ep_mod", plugin_source(name="ext_ep"), "ext_ep = ext_ep_mod")
    undecorated = plugin_source(name="unused").replace('@register_method("unused")\n', "")
    _distribution(site, "ext_dist2", "ext_ep_cls", undecorated, "ext_cls = ext_ep_cls:ExternalTemperature")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "ext_ep_mod", raising=False)
    monkeypatch.delitem(sys.modules, "ext_ep_cls", raising=False)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "ext_ep" in out and "entry point ext_ep = ext_ep_mod" in out and "ext_cls" in out
    suite = SUITES.get("mnist_rotated")()
    plan = resolve_plan(suite, "smoke", ["ext_ep", "ext_cls"], {}, method_registry=METHODS)
    for name in ("ext_ep", "ext_cls"):
        cid = cell_identity(suite, plan, ResultsStore(tmp_path), METHODS, "lenet_300_100", name,
                            plan.methods[name][0], 0, torch.device("cpu"))
        assert cid.base["plugin_origin"] == "entry_point" and cid.identity["plugin_source_sha256"]
    # an entry point whose name is taken, or that fails to import: exit 2 naming it
    _distribution(site, "ext_dist3", "ext_ep_clash", plugin_source(name="deterministic"), "clash = ext_ep_clash")
    monkeypatch.delitem(sys.modules, "ext_ep_clash", raising=False)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert "entry point clash = ext_ep_clash" in err and "methods/deterministic.py" in err
    (site / "ext_dist3-0.1.dist-info" / "entry_points.txt").write_text("[bench.methods]\nclash = no_such_mod_xyz\n")
    assert main(["list"]) == 2
    assert "entry point clash = no_such_mod_xyz" in capsys.readouterr().err


def test_a_dask_worker_loads_the_drivers_plugin_files_or_the_preflight_names_them(tmp_path):
    """Workers load the RunSpec's --plugin files (at the same path); one missing there is a
    pre-flight problem naming it, before any work."""
    from bench.executors.preflight import worker_report

    plugin = write(tmp_path / "p" / "ext_ts.py", plugin_source())
    token = tmp_path / "t.token"
    token.write_text("tok")
    ok = worker_report(str(tmp_path), None, str(token), "tok", ["ext_ts"], (str(plugin.resolve()),))
    assert ok["problems"] == [] and ok["plugins"] == {str(plugin.resolve()): hashlib.sha256(plugin.read_bytes())
                                                      .hexdigest()}
    missing = str(tmp_path / "not_on_this_worker.py")
    bad = worker_report(str(tmp_path), None, str(token), "tok", ["ext_ts"], (missing,))
    assert any(missing in p and "same absolute path on every worker" in p for p in bad["problems"])


def test_a_plugin_may_bring_its_own_tuning_space(tmp_path):
    from bench import tuning
    from bench.plugins import load_file

    load_file(write(tmp_path / "p" / "tuned.py", plugin_source(name="tuned_ext").replace(
        "    defaults =", '    TUNING_SPACE = {"t": [0.5, 1.0, 2.0, 4.0]}\n    defaults =')))
    assert tuning.space_of("tuned_ext") == {"t": [0.5, 1.0, 2.0, 4.0]}
    tuning.check_spaces()
    assert tuning.sweep_sets("tuned_ext") == ["tuned_ext.t=0.5,1,2,4"]


@pytest.mark.slow
def test_a_dask_run_with_a_plugin_file_gives_the_local_cells(mnist, tmp_path):
    """--executor dask: the worker loads the driver's --plugin file, so its cells are the local
    run's (same config hashes, source hash recorded)."""
    plugin = write(tmp_path / "p" / "ext_ts.py", plugin_source())
    local, dist = tmp_path / "local", tmp_path / "dist"
    base = lambda out: small_mnist_run(mnist, out, "deterministic,ext_ts") + ["--plugin", str(plugin)]  # noqa: E731
    assert main(base(local)) == 0
    dask = ["--executor", "dask", "--workers", "1", "--threads", "1"]
    assert main(base(dist) + dask) == 0
    cols = ("method", "config_hash", "plugin_source_sha256")
    cells = lambda out: set(zip(*(load_records(out)[c] for c in cols)))  # noqa: E731
    assert cells(dist) == cells(local) and len(cells(dist)) == 2
    assert set(load_records(dist)["worker"]) != {"local"}
