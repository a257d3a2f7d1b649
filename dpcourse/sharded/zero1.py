"""ZeRO stage 1 by hand: each rank keeps Adam's state for one shard of the parameters, and updates only that.

Under DDP every rank runs the same optimizer on the same averaged gradients: n ranks hold n identical copies of
Adam's two averages. ZeRO-1 (Rajbhandari et al., 2020) keeps one copy, split over the ranks:

1. flatten the parameters into one vector of ``numel`` numbers and give rank ``r`` the slice ``shard_range``;
2. each step, all-reduce the gradients as DDP does (every rank gets the average);
3. each rank runs Adam on its slice only: its state is a 1/n of DDP's;
4. ``all_gather`` the updated slices so that every rank has all the parameters again for the next forward.

Slices are the same size, ``ceil(numel / n)``, with the last ones shorter (or empty): the rule of
``torch.chunk``, which FSDP2 uses for its shards (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``).
An all-gather wants the same number of elements from every rank, so a short slice is padded to that size
before the gather and the padding is cut off after it (``all_gathered``).

``ddp_program`` and ``zero1_program`` are training programs for ``sharded.ranks.train_on_ranks``.
"""

import math

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..ddp.lesson import loss_fn
from ..memory.accounting import state_tensors, storage_bytes


def shard_range(numel: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)``: the slice of a flat vector of ``numel`` numbers that ``rank`` of ``world_size`` owns.

    Every slice but the last ones holds ``ceil(numel / world_size)`` numbers; they cover ``0 ... numel - 1``
    in rank order; a rank past the end gets an empty slice (``start == stop == numel``).
    """
    for name, value, least in (("numel", numel, 0), ("world_size", world_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}; got {value!r}.")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be one of 0 ... {world_size - 1} for world_size={world_size}; got {rank!r}.")
    size = math.ceil(numel / world_size)
    return min(rank * size, numel), min((rank + 1) * size, numel)


def all_gathered(shard: torch.Tensor, numel: int) -> torch.Tensor:
    """Every rank's ``shard``, concatenated in rank order: the full vector of ``numel`` numbers, on every rank.

    Each rank pads its shard with zeros to ``ceil(numel / n)`` numbers, so all send the same size, and the
    padding is dropped from the gathered vector.
    """
    world_size = dist.get_world_size()
    size = math.ceil(numel / world_size)
    padded = torch.zeros(size, dtype=shard.dtype, device=shard.device)
    padded[: shard.numel()] = shard
    pieces = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(pieces, padded)
    return torch.cat(pieces)[:numel]


def averaged_gradient(model: nn.Module) -> torch.Tensor:
    """All of ``model``'s gradients as one flat vector, all-reduced and divided by the number of ranks."""
    gradient = parameters_to_vector(p.grad for p in model.parameters())
    dist.all_reduce(gradient)
    return gradient / dist.get_world_size()


def ddp_program(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP's training, written out: all-reduce the gradients, then every rank runs Adam on all parameters."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        vector_to_parameters(averaged_gradient(model), [p.grad for p in model.parameters()])
        optimizer.step()
    return {"parameters": list(model.parameters()), "state_bytes": storage_bytes(state_tensors(optimizer))}


def zero1_program(model: nn.Module, batches: list, lr: float) -> dict:
    """ZeRO-1: all-reduce the gradients, Adam on this rank's slice only, all-gather the updated slices."""
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    start, stop = shard_range(flat.numel(), dist.get_rank(), dist.get_world_size())
    mine = flat[start:stop].clone().requires_grad_()  # the only parameters this rank's optimizer sees
    optimizer = torch.optim.Adam([mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        loss_fn(model(x), y).backward()
        mine.grad = averaged_gradient(model)[start:stop]
        optimizer.step()
        with torch.no_grad():
            vector_to_parameters(all_gathered(mine.detach(), flat.numel()), parameters)
    return {"parameters": parameters, "state_bytes": storage_bytes(state_tensors(optimizer))}
