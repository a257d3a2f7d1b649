"""What is trained, described so that it can be both built and reasoned about: an MLP, a batch, an optimizer.

``Setup`` names one training step on one or several devices; ``dpcourse.memory.predict`` computes its bytes per
device from these numbers alone, and ``dpcourse.memory.measure`` builds it (``MLP.build``, ``make_optimizer``)
and counts what torch really holds. Both must agree, so everything either of them needs lives here.
"""

import dataclasses
import itertools
import math
from collections.abc import Iterable

import torch
from torch import nn

from .. import examples

KINDS = ("one device", "DataParallel", "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
RANKS = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")  # the kinds that run one process per device
SHARDED = ("ZeRO-1", "ZeRO-2", "ZeRO-3")
OPTIMIZERS = ("SGD", "SGD with momentum", "Adam")
FLOAT = 4  # bytes per float32 value: parameters, activations and optimizer state are all float32 here
LABEL = 8  # bytes per class label: cross_entropy's targets are int64


def whole(name: str, value: object, meaning: str) -> int:
    """``value`` if it is a whole number >= 1, else ``ValueError`` naming ``name`` and what it means.

    NaN, infinities, fractions, zero and negative numbers are refused: a count of layers or samples is none of
    these. A float with a whole value (``256.0``, what a text box may give) is accepted.
    """
    number = value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"{name} must be a whole number >= 1 ({meaning}); got {value!r}.")
    return number


@dataclasses.dataclass(frozen=True)
class MLP:
    """``Linear(features, width) -> ReLU -> ... -> Linear(width, classes)``: ``depth`` Linear layers, float32.

    Trained with ``cross_entropy`` on ``classes`` classes, so its last layer's output is one score per class and
    sample: a large ``classes`` (a vocabulary) makes the outputs, and DataParallel's gathered copy of them, big.
    """

    features: int = 64
    width: int = 512
    depth: int = 4
    classes: int = 1000

    def __post_init__(self) -> None:
        for name, meaning in (("features", "inputs per sample"), ("width", "units per hidden layer"),
                              ("depth", "Linear layers"), ("classes", "outputs per sample")):
            object.__setattr__(self, name, whole(name, getattr(self, name), meaning))

    @property
    def layer_sizes(self) -> list[int]:
        return [self.features] + [self.width] * (self.depth - 1) + [self.classes]

    @property
    def parameters(self) -> int:
        """How many parameters: each Linear(a, b) has a * b weights and b biases."""
        return sum(a * b + b for a, b in itertools.pairwise(self.layer_sizes))

    @property
    def shapes(self) -> list[list[tuple[int, ...]]]:
        """Each Linear layer's parameter shapes, ``[(out, in), (out,)]``: what a sharded rank cuts along dim 0."""
        return [[(b, a), (b,)] for a, b in itertools.pairwise(self.layer_sizes)]

    @property
    def tensors(self) -> int:
        """How many parameter tensors: a weight and a bias per layer."""
        return 2 * self.depth

    @property
    def saved_per_sample(self) -> int:
        """Float32 values autograd saves per sample: every Linear's input (ReLU saves the same tensor)."""
        return self.features + (self.depth - 1) * self.width

    def build(self, seed: int = 0) -> nn.Sequential:
        """The model, initialised from ``seed`` without touching the global random state (``examples.mlp``)."""
        return examples.mlp(self.layer_sizes, seed)

    def batch(self, samples: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """``samples`` random inputs and class labels, the same every time for the same seed."""
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(samples, self.features, generator=generator)
        return x, torch.randint(0, self.classes, (samples,), generator=generator)


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
class Setup:
    """One training step: ``model`` on ``devices`` devices (``kind``), ``batch`` samples in all, ``optimizer``.

    ``kind`` is ``"one device"``, ``"DataParallel"`` (one process, replicas on ``devices`` devices), ``"DDP"``
    (``devices`` processes) or a ZeRO stage on ``devices`` ranks: ``"ZeRO-1"`` (optimizer state sharded),
    ``"ZeRO-2"`` (and gradients), ``"ZeRO-3"`` (and parameters). ``bucket_view`` is DDP's
    ``gradient_as_bucket_view`` (DDP and ZeRO-1, which runs under DDP): the gradients then live in DDP's
    all-reduce buckets instead of beside them. Every field is checked: a bad one raises ``ValueError`` naming it.
    """

    kind: str = "one device"
    devices: int = 1
    batch: int = 256
    optimizer: str = "Adam"
    model: MLP = MLP()
    bucket_view: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {list(KINDS)}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r} is not one of {list(OPTIMIZERS)}.")
        object.__setattr__(self, "devices", whole("devices", self.devices, "replicas or ranks"))
        object.__setattr__(self, "batch", whole("batch", self.batch, "samples per step, all devices together"))
        if self.kind == "one device" and self.devices != 1:
            raise ValueError(f"devices={self.devices} with kind='one device': use kind='DataParallel', 'DDP' or a "
                             f"ZeRO stage.")
        if not isinstance(self.model, MLP):
            raise ValueError(f"model must be a dpcourse.memory.MLP, got {type(self.model).__name__}.")
        if not isinstance(self.bucket_view, bool):
            raise ValueError(f"bucket_view must be True or False, got {self.bucket_view!r}.")
        if self.bucket_view and self.kind not in ("DDP", "ZeRO-1"):
            raise ValueError(f"bucket_view=True is DDP's gradient_as_bucket_view: kind={self.kind!r} has no DDP "
                             f"buckets; use kind='DDP' or 'ZeRO-1', or bucket_view=False.")
