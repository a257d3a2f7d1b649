"""Lesson 00's exercises: what a trace of one DataParallel forward records, on several devices and on one."""

import torch

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from ..trace import trace
from ..ui.words import plural
from .check import Case, Exercise, equals


def _replica_forwards(batch: int, n: int) -> int:
    return len(torch.arange(batch).chunk(n))


def _every_batch_up_to_12_on_2_to_6_devices() -> list[Case]:
    """From 2 devices: on one, DataParallel calls the model itself, with no replica (the next exercise)."""
    return [Case(f"{plural(batch, 'row')} on {n} devices", (batch, n)) for batch in range(1, 13) for n in range(2, 7)]


REPLICA_FORWARDS = Exercise(
    name="replica_forwards",
    task="Write replica_forwards(batch, n): how many replica forwards run when DataParallel on n devices gets a "
         "batch of `batch` rows. Count the forward spans of a trace.",
    cases=lambda: [
        Case("5 rows on 4 devices", (5, 4),
             "one replica runs per chunk that scatter made, and torch.chunk may make fewer chunks than devices"),
        Case("8 rows on 4 devices", (8, 4)),
        Case("9 rows on 8 devices", (9, 8), "torch.chunk makes chunks of ceil(9 / 8) rows: count them"),
        Case("2 rows on 4 devices", (2, 4), "a device with no rows runs no replica"),
    ],
    judge=equals(_replica_forwards),
    generated=_every_batch_up_to_12_on_2_to_6_devices,
)


def _steps_on_one_device(model: torch.nn.Module, x: torch.Tensor) -> list[str]:
    one = devices(1)
    with trace() as recorded:
        DataParallel(model, devices=one)(x)
    return [span.step for span in recorded.spans]


def _one_device_case(description: str, model: torch.nn.Module, batch: int) -> Case:
    device = devices(1)[0]
    return Case(description, (model.to(device), examples.make_batch(batch, device=device)[0]),
                "run it under dpcourse.trace() and list span.step for every span of t.spans, in order")


SINGLE_DEVICE_STEPS = Exercise(
    name="single_device_steps",
    task="Write single_device_steps(model, x): the step of every span, in order, that a trace records while "
         "DataParallel on one device (dpcourse.devices(1)) runs model on x.",
    cases=lambda: [
        _one_device_case("the course model, 10 rows", examples.make_model(), 10),
        _one_device_case("the BatchNorm model, 4 rows", examples.make_model(batchnorm=True), 4),
    ],
    judge=equals(_steps_on_one_device),
)

EXERCISES = (REPLICA_FORWARDS, SINGLE_DEVICE_STEPS)
