"""The course's running example: one small model, one batch, and the single-device oracle to compare with.

Every lesson parallelises the same training step, so the numbers can be compared from lesson to lesson:

    devices = dpcourse.devices(3)
    model = examples.make_model().to(devices[0])         # Linear(8, 16) -> ReLU -> Linear(16, 4), seeded
    x, y = examples.make_batch(10, device=devices[0])    # 10 samples, 8 features, 4 classes, seeded
    loss = examples.loss_fn(model(x), y)                 # cross-entropy, mean over the batch

The model goes to ``devices[0]`` before DataParallel wraps it, as torch requires: on a GPU machine
``devices[0]`` is ``cuda:0``; with CPU devices the move costs nothing.

The oracle is the same step on one device with the whole batch: DataParallel is correct exactly when its
outputs, gradients and weights match it.
"""

import copy
import itertools
from collections.abc import Sequence

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES = 8, 16, 4


def make_model(seed: int = 0, batchnorm: bool = False) -> nn.Sequential:
    """The running example: a 2-layer MLP (optionally with BatchNorm after the first layer).

    ``seed`` fixes the weights without touching the global random state, so a notebook's other cells
    draw the same random numbers whether or not they built a model first.
    """
    return mlp((FEATURES, HIDDEN, CLASSES), seed, batchnorm)


def mlp(widths: Sequence[int], seed: int = 0, batchnorm: bool = False, relu: bool = True) -> nn.Sequential:
    """Linear layers of ``widths`` (input first, outputs last) with a ReLU between each two, seeded like ``make_model``.

    ``mlp((8, 16, 4))`` is the running example; wider and deeper ones are what the DDP lessons, the cost
    model and the timings train. ``batchnorm`` puts a BatchNorm1d after the first layer, ``relu=False``
    leaves the ReLUs out. Built under ``torch.random.fork_rng``: the global random state is left as it was.
    """
    if len(widths) < 2 or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"widths={tuple(widths)!r} must be 2 or more whole numbers >= 1: input first, outputs last.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
            if i and relu:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(width_in, width_out))
            if i == 0 and batchnorm:
                layers.append(nn.BatchNorm1d(width_out))
        return nn.Sequential(*layers)


def make_batch(
    batch: int = 10, seed: int = 1, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random samples and class labels, the same every time for the same seed, on ``device``.

    Drawn on the CPU (the same numbers on every machine), then moved: ``make_batch(10, device=devices[0])``
    puts both where DataParallel gathers its outputs, so the loss meets its targets on one device.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, FEATURES, generator=generator)
    y = torch.randint(0, CLASSES, (batch,), generator=generator)
    if device is None:
        return x, y
    return x.to(device), y.to(device)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over the whole batch: the loss every lesson uses."""
    return nn.functional.cross_entropy(output, target)


def twin(model: nn.Module) -> nn.Module:
    """An independent copy with the same weights, to run the oracle beside the parallel version."""
    return copy.deepcopy(model)


def max_grad_difference(a: nn.Module, b: nn.Module) -> float:
    """The largest absolute difference between the two models' parameter gradients (0.0 = identical)."""
    return max((pa.grad - pb.grad).abs().max().item() for pa, pb in zip(a.parameters(), b.parameters(), strict=True))


def max_weight_difference(a: nn.Module, b: nn.Module) -> float:
    """The largest absolute difference between the two models' parameters."""
    return max((pa - pb).abs().max().item() for pa, pb in zip(a.parameters(), b.parameters(), strict=True))


def sgd_step(model: nn.Module, lr: float, momentum: float = 0.0, velocities: list[torch.Tensor] | None = None) -> None:
    """``torch.optim.SGD(lr=lr, momentum=momentum)``'s update, written out (a test checks they agree).

    The first construction of a torch optimizer imports torch._dynamo, about 2 s that a lesson or a widget
    click cannot spare. ``velocities`` holds one momentum buffer per parameter, kept by the caller.
    """
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            step = p.grad
            if velocities is not None:
                step = velocities[i].mul_(momentum).add_(p.grad)
            p -= lr * step


def train(model: nn.Module, steps: int = 20, batch: int = 10, lr: float = 0.1, momentum: float = 0.9) -> list[float]:
    """``steps`` of SGD with momentum on fresh seeded batches; returns the losses. Works for DataParallel too.

    The batches go where the model's parameters are (for DataParallel, ``devices[0]``).
    """
    velocities = [torch.zeros_like(p) for p in model.parameters()]
    device = next(model.parameters()).device
    losses = []
    for step in range(steps):
        x, y = make_batch(batch, seed=100 + step, device=device)
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        sgd_step(model, lr, momentum, velocities)
        losses.append(loss.item())
    return losses


class CountingNet(nn.Module):
    """Linear + BatchNorm with plain attributes: what replicate shares, copies, or shares by reference.

    ``calls += 1`` in forward is lost under DataParallel with 2+ devices (it rebinds the name on a
    throwaway replica); ``seen.append`` is not (every replica holds the same list).
    """

    def __init__(self, features: int = 3) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.bn = nn.BatchNorm1d(features)
        self.calls = 0
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.seen.append(x.shape[0])
        return self.bn(self.fc(x))


class ChunkMean(nn.Module):
    """Forward returns the mean of what it is given: under DataParallel, each replica's chunk becomes one number.

    Given one loss per sample, it is the "loss inside forward" pattern reduced to its core: gather then makes
    a vector of the chunks' means, whose ``.mean()`` weighs a sample of a short chunk more (lesson 06), and a 0-d
    output per replica becomes one element per replica (lesson 05).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean()


class LossInside(nn.Module):
    """Wraps ``model`` so that forward returns the mean loss (``loss_fn``) of the rows it was given.

    Many training scripts compute the loss inside ``forward`` so that the outputs never travel to device 0.
    Under DataParallel each replica then returns its own chunk's mean, and gather makes a vector of N chunk
    means: lesson 06's mean-of-means pitfall, and lesson 14's under gradient accumulation.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(self.model(x), y)
