"""What the CPU and GPU benchmarks both time: the models, one training step, and the cost of tracing it.

Two models pull in opposite directions (``dpcourse.models_to_time``). The MLP (512 -> 1024 -> 1024 -> 10, batch
256) is almost all matrix products, which release the GIL: replicas can overlap, and the question is what
the copies and the thread hand-offs cost on top. The 200-layer model does little arithmetic per layer, so
its step is mostly Python running one thread at a time: DataParallel can only add to it.
"""

from collections.abc import Callable, Sequence

import torch
from torch import nn

import dpcourse
from dpcourse.examples import loss_fn
from dpcourse.examples.model import MLP
from dpcourse.models_to_time import ModelToTime
from dpcourse.timing import Sample, StepTimes, timed_step, wall_time, within

from .rounds import watched

LEARNING_RATE = 1e-4


def models(quick: bool) -> list[ModelToTime]:
    """The two models, labelled ``mlp`` and ``small-layers`` (the keys of the results)."""
    if quick:
        return [ModelToTime("mlp", MLP((64, 128, 128, 10))), ModelToTime("small-layers", MLP((32,) * 21))]
    return [ModelToTime("mlp", MLP((512, 1024, 1024, 10))), ModelToTime("small-layers", MLP((32,) * 201))]


def batch_size(quick: bool) -> int:
    return 32 if quick else 256


def training_step(
    forward: nn.Module, model: nn.Module, workload: ModelToTime, batch: int, device: torch.device
) -> Callable[[], StepTimes]:
    """Forward, cross-entropy, backward, SGD: the same step whether ``forward`` is ``model`` or a wrapper of it."""
    x, y = workload.mlp.batch(batch, device=device)
    return lambda: timed_step(forward, model, x, lambda output: loss_fn(output, y), LEARNING_RATE)


def dp_step(
    workload: ModelToTime, batch: int, model: nn.Module, devices: Sequence[torch.device]
) -> Callable[[], StepTimes]:
    """One training step of ``dpcourse.DataParallel(model, devices)``; ``model`` must be on ``devices[0]``."""
    return training_step(dpcourse.DataParallel(model, devices=devices), model, workload, batch, devices[0])


def tracing_cost(
    workload: ModelToTime, batch: int, devices: Sequence[torch.device], rounds: int, warmup: int,
    timer: Callable[[Callable[[], object]], Sample] = wall_time,
) -> dict:
    """One DP step with tracing off and inside ``dpcourse.trace()``.

    Off, the steps are dpcourse's own functions, untouched (the trace swaps in timed stand-ins only while it
    is open), so "off" costs nothing by construction. Opening and closing the trace are not timed; recording
    every span is.
    """
    model = workload.mlp.build().to(devices[0])
    step = timer(dp_step(workload, batch, model, devices))
    variants = {"off": step, "on": within(dpcourse.trace, step)}
    return {"devices": [str(d) for d in devices], **watched(variants, rounds, warmup).report("off", "vs_off")}
