"""Lesson 11's exercises, each needing two lessons at once: the shape of a gathered scalar (scatter and gather),
and what survives of a module's state after forwards on replicas (replicate)."""

import warnings

import torch

from ..data_parallel import DataParallel
from ..devices import devices
from ..examples import BufferCountingNet, ChunkMean
from ..ui.words import plural
from .check import Case, Exercise, equals


def _scalar_output_shape(batch: int, n: int) -> tuple[int, ...]:
    with warnings.catch_warnings():  # gathering 0-d outputs warns (lesson 05); expected here
        warnings.simplefilter("ignore")
        return tuple(DataParallel(ChunkMean(), devices=devices(n))(torch.ones(batch, 2)).shape)


def _every_batch_up_to_10_on_up_to_5_devices() -> list[Case]:
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}", (batch, n))
            for batch in range(1, 11) for n in range(1, 6)]


SCALAR_OUTPUT_SHAPE = Exercise(
    name="scalar_output_shape",
    task="Write scalar_output_shape(batch, n): the shape, as a tuple, of dp(x) when x has `batch` rows, dp runs "
         "on n devices, and the module returns x.mean(), a 0-d tensor.",
    cases=lambda: [
        Case("10 rows on 4 devices", (10, 4), "gather turns each replica's 0-d output into one element of a vector"),
        Case("6 rows on 4 devices", (6, 4), "6 rows make chunks of 2: only 3 replicas run, so 3 outputs"),
        Case("3 rows on 2 devices", (3, 2)),
        Case("8 rows on 1 device", (8, 1), "with one device DataParallel calls the module itself: nothing is gathered"),
    ],
    judge=equals(_scalar_output_shape),
    generated=_every_batch_up_to_10_on_up_to_5_devices,
)


def _after_forwards(k: int, n: int) -> tuple[int, int]:
    used = devices(n)
    counts = BufferCountingNet(features=1).to(used[0])  # its buffers go to devices[0] before wrapping, as any model's
    dp = DataParallel(counts, devices=used)
    for _ in range(k):
        dp(torch.zeros(8, 1, device=used[0]))
    return counts.calls, int(counts.forwards)


AFTER_FORWARDS = Exercise(
    name="after_forwards",
    task="Write after_forwards(k, n): a pair, the model's `self.calls` (an int, `self.calls += 1` in forward) and "
         "its registered buffer `forwards` (`self.forwards += 1` in forward, as an int), after k forwards on n "
         "devices.",
    cases=lambda: [
        Case("3 forwards on 1 device", (3, 1), "one device runs the model itself, so both count every forward"),
        Case("3 forwards on 2 devices", (3, 2),
             "`self.calls += 1` rebinds an attribute of a replica thrown away after the forward"),
        Case("2 forwards on 4 devices", (2, 4),
             "an in-place change of a buffer on replica 0 changes the model's own buffer: replica 0 aliases it"),
    ],
    judge=equals(_after_forwards),
)

EXERCISES = (SCALAR_OUTPUT_SHAPE, AFTER_FORWARDS)
