"""Lesson 01's quiz experiments (``quizzes/01_one_device.toml``): with one device, DataParallel calls the module
itself.
"""

from dpcourse.trace import trace

from ...examples import ChunkMean, CountingNet
from ..lab import caught_warnings, data_parallel_over, seeded_randn
from ..outcome import Outcome


def counter_on_one_device() -> Outcome:
    """With a single device DataParallel calls the module itself, so ``self.calls += 1`` counts every forward."""
    model = CountingNet(features=2)
    dp = data_parallel_over(model, 1)
    with trace() as recorded:
        for _ in range(3):
            dp(seeded_randn(4, 2))
    text = (
        f"3 forwards of DataParallel(model, devices={[str(d) for d in dp.devices]}):\n"
        f"  replicate steps run = {len(recorded.steps('replicate'))} (one device: the module is called directly)\n"
        f"  model.calls         = {model.calls}"
    )
    return Outcome(text, model.calls)


def scalar_on_one_device() -> Outcome:
    """A 0-d output stays 0-d with one device (nothing is gathered); with two it becomes a vector."""
    x = seeded_randn(8, 3)
    with caught_warnings():
        one, two = data_parallel_over(ChunkMean(), 1)(x), data_parallel_over(ChunkMean(), 2)(x)
    text = (
        f"Module returns x.mean(), a 0-d tensor; x has 8 rows.\n"
        f"  1 device : dp(x).shape = {one.shape}  (the module's own output: no gather)\n"
        f"  2 devices: dp(x).shape = {two.shape}  (gather turned 2 scalars into a vector, with a warning)"
    )
    return Outcome(text, tuple(one.shape))


EXPERIMENTS = (
    counter_on_one_device,
    scalar_on_one_device,
)
