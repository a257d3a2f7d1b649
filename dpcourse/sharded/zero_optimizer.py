"""torch's ZeRO-1: ``ZeroRedundancyOptimizer`` next to DDP, and the rule by which it splits the parameters.

    model = DistributedDataParallel(model)              # all-reduces the gradients, as always
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)

Each rank builds a plain ``torch.optim.Adam`` (``optimizer.optim``) over the parameters it *owns*, steps it, and
then every owner broadcasts its updated parameters to the others
(``torch/distributed/optim/zero_redundancy_optimizer.py: ZeroRedundancyOptimizer.step``). Unlike lesson 18's
flat slices, a parameter is never cut: each is owned whole by one rank, chosen by ``greedy_partition``.
"""

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

from ..ddp.per_rank import wrap
from ..examples import regression_loss
from ..memory.accounting import state_tensors, storage_bytes
from ..ranks.launcher import device


def greedy_partition(sizes: list[int], world_size: int) -> list[int]:
    """The rank that owns each parameter, given the parameters' sizes (numbers of elements), in order.

    ``ZeroRedundancyOptimizer``'s rule (``_partition_parameters`` in the file above): go through the parameters
    from the largest to the smallest (a stable sort, so equal sizes keep their order) and give each to the rank
    that owns the fewest elements so far, the lowest rank on a tie.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1; got {world_size!r}.")
    owned, owners = [0] * world_size, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        rank = owned.index(min(owned))
        owners[index], owned[rank] = rank, owned[rank] + sizes[index]
    return owners


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> None:
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(model(x), y).backward()
        optimizer.step()


def ddp_adam_program(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP with a plain Adam on every rank: the full parameters and the bytes of Adam's state this rank holds."""
    wrapped = wrap(model, device())
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=lr)
    _train(wrapped, optimizer, batches)
    return {"parameters": list(model.parameters()), "state_bytes": storage_bytes(state_tensors(optimizer))}


def zero_program(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP with ``ZeroRedundancyOptimizer(Adam)``: the full parameters, the names of the parameters this rank's
    Adam owns, the bytes of its state, and how many entries rank 0's consolidated state dict holds."""
    names = {id(p): name for name, p in model.named_parameters()}
    wrapped = wrap(model, device())
    optimizer = ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    _train(wrapped, optimizer, batches)
    owned = [names[id(p)] for group in optimizer.optim.param_groups for p in group["params"]]
    optimizer.consolidate_state_dict(to=0)  # a collective: every rank sends its state to rank 0
    consolidated = len(optimizer.state_dict()["state"]) if torch.distributed.get_rank() == 0 else None
    return {"parameters": list(model.parameters()), "owned": owned,
            "state_bytes": storage_bytes(state_tensors(optimizer.optim)), "consolidated_entries": consolidated}
