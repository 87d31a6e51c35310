"""The in-memory suite of :func:`bench.evaluate`: a researcher's data and network(s) as a
:class:`bench.suites.base.Suite`, run by the same harness, records and report as a registered suite.

It is not registered (``SUITES``): ``bench run`` cannot name it. A distributed run ships the suite
object itself to the workers (``RunSpec.suite_object``); its data then travels as a file under the
results directory (:meth:`UserSuite.save_data`), its networks pickled with it.
"""
from __future__ import annotations

import copy
from pathlib import Path
import torch
from torch import nn

from bench.data import EvalSet, SuiteData, data_digest
from bench.errors import BenchError
from bench.suites.base import Suite


class UserNetwork:
    """One network :func:`bench.evaluate` got, under the name its records carry.

    ``model`` is a factory (a callable returning an ``nn.Module``, called as
    :func:`bench.model_specs.call_factory` says), an ``nn.Module`` *template* (each network is a
    deep copy re-initialised with ``reset_parameters()`` of every layer that has one, under the
    cell's seeded random state, so that seeds and ensemble members start apart; layers without it
    keep the template's values), or a model name (registered, ``MODULE:FACTORY``, ``timm:NAME``).
    Built and checked once now (a BenchError when it does not fit the task), which also fixes its
    identity: a hash of the user's source files behind it and of the network's ``repr``.
    """

    def __init__(self, name: str, model, in_shape: tuple, task):
        from bench.model_specs import check_network, source_hash

        self.name, self.model = name, model
        what = f"model {name!r}"
        if isinstance(model, str):  # built by its canonical name (bench.model_specs), under the name given
            from bench.models import check_model, model_identity

            self.model = check_model(model, in_shape, task)
            self.identity = model_identity(self.model, in_shape, task.num_outputs)
            return
        if not isinstance(model, nn.Module) and not callable(model):
            raise BenchError(f"model= is a {type(model).__name__}; give a callable returning an nn.Module, an "
                             f"nn.Module to copy, or a model name (docs/your_model.md)")
        with torch.random.fork_rng(devices=[]):
            net = self.build(in_shape, task.num_outputs)
        check_network(net, in_shape, task, what)
        factory = None if isinstance(model, nn.Module) else getattr(model, "func", model)
        self.identity = {"model_source": source_hash(name, factory, net, extra=repr(net))}

    def build(self, in_shape, num_outputs: int, dropout: float = 0.0) -> nn.Module:
        """A fresh network on the CPU; ``dropout`` reaches a factory that names it, nothing else."""
        if isinstance(self.model, str):
            from bench.models import build_model

            return build_model(self.model, in_shape, num_outputs, dropout=dropout)
        if isinstance(self.model, nn.Module):
            net = copy.deepcopy(self.model).cpu()
            for m in net.modules():
                reset = getattr(m, "reset_parameters", None)
                if callable(reset):
                    reset()
            return net.train()
        from bench.model_specs import call_factory

        return call_factory(self.model, in_shape, num_outputs, dropout, what=f"model {self.name!r}")


class UserSuite(Suite):
    """A suite over tensors in memory (:mod:`bench.user_data`) and :class:`UserNetwork` s.

    Its data options (``DEFAULT_DATA``) hold what makes its cells differ when the same name and
    results directory see other inputs: ``fit_digest`` (a hash of the training and validation
    sets: other training data makes new cells and MAP networks) and ``map_checkpoint`` (the
    SHA-256 prefixes of the user's MAP checkpoints); each evaluation set carries its own digest as
    its fingerprint (other test data is re-evaluated, nothing refitted).
    """
    IN_MEMORY = True  # the data are the user's tensors, not files under a data root

    description = "a researcher's own data and network (bench.evaluate)"
    DEFAULT_DATA = {"fit_digest": "", "map_checkpoint": None, "eval_batch_size": 1000}

    def __init__(self, name: str, task, in_shape: tuple, data: SuiteData, networks: dict[str, UserNetwork],
                 profile: str, profile_cfg: dict, default_methods: tuple[str, ...],
                 map_checkpoint: dict | None = None):
        self.name, self.task, self.in_shape = name, task, tuple(in_shape)
        self.profiles = {profile: profile_cfg}
        self.default_methods = tuple(default_methods)
        self.networks = networks
        self._data: SuiteData | None = data
        self.data_file: Path | None = None
        # the user's MAP network(s): {"path": file} for every seed, or {"per_seed": {"0": {...}, ...}}
        self.map_checkpoint = map_checkpoint
        self.pretrained_map = map_checkpoint is not None

    # -- networks ---------------------------------------------------------------
    def _network(self, model_name: str) -> UserNetwork:
        if model_name not in self.networks:
            raise BenchError(f"model {model_name!r} is not one of this evaluation's: {', '.join(self.networks)}")
        return self.networks[model_name]

    def build_model(self, model_name: str, data_cfg: dict, dropout: float = 0.0) -> nn.Module:
        return self._network(model_name).build(self.in_shape, self.task.num_outputs, dropout)

    def model_identity(self, model_name: str, data_cfg: dict) -> dict:
        return dict(self._network(model_name).identity)

    def check_model(self, model_name: str, data_cfg: dict) -> str:
        return self._network(model_name).name  # built and checked when the network was given

    def pretrained_weights(self, model_name: str, data_cfg: dict, download: bool) -> dict:
        """The provenance of the user's MAP checkpoint(s) (``map_checkpoint=``), stored in every record."""
        return dict(self.map_checkpoint)

    # -- data --------------------------------------------------------------------
    def describe_shifts(self, data_cfg: dict) -> list[str]:
        data = self.load(Path("."), data_cfg, False)
        return [f"{e.kind}: {e.shift}" + ("" if e.severity is None else f" severity {e.severity:g}")
                for e in data.eval_sets]

    def load(self, data_root: Path, data_cfg: dict, download: bool) -> SuiteData:
        """The data given to :func:`bench.evaluate` (held in memory, or read from the file a
        distributed run left for its workers); a fresh list of sets each call (the harness adds
        the validation set to it)."""
        d = self._data if self._data is not None else self._read()
        return SuiteData(d.train_x, d.train_y, d.val_x, d.val_y, list(d.eval_sets), extras=dict(d.extras))

    def save_data(self, folder: Path) -> Path:
        """Write the data to ``folder/data-<digest of every set>.pt`` (once) for the workers of a distributed
        run, which unpickle this suite without the tensors and read them there."""
        d = self._data
        digest = data_digest(*(v for e in d.eval_sets for v in (e.x, e.y)), d.train_x, d.train_y, d.val_x, d.val_y)
        path = Path(folder) / f"data-{digest}.pt"
        if not path.exists():
            from bench.torch_files import save_torch

            save_torch({"train": (d.train_x, d.train_y), "val": (d.val_x, d.val_y),
                        "eval": [{"kind": e.kind, "shift": e.shift, "severity": e.severity, "x": e.x, "y": e.y,
                                  "fingerprint": e.fingerprint} for e in d.eval_sets]}, path)
        self.data_file = path.resolve()
        return self.data_file

    def _read(self) -> SuiteData:
        if self.data_file is None:
            raise BenchError(f"suite {self.name}: its data is neither in memory nor saved to a file")
        state = torch.load(self.data_file, map_location="cpu", weights_only=True)
        sets = [EvalSet(e["kind"], e["shift"], e["severity"], e["x"], e["y"], fingerprint=e["fingerprint"])
                for e in state["eval"]]
        return SuiteData(*state["train"], *state["val"], sets)

    def __getstate__(self):  # a saved suite travels without its tensors
        state = dict(self.__dict__)
        if self.data_file is not None:
            state["_data"] = None
        return state
