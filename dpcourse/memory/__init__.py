"""Memory per device: what a training step holds on each device, predicted from a few numbers and measured.

    from dpcourse import memory
    setup = memory.Setup(kind="DataParallel", devices=4, batch=256, optimizer="Adam")
    print(memory.predict(setup))     # bytes per device and category, from formulas (calculator.py)
    print(memory.measure(setup))     # the same, counted on the tensors torch really holds (measure.py)

``kind`` may also be a ZeRO stage, ``"ZeRO-1"``, ``"ZeRO-2"`` or ``"ZeRO-3"``, or ``"FSDP2, no reshard"``
(``FSDP2_NO_RESHARD``: ``fully_shard`` with ``reshard_after_forward=False``, which is not ZeRO-2), on ``devices``
ranks: ``predict`` then uses the formulas of ``sharding``, and ``dpcourse.sharded.memory.measure_sharded`` counts
what torch's own implementations (``ZeroRedundancyOptimizer``, FSDP2's ``fully_shard``) hold on each rank.

The categories (``CATEGORIES``): parameters, gradients, optimizer state, activations, outputs and loss, DDP's
all-reduce buckets. ``accounting`` says what each one is and how it is counted; ``profile_step`` asks torch's
profiler, and ``cuda_peaks`` ``torch.cuda.max_memory_allocated`` on GPUs, for the allocator's real peak
(``peak``).
"""

from ..examples import loss_fn
from ..training_setup import KINDS
from .accounting import CATEGORIES, MIB, Breakdown, SavedTensors, local, state_tensors, storage_bytes
from .calculator import chunk_sizes, optimizer_state_bytes, predict
from .measure import CountingDataParallel, copies_and_gradients, measure
from .peak import ProfiledStep, cuda_peaks, profile_step
from .setup import (
    FSDP2_NO_RESHARD,
    OPTIMIZERS,
    SHARDED,
    Setup,
    layer_shapes,
    make_optimizer,
    optimizer_class,
    parameter_tensors,
    saved_per_sample,
    sized_mlp,
)

__all__ = [
    "CATEGORIES",
    "FSDP2_NO_RESHARD",
    "KINDS",
    "MIB",
    "OPTIMIZERS",
    "SHARDED",
    "Breakdown",
    "CountingDataParallel",
    "ProfiledStep",
    "SavedTensors",
    "Setup",
    "chunk_sizes",
    "copies_and_gradients",
    "cuda_peaks",
    "layer_shapes",
    "local",
    "loss_fn",
    "make_optimizer",
    "measure",
    "optimizer_class",
    "optimizer_state_bytes",
    "parameter_tensors",
    "predict",
    "profile_step",
    "saved_per_sample",
    "sized_mlp",
    "state_tensors",
    "storage_bytes",
]
