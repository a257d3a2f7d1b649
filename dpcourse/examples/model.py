"""The running example's model: an MLP described by its widths (``MLP``), built with seeded weights."""

import dataclasses
import itertools
from collections.abc import Sequence

import torch
from torch import nn

from .seeded import seeded_module

FEATURES, HIDDEN, CLASSES = 8, 16, 4


@dataclasses.dataclass(frozen=True)
class MLP:
    """Linear layers of ``widths`` (input first, outputs last), a ReLU between each two: one spec, built on demand.

    ``MLP((8, 16, 4))`` is the running example; wider and deeper ones are what the DDP lessons, the cost
    model, the memory lessons and the timings train. ``batchnorm`` puts a BatchNorm1d after the first layer,
    ``relu=False`` leaves the ReLUs out. The spec is a value (frozen, comparable): two equal specs build
    the same weights from the same seed.
    """

    widths: tuple[int, ...]
    batchnorm: bool = False
    relu: bool = True

    def __post_init__(self) -> None:
        widths = tuple(self.widths)
        if len(widths) < 2 or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
            raise ValueError(f"widths={widths!r} must be 2 or more whole numbers >= 1: input first, outputs last.")
        object.__setattr__(self, "widths", widths)  # a list given is kept as a tuple: the spec stays hashable

    def build(self, seed: int = 0) -> nn.Sequential:
        """The model, its weights drawn from ``seed`` (``seeded_module``: under ``torch.random.fork_rng``).

        The global random state is left as it was, so a notebook's other cells draw the same numbers whether
        or not they built a model first, and every rank builds the same weights from the same seed.
        """
        return seeded_module(self._layers, seed)

    def _layers(self) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, (width_in, width_out) in enumerate(itertools.pairwise(self.widths)):
            if i and self.relu:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(width_in, width_out))
            if i == 0 and self.batchnorm:
                layers.append(nn.BatchNorm1d(width_out))
        return nn.Sequential(*layers)

    @property
    def parameters(self) -> int:
        """How many parameters: each ``Linear(a, b)`` has ``a * b`` weights and ``b`` biases (BatchNorm: 2 per unit)."""
        linears = sum(a * b + b for a, b in itertools.pairwise(self.widths))
        return linears + (2 * self.widths[1] if self.batchnorm else 0)

    def batch(
        self, samples: int, seed: int = 1, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``samples`` random inputs ``(samples, widths[0])`` and class labels below ``widths[-1]``, from ``seed``.

        Drawn on the CPU from a generator of their own (the same numbers on every machine, the global random
        state untouched), then moved to ``device`` when one is given.
        """
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(samples, self.widths[0], generator=generator)
        y = torch.randint(0, self.widths[-1], (samples,), generator=generator)
        if device is None:
            return x, y
        return x.to(device), y.to(device)


def running_example(hidden: int = HIDDEN, depth: int = 2, batchnorm: bool = False) -> MLP:
    """The running example's spec, 8 inputs and 4 outputs, ``depth`` Linear layers of width ``hidden`` between.

    The defaults are ``MLP((8, 16, 4))``, the model every DataParallel lesson parallelises; the DDP lessons
    widen and deepen it (``depth=3`` adds a ``Linear(hidden, hidden) -> ReLU`` block) where an experiment
    needs more parameters or more modules.
    """
    return MLP((FEATURES, *[hidden] * (depth - 1), CLASSES), batchnorm)


def make_model(seed: int = 0, batchnorm: bool = False, hidden: int = HIDDEN, depth: int = 2) -> nn.Sequential:
    """The running example, ``Linear(8, hidden) -> [BatchNorm1d] -> ReLU -> Linear(hidden, 4)``, from ``seed``.

    ``seed`` fixes the weights without touching the global random state, so a notebook's other cells draw
    the same random numbers whether or not they built a model first, and every DDP rank builds the same
    weights from the same seed. ``hidden`` and ``depth`` as in ``running_example``.
    """
    return running_example(hidden, depth, batchnorm).build(seed)


def mlp(widths: Sequence[int], seed: int = 0, batchnorm: bool = False, relu: bool = True) -> nn.Sequential:
    """``MLP(widths, batchnorm, relu).build(seed)``, in one call: ``mlp((8, 16, 4))`` is the running example."""
    return MLP(tuple(widths), batchnorm, relu).build(seed)
