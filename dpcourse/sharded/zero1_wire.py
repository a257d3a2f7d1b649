"""What ZeRO-1 costs on the wire: DDP, two versions of ZeRO-1 by hand and torch's ``ZeroRedundancyOptimizer``, counted.

``every_program`` is a training program for ``ranks.train_on_ranks``: on every rank it trains each program of
``PROGRAMS`` from the same weights, each inside its own ``traffic.counted()``, which records every collective called
through ``torch.distributed`` with the bytes of its whole tensor. What each program calls per step:

    DDP                       all_reduce of every bucket        (torch's allreduce_hook, ``zero1.ddp_program``)
    ZeRO-1, all-reduce        all_reduce, all_gather             (``zero1.zero1_program``, the course's first)
    ZeRO-1, reduce-scatter    reduce_scatter, all_gather         (``zero1.zero1_reduce_scatter_program``, the paper's)
    ZeroRedundancyOptimizer   DDP's all_reduce, then a broadcast of every parameter from the rank that owns it
                              (``torch/distributed/optim/zero_redundancy_optimizer.py: _broadcast_params_from_rank``)

What a collective sends runs inside gloo or NCCL, where ``counted`` cannot see it; ``ring_bytes`` says what one
rank sends for each recorded call when every collective runs as lesson 13's ring: an all-reduce of S bytes
2(n - 1)/n * S, a reduce-scatter or an all-gather (n - 1)/n * S, and a broadcast (n - 1)/n * S on average over the
ranks (whatever its algorithm, each of the n - 1 other ranks must receive the S bytes once).
"""

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

from ..ddp.per_rank import wrap
from ..examples import regression_loss
from ..memory.accounting import state_tensors, storage_bytes
from ..ranks.launcher import device
from ..ranks.traffic import counted
from . import zero1
from .zero1 import allreduce_hook


def zero_redundancy_program(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP (through ``allreduce_hook``, as ``zero1.ddp_program``) with torch's ``ZeroRedundancyOptimizer(Adam)``."""
    ddp_model = wrap(model, device())
    ddp_model.register_comm_hook(None, allreduce_hook)
    optimizer = ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        regression_loss(ddp_model(x), y).backward()
        optimizer.step()  # Adam on this rank's parameters, then every owner broadcasts its updated ones
    return {"parameters": list(model.parameters()), "state_bytes": storage_bytes(state_tensors(optimizer.optim))}


PROGRAMS: dict[str, Callable[..., dict]] = {
    "DDP": zero1.ddp_program,
    "ZeRO-1, all-reduce": zero1.zero1_program,
    "ZeRO-1, reduce-scatter": zero1.zero1_reduce_scatter_program,
    "ZeroRedundancyOptimizer": zero_redundancy_program,
}


def every_program(model: nn.Module, batches: list, lr: float) -> dict:
    """Every program of ``PROGRAMS`` on a copy of ``model``, counted apart. Per program: its final ``parameters``,
    ``state_bytes``, and ``calls``, the ``(collective, bytes)`` it called per step (the same every step but for how
    DDP splits its buckets, lesson 19: the bytes of each kind are then summed over the step). The run's own
    ``parameters`` are those of lesson 18's ZeRO-1."""
    start, runs = copy.deepcopy(model), {}
    for name, program in PROGRAMS.items():
        with counted() as traffic:
            result = program(copy.deepcopy(start), batches, lr)
        runs[name] = {**result, "calls": per_step(traffic.calls, len(batches))}
    return {"parameters": runs["ZeRO-1, all-reduce"]["parameters"], "runs": runs}


def per_step(calls: list[tuple[str, int]], steps: int) -> dict[str, tuple[int, int]]:
    """``calls`` of ``steps`` steps as ``{collective: (calls per step, bytes per step)}``, in the order first called.
    Raises ``ValueError`` when the steps did not call the same bytes of each collective."""
    totals: dict[str, list[int]] = {}
    for name, size in calls:
        totals.setdefault(name, [0, 0])
        totals[name][0] += 1
        totals[name][1] += size
    if any(count % steps or size % steps for count, size in totals.values()):
        raise ValueError(f"the {steps} steps did not all call the same collectives: {calls}")
    return {name: (count // steps, size // steps) for name, (count, size) in totals.items()}


SHARE = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
         "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: (n - 1) / n}


def ring_bytes(calls: dict[str, tuple[int, int]], world_size: int) -> float:
    """Bytes one rank sends per step for ``calls`` (``per_step``'s), every collective a ring (module docstring)."""
    unknown = set(calls) - set(SHARE)
    if unknown:
        raise ValueError(f"ring_bytes knows {sorted(SHARE)}, not {sorted(unknown)}.")
    return sum(SHARE[name](world_size) * size for name, (_, size) in calls.items())
