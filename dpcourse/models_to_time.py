"""The models the course times, each an ``examples.MLP`` with the label a timing shows: the trace explorer
(``widgets.timing``) and the benchmarks (``tests/benchmarks``) use them.

A ``ModelToTime``'s training step is ``dpcourse.timing.timed_step``. Two shapes of model pull in opposite
directions:

* a wide MLP (``WIDE_MLP``, 512 -> 1024 -> 1024 -> 10) is almost all matrix products, which release the GIL:
  replicas overlap, and DataParallel's copies and thread hand-offs come on top;
* many tiny layers do little arithmetic each, so a step is mostly Python, one thread at a time:
  DataParallel can only add to it.
"""

import dataclasses

from .examples.model import MLP


@dataclasses.dataclass(frozen=True)
class ModelToTime:
    """``mlp`` (build it with ``mlp.build()``, its batches with ``mlp.batch(size)``) and what a timing calls it."""

    label: str
    mlp: MLP

    def describe(self) -> str:
        """``"mlp: 3 Linear layers 512->...->10"``."""
        widths = self.mlp.widths
        return f"{self.label}: {len(widths) - 1} Linear layers {widths[0]}->...->{widths[-1]}"


WIDE_MLP = ModelToTime("a 512-1024-1024-10 MLP", MLP((512, 1024, 1024, 10)))
