"""ZeRO stage 1 by hand: each rank keeps Adam's state for one shard of the parameters, and updates only that.

Under DDP every rank runs the same optimizer on the same averaged gradients: n ranks hold n identical copies of
Adam's two averages. ZeRO-1 (Rajbhandari et al., arXiv:1910.02054) keeps one copy, split over the ranks:

1. flatten the parameters into one vector of ``numel`` numbers and give rank ``r`` the slice ``shard_range``;
2. each step, all-reduce the gradients as DDP does (every rank gets the average);
3. each rank runs Adam on its slice only: its state is about 1/n of DDP's;
4. all-gather the updated slices so that every rank has all the parameters again for the next forward
   (``all_gather_padded``).

Slices are the same size, ``ceil(numel / n)``, with the last ones shorter (or empty): the rule of
``torch.chunk``, with which FSDP2 cuts each parameter along dim 0, padding every shard to the first's size
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py: FSDPParam._init_sharded_param``).
An all-gather wants the same number of elements from every rank, so a short slice is padded to that size
before the gather and the padding is cut off after it. ``shard_range`` and ``all_gather_padded`` live in
``collectives.py``, with the reduce-scatter that ZeRO-2 and ZeRO-3 add.

``ddp_program``, ``zero1_program`` and ``ddp_then_zero1`` are training programs for
``ranks.train_on_ranks``; ``uneven_all_gather`` shows what gloo does with shards that are not padded.
"""

import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .. import examples
from ..ddp.demos.memory import bucket_bytes
from ..ddp.per_rank import wrap
from ..examples import regression_batch, regression_loss
from ..memory.accounting import state_tensors, storage_bytes
from ..ranks.launcher import device, launch
from ..ranks.training import WIDTHS, parameter_count
from .collectives import all_gather_padded, shard_range


def adam_state_bytes(numel: int, rank: int, world_size: int, element_size: int = 4) -> int:
    """The bytes of ``torch.optim.Adam``'s state on ``rank`` when it steps one tensor, its shard of the flat vector.

    ``exp_avg`` and ``exp_avg_sq`` are the shard's size each, and ``step`` is one 4-byte float32 counter per
    tensor stepped (``torch/optim/adam.py: Adam._init_group``), kept even for an empty shard.
    """
    start, stop = shard_range(numel, rank, world_size)
    return 2 * (stop - start) * element_size + 4


def one_device_state_bytes(widths: tuple[int, ...] = WIDTHS) -> int:
    """The bytes of Adam's state after one step on one device, for the model of ``widths``: DDP's per rank."""
    model = examples.mlp(widths)
    optimizer = torch.optim.Adam(model.parameters())
    x, y = regression_batch(8)
    regression_loss(model(x), y).backward()
    optimizer.step()
    return storage_bytes(state_tensors(optimizer))


def ddp_program(model: nn.Module, batches: list, lr: float) -> dict:
    """torch's DDP with Adam: DDP all-reduces (averages) the gradients, every rank steps all the parameters.

    Also reports the bytes of DDP's all-reduce buckets: what it all-reduces every step (``ddp.demos.memory``).
    """
    ddp_model = wrap(model, device())
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(ddp_model(x), y).backward()
        optimizer.step()
    return {"parameters": list(model.parameters()), "state_bytes": storage_bytes(state_tensors(optimizer)),
            "bucket_bytes": bucket_bytes(ddp_model)}


def zero1_program(model: nn.Module, batches: list, lr: float, average: bool = True) -> dict:
    """ZeRO-1: all-reduce the gradients, Adam on this rank's slice only, all-gather the updated slices.

    ``average=False`` forgets to divide the all-reduced gradients by the number of ranks (lesson 18's quiz).
    """
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    start, stop = shard_range(flat.numel(), dist.get_rank(), dist.get_world_size())
    mine = flat[start:stop].clone().requires_grad_()  # the only parameters this rank's optimizer sees
    optimizer = torch.optim.Adam([mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        regression_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in model.parameters())
        dist.all_reduce(gradient)
        mine.grad = (gradient / dist.get_world_size() if average else gradient)[start:stop]
        optimizer.step()
        full, _ = all_gather_padded(mine.detach(), flat.numel())
        with torch.no_grad():
            vector_to_parameters(full, parameters)
    return {"parameters": parameters, "state_bytes": storage_bytes(state_tensors(optimizer))}


def ddp_then_zero1(model: nn.Module, batches: list, lr: float) -> dict:
    """Both in one launch: torch's DDP on a copy of ``model`` (reported under ``"ddp"``), then ZeRO-1 on it.

    DDP's reducer calls its all-reduces from C++, not through ``dist.all_reduce``: the collectives that
    ``train_on_ranks`` records are ZeRO-1's.
    """
    ddp = ddp_program(copy.deepcopy(model), batches, lr)
    return {**zero1_program(model, batches, lr), "ddp": ddp}


def _gather_unpadded(numel: int) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sizes = [stop - start for start, stop in (shard_range(numel, r, world_size) for r in range(world_size))]
    pieces = [torch.empty(size) for size in sizes]
    try:
        dist.all_gather(pieces, torch.full((sizes[rank],), float(rank)))
    except RuntimeError as error:
        return {"sizes": sizes, "error": str(error).splitlines()[0]}
    return {"sizes": sizes, "error": None, "gathered": torch.cat(pieces)}


def uneven_all_gather(world_size: int = 4, numel: int | None = None) -> list[dict]:
    """Every rank calls ``dist.all_gather`` with its own, unpadded shard of ``numel`` numbers (default: the
    course model's), and a piece of each rank's true size to receive it in. Per rank: the ``sizes``, and the
    ``error`` it raised (``None`` if it worked, then ``gathered`` holds what it received)."""
    numel = parameter_count(WIDTHS) if numel is None else numel
    return launch(_gather_unpadded, world_size, (numel,), backend="gloo", timeout=20)
