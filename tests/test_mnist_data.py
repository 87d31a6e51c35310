import numpy as np
import pytest
import torch

from datasets.errors import DatasetNotFoundError
from datasets.mnist import load_mnist_like, read_idx, write_idx
from datasets.shifts import rotate_images
from tests.conftest import make_fake_mnist


@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path, gz):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.idx" + (".gz" if gz else ""))
    write_idx(path, arr)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), arr)


@pytest.mark.parametrize("gz", [False, True])
def test_loader_reads_torchvision_layout(tmp_path, gz):
    root = make_fake_mnist(tmp_path, n_train=50, n_test=20, gz=gz)
    x, y = load_mnist_like(root, "MNIST", "train")
    assert x.shape == (50, 1, 28, 28) and x.dtype == torch.uint8 and y.dtype == torch.int64
    xo, _ = load_mnist_like(root, "FashionMNIST", "test")
    assert xo.shape == (20, 1, 28, 28)


def test_missing_dataset_names_path_and_how(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_mnist_like(tmp_path, "MNIST", "train", download=False)
    msg = str(err.value)
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in msg
    assert "unpack.sh" in msg and "Layout" in msg


def test_malformed_file_is_reported(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 20)
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"garbage")
    with pytest.raises(DatasetNotFoundError, match="malformed"):
        load_mnist_like(tmp_path, "MNIST", "test")


def test_rotation_matches_rot90_and_is_counter_clockwise():
    img = torch.zeros(1, 1, 28, 28)
    img[0, 0, 2:5, 20:26] = 1.0  # a bar in the top-right
    rot = rotate_images(img, 90)
    torch.testing.assert_close(rot, torch.rot90(img, 1, dims=(2, 3)), atol=1e-5, rtol=0)
    assert rot[0, 0, :14, :14].sum() > 0  # counter-clockwise: the bar moves to the top-left
    torch.testing.assert_close(rotate_images(img, 0), img)
    blob = torch.zeros(1, 1, 28, 28)
    blob[0, 0, 10:18, 12:16] = 1.0  # near the centre, so no mass leaves the frame
    assert rotate_images(blob, 45).sum().item() == pytest.approx(blob.sum().item(), rel=0.1)


@pytest.mark.real_data
def test_real_mnist_files(real_root):
    x, y = load_mnist_like(real_root, "MNIST", "train")
    assert x.shape == (60000, 1, 28, 28) and int(y.max()) == 9
    xm = x[:50000].float() / 255
    assert xm.mean().item() == pytest.approx(0.1307, abs=2e-3)
    xo, _ = load_mnist_like(real_root, "FashionMNIST", "test")
    assert xo.shape == (10000, 1, 28, 28)


def test_a_failed_download_leaves_the_data_root_as_it_was(tmp_path, monkeypatch):
    """torchvision creates its folders before the network fails: they are removed again, and the
    error is the usual missing-dataset one (exit 2 from the CLI)."""
    from pathlib import Path

    import torchvision

    from datasets.cifar10 import load_cifar10, load_svhn_test
    from datasets.errors import DatasetNotFoundError
    from datasets.mnist import load_mnist_like

    def offline(root, *args, **kwargs):
        (Path(root) / "MNIST" / "raw").mkdir(parents=True, exist_ok=True)
        (Path(root) / "cifar-10-batches-py").mkdir(parents=True, exist_ok=True)
        raise OSError("no network")

    for name in ("MNIST", "FashionMNIST", "CIFAR10", "SVHN"):
        monkeypatch.setattr(torchvision.datasets, name, offline)
    root = tmp_path / "data"
    (root / "keep").mkdir(parents=True)
    for load in (lambda: load_mnist_like(root, "MNIST", "train", download=True),
                 lambda: load_cifar10(root, "train", download=True),
                 lambda: load_svhn_test(root, download=True)):
        with pytest.raises(DatasetNotFoundError, match=r"download failed \(OSError\)"):
            load()
        assert sorted(p.name for p in root.rglob("*")) == ["keep"]
