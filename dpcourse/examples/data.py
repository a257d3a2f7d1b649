"""The running example's data and loss: seeded samples with class labels, cross-entropy over the batch."""

import torch
from torch import nn

from .model import RUNNING_EXAMPLE


def make_batch(
    batch: int = 10, seed: int = 1, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random samples and class labels, the same every time for the same seed, on ``device``.

    Drawn on the CPU (the same numbers on every machine), then moved: ``make_batch(10, device=devices[0])``
    puts both where DataParallel gathers its outputs, so the loss meets its targets on one device.
    """
    return RUNNING_EXAMPLE.batch(batch, seed, device)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over the whole batch: the loss every lesson uses."""
    return nn.functional.cross_entropy(output, target)
