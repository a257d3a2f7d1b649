"""Which process group each collective ran on, and the bytes a rank sends in each dimension of a device mesh.

    with grouped() as calls:
        loss.backward()          # FSDP2 on a 2-D mesh: collectives on two kinds of group
    calls                        # [Call("all_gather_single", (0, 1), 512), Call("all_reduce", (0, 2), 256)]
    per_dimension(calls, {"shard": (0, 1), "replicate": (0, 2)})

``ranks.traffic.counted`` records each collective's name and size; ``grouped`` also records the ranks of the
process group it ran on (``dist.get_process_group_ranks``), the thing a 2-D mesh changes. The size is
``counted``'s: the bytes of the largest tensor argument, so the full output of an all-gather, the full input of a
reduce-scatter, the tensor of an all-reduce.

What a rank *sends* for a collective of ``size`` bytes on ``n`` ranks, by the ring algorithms of lesson 13
(``sharded.rings``): an all-gather or a reduce-scatter passes ``n - 1`` pieces of ``size / n``, an all-reduce
twice that. ``sent_by_ring`` is that rule; ``traffic_per_rank`` applies it to FSDP2's step on an ``(R, S)`` mesh.
"""

import contextlib
import dataclasses
from collections.abc import Iterator

import torch.distributed as dist

from ..ranks.traffic import COLLECTIVES, outermost_calls, swapped

SHORT = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce"}


@dataclasses.dataclass(frozen=True)
class Call:
    """One collective: its function's name, the global ranks of its group, and its size in bytes."""

    name: str
    ranks: tuple[int, ...]
    size: int

    @property
    def kind(self) -> str:
        """``all-gather``, ``reduce-scatter`` or ``all-reduce``: the name without torch's version-dependent suffix
        (torch 2.8 calls ``all_gather_into_tensor``, torch 2.13 ``all_gather_single``)."""
        return next((short for prefix, short in SHORT.items() if self.name.startswith(prefix)), self.name)


def _group_ranks(args: tuple, kwargs: dict) -> tuple[int, ...]:
    group = kwargs.get("group") or next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
    return tuple(dist.get_process_group_ranks(group or dist.group.WORLD))


def _size(args: tuple, kwargs: dict) -> int:
    tensors = [a for a in (*args, *kwargs.values()) if hasattr(a, "element_size")]
    tensors += [t for a in (*args, *kwargs.values()) if isinstance(a, list) for t in a if hasattr(t, "element_size")]
    return max((t.numel() * t.element_size() for t in tensors), default=0)


@contextlib.contextmanager
def grouped() -> Iterator[list[Call]]:
    """Record every collective this process calls inside the block, with its group's ranks and its size.

    A collective that calls another (torch 2.8's ``all_gather_into_tensor`` and its kin) is recorded once, as
    the call the program made."""
    calls: list[Call] = []
    recording = outermost_calls(lambda name, args, kwargs: calls.append(
        Call(name, _group_ranks(args, kwargs), _size(args, kwargs))))

    with swapped({name: recording(name, getattr(dist, name)) for name in COLLECTIVES if hasattr(dist, name)}):
        yield calls


def sent_by_ring(kind: str, size: float, n: int) -> float:
    """Bytes one rank sends in a ring ``kind`` of ``size`` bytes on ``n`` ranks: ``(n - 1) / n * size`` for an
    all-gather (``size`` its full output) or a reduce-scatter (its full input), twice that for an all-reduce."""
    factor = {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 2}[kind]
    return factor * (n - 1) / n * size


def per_dimension(calls: list[Call], groups: dict[str, tuple[int, ...]]) -> dict[str, dict]:
    """Per named group (``{"shard": (0, 1), ...}``, this rank's): how many of each kind of collective ran on it,
    their total size, and the bytes this rank sent in them by the ring rule. A call on no named group raises."""
    summary = {name: {"calls": {}, "size": 0, "sent": 0.0} for name in groups}
    for call in calls:
        name = next((n for n, ranks in groups.items() if tuple(ranks) == call.ranks), None)
        if name is None:
            raise ValueError(f"{call.name} ran on ranks {call.ranks}, none of the groups {groups}.")
        entry = summary[name]
        entry["calls"][call.kind] = entry["calls"].get(call.kind, 0) + 1
        entry["size"] += call.size
        entry["sent"] += sent_by_ring(call.kind, call.size, len(call.ranks))
    return summary


def traffic_per_rank(parameter_bytes: float, replicate: int, shard: int) -> dict[str, float]:
    """Bytes one rank sends in one training step of FSDP2 on a ``(replicate, shard)`` mesh, per dimension, every
    Linear its own unit, ``reshard_after_forward=True``, every row count divisible by ``shard``:

    * ``shard``: each unit all-gathered twice (forward, backward) and its gradients reduce-scattered once, on
      ``shard`` ranks: ``3 (S - 1) / S * P``;
    * ``replicate``: each rank's gradient shard, ``P / S`` bytes, all-reduced on ``replicate`` ranks:
      ``2 (R - 1) / R * P / S``.

    ``(1, n)`` is FSDP2 (ZeRO-3) and ``(n, 1)`` is DDP: the all-reduce of every gradient."""
    return {"shard": sent_by_ring("all-gather", 2 * parameter_bytes, shard)
            + sent_by_ring("reduce-scatter", parameter_bytes, shard),
            "replicate": sent_by_ring("all-reduce", parameter_bytes / shard, replicate)}


def mesh_groups(world_size: int, shard: int) -> dict[str, list[list[int]]]:
    """The ranks of every shard group and every replicate group of ``init_device_mesh(..., (world_size // shard,
    shard))``. The mesh is ``torch.arange(world_size).view(R, S)`` (``torch/distributed/device_mesh.py:
    init_device_mesh``, row-major): a shard group is a row, ``S`` consecutive ranks; a replicate group a column,
    ranks ``S`` apart."""
    if shard < 1 or world_size % shard:
        raise ValueError(f"shard={shard} must divide world_size={world_size}: the mesh is (world_size // shard, "
                         "shard).")
    rows = world_size // shard
    return {"shard": [list(range(row * shard, (row + 1) * shard)) for row in range(rows)],
            "replicate": [list(range(column, world_size, shard)) for column in range(shard)]}
