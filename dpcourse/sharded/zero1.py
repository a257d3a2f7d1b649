"""ZeRO stage 1 by hand: each rank keeps Adam's state for one shard of the parameters, and updates only that.

Under DDP every rank runs the same optimizer on the same averaged gradients: n ranks hold n identical copies of
Adam's two averages. ZeRO-1 (Rajbhandari et al., arXiv:1910.02054) keeps one copy, split over the ranks:

1. flatten the parameters into one vector of ``numel`` numbers and give rank ``r`` the slice ``shard_range``;
2. each step, average the gradients over the ranks;
3. each rank runs Adam on its slice only: its state is about 1/n of DDP's;
4. all-gather the updated slices so that every rank has all the parameters again for the next forward
   (``all_gather_padded``).

Step 2 comes in two versions. ``zero1_program``, the course's first and simplest, all-reduces the whole gradient as
DDP does and keeps its slice: it sends an all-reduce *and* an all-gather, about 1.5 times DDP's bytes.
``zero1_reduce_scatter_program`` is the paper's (its section 7.2.1): a reduce-scatter gives each rank the sum of
its slice only, and the all-gather of the updated slices is the all-reduce's other half, so it sends DDP's bytes.
``zero1_wire`` counts both, with DDP and torch's ``ZeroRedundancyOptimizer``.

Slices are the same size, ``ceil(numel / n)``, with the last ones shorter (or empty): the rule of
``torch.chunk``, with which FSDP2 cuts each parameter along dim 0, padding every shard to the first's size
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py: FSDPParam._init_sharded_param``).
An all-gather wants the same number of elements from every rank, so a short slice is padded to that size
before the gather and the padding is cut off after it. ``shard_range`` and the padded collectives live in
``collectives.py``.

``ddp_program``, ``zero1_program`` and ``zero1_reduce_scatter_program`` are training programs for
``ranks.train_on_ranks``; ``uneven_all_gather`` shows what gloo does with shards that are not padded.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .. import examples
from ..ddp.per_rank import wrap
from ..examples import regression_batch, regression_loss
from ..memory.accounting import state_tensors, storage_bytes
from ..ranks.launcher import device, launch
from ..ranks.training import WIDTHS, parameter_count
from .collectives import all_gather_padded, reduce_scatter_padded, shard_range


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

    DDP's reducer starts its all-reduces from C++ (``torch/csrc/distributed/c10d/reducer.cpp``), where
    ``traffic.counted`` cannot see them. So this DDP all-reduces through torch's own ``allreduce_hook``
    (``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py:35``), which divides each bucket by the number of
    ranks and calls ``dist.all_reduce`` on it from Python: DDP's buckets and arithmetic, now recorded.
    """
    ddp_model = wrap(model, device())
    ddp_model.register_comm_hook(None, allreduce_hook)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(ddp_model(x), y).backward()
        optimizer.step()
    return {"parameters": list(model.parameters()), "state_bytes": storage_bytes(state_tensors(optimizer))}


def _averaged_shard(gradient: torch.Tensor, start: int, stop: int, reduce_scatter: bool) -> torch.Tensor:
    """This rank's slice of the gradient summed over the ranks: all-reduced whole, or reduce-scattered."""
    if reduce_scatter:
        return reduce_scatter_padded(gradient)  # only this rank's slice of the sum arrives
    dist.all_reduce(gradient)  # every rank receives the whole sum, and keeps its slice
    return gradient[start:stop]


def zero1_program(model: nn.Module, batches: list, lr: float, average: bool = True,
                  reduce_scatter: bool = False) -> dict:
    """ZeRO-1, the course's first version: all-reduce the gradients, Adam on this rank's slice only, all-gather
    the updated slices. ``reduce_scatter=True`` is ``zero1_reduce_scatter_program``.

    ``average=False`` forgets to divide the summed gradients by the number of ranks (lesson 18's quiz).
    """
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    start, stop = shard_range(flat.numel(), dist.get_rank(), dist.get_world_size())
    mine = flat[start:stop].clone().requires_grad_()  # the only parameters this rank's optimizer sees
    optimizer = torch.optim.Adam([mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        regression_loss(model(x), y).backward()
        shard = _averaged_shard(parameters_to_vector(p.grad for p in parameters), start, stop, reduce_scatter)
        mine.grad = shard / dist.get_world_size() if average else shard
        optimizer.step()
        full, _ = all_gather_padded(mine.detach(), flat.numel())
        with torch.no_grad():
            vector_to_parameters(full, parameters)
    return {"parameters": parameters, "state_bytes": storage_bytes(state_tensors(optimizer))}


def zero1_reduce_scatter_program(model: nn.Module, batches: list, lr: float) -> dict:
    """ZeRO-1 as the ZeRO paper runs it: reduce-scatter the gradients, Adam on this rank's slice, all-gather.

    A ring all-reduce is a reduce-scatter then an all-gather (lesson 13); this runs the two halves with Adam's step
    in between, so it sends DDP's bytes, plus the padding. Every rank still holds the whole gradient after backward:
    freeing it, bucket by bucket during backward, is ZeRO-2 (lesson 19).
    """
    return zero1_program(model, batches, lr, reduce_scatter=True)


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
