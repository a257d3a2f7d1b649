"""dpcourse: torch.nn.DataParallel's four steps, re-implemented to be read, run and watched.

One DataParallel forward is ``scatter`` (split the batch) -> ``replicate`` (copy the module to every
device) -> ``parallel_apply`` (run the replicas in threads) -> ``gather`` (concatenate the outputs).
The signatures mirror those in ``torch/nn/parallel/`` so the two can be read side by side; unlike torch's, these
also run on several CPU "devices" (see ``dpcourse.devices``).
"""

from .data_parallel import DataParallel, data_parallel
from .devices import devices
from .parallel_apply import parallel_apply
from .replicate import replicate
from .scatter_gather import gather, scatter, scatter_kwargs
from .trace import trace

__all__ = [
    "DataParallel",
    "data_parallel",
    "devices",
    "gather",
    "parallel_apply",
    "replicate",
    "scatter",
    "scatter_kwargs",
    "trace",
]
