"""HSDP: FSDP2 on a 2-D device mesh, sharding along one dimension and replicating along the other (lesson 26).

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))   # ranks [[0, 1], [2, 3]]
    for layer in linear_layers(model):
        fully_shard(layer, mesh=mesh)          # (Replicate(), Shard(0)): rows split over a row of the mesh
    fully_shard(model, mesh=mesh)

``fully_shard`` reads a 2-D mesh as "replicate across dim 0, shard across dim 1" (``torch/distributed/fsdp/
_fully_shard/_fully_shard.py: fully_shard``, its ``mesh`` argument). Ranks 0 and 1 (a row, a *shard group*) split
each parameter's rows as 1-D FSDP2 does on 2 ranks; ranks 2 and 3 hold the same two shards again. In a step,
each shard group all-gathers and reduce-scatters among itself; then each rank's reduce-scattered gradient shard
is all-reduced with the rank that holds the same shard in the other row (a column, a *replicate group*):
``_fsdp_collectives.py: foreach_reduce``, its ``all_reduce_group``, "not ``None`` iff HSDP".

``tour_program`` trains three copies of the seeded model in one start of 4 ranks: HSDP on ``(2, 2)``, 1-D FSDP2
on all 4 ranks, and DDP (whose all-reduce goes through torch's ``allreduce_hook`` so that ``hsdp_traffic.grouped``
sees it); each records its first step's collectives by group and what a rank holds after training. Run on gloo
with torch 2.8.0, 2.13 and 2.14.1: the same placements, groups, shapes and collectives on each, and weights within
``ATOL`` of one-device Adam.
"""

import contextlib
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .. import ranks
from ..ddp.per_rank import wrap
from ..examples import regression_loss
from ..memory.accounting import state_tensors
from ..ranks.launcher import device
from . import fsdp2
from .hsdp_traffic import Call, grouped, per_dimension

WIDTHS = (8, 16, 16, 4)  # the course's model with 16 hidden units: every row count splits evenly over 2 and 4
WORLD_SIZE = 4
MESH = (2, 2)  # (replicate, shard)
DIM_NAMES = ("replicate", "shard")
STEPS = 3
KINDS = ("DDP", "FSDP2", "HSDP")  # the three ways of the tour: replicate all, shard all, both
# Measured after 3 steps: torch 2.13 and 2.14.1 end within 3e-8 of one-device Adam, torch 2.8.0 up to 6e-6 (FSDP2
# and HSDP alike; its gradient average rounds otherwise, and Adam, which divides by each entry's running RMS,
# magnifies that where a gradient is near zero). ``first_difference``'s own atol, 1e-6, would fail torch 2.8.
ATOL = 1e-5


def hsdp_mesh(replicate: int = MESH[0], shard: int = MESH[1]) -> DeviceMesh:
    """``init_device_mesh`` of ``(replicate, shard)`` ranks on this rank's device type, its dims named."""
    return init_device_mesh(device().type, (replicate, shard), mesh_dim_names=DIM_NAMES)


def rows_held(parameter: torch.Tensor) -> tuple[int, int]:
    """``(first, end)``: which rows of the full parameter this rank's shard holds, found by comparing the shard
    with the full tensor (the weights are random: their rows differ). A collective: every rank calls it."""
    full, mine = parameter.full_tensor(), fsdp2.local(parameter)
    for first in range(full.shape[0] - mine.shape[0] + 1):
        if torch.equal(full[first:first + mine.shape[0]], mine):
            return first, first + mine.shape[0]
    raise ValueError("this rank's shard is no block of consecutive rows of the full parameter.")


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> list[Call]:
    """Train one step per batch; the first step's collectives, with their groups."""
    calls: list[Call] = []
    for step, (x, y) in enumerate(batches):
        with grouped() if step == 0 else contextlib.nullcontext() as seen:
            optimizer.zero_grad()
            regression_loss(model(x), y).backward()
            optimizer.step()
        calls = seen if step == 0 else calls
    return calls


def _held(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds after training: its parameters, gradients and Adam's state (shards, or all)."""
    return {"parameters": fsdp2.local_bytes(model.parameters()),
            "gradients": fsdp2.local_bytes(p.grad for p in model.parameters()),
            "optimizer state": fsdp2.local_bytes(state_tensors(optimizer))}


def _report(model: nn.Module, optimizer: torch.optim.Optimizer, calls: list[Call], groups: dict) -> dict:
    return {"parameters": [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in model.parameters()],
            "traffic": per_dimension(calls, groups), "groups": groups, "bytes": _held(model, optimizer)}


def hsdp_program(model: nn.Module, batches: list, lr: float) -> dict:
    """HSDP on the ``MESH``: the full parameters, the first weight's placements, local shape and rows held, this
    rank's place on the mesh and its two groups, the first step's traffic per dimension, the bytes held."""
    mesh = hsdp_mesh()
    fsdp2.shard_model(model, mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    calls = _train(model, optimizer, batches)
    groups = {name: tuple(dist.get_process_group_ranks(mesh.get_group(name))) for name in DIM_NAMES}
    first = fsdp2.linear_layers(model)[0].weight
    return {**_report(model, optimizer, calls, groups), "placements": str(first.placements),
            "local": tuple(fsdp2.local(first).shape), "rows": rows_held(first),
            "coordinate": tuple(mesh.get_coordinate())}


def fsdp2_program(model: nn.Module, batches: list, lr: float) -> dict:
    """1-D FSDP2 on every rank (lesson 21): the same report, one group of all the ranks."""
    fsdp2.shard_model(model, fsdp2.mesh_of_all_ranks())
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    calls = _train(model, optimizer, batches)
    return _report(model, optimizer, calls, {"all ranks": tuple(range(dist.get_world_size()))})


def ddp_program(model: nn.Module, batches: list, lr: float) -> dict:
    """DDP with Adam: its bucket all-reduce through ``allreduce_hook`` (the same mean as DDP's own reducer,
    called from Python, where ``grouped`` records it), the same report."""
    wrapped = wrap(model, device())
    wrapped.register_comm_hook(None, allreduce_hook)
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=lr)
    calls = _train(wrapped, optimizer, batches)
    return _report(model, optimizer, calls, {"all ranks": tuple(range(dist.get_world_size()))})


def tour_program(model: nn.Module, batches: list, lr: float) -> dict:
    """HSDP, FSDP2 and DDP on copies of ``model``: HSDP's report, with the other two under their names."""
    untouched = copy.deepcopy(model)
    others = {"FSDP2": fsdp2_program(copy.deepcopy(untouched), batches, lr),
              "DDP": ddp_program(copy.deepcopy(untouched), batches, lr)}
    return {**hsdp_program(model, batches, lr), **others}


def tour(world_size: int = WORLD_SIZE, steps: int = STEPS) -> list[dict]:
    """``tour_program`` on 4 ranks, ``steps`` steps of the course's data, the model of ``WIDTHS``; per rank."""
    return ranks.train_on_ranks(tour_program, world_size, steps=steps, widths=WIDTHS)


def runs(results: list[dict], kind: str) -> list[dict]:
    """One kind's results on every rank (``"HSDP"`` is the top level), as ``ranks.first_difference`` reads them."""
    return results if kind == "HSDP" else [result[kind] for result in results]


def one_device(steps: int = STEPS) -> list[torch.Tensor]:
    """The oracle, one-device Adam on the whole batch, on this lesson's model."""
    return ranks.one_device(steps=steps, widths=WIDTHS)


def difference(runs: list[dict], expected: list[torch.Tensor] | None = None) -> str | None:
    """``ranks.first_difference`` of ``runs`` (per rank, a dict with ``parameters``) from ``expected`` (by default
    ``one_device()``), within a relative 1e-5 and an absolute ``ATOL``."""
    return ranks.first_difference(runs, one_device() if expected is None else expected, widths=WIDTHS, atol=ATOL)
