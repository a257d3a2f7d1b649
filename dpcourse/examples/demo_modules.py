"""Small modules that make one DataParallel behaviour visible: call counters, a chunk's mean, a loss inside forward."""

import torch
from torch import nn

from .data import loss_fn


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


class BufferCountingNet(CountingNet):
    """``CountingNet`` that also counts in registered buffers, updated in place: ``forwards += 1``, ``rows += len(x)``.

    The fix for the lost ``calls`` (pytorch/pytorch#2864), and lesson 03's exercise. Replica 0's buffers are the
    model's own (``broadcast_coalesced`` returns them as they are for ``devices[0]``), so ``forwards`` counts
    every forward on any number of devices; replicas 1, 2, ... add to copies that are thrown away, so ``rows``
    counts only replica 0's chunks: a buffer counts calls, not data (lesson 11). Lesson 03's ``CountingNet``
    has no such buffers: its map would show the exercise's answer.
    """

    def __init__(self, features: int = 3) -> None:
        super().__init__(features)
        self.register_buffer("forwards", torch.zeros(()))
        self.register_buffer("rows", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        self.rows += len(x)
        return super().forward(x)


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
