"""The running example's data and losses, one per purpose.

* ``make_batch`` and ``loss_fn``: samples with class labels and cross-entropy, the DataParallel lessons' step;
* ``regression_batch`` and ``regression_loss``: samples with 4 real targets and mean squared error, what the
  DDP and sharded lessons train, one slice of the fixed seeded samples per step.
"""

import torch
from torch import nn

from .model import CLASSES, FEATURES, running_example


def make_batch(
    batch: int = 10, seed: int = 1, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random samples and class labels, the same every time for the same seed, on ``device``.

    Drawn on the CPU (the same numbers on every machine), then moved: ``make_batch(10, device=devices[0])``
    puts both where DataParallel gathers its outputs, so the loss meets its targets on one device.
    """
    return running_example().batch(batch, seed, device)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over the whole batch: the loss every DataParallel lesson uses."""
    return nn.functional.cross_entropy(output, target)


def regression_batch(samples: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``(samples, 8)`` and real targets ``(samples, 4)``, on the CPU, the same on every rank (fixed seed).

    The DDP lessons draw ``steps * batch`` samples once and train step ``s`` on the ``s``-th slice of
    ``batch``, so every rank and the single-device oracle see the same samples in the same order.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=generator)
    return x, torch.randn(samples, CLASSES, generator=generator)


def regression_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the samples given: a DDP rank's loss is already an average, hence DDP averages."""
    return nn.functional.mse_loss(output, target)
