"""One thing to run: a ``Setup`` names a training step as kind x devices x model x batch.

Every topic that runs or predicts steps starts from these four fields and adds its own: the cost model times
DataParallel steps (``costmodel.Setup`` adds ``traced``), the memory lessons count bytes per device
(``memory.Setup`` adds ``optimizer`` and ``bucket_view``). The model is always an ``examples.MLP`` spec, so a
step can be both built (``model.build()``, ``model.batch(...)``) and reasoned about from its widths.
"""

import dataclasses
import math
from typing import ClassVar

from .examples.model import MLP, running_example

# The course's one vocabulary for kinds of training step: every topic (the memory counters, the cost model, the
# ZeRO lessons) names a kind with one of these words and narrows the list to the kinds it knows; any other spelling
# is a ValueError naming these. FSDP has no name of its own: FSDP2's ``fully_shard`` is ZeRO-3.
KINDS = ("one device", "DataParallel", "DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")
# FSDP2 with ``reshard_after_forward=False`` is no ZeRO stage: the paper's ZeRO-2 keeps every parameter on every
# rank, where FSDP2 keeps its shards and, from a layer's forward to its backward, the layer's gathered parameters.
# The memory counters, which measure it (``dpcourse.sharded.memory``), call it this; the cost model has no formula.
FSDP2_NO_RESHARD = "FSDP2, no reshard"
# The largest training jobs run on about 10^5 GPUs. Every per-device answer (a memory breakdown, a timeline) holds
# one entry per device, so a larger count is refused before any work rather than filling the memory.
MOST_DEVICES = 100_000


def whole(name: str, value: object, meaning: str, most: int | None = None) -> int:
    """``value`` if it is a whole number >= 1 (and <= ``most``), else ``ValueError`` naming ``name`` and what it means.

    NaN, infinities, fractions, zero and negative numbers are refused: a count of layers or samples is none of
    these. A float with a whole value (``256.0``, what a text box may give) is accepted.
    """
    number = value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"{name} must be a whole number >= 1 ({meaning}); got {value!r}.")
    if most is not None and number > most:
        shown = f"{number:.3g}" if number < 10**300 else f"a number of {len(str(number))} digits"
        raise ValueError(f"{name} must be at most {most:,} ({meaning}); got {shown}.")
    return number


@dataclasses.dataclass(frozen=True)
class Setup:
    """One training step: ``model`` on ``devices`` devices as ``kind``, ``batch`` samples in all devices together.

    ``kind`` is one of ``KINDS`` (a topic narrows them: the class attribute ``KINDS``): ``"one device"``,
    ``"DataParallel"`` (one process, replicas on ``devices`` devices), ``"DDP"`` (``devices`` processes) or a
    ZeRO stage on ``devices`` ranks. Every field is checked: a bad one raises ``ValueError`` naming it.
    """

    KINDS: ClassVar[tuple[str, ...]] = KINDS

    kind: str = "one device"
    devices: int = 1
    model: MLP = running_example()
    batch: int = 256

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {list(self.KINDS)}.")
        object.__setattr__(self, "devices", whole("devices", self.devices, "replicas or ranks",
                                                         MOST_DEVICES))
        object.__setattr__(self, "batch", whole("batch", self.batch, "samples per step, all devices together"))
        if self.kind == "one device" and self.devices != 1:
            raise ValueError(f"devices={self.devices} with kind='one device': use kind='DataParallel', 'DDP' or a "
                             f"ZeRO stage.")
        if not isinstance(self.model, MLP):
            raise ValueError(f"model must be a dpcourse.examples.MLP, got {type(self.model).__name__}.")
