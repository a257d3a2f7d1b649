"""The course's pictures: one function per figure, each computed from a real dpcourse run.

Every function returns a ``matplotlib.figure.Figure`` made without pyplot, so nothing leaks into
``plt``'s state and a notebook shows it once. Replica / device ``i`` has the same colour in every figure
(``palette.device_color``); grey means idle. ``python -m dpcourse.viz.gallery out/`` writes them all.
"""

from .chunks import chunk_split
from .costmodel import plot_speedup
from .ddp_practice import batchnorm_stats, sampler_coverage, uneven_steps
from .gather import gather_view
from .gradients import gradient_sum, per_replica_mean_bias
from .replicate import replicate_map
from .scaling import measure_scaling, scaling
from .timeline import timeline

__all__ = [
    "batchnorm_stats",
    "chunk_split",
    "gather_view",
    "gradient_sum",
    "measure_scaling",
    "per_replica_mean_bias",
    "plot_speedup",
    "replicate_map",
    "sampler_coverage",
    "scaling",
    "timeline",
    "uneven_steps",
]
