"""ZeRO-3 next to DDP on the same ranks: memory per rank over a step, bytes on the wire, and the learner's checks.

``compare`` is a training program for ``ranks.train_on_ranks`` that trains the same model several ways
in one launch of the ranks (starting ranks costs seconds): DDP, ZeRO-3, ZeRO-3 with prefetch, ZeRO-3 without
resharding. Every way runs its collectives as rings of point-to-point messages (``rings.ring_collectives``), so
that ``ranks.traffic.counted`` counts every byte sent. The last step of each way runs under lesson 15's profiler
(``memory.peak.allocations``): every allocation and free, in order, on top of what the rank held when the step
began (``memory.accounting.storage_bytes`` of its parameters or shards, Adam's state and its batch).

``bytes_per_step`` is the same count as a formula, which lesson 20's exercise asks for.
"""

import copy
import itertools
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .. import ranks
from ..examples import regression_loss
from ..memory.accounting import state_tensors, storage_bytes
from ..memory.peak import allocations, phase_of, phased_step
from ..ranks.by_source import SourceFunction
from ..ranks.launcher import device
from ..ranks.traffic import counted
from . import zero3
from .collectives import piece_size, shard_range
from .rings import ring_collectives

# 8 inputs, four hidden layers of 127, 4 outputs: layers of 1,143, 16,256 (three) and 512 parameters, 50,423 in
# all: one layer is a third of the model at most. 1,143 splits unevenly over 2 and 4 ranks, 16,256 over 3.
WIDE = (8, 127, 127, 127, 127, 4)
WAYS = {"DDP": {}, "ZeRO-3": {}, "ZeRO-3, prefetch": {"prefetch": True}, "ZeRO-3, no reshard": {"reshard": False}}


def bytes_per_step(numels: Sequence[int], world_size: int, reshard: bool = True, element_size: int = 4) -> int:
    """Bytes one rank sends in one ZeRO-3 step with ring collectives, for layers of ``numels`` parameters.

    Per layer, every collective sends ``n - 1`` pieces of ``ceil(numel / n)`` numbers (the padded shard): an
    all-gather before forward, another before backward if ``reshard``, and the reduce-scatter of the gradient.
    """
    if world_size == 1:
        return 0
    collectives = 3 if reshard else 2
    return sum(collectives * (world_size - 1) * piece_size(numel, world_size) * element_size for numel in numels)


def _train(forward: Callable, optimizer: torch.optim.Optimizer, held: Callable[[], list[torch.Tensor]],
           batches: list, after_backward: Callable[[], None] = lambda: None) -> dict:
    """All steps but the last as usual; the last one profiled and its bytes sent counted."""
    for x, y in batches[:-1]:
        optimizer.zero_grad()
        phased_step(forward, regression_loss, optimizer, x, y, after_backward)
    optimizer.zero_grad()
    x, y = batches[-1]
    start = storage_bytes([*held(), *state_tensors(optimizer), x, y])
    with counted() as traffic:
        changes, phases = allocations(lambda: phased_step(forward, regression_loss, optimizer, x, y, after_backward))
    return {"start": start, "allocated": list(itertools.accumulate(changes, initial=start))[1:], "phases": phases,
            "step_sent": traffic.sent}


def peak_phase(run: dict) -> str:
    """The phase of the step (``memory.peak.PHASES``) in which ``run``'s allocations peaked."""
    return phase_of(run["allocated"].index(max(run["allocated"])), run["phases"])


def _ddp(model: nn.Module, batches: list, lr: float) -> dict:
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(parameters, lr=lr)

    def average_gradients() -> None:  # DDP's all-reduce, on one flat vector
        flat = parameters_to_vector(p.grad for p in parameters)
        dist.all_reduce(flat)
        vector_to_parameters(flat / dist.get_world_size(), [p.grad for p in parameters])

    run = _train(model, optimizer, lambda: parameters, batches, average_gradients)
    return {**run, "parameters": [p.detach().clone() for p in parameters]}


def _zero3(model: nn.Sequential, batches: list, lr: float, **options) -> dict:
    sharded = zero3.Zero3(model, **options)
    optimizer = torch.optim.Adam(sharded.shards(), lr=lr)
    held_after_forward: list[list[int]] = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        output = sharded(x)
        held_after_forward.append([layer.full.untyped_storage().nbytes() for layer in sharded.layers])
        return output

    run = _train(forward, optimizer, sharded.shards, batches)
    return {**run, "parameters": sharded.parameters(), "held_after_forward": held_after_forward[-1],
            "shard_bytes": [layer.shard.nbytes for layer in sharded.layers],
            "numels": [layer.numel for layer in sharded.layers]}


def compare(model: nn.Sequential, batches: list, lr: float, ways: dict[str, dict] | None = None) -> dict:
    """Train a copy of ``model`` each way of ``ways`` (default ``WAYS``: name -> options of ``zero3.Zero3``, or
    ``"DDP"``); per way what ``_train`` measured, and ZeRO-3's: the bytes each layer's gathered vector held
    after the forward, each shard's bytes, each layer's parameter count. The runner's ``parameters`` are the
    first ZeRO-3 way's, to check against one device."""
    ways = WAYS if ways is None else ways
    with ring_collectives():
        results = {way: (_ddp if way == "DDP" else _zero3)(copy.deepcopy(model), batches, lr, **options)
                   for way, options in ways.items()}
    return {"ways": results, "parameters": results[next(w for w in ways if w != "DDP")]["parameters"]}


def measure(world_size: int = 4, widths: Sequence[int] = WIDE, ways: dict[str, dict] | None = None) -> list[dict]:
    """``compare`` on ``world_size`` ranks, one launch: per rank, ``"ways"`` and the ZeRO-3 ``"parameters"``.

    ``ways`` is read here, when called, and sent to the ranks."""
    ways = dict(WAYS if ways is None else ways)
    return ranks.train_on_ranks(compare, world_size, widths=widths, extra={"ways": ways})


def _rebuilt(function: SourceFunction | None) -> Callable | None:
    return function.rebuild() if isinstance(function, SourceFunction) else function


def known_vector(world_size: int) -> torch.Tensor:
    """``0.5, 1.5, 2.5, ...``, 11 numbers more than the ranks: its slices are uneven on 2, 3 and 4 ranks."""
    return torch.arange(world_size + 11, dtype=torch.float32) + 0.5


def learners(model: nn.Sequential, batches: list, lr: float, gather: SourceFunction | None = None,
             scatter: SourceFunction | None = None) -> dict:
    """The learner's ``gather`` or ``scatter`` (sent as source) called once on known numbers, then trained with.

    An exception in the first call goes to the learner as it is. Training runs only if every rank's first call
    gave the right numbers (a rank that stopped early would leave the others waiting in a collective); an
    exception in training, or training not run, is returned as ``"error"``, with zeros for parameters, so that
    the check can first say what the known numbers show.

    The known numbers: ``v = known_vector(n)``. ``gather`` gets this rank's slice of it and should return ``v``;
    ``scatter`` gets ``(rank + 1) * v`` and should return this rank's slice of its average over the ranks.
    """
    gather, scatter = _rebuilt(gather), _rebuilt(scatter)
    n, rank = dist.get_world_size(), dist.get_rank()
    known = known_vector(n).to(device())  # NCCL ranks need their tensors on their GPU
    start, stop = shard_range(known.numel(), rank, n)
    direct = {}
    if gather is not None:
        direct["gathered"] = gather(known[start:stop].clone(), known.numel())
    if scatter is not None:
        direct["scattered"] = scatter((rank + 1) * known)
    direct = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in direct.items()}
    known = known.cpu()
    expected = {"gathered": known, "scattered": (known * (n + 1) / 2)[start:stop]}
    right = all(isinstance(got, torch.Tensor) and got.shape == expected[k].shape and torch.allclose(got, expected[k])
                for k, got in direct.items())
    everywhere = torch.tensor(float(right), device=device())
    dist.all_reduce(everywhere, op=dist.ReduceOp.MIN)  # train on all ranks or on none: a rank left alone would wait
    nothing = [torch.zeros(p.shape) for p in model.parameters()]
    if not everywhere.item():
        return {"parameters": nothing, "direct": direct, "error": "not run: the known numbers came out wrong"}
    try:
        trained = zero3.program(model, batches, lr, gather=gather, scatter=scatter)
    except Exception as error:  # reported after what the known numbers show, which says more
        return {"parameters": nothing, "direct": direct, "error": f"{type(error).__name__}: {error}"}
    return {**trained, "direct": direct}
