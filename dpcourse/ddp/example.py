"""The model, data and shards every DDP experiment uses, and the one place dpcourse wraps a model in DDP.

Same model as the DataParallel lessons (``examples.mlp``), trained with a mean-squared-error loss on a
fixed seeded dataset, so DDP's numbers can be put next to DP's and next to plain single-device training.
"""

import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from .. import examples
from ..workloads import lesson_mlp


def model(seed: int = 0, batchnorm: bool = False, hidden: int = 16, depth: int = 2) -> nn.Sequential:
    """The running example's MLP, ``Linear(8, hidden) -> [BatchNorm1d] -> ReLU -> Linear(hidden, 4)``, from ``seed``.

    ``depth`` counts the Linear layers: more than 2 adds ``Linear(hidden, hidden) -> ReLU`` blocks, for
    experiments that need more parameters or more modules (the timelines). Like ``examples.make_model`` it
    leaves the global random state alone: every rank builds the same weights from ``seed``.
    """
    return examples.mlp(lesson_mlp(hidden, depth).widths, seed, batchnorm)


def data(samples: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``(samples, 8)`` and targets ``(samples, 4)``, the same on every rank (fixed seed)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 8, generator=generator)
    return x, torch.randn(samples, 4, generator=generator)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the samples the rank has: each rank's loss is already an average, hence DDP averages."""
    return F.mse_loss(output, target)


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


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest elementwise ``|a - b|``: how far two ranks', or a rank's and one device's, numbers are apart."""
    return (a - b).abs().max().item()


def flat_grad(module: nn.Module) -> torch.Tensor:
    """Every parameter's ``.grad`` as one vector, in ``parameters()`` order, on the CPU."""
    return torch.cat([p.grad.detach().flatten() for p in module.parameters()]).cpu()


def flat_weights(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()]).cpu()


def single_device(steps: int, batch: int, lr: float) -> dict[str, list[torch.Tensor]]:
    """The reference: plain SGD on one device, each step on the whole batch. Weights and gradient per step."""
    reference = model()
    x, y = data(steps * batch)
    optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
    weights, grads = [], []
    for step in range(steps):
        optimizer.zero_grad()
        part = slice(step * batch, (step + 1) * batch)
        loss_fn(reference(x[part]), y[part]).backward()
        grads.append(flat_grad(reference))
        optimizer.step()
        weights.append(flat_weights(reference))
    return {"weights": weights, "grads": grads}
