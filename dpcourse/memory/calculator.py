"""Predict a step's bytes per device from the model's shape, the batch, the optimizer and the devices alone.

Every line below is one thing torch keeps, written as a formula; ``dpcourse.memory.measure`` counts the same
things on real tensors, and the tests hold the two within 10% of each other. With P the parameter bytes:

    parameters          P on every device that runs a replica (replica 0 *is* the model: no second copy)
    gradients           P per replica; DataParallel's device 0 also holds the sum: 2P
    optimizer state     SGD 0, momentum P, Adam 2P + 4 bytes per parameter tensor (the step counters)
                        on device 0 only under DataParallel, on every rank under DDP
    activations         samples on the device x (features + (depth - 1) x width) x 4 bytes
    outputs and loss    samples x (2 x classes x 4 + 8) + 8: the output and the loss's log-softmax, one float
                        per class each, the int64 targets, the loss and its weight total; DataParallel: the
                        whole batch's, on device 0
    all-reduce buckets  DDP: P, or none with gradient_as_bucket_view=True (the gradients live in them)

The ZeRO stages (``kind="ZeRO-1" | "ZeRO-2" | "ZeRO-3"``) and FSDP2 without resharding (``"FSDP2, no reshard"``)
shard optimizer state, gradients and parameters over the ranks: ``dpcourse.memory.sharding`` has their formulas;
activations, outputs and loss are DDP's.

DataParallel cuts the batch as ``torch.chunk`` does (``torch/nn/parallel/scatter_gather.py``), so with fewer
chunks than devices the last devices hold nothing. DDP ranks each get ceil(batch / ranks) samples, as
``DistributedSampler`` pads the data to make the shards equal (``torch/utils/data/distributed.py``).
"""

import math

from . import sharding
from .accounting import Breakdown, device_bytes
from .setup import FLOAT, LABEL, RANKS, SHARDED, Setup, parameter_tensors, saved_per_sample

STATE_COPIES = {"SGD": 0, "SGD with momentum": 1, "Adam": 2}  # buffers the size of the parameters
STEP_COUNTER = 4  # Adam's per-tensor float32 ``step``


def chunk_sizes(batch: int, devices: int) -> list[int]:
    """The samples each DataParallel replica gets: ``torch.chunk``'s rule, chunks of ceil(batch / devices)."""
    size = math.ceil(batch / devices)
    return [min(size, batch - start) for start in range(0, batch, size)]


def optimizer_state_bytes(setup: Setup) -> int:
    """What ``setup.optimizer`` keeps for ``setup.model``'s parameters after its first step, on a device that keeps
    all of it; a ZeRO rank's share of it (``sharding.state_share``) under a ZeRO stage."""
    counter = STEP_COUNTER if setup.optimizer == "Adam" else 0
    if setup.kind in SHARDED:
        return sharding.state_share(setup, STATE_COPIES[setup.optimizer], counter)
    return STATE_COPIES[setup.optimizer] * setup.model.parameters * FLOAT + parameter_tensors(setup.model) * counter


def outputs_and_loss_bytes(setup: Setup, samples: int) -> int:
    """The kept output, the loss's log-softmax and targets, the loss and its weight total for ``samples``."""
    classes = setup.model.widths[-1]
    return samples * (2 * classes * FLOAT + LABEL) + 2 * FLOAT


def _replica(setup: Setup, samples: int, **extra: int) -> dict[str, int]:
    parameter_bytes = setup.model.parameters * FLOAT
    kinds = {"parameters": parameter_bytes, "gradients": parameter_bytes,
             "activations": samples * saved_per_sample(setup.model) * FLOAT}
    for name, value in extra.items():
        kinds[name] = kinds.get(name, 0) + value
    return device_bytes(**kinds)


def _rank_parameters_and_gradients(setup: Setup) -> dict[str, int]:
    if setup.kind in SHARDED:
        return sharding.parameters_and_gradients(setup)
    whole = setup.model.parameters * FLOAT
    return {"parameters": whole, "gradients": whole, "all_reduce_buckets": 0 if setup.bucket_view else whole}


def predict(setup: Setup) -> Breakdown:
    """The bytes ``setup`` needs on each device, by category, from the formulas in this module's docstring."""
    state = optimizer_state_bytes(setup)
    if setup.kind in RANKS:  # every rank alike: its own ceil(batch / n) samples
        samples = math.ceil(setup.batch / setup.devices)
        rank = device_bytes(**_rank_parameters_and_gradients(setup), optimizer_state=state,
                            activations=samples * saved_per_sample(setup.model) * FLOAT,
                            outputs_and_loss=outputs_and_loss_bytes(setup, samples))
        return Breakdown(setup, [dict(rank) for _ in range(setup.devices)], "predicted")
    if setup.kind == "one device" or setup.devices == 1:  # DataParallel on one device runs the module itself
        return Breakdown(setup, [_replica(setup, setup.batch, optimizer_state=state,
                                          outputs_and_loss=outputs_and_loss_bytes(setup, setup.batch))], "predicted")
    chunks = chunk_sizes(setup.batch, setup.devices)
    summed = setup.model.parameters * FLOAT
    devices = [_replica(setup, chunks[0], gradients=summed, optimizer_state=state,
                        outputs_and_loss=outputs_and_loss_bytes(setup, setup.batch))]
    devices += [_replica(setup, samples) for samples in chunks[1:]]
    devices += [device_bytes() for _ in range(setup.devices - len(chunks))]  # no chunk: idle
    return Breakdown(setup, devices, "predicted")
