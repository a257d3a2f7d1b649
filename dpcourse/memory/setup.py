"""What is trained, described so that it can be both built and reasoned about: an MLP, a batch, an optimizer.

``Setup`` names one training step on one or several devices (``training_setup.Setup`` and an optimizer);
``dpcourse.memory.predict`` computes its bytes per device from these numbers alone, and
``dpcourse.memory.measure`` builds it (``model.build()``, ``make_optimizer``) and counts what torch really holds.
Both must agree, so everything either of them needs lives here.
"""

import dataclasses
import itertools
from collections.abc import Iterable
from typing import ClassVar

import torch

from ..examples.model import MLP
from ..training_setup import FSDP2_NO_RESHARD, whole
from ..training_setup import KINDS as COURSE_KINDS
from ..training_setup import Setup as TrainingSetup

RANKS = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", FSDP2_NO_RESHARD)  # the kinds that run one process per device
SHARDED = ("ZeRO-1", "ZeRO-2", "ZeRO-3", FSDP2_NO_RESHARD)
OPTIMIZERS = ("SGD", "SGD with momentum", "Adam")
FLOAT = 4  # bytes per float32 value: parameters, activations and optimizer state are all float32 here
LABEL = 8  # bytes per class label: cross_entropy's targets are int64


def sized_mlp(features: int = 64, width: int = 512, depth: int = 4, classes: int = 1000) -> MLP:
    """``Linear(features, width) -> ReLU -> ... -> Linear(width, classes)``: ``depth`` Linear layers, float32.

    Trained with ``cross_entropy`` on ``classes`` classes, so its last layer's output is one score per class and
    sample: a large ``classes`` (a vocabulary) makes the outputs, and DataParallel's gathered copy of them, big.
    The defaults are the memory lesson's MLP, 64 -> 512 -> 512 -> 512 -> 1000. A bad size raises ``ValueError``
    naming it.
    """
    features = whole("features", features, "inputs per sample")
    width = whole("width", width, "units per hidden layer")
    depth = whole("depth", depth, "Linear layers")
    classes = whole("classes", classes, "outputs per sample")
    return MLP((features, *[width] * (depth - 1), classes))


def layer_shapes(model: MLP) -> list[list[tuple[int, ...]]]:
    """Each Linear layer's parameter shapes, ``[(out, in), (out,)]``: what a sharded rank cuts along dim 0."""
    return [[(b, a), (b,)] for a, b in itertools.pairwise(model.widths)]


def parameter_tensors(model: MLP) -> int:
    """How many parameter tensors: a weight and a bias per Linear layer."""
    return 2 * (len(model.widths) - 1)


def saved_per_sample(model: MLP) -> int:
    """Float32 values autograd saves per sample: every Linear's input (ReLU saves the same tensor)."""
    return sum(model.widths[:-1])


def optimizer_class(name: str) -> tuple[type[torch.optim.Optimizer], dict]:
    """One of ``OPTIMIZERS`` as a class and its keyword arguments, with ``foreach=True``: the implementation torch
    picks by default on GPUs (``torch/optim/optimizer.py: _default_to_fused_or_foreach``), so the CPU holds what
    a GPU would. ``ZeroRedundancyOptimizer`` takes the class and builds one per rank itself."""
    if name == "SGD":
        return torch.optim.SGD, {"lr": 0.01, "foreach": True}
    if name == "SGD with momentum":
        return torch.optim.SGD, {"lr": 0.01, "momentum": 0.9, "foreach": True}
    if name == "Adam":
        return torch.optim.Adam, {"lr": 1e-3, "foreach": True}
    raise ValueError(f"optimizer={name!r} is not one of {list(OPTIMIZERS)}.")


def make_optimizer(name: str, parameters: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """One of ``OPTIMIZERS`` over ``parameters`` (``optimizer_class``)."""
    cls, options = optimizer_class(name)
    return cls(parameters, **options)


@dataclasses.dataclass(frozen=True)
class Setup(TrainingSetup):
    """One training step: ``model`` on ``devices`` devices (``kind``), ``batch`` samples in all, ``optimizer``.

    ``kind`` is ``"one device"``, ``"DataParallel"`` (one process, replicas on ``devices`` devices), ``"DDP"``
    (``devices`` processes), a ZeRO stage on ``devices`` ranks: ``"ZeRO-1"`` (optimizer state sharded),
    ``"ZeRO-2"`` (and gradients), ``"ZeRO-3"`` (and parameters), or ``"FSDP2, no reshard"`` (``FSDP2_NO_RESHARD``:
    ``fully_shard(..., reshard_after_forward=False)``, which is not ZeRO-2). ``model`` is an MLP of Linear layers
    and ReLUs (``sized_mlp``), by default the lesson's. ``bucket_view`` is DDP's ``gradient_as_bucket_view`` (DDP and
    ZeRO-1, which runs under DDP): the gradients then live in DDP's all-reduce buckets instead of beside them.
    Every field is checked: a bad one raises ``ValueError`` naming it.
    """

    KINDS: ClassVar[tuple[str, ...]] = (*COURSE_KINDS, FSDP2_NO_RESHARD)

    model: MLP = sized_mlp()
    optimizer: str = "Adam"
    bucket_view: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model.batchnorm or not self.model.relu:
            raise ValueError(f"model={self.model!r}: memory counts Linear layers with a ReLU between each two, no "
                             f"BatchNorm; build it with memory.sized_mlp(...).")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r} is not one of {list(OPTIMIZERS)}.")
        if not isinstance(self.bucket_view, bool):
            raise ValueError(f"bucket_view must be True or False, got {self.bucket_view!r}.")
        if self.bucket_view and self.kind not in ("DDP", "ZeRO-1"):
            raise ValueError(f"bucket_view=True is DDP's gradient_as_bucket_view: kind={self.kind!r} has no DDP "
                             f"buckets; use kind='DDP' or 'ZeRO-1', or bucket_view=False.")
