"""What is DDP's own in every DDP experiment: a rank's shard of the batch, and wrapping its model in DDP.

The model, the data, the loss and the single-device oracle are the running example's
(``examples.make_model``, ``regression_batch``, ``regression_loss``, ``single_device``), so DDP's numbers
can be put next to DataParallel's and next to plain single-device training. ``wrap`` is the one place
dpcourse constructs ``DistributedDataParallel``.
"""

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler


def shard(batch: int, rank: int, world_size: int, sizes: Sequence[int] | None = None) -> list[int]:
    """The indices of ``range(batch)`` that ``rank`` trains on.

    * ``sizes=None``: what ``DistributedSampler(shuffle=False)`` gives, ``rank, rank + world_size, ...``.
      When ``batch`` is not a multiple of ``world_size`` it *pads* by repeating the first indices, so
      some samples count twice (with ``drop_last=True`` it drops the tail instead).
    * ``sizes=[5, 3]``: contiguous, unequal shards, rank 0 gets ``0..4`` and rank 1 ``5..7``. This is how
      the course makes unequal shards; it is what a last, short batch does to real training.
    """
    if sizes is None:
        return list(DistributedSampler(range(batch), num_replicas=world_size, rank=rank, shuffle=False))
    if len(sizes) != world_size or sum(sizes) != batch or min(sizes) < 1:
        raise ValueError(
            f"sizes={list(sizes)} must give each of the {world_size} ranks at least one sample and add up to "
            f"the batch of {batch}."
        )
    start = sum(sizes[:rank])
    return list(range(start, start + sizes[rank]))


def wrap(module: nn.Module, device: torch.device, sync_buffers: bool = True, **options: Any) -> nn.Module:
    """``DistributedDataParallel(module)`` on ``device``; the process group must be initialised.

    Construction broadcasts rank 0's parameters and buffers to every rank (``_sync_module_states`` in
    ``torch/nn/parallel/distributed.py``): the only time the model is copied. ``sync_buffers`` also
    broadcasts rank 0's buffers at the start of every forward; torch 2.13 renamed that option from
    ``broadcast_buffers`` to ``forward_sync_buffers``.
    """
    parameters = inspect.signature(DistributedDataParallel).parameters
    sync_option = "forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers"
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module.to(device), device_ids=device_ids, **{sync_option: sync_buffers}, **options)
