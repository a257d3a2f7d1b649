"""The course's running example: one small model, one batch, and the single-device oracle to compare with.

Every lesson parallelises the same training step, so the numbers can be compared from lesson to lesson:

    devices = dpcourse.devices(3)
    model = examples.make_model().to(devices[0])         # Linear(8, 16) -> ReLU -> Linear(16, 4), seeded
    x, y = examples.make_batch(10, device=devices[0])    # 10 samples, 8 features, 4 classes, seeded
    loss = examples.loss_fn(model(x), y)                 # cross-entropy, mean over the batch

The model goes to ``devices[0]`` before DataParallel wraps it, as torch requires: on a GPU machine
``devices[0]`` is ``cuda:0``; with CPU devices the move costs nothing.

The oracle is the same step on one device with the whole batch: DataParallel is correct exactly when its
outputs, gradients and weights match it.

The DDP and sharded lessons train the same model on a regression task, each rank on its share of the batch::

    x, y = examples.regression_batch(steps * batch)      # 8 features, 4 real targets, seeded
    loss = examples.regression_loss(model(x), y)         # mean squared error
    examples.single_device(steps, batch, lr)             # their oracle: weights and gradients per step
"""

from .data import loss_fn, make_batch, regression_batch, regression_loss
from .demo_modules import BufferCountingNet, ChunkMean, CountingNet, LossInside
from .model import CLASSES, FEATURES, HIDDEN, MLP, make_model, mlp, running_example
from .oracle import (
    FLOAT_ROUNDING,
    flat_grad,
    flat_weights,
    gap,
    max_difference,
    max_grad_difference,
    max_weight_difference,
    sgd_step,
    single_device,
    train,
    twin,
)
from .seeded import seeded_module, seeded_randn

__all__ = [
    "CLASSES",
    "FLOAT_ROUNDING",
    "BufferCountingNet",
    "ChunkMean",
    "CountingNet",
    "FEATURES",
    "HIDDEN",
    "LossInside",
    "MLP",
    "flat_grad",
    "flat_weights",
    "gap",
    "loss_fn",
    "make_batch",
    "make_model",
    "max_difference",
    "max_grad_difference",
    "max_weight_difference",
    "mlp",
    "regression_batch",
    "regression_loss",
    "running_example",
    "seeded_module",
    "seeded_randn",
    "sgd_step",
    "single_device",
    "train",
    "twin",
]
