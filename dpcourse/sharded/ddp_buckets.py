"""Which buckets torch's DDP all-reduces, step by step, read from a comm hook on real ranks.

DDP all-reduces the gradients bucket by bucket, each as soon as backward has produced all of its gradients. Which
parameters share a bucket depends on ``find_unused_parameters`` (torch 2.13, ``torch/nn/parallel/distributed.py``):

* the default, ``False``: the first step uses **one bucket** for every parameter (``bucket_size_limits =
  [sys.maxsize]``, :153-154). After that step, the reducer **rebuilds** the buckets in the order the gradients
  became ready ("bucket rebuild" bucketizes parameters based on its real execution order in backward graph",
  :1406-1407), each closing once it holds at least the bucket size;
* ``True``: the buckets are cut once, in ``parameters()`` order, each closing once it holds at least the bucket
  size, and the list is reversed (``_compute_bucket_assignment_by_size``, then ``list(reversed(bucket_indices))``,
  :1433-1439), since backward produces the last layers' gradients first. That is the rule the course's ZeRO-2
  uses (``ddp.implementations.reducer.bucket_indices``).

``record`` wraps a model in DDP with a comm hook that notes each bucket it is handed (its bytes, its parameters'
names), then all-reduces the bucket as torch's ``allreduce_hook`` does
(``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py:35-54``: the same results as no hook).
``_get_ddp_logging_data()["bucket_sizes"]`` keeps reporting the buckets built at construction after a rebuild,
so the hook is where the buckets DDP really all-reduces can be read.
"""

import os

import torch
from torch import nn

from ..ddp.demos.unused import stderr_to
from ..ddp.per_rank import wrap
from ..ranks.launcher import device, launch
from .zero1 import allreduce_hook

LAYERS, WIDTH = 6, 100  # six Linear(100, 100): 12 parameters of 10,000 and 100 values
BUCKET_CAP_MB = 0.1  # 104,857 bytes: about two and a half layers per bucket


def model() -> nn.Sequential:
    """The model whose buckets are read: ``LAYERS`` layers ``nn.Linear(WIDTH, WIDTH)`` in a row."""
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])


def record(module: nn.Module, steps: int, **options) -> list[list[dict]]:
    """Train ``module`` under DDP (``options`` go to ``DistributedDataParallel``) for ``steps`` steps of SGD on
    random data; per step, every bucket DDP all-reduced, in the order it did: ``{"bytes", "parameters"}``."""
    names = {id(p): name for name, p in module.named_parameters()}
    steps_seen: list[list[dict]] = []

    def noting(state, bucket):
        steps_seen[-1].append({"bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                               "parameters": [names[id(p)] for p in bucket.parameters()]})
        return allreduce_hook(state, bucket)

    ddp_model = wrap(module, device(), **options)
    ddp_model.register_comm_hook(None, noting)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
    for step in range(steps):
        steps_seen.append([])
        optimizer.zero_grad()
        ddp_model(_batch(step)).square().mean().backward()
        optimizer.step()
    return steps_seen


def _batch(step: int) -> torch.Tensor:
    return torch.randn(8, WIDTH, generator=torch.Generator().manual_seed(step)).to(device())


def _both(steps: int) -> dict[bool, list[list[dict]]]:
    default = record(model(), steps, bucket_cap_mb=BUCKET_CAP_MB)
    with stderr_to(os.devnull):  # torch warns from C++ that this model has no unused parameter: we know
        unused = record(model(), steps, bucket_cap_mb=BUCKET_CAP_MB, find_unused_parameters=True)
    return {False: default, True: unused}


def recorded(world_size: int = 2, steps: int = 3) -> dict[bool, list[list[dict]]]:
    """``record`` on ``world_size`` real ranks, ``model()`` with ``bucket_cap_mb=BUCKET_CAP_MB``, by
    ``find_unused_parameters`` (``False``, the default, and ``True``): rank 0's buckets per step."""
    return launch(_both, world_size, (steps,), timeout=60)[0]
