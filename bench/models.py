"""Network architectures used by the suites, registered by name.

Builders take ``(in_shape, num_outputs, dropout)`` and return an ``nn.Sequential`` (or a
module whose ``.features``-free forward is a plain chain), so that methods can find the
layers before the first stochastic one and compute them once for all posterior samples.
Dropout layers are placed after each hidden activation (never on the input or output),
and exist in every model with ``p = dropout`` (identity at ``p = 0``) so that MC dropout
and the deterministic network share one architecture.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from bench.errors import BenchError
from bench.registry import Registry

MODELS: Registry[Callable[..., nn.Module]] = Registry("model")


def _dropout(p: float) -> list[nn.Module]:
    return [nn.Dropout(p)] if p > 0 else []


@MODELS.register("lenet_300_100")
def lenet_300_100(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """LeNet-300-100 with batch norm and ReLU (PBN paper, Appendix H.2.1)."""
    d = math.prod(in_shape)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(d, 300), nn.BatchNorm1d(300), nn.ReLU(), *_dropout(dropout),
        nn.Linear(300, 100), nn.BatchNorm1d(100), nn.ReLU(), *_dropout(dropout),
        nn.Linear(100, num_outputs),
    )


@MODELS.register("lenet5")
def lenet5(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """LeNet-5 (LeCun et al. 1998) with batch norm, ReLU and max pooling; 28x28 or 32x32 input."""
    c, h, w = in_shape
    pad = 2 if h == 28 else 0
    fh = ((h + 2 * pad - 4) // 2 - 4) // 2
    fw = ((w + 2 * pad - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 6, 5, padding=pad), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * fh * fw, 120), nn.BatchNorm1d(120), nn.ReLU(), *_dropout(dropout),
        nn.Linear(120, 84), nn.BatchNorm1d(84), nn.ReLU(), *_dropout(dropout),
        nn.Linear(84, num_outputs),
    )


@MODELS.register("mlp_100")
def mlp_100(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """One hidden layer of 100 ReLU units (the toy regression of Hernandez-Lobato & Adams 2015)."""
    d = math.prod(in_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 100), nn.ReLU(), *_dropout(dropout), nn.Linear(100, num_outputs))


class BasicBlock(nn.Module):
    """ResNet basic block (He et al. 2016): conv3x3(stride) -> BN -> ReLU -> [dropout] -> conv3x3 -> BN,
    plus the identity or a 1x1 conv + BN projection shortcut, then ReLU.

    The dropout sits after the block's first convolution (PBN paper, Appendix H.3.2); it is
    an ``nn.Dropout`` when ``dropout > 0`` (so MC dropout finds and samples it) and an
    identity otherwise.
    """

    def __init__(self, c_in: int, c_out: int, stride: int = 1, dropout: float = 0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu1 = nn.ReLU()
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
        else:
            self.shortcut = nn.Identity()
        self.relu2 = nn.ReLU()

    def forward(self, x):
        h = self.drop(self.relu1(self.bn1(self.conv1(x))))
        h = self.bn2(self.conv2(h))
        return self.relu2(h + self.shortcut(x))


def _resnet(in_shape, num_outputs: int, dropout: float, stem: list[nn.Module], c_stem: int,
            blocks: list[tuple[int, int]]) -> nn.Sequential:
    """stem, basic blocks ``(width, stride)``, global average pool, [dropout], linear -- one
    ``nn.Sequential`` whose children are whole blocks (so methods can split it at a block)."""
    layers, c = list(stem), c_stem
    for width, stride in blocks:
        layers.append(BasicBlock(c, width, stride, dropout))
        c = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), *_dropout(dropout), nn.Linear(c, num_outputs)]
    return nn.Sequential(*layers)


@MODELS.register("resnet_small")
def resnet_small(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """The PBN paper's small ResNet (Appendix H.3.1): 3x3 stride-2 input convolution (16
    channels) + BN + ReLU and a 2x2 max pool, then 4 residual blocks whose first
    convolution has stride 2 and second stride 1, widths 16 / 32 / 64 / 64 (the appendix
    lists the features [16, 32, 64] for 4 blocks; the last block keeps 64), global average
    pool and a linear layer. On 32x32 inputs the maps are 16 -> 8 -> 4 -> 2 -> 1 -> 1."""
    c = in_shape[0]
    stem = [nn.Conv2d(c, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2)]
    return _resnet(in_shape, num_outputs, dropout, stem, 16, [(16, 2), (32, 2), (64, 2), (64, 2)])


@MODELS.register("resnet_small_x2")
def resnet_small_x2(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """``resnet_small`` at twice the width (stem 32, blocks 32 / 64 / 128 / 128; 0.62 M weights at
    10 classes, about 4x the multiply-adds): the wider network of the SSVI capacity experiment
    (docs/ssvi.md), where a 10 %-dense classifier keeps 128 of its weights instead of 64."""
    c = in_shape[0]
    stem = [nn.Conv2d(c, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2)]
    return _resnet(in_shape, num_outputs, dropout, stem, 32, [(32, 2), (64, 2), (128, 2), (128, 2)])


_RESNET18_BLOCKS = [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)]


@MODELS.register("resnet18_cifar")
def resnet18_cifar(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """ResNet-18 for 32x32 inputs (the common CIFAR variant): 3x3 stride-1 input convolution,
    no max pool, 4 stages of 2 basic blocks (64 / 128 / 256 / 512), dropout after the first
    convolution of every block and before the linear layer (PBN paper, Appendix H.3.2)."""
    stem = [nn.Conv2d(in_shape[0], 64, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    return _resnet(in_shape, num_outputs, dropout, stem, 64, _RESNET18_BLOCKS)


@MODELS.register("resnet18_pbn")
def resnet18_pbn(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """ResNet-18 exactly as the PBN paper's Appendix H.3.2 words it: the 7x7 input convolution
    kept but with stride 1, max pool removed; otherwise as ``resnet18_cifar``."""
    stem = [nn.Conv2d(in_shape[0], 64, 7, stride=1, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    return _resnet(in_shape, num_outputs, dropout, stem, 64, _RESNET18_BLOCKS)


# ------------------------------------------------------------------------------ segmentation


class PixelRows(nn.Module):
    """``(B, C, H, W)`` feature maps -> ``(B H W, C)``: one row per pixel (batch-major, then rows,
    then columns). A segmentation network ends with it and an ``nn.Linear`` (= a 1x1 convolution),
    so that every method sees pixels as examples: a classifier's losses, predictives and Laplace
    approximations apply unchanged (the last-layer Laplace is the 1x1 classifier, pixels are
    its observations)."""

    def forward(self, x):
        return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


def _double_conv(c_in: int, c_out: int, dropout: float) -> nn.Sequential:
    """(3x3 conv, BN, ReLU) x 2, dropout after the block when ``dropout > 0``."""
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
              nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*layers, *_dropout(dropout))


class UNetBody(nn.Module):
    """UNet (Ronneberger et al. 2015) without its classifier: an encoder of double convolutions
    and 2x2 max pools (``widths``), a decoder that upsamples bilinearly, convolves to the skip's
    width, concatenates the skip and applies a double convolution. Inputs of any size: padded to a
    multiple of 2^depth (zeros = the normalised mean), the output cropped back. Dropout after the
    bottleneck and every decoder block (Bayesian SegNet's placement in the central and decoder
    units, Kendall et al. 2017) when ``dropout > 0``."""

    def __init__(self, c_in: int, widths=(16, 32, 64, 128), dropout: float = 0.0):
        super().__init__()
        self.depth = len(widths) - 1
        self.down = nn.ModuleList()
        c = c_in
        for i, w in enumerate(widths):
            self.down.append(_double_conv(c, w, dropout if i == len(widths) - 1 else 0.0))
            c = w
        self.up_conv = nn.ModuleList()
        self.dec = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.up_conv.append(nn.Conv2d(c, w, 1))
            self.dec.append(_double_conv(2 * w, w, dropout))
            c = w
        self.out_channels = c

    def forward(self, x):
        import torch.nn.functional as F

        h, w = x.shape[-2:]
        m = 2 ** self.depth
        ph, pw = (-h) % m, (-w) % m
        if ph or pw:
            x = F.pad(x, (0, pw, 0, ph))
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < self.depth:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, dec, skip in zip(self.up_conv, self.dec, reversed(skips)):
            x = up(F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False))
            x = dec(torch.cat([skip, x], dim=1))
        return x[..., :h, :w]


@MODELS.register("unet_small")
def unet_small(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """A 4-level UNet (widths 16 / 32 / 64 / 128, 0.45 M weights at 11 classes) for 2-CPU runs: the body, one row per
    pixel (:class:`PixelRows`), and the 1x1 classifier as an ``nn.Linear``."""
    body = UNetBody(in_shape[0], (16, 32, 64, 128), dropout)
    return nn.Sequential(body, PixelRows(), nn.Linear(body.out_channels, num_outputs))


class PresenceUNet(nn.Module):
    """Per-class presence from a segmentation network (multi-label: which classes an image shows):
    the per-pixel class logits of :func:`unet_small` (``seg``) pooled into one logit per class,
    ``scale_k (log s_k - log t) + shift_k``, s_k the image's mean softmax share of class k and t the
    presence threshold (the share at which a class counts as present). At ``scale = 1``,
    ``shift = 0`` (the initialisation) a class predicted on a share t of the pixels gets probability
    1/2, so a ``seg`` pretrained on the segmentation task of the same classes starts as that task's
    presence rule; training adjusts it end to end. ``camvid_multilabel`` loads ``seg`` from a
    camvid MAP network (``data.backbone``)."""

    #: the smallest share the log is taken of (a class on no pixel: log 1e-6, not -inf)
    SHARE_FLOOR = 1e-6

    def __init__(self, in_shape, num_outputs: int, dropout: float = 0.0, threshold: float = 0.01):
        super().__init__()
        self.seg = unet_small(in_shape, num_outputs, dropout)
        self.scale = nn.Parameter(torch.ones(num_outputs))
        self.shift = nn.Parameter(torch.zeros(num_outputs))
        self.register_buffer("log_threshold", torch.tensor(math.log(threshold)))

    def forward(self, x):
        rows = self.seg(x)  # (B H W, K), one row per pixel
        share = torch.softmax(rows, dim=-1).reshape(x.shape[0], -1, rows.shape[-1]).mean(1)
        return self.scale * (torch.log(share.clamp_min(self.SHARE_FLOOR)) - self.log_threshold) + self.shift


@MODELS.register("unet_presence")
def unet_presence(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """:class:`PresenceUNet` at a 1 % presence threshold: a multi-label network whose labels are
    classes of the image's pixels (``camvid_multilabel``, which sets its threshold and backbone)."""
    return PresenceUNet(in_shape, num_outputs, dropout)


@MODELS.register("unet_pbn")
def unet_pbn(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """The PBN paper's Cityscapes UNet (App. H.4): blocks of 64 / 128 / 256 / 512 / 1024 features,
    bilinear upsampling between decoder blocks (31 M weights); for the paper profile."""
    body = UNetBody(in_shape[0], (64, 128, 256, 512, 1024), dropout)
    return nn.Sequential(body, PixelRows(), nn.Linear(body.out_channels, num_outputs))


def _torchvision_resnet(arch: str, num_outputs: int, dropout: float) -> nn.Sequential:
    """torchvision's ``arch`` as an ``nn.Sequential`` of its own children, named as torchvision
    names them (``conv1``, ``bn1``, ..., ``layer4``, ``avgpool``, ``fc``), so that torchvision's
    pretrained state dicts load unchanged; dropout (MC dropout) only before ``fc``."""
    from collections import OrderedDict

    import torchvision

    net = getattr(torchvision.models, arch)(weights=None, num_classes=num_outputs)
    parts = OrderedDict((n, m) for n, m in net.named_children() if n != "fc")
    parts["flatten"] = nn.Flatten()
    if dropout > 0:
        parts["dropout"] = nn.Dropout(dropout)
    parts["fc"] = net.fc
    return nn.Sequential(parts)


@MODELS.register("resnet50")
def resnet50(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """torchvision's ResNet-50 (He et al. 2016; bottleneck blocks, 25.6 M weights at 1,000
    classes): the PBN paper's ImageNet network (Sec. 4.5, Fig. 7), loaded from pretrained weights
    by the ImageNet suites (:func:`load_pretrained`)."""
    return _torchvision_resnet("resnet50", num_outputs, dropout)


@MODELS.register("resnet18")
def resnet18(in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """torchvision's ResNet-18 (7x7 stride-2 stem and max pool: ImageNet's), 11.7 M weights."""
    return _torchvision_resnet("resnet18", num_outputs, dropout)


#: torchvision's published weight files (the IMAGENET1K_V1 weights: Ovadia et al. 2019's networks
#: were trained the same way), looked up in torch's hub cache before any download
TORCHVISION_WEIGHTS = {"resnet50": "resnet50-0676ba61.pth", "resnet18": "resnet18-f37ad2e1.pth"}


def pretrained_weights_path(model_name: str, weights: str | None, download: bool):
    """The weights file of ``model_name``: ``weights`` when given, else torchvision's published
    file in torch's hub cache (downloaded there only when ``download`` and a network is there).
    Raises :class:`bench.errors.BenchError` naming where it looked."""
    from pathlib import Path

    import torch

    from bench.errors import BenchError

    if weights:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise BenchError(f"pretrained weights for {model_name}: {path} does not exist (data.weights)")
        return path
    fname = TORCHVISION_WEIGHTS.get(model_name)
    if fname is None:
        raise BenchError(f"model {model_name} has no published pretrained weights; give a state-dict file with "
                         f"--set data.weights=PATH")
    path = Path(torch.hub.get_dir()) / "checkpoints" / fname
    if path.is_file():
        return path
    if download:
        try:
            torch.hub.download_url_to_file(f"https://download.pytorch.org/models/{fname}", str(path), progress=False)
            return path
        except Exception as exc:  # noqa: BLE001 - no network: say where the file must go
            reason = f"download failed ({type(exc).__name__})"
    else:
        reason = "not there and downloads are off"
    raise BenchError(f"pretrained weights for {model_name}: {path} {reason}; put torchvision's {fname} there "
                     f"(https://download.pytorch.org/models/{fname}) or give a state-dict file with --set data.weights=PATH")


def load_pretrained(model: nn.Module, path) -> dict:
    """Load a state dict (a plain one, or ``{"state_dict": ...}`` / ``{"model": ...}``) into
    ``model`` strictly; returns its provenance (file, size, SHA-256 prefix)."""
    from pathlib import Path

    import torch

    from bench.errors import BenchError

    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's input error
        raise BenchError(f"pretrained weights {path}: unreadable ({type(exc).__name__}: {exc})") from None
    if isinstance(state, dict):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), dict):
                state = state[key]
                break
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise BenchError(f"pretrained weights {path} do not fit the network: {str(exc)[:500]}") from None
    return weights_provenance(path)


def weights_provenance(path) -> dict:
    """A weights file's path, size and SHA-256 prefix (stored with every record built on it)."""
    import hashlib
    from pathlib import Path

    path = Path(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256_16": h.hexdigest()[:16]}


def build_model(name: str, in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
    """A fresh network: a registered name (every builder takes ``dropout``), or a model spec,
    ``MODULE:FACTORY`` / ``timm:NAME`` (:mod:`bench.model_specs`), whose factory gets ``dropout``
    only when it names it (else MC dropout adds its own layers)."""
    if name in MODELS:
        return MODELS.get(name)(tuple(in_shape), num_outputs, dropout=dropout)
    from bench.model_specs import build_spec, forms, is_spec

    if not is_spec(name):
        raise BenchError(f"unknown model {name!r}; models are {forms(MODELS.names())}")
    return build_spec(name, in_shape, num_outputs, dropout, registered=MODELS.names())


def model_identity(name: str, in_shape, num_outputs: int) -> dict:
    """What a model adds to its cells' identity and its MAP networks' cache key: nothing for a
    registered name (earlier hashes hold), the source hash of a model spec
    (:func:`bench.model_specs.spec_identity`)."""
    if name in MODELS:
        return {}
    from bench.model_specs import spec_identity

    return spec_identity(name, tuple(int(s) for s in in_shape), int(num_outputs))


def check_model(name: str, in_shape, task) -> str:
    """The canonical name of the model ``name`` (checked when a run is planned): a registered name,
    or a spec that resolves, builds an ``nn.Module`` and gives the task's output shape on a batch of
    the suite's inputs; else a BenchError naming what is valid."""
    if name in MODELS:
        return name
    from bench.model_specs import canonical_name, check_network, forms, is_spec

    if not is_spec(name):
        raise BenchError(f"unknown model {name!r}; models are {forms(MODELS.names())}")
    with torch.random.fork_rng(devices=[]):
        net = build_model(name, in_shape, task.num_outputs)
    check_network(net, tuple(in_shape), task, f"model {name!r}")
    return canonical_name(name)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
