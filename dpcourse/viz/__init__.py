"""The course's pictures: one function per figure, each computed from a real dpcourse run.

Every function returns a ``matplotlib.figure.Figure`` made without pyplot, so nothing leaks into
``plt``'s state and a notebook shows it once. Replica / device ``i`` has the same colour in every figure
(``palette.device_color``); grey means idle. ``python -m dpcourse.viz.gallery out/`` writes them all.
"""

from .accumulation import accumulation_timeline, micro_batch_weights
from .chunks import chunk_split
from .collectives import bytes_per_rank, collective
from .costmodel import plot_speedup
from .ddp_practice import batchnorm_stats, sampler_coverage, uneven_steps
from .gather import gather_view
from .gradients import gradient_sum, per_replica_mean_bias
from .memory import memory_bars, memory_timeline
from .precision import autocast_threads, compression_error, loss_scale
from .replicate import replicate_map
from .scaling import measure_scaling, scaling
from .shards import shard_layout
from .timeline import timeline
from .zero2 import gradient_bytes
from .zero3 import zero3_memory

__all__ = [
    "accumulation_timeline",
    "autocast_threads",
    "batchnorm_stats",
    "bytes_per_rank",
    "chunk_split",
    "collective",
    "compression_error",
    "gather_view",
    "gradient_bytes",
    "gradient_sum",
    "loss_scale",
    "measure_scaling",
    "memory_bars",
    "memory_timeline",
    "micro_batch_weights",
    "per_replica_mean_bias",
    "plot_speedup",
    "replicate_map",
    "sampler_coverage",
    "scaling",
    "shard_layout",
    "timeline",
    "uneven_steps",
    "zero3_memory",
]
