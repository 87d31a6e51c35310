"""No file the project reads can run code (issue 38, item 8): the CIFAR-10 python batches go through
one restricted unpickler (``datasets/safe_pickle.py``), torch files through ``weights_only=True``
(``bench.torch_files.load_torch``). A crafted pickle whose payload would create a marker file is fed
through every loader of such files; the sources are checked for any other way to unpickle."""
from __future__ import annotations

import ast
import importlib.util
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.errors import BenchError
from datasets.cifar10 import write_cifar_batch
from synthetic import TouchOnUnpickle

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("bench", "methods", "datasets", "benchmarks", "scripts")
#: the one module allowed to unpickle (with its restricted unpickler)
SAFE_LOADER = "datasets/safe_pickle.py"
PICKLERS = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}


def _unsafe_uses(path: Path) -> list[str]:
    """Every call in ``path`` that can unpickle arbitrary objects, as ``file:line: what``."""
    text = path.read_text()
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(ast.parse(text)):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module in PICKLERS:
            bad = [a.name for a in node.names if a.name in ("load", "loads", "Unpickler", "open")]
            if bad:
                found.append(f"{where}: from {node.module} import {', '.join(bad)}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in PICKLERS \
                and node.attr in ("load", "loads", "Unpickler", "open"):
            found.append(f"{where}: {node.value.id}.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("read_pickle",):
            found.append(f"{where}: .{node.attr}")
        if isinstance(node, ast.Call):
            func = node.func
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            is_torch_load = (isinstance(func, ast.Attribute) and func.attr == "load"
                             and isinstance(func.value, ast.Name) and func.value.id == "torch")
            wo = kw.get("weights_only")
            if (is_torch_load or wo is not None) and not (isinstance(wo, ast.Constant) and wo.value is True):
                found.append(f"{where}: a load without weights_only=True")
            ap = kw.get("allow_pickle")
            if ap is not None and not (isinstance(ap, ast.Constant) and ap.value is False):
                found.append(f"{where}: allow_pickle other than False")
    for n, line in enumerate(text.splitlines(), 1):  # whatever form the code takes (a string, a comment)
        if re.search(r"weights_only\s*=\s*False|allow_pickle\s*=\s*True", line):
            found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_no_source_unpickles_outside_the_safe_loader():
    files = sorted(p for d in SOURCES for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)
    assert len(files) > 50 and (ROOT / SAFE_LOADER) in files
    found = [u for p in files if p.relative_to(ROOT).as_posix() != SAFE_LOADER for u in _unsafe_uses(p)]
    assert not found, "unpickling outside " + SAFE_LOADER + " (use it, or bench.torch_files.load_torch):\n" + \
        "\n".join(found)


def test_the_checker_finds_each_unsafe_form(tmp_path):
    """The grep above is only as good as its patterns: each form is caught."""
    probe = tmp_path / "probe.py"
    forms = ["pickle.load(fh)", "pickle.loads(b)", "from pickle import loads", "pickle.Unpickler(fh).load()",
             "torch.load(p)", "torch.load(p, weights_only=False)", "np.load(p, allow_pickle=True)",
             "pd.read_pickle(p)", "x = dict(weights_only=False)"]
    for form in forms:
        probe.write_text(form + "\n")
        assert _unsafe_uses(probe), form
    probe.write_text("torch.load(p, map_location='cpu', weights_only=True)\nnp.load(p)\n"
                     "np.save(fh, a, allow_pickle=False)\npickle.dump(obj, fh)\n")
    assert not _unsafe_uses(probe)


# ----------------------------------------------------------------------------- crafted files

def _crafted_batch(marker: Path) -> bytes:
    return pickle.dumps({b"data": TouchOnUnpickle(marker), b"labels": [0], "data": TouchOnUnpickle(marker)})


def _cifar_root(tmp_path: Path, marker: Path) -> Path:
    root = tmp_path / "data"
    d = root / "cifar-10-batches-py"
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_cifar_batch(d / name, rng.integers(0, 255, (10, 3, 32, 32), dtype=np.uint8), np.arange(10) % 10)
    for name in ("test_batch", "data_batch_1"):
        (d / name).write_bytes(_crafted_batch(marker))
    return root


def test_crafted_cifar_batch_through_the_dataset_loader(tmp_path):
    from datasets.cifar10 import load_cifar10

    marker = tmp_path / "code-ran"
    root = _cifar_root(tmp_path, marker)
    for split in ("train", "test"):
        with pytest.raises(BenchError, match="malformed.*refusing to load"):
            load_cifar10(root, split)
    assert not marker.exists()


def test_crafted_cifar_batch_through_the_cifar10c_generator(tmp_path, capsys):
    from datasets.cifar10c.generate import load_cifar10_test, main

    marker = tmp_path / "code-ran"
    root = _cifar_root(tmp_path, marker)
    with pytest.raises(BenchError, match="malformed"):
        load_cifar10_test(root)
    assert main(["--data-root", str(root)]) == 2  # the command the CIFAR-10-C error message names
    err = capsys.readouterr().err
    assert "CIFAR-10: dataset malformed" in err and "refusing to load" in err
    assert not marker.exists() and not (root / "CIFAR-10-C").exists()


def test_the_generator_still_reads_a_genuine_batch(tmp_path):
    """The official batches are Python 2 pickles read with latin1 (str keys); fixtures have bytes keys."""
    from datasets.cifar10c.generate import load_cifar10_test

    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (4, 3, 32, 32), dtype=np.uint8)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    write_cifar_batch(path, images, [3, 1, 4, 1])
    x, y = load_cifar10_test(tmp_path)
    assert np.array_equal(x, images.transpose(0, 2, 3, 1)) and y.tolist() == [3, 1, 4, 1]
    with open(path, "wb") as fh:  # str keys, as the official release reads under latin1
        pickle.dump({"data": images.reshape(4, -1), "labels": [3, 1, 4, 1]}, fh, protocol=2)
    x, y = load_cifar10_test(tmp_path)
    assert np.array_equal(x, images.transpose(0, 2, 3, 1)) and y.tolist() == [3, 1, 4, 1]


def test_crafted_torch_checkpoints(tmp_path):
    from torch import nn

    from bench.models import load_pretrained
    from bench.torch_files import DamagedCheckpointError, load_or_set_aside, load_torch

    marker = tmp_path / "code-ran"
    path = tmp_path / "seed0.pt"
    torch.save({"method": TouchOnUnpickle(marker), "fit_cost": {}}, path)
    with pytest.raises(DamagedCheckpointError, match="cannot be loaded safely"):
        load_torch(path)
    with pytest.raises(BenchError, match="pretrained weights .*unreadable"):
        load_pretrained(nn.Linear(2, 2), path)
    assert load_or_set_aside(path) is None and path.with_name("seed0.pt.bad").exists()
    assert not marker.exists()


def test_crafted_checkpoint_through_the_stationarity_benchmark(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("pbn_sigma_stationarity",
                                                  ROOT / "benchmarks" / "pbn_sigma_stationarity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from bench.store import ResultsStore

    marker = tmp_path / "code-ran"
    results = tmp_path / "results"
    rec = {"suite": "toy", "model": "mlp", "method": "pbn", "config_hash": "abc", "seed": 0, "method_config": {}}
    rec_path = results / "toy" / "records" / "mlp" / "pbn-abc" / "seed0" / "id-clean-0.json"
    rec_path.parent.mkdir(parents=True)
    rec_path.write_text(json.dumps(rec))
    ckpt = ResultsStore(results).fitted_checkpoint(rec)
    ckpt.parent.mkdir(parents=True)
    torch.save({"method": TouchOnUnpickle(marker), "fit_cost": {}}, ckpt)
    from bench.suites import SUITES

    suite = SUITES.get("toy")()
    with pytest.raises(BenchError, match="cannot be loaded safely"):
        mod.fitted_pbn(results, suite, None, "mlp", 0)
    # the command: exit 2 with the message
    with pytest.raises(SystemExit) as exc:
        mod.main(["--suite", "toy", "--profile", "smoke", "--model", "mlp", "--results", str(results),
                  "--data-root", str(tmp_path / "data")])
    assert exc.value.code == 2 and "cannot be loaded safely" in capsys.readouterr().err
    assert not marker.exists()
