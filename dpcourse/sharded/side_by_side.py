"""DP, DDP, ZeRO-1, FSDP2 without resharding and ZeRO-3 side by side: bytes per rank, measured on the course's
model, predicted at scale.

Measured with the course's two counters: ``memory.measure`` for DataParallel (one process, lesson 15) and
``sharded.memory.measure_sharded`` for the rest (one start of the ranks), where ZeRO-1 is DDP with torch's
``ZeroRedundancyOptimizer`` and the last two are FSDP2 (``fully_shard``) with ``reshard_after_forward`` False and
True (the first is no ZeRO stage: ``training_setup.FSDP2_NO_RESHARD``). Predicted with ``memory.predict``, whose
formulas are in ``memory.calculator`` and ``memory.sharding``.
"""

from ..examples.model import MLP
from ..memory import Setup, measure, predict, sized_mlp
from ..memory.accounting import Breakdown
from ..ranks.training import WIDTHS
from ..training_setup import FSDP2_NO_RESHARD
from . import memory as sharded_memory

KINDS = ("DataParallel", "DDP", "ZeRO-1", FSDP2_NO_RESHARD, "ZeRO-3")  # the kinds that split a step and run
LABELS = {
    "DataParallel": "DP (one process)",
    "DDP": "DDP",
    "ZeRO-1": "ZeRO-1: DDP + ZeroRedundancyOptimizer",
    FSDP2_NO_RESHARD: "FSDP2, reshard_after_forward=False",
    "ZeRO-3": "ZeRO-3: FSDP2, reshard_after_forward=True",
}
SHOWN = ("parameters", "gradients", "optimizer state")


def course_model() -> MLP:
    """The course's Part III model, ``ranks.WIDTHS`` (8 -> 15 -> 15 -> 4), as the memory calculator describes it."""
    features, *hidden, classes = WIDTHS
    return sized_mlp(features=features, width=hidden[0], depth=len(hidden) + 1, classes=classes)


def setups(model: MLP, ranks: int, batch: int) -> list[Setup]:
    """One ``Setup`` per kind of ``KINDS``, Adam, ``ranks`` devices or ranks."""
    return [Setup(kind=kind, devices=ranks, batch=batch, model=model) for kind in KINDS]


def measured(ranks: int = 3, batch: int = 24) -> list[Breakdown]:
    """Every kind on the course's model, counted: DataParallel in this process, the others on ``ranks`` ranks."""
    data_parallel, *sharded = setups(course_model(), ranks, batch)
    return [measure(data_parallel), *sharded_memory.measure_sharded(sharded)]


def predicted(model: MLP, ranks: int, batch: int) -> list[Breakdown]:
    """Every kind, from the formulas."""
    return [predict(setup) for setup in setups(model, ranks, batch)]


def table(breakdowns: list[Breakdown], unit: str = "bytes", scale: int = 1) -> str:
    """Per kind, the device or rank that holds the most: its parameters, gradients, optimizer state and total
    (all categories, activations and buffers included), in ``unit`` (``scale`` bytes each)."""
    width = max(map(len, LABELS.values()))
    header = f"{'':<{width}}" + "".join(f"{name:>17}" for name in (*SHOWN, "total (all)"))
    lines = [f"{header}   ({unit}, the device or rank that holds the most)"]
    for breakdown in breakdowns:
        most = max(range(len(breakdown.devices)), key=lambda i: breakdown.totals[i])
        values = [breakdown.devices[most][name] for name in SHOWN] + [breakdown.totals[most]]
        digits = 0 if scale == 1 else 2
        cells = "".join(f"{value / scale:>17,.{digits}f}" for value in values)
        lines.append(f"{LABELS[breakdown.setup.kind]:<{width}}{cells}")
    return "\n".join(lines)
