"""Memory per device: what a training step holds on each device, predicted from a few numbers and measured.

    from dpcourse import memory
    setup = memory.Setup(kind="DataParallel", devices=4, batch=256, optimizer="Adam")
    print(memory.predict(setup))     # bytes per device and category, from formulas (calculator.py)
    print(memory.measure(setup))     # the same, counted on the tensors torch really holds (measure.py)

The categories (``CATEGORIES``): parameters, gradients, optimizer state, activations, outputs and loss, DDP's
all-reduce buckets. ``accounting`` says what each one is and how it is counted; ``timeline`` asks torch's
profiler, and ``cuda_peaks`` ``torch.cuda.max_memory_allocated`` on GPUs, for the allocator's real peak
(``peak``).
"""

from ..examples import loss_fn
from .accounting import CATEGORIES, MIB, Breakdown, SavedTensors, state_tensors, storage_bytes
from .calculator import chunk_sizes, optimizer_state_bytes, predict
from .measure import CountingDataParallel, copies_and_gradients, measure
from .peak import Timeline, cuda_peaks, timeline
from .workload import KINDS, MLP, OPTIMIZERS, Setup, make_optimizer

__all__ = [
    "CATEGORIES",
    "KINDS",
    "MIB",
    "MLP",
    "OPTIMIZERS",
    "Breakdown",
    "CountingDataParallel",
    "SavedTensors",
    "Setup",
    "Timeline",
    "chunk_sizes",
    "copies_and_gradients",
    "cuda_peaks",
    "loss_fn",
    "make_optimizer",
    "measure",
    "optimizer_state_bytes",
    "predict",
    "state_tensors",
    "storage_bytes",
    "timeline",
]
