import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest


def _pin_xdist_worker() -> None:
    """Under ``pytest -n N`` (pytest-xdist), worker k runs on every N-th core of the affinity mask
    from the k-th: bench takes its cores from the mask (bench/threads.py), so the workers' torch
    threads, clusters and child processes never oversubscribe the cores between them."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= count:
        os.sched_setaffinity(0, cores[int(worker[2:]) % count::count])


_pin_xdist_worker()  # before torch: its default thread count follows the mask

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # our `datasets`, not the PyPI package

torch.set_num_threads(min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2,
                          torch.get_num_threads()))


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """The objects alive when a test module starts (the imported libraries: about half a million)
    are frozen out of the cyclic garbage collector while it runs: the full collection that every
    fit's and prediction's memory measurement makes (bench.cost.release_free_memory) then scans
    only the module's own objects (0.2-0.4 s a call otherwise, about a tenth of a grid test's time).
    Garbage is collected before the freeze; what the module creates is collected as always."""
    import bench.reporting.build  # noqa: F401  the libraries the code imports lazily, frozen with the rest
    import laplace  # noqa: F401
    import matplotlib.pyplot  # noqa: F401

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def real_data_root() -> Path | None:
    """The unpacked real data (BENCH_DATA_ROOT, else ./data), or None when absent."""
    root = Path(os.environ.get("BENCH_DATA_ROOT", ROOT / "data"))
    return root if (root / "MNIST" / "raw" / "train-images-idx3-ubyte").exists() else None


@pytest.fixture
def real_root():
    root = real_data_root()
    if root is None:
        pytest.skip("real MNIST not unpacked (run ../shared/data/unpack.sh data)")
    return root


def load_script(relpath: str):
    """A script of the repository that is not in a package (``benchmarks/x.py``, ``scripts/y.py``) as a
    module, loaded from its file."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_fake_mnist(root: Path, n_train: int = 600, n_test: int = 200, gz: bool = False, seed: int = 0) -> Path:
    """MNIST and FashionMNIST test in torchvision's raw IDX layout, with learnable fake digits."""
    from datasets.mnist import write_idx

    rng = np.random.default_rng(seed)
    suffix = ".gz" if gz else ""

    def digits(n):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, lab in enumerate(labels):  # a bright bar whose position encodes the label
            images[i, 4 + 2 * lab: 6 + 2 * lab, 6:22] = 250
        return images, labels

    for split, n in (("train", n_train), ("t10k", n_test)):
        im, lab = digits(n)
        write_idx(root / "MNIST" / "raw" / f"{split}-images-idx3-ubyte{suffix}", im)
        write_idx(root / "MNIST" / "raw" / f"{split}-labels-idx1-ubyte{suffix}", lab)
    im, lab = digits(n_test)
    im = 255 - im  # a different-looking distribution for the OOD set
    write_idx(root / "FashionMNIST" / "raw" / f"t10k-images-idx3-ubyte{suffix}", im)
    write_idx(root / "FashionMNIST" / "raw" / f"t10k-labels-idx1-ubyte{suffix}", lab)
    return root


@pytest.fixture
def fake_mnist(tmp_path):
    return make_fake_mnist(tmp_path / "data")


def small_mnist_run(data_root, out, methods: str, *, n_train: int = 500, epochs: int = 2) -> list[str]:
    """``bench run`` arguments of a quiet smoke run of rotated MNIST on the fake data at ``data_root``:
    100 validation, test and OOD images, ``n_train`` training images, ``epochs`` epochs, no report."""
    return ["run", "--suite", "mnist_rotated", "--profile", "smoke", "--quiet", "--no-report",
            "--data-root", str(data_root), "--out", str(out), "--methods", methods,
            "--set", "data.n_val=100", "--set", f"data.n_train={n_train}", "--set", "data.n_test=100",
            "--set", "data.n_ood=100", "--set", f"train.epochs={epochs}"]


def pytest_collection_modifyitems(config, items):
    """``BENCH_CONTRACT_METHODS=a,b`` (set by ``python -m bench check-plugin``): of the plugin
    contract tests (tests/test_method_contract.py), only those of these methods run."""
    only = {m.strip() for m in os.environ.get("BENCH_CONTRACT_METHODS", "").split(",") if m.strip()}
    if not only:
        return
    keep, drop = [], []
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("name")
        contract = Path(str(item.fspath)).name == "test_method_contract.py"
        (drop if contract and name not in only else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
