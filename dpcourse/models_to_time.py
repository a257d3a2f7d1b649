"""The models the course times, as one type: the cost model, the benchmarks and the Timeline explorer all use it.

A ``ModelToTime`` is a stack of Linear layers (``examples.mlp``) and random, seeded batches for it; its
training step is ``dpcourse.timing.timed_step``. Two shapes of model pull in opposite directions:

* a wide MLP (``WIDE_MLP``, 512 -> 1024 -> 1024 -> 10) is almost all matrix products, which release the GIL:
  replicas overlap, and DataParallel's copies and thread hand-offs come on top;
* many tiny layers do little arithmetic each, so a step is mostly Python, one thread at a time:
  DataParallel can only add to it.
"""

import dataclasses

import torch
from torch import nn

from . import examples


@dataclasses.dataclass(frozen=True)
class ModelToTime:
    """Linear layers of ``widths`` (input first, classes last), a ReLU between each two unless ``relu=False``."""

    label: str
    widths: tuple[int, ...]
    relu: bool = True

    def model(self) -> nn.Sequential:
        """The model, with the same weights every time (the global random state is left alone)."""
        return examples.mlp(self.widths, relu=self.relu)

    def batch(self, size: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` random inputs and class labels, the same every time, on ``device``."""
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(size, self.widths[0], generator=generator)
        y = torch.randint(0, self.widths[-1], (size,), generator=generator)
        return x.to(device), y.to(device)

    def describe(self) -> str:
        """``"mlp: 3 Linear layers 512->...->10"``."""
        return f"{self.label}: {len(self.widths) - 1} Linear layers {self.widths[0]}->...->{self.widths[-1]}"


def lesson_mlp(hidden: int, depth: int) -> ModelToTime:
    """The running example widened to ``hidden`` and deepened to ``depth`` Linear layers (8 in, 4 classes out)."""
    widths = (examples.FEATURES, *[hidden] * (depth - 1), examples.CLASSES)
    return ModelToTime(f"the course MLP, {depth} layers of width {hidden}", widths)


WIDE_MLP = ModelToTime("a 512-1024-1024-10 MLP", (512, 1024, 1024, 10))
