"""The five collectives on real ranks: which rank holds what before and after each, and where it came from.

``collectives(world_size)`` starts the ranks once and runs, in every rank, on a tensor ``x`` of
``world_size`` pieces (one value each) where rank ``r``'s piece ``p`` is ``10 (r + 1) + p``:

=================  ===============================================  ==========================================
collective         call                                             afterwards
=================  ===============================================  ==========================================
broadcast          ``dist.broadcast(x, src=0)``                     every rank holds rank 0's ``x``
reduce             ``dist.reduce(x, dst=0)``                        rank 0 holds the sum; the others: undefined
all-reduce         ``dist.all_reduce(x)``                           every rank holds the sum
all-gather         ``dist.all_gather(pieces, x[rank])``             every rank holds every rank's own piece
reduce-scatter     ``dist.reduce_scatter(piece, list(x.chunk(n)))`` rank ``r`` holds piece ``r`` of the sum
=================  ===============================================  ==========================================

Each collective runs twice: on those values, and on a tensor holding ``2 ** rank`` everywhere. Summed, the
second gives every value's *contributors* as the bits of a number (``1 + 4 = 5``: ranks 0 and 2), which is
what the pictures colour a cell by (``dpcourse.viz.collective``).
"""

import dataclasses

import torch
import torch.distributed as dist

from ...ranks.launcher import device, launch

CALLS = {
    "broadcast": "dist.broadcast(x, src=0)",
    "reduce": "dist.reduce(x, dst=0)",
    "all_reduce": "dist.all_reduce(x)",
    "all_gather": "dist.all_gather(pieces, x[rank])",
    "reduce_scatter": "dist.reduce_scatter(piece, list(x.chunk(n)))",
}


def _placed(values: torch.Tensor, at: int, n: int) -> list[int | None]:
    """One value at position ``at`` of ``n`` and nothing elsewhere: a rank that holds only one piece."""
    return [int(values[0]) if p == at else None for p in range(n)]


def _run(name: str, x: torch.Tensor) -> tuple[list[int | None], list[int | None]]:
    """``x`` before and after collective ``name``, as the pieces this rank holds (``None``: none there)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    x = x.to(device())
    before, out = x.tolist(), x.clone()
    if name == "broadcast":
        dist.broadcast(out, src=0)
    elif name == "reduce":
        dist.reduce(out, dst=0)
    elif name == "all_reduce":
        dist.all_reduce(out)
    elif name == "all_gather":
        pieces = [torch.empty_like(x[:1]) for _ in range(n)]
        dist.all_gather(pieces, x[rank : rank + 1].clone())
        return _placed(x[rank : rank + 1], rank, n), torch.cat(pieces).tolist()
    elif name == "reduce_scatter":
        piece = torch.empty_like(x[:1])
        dist.reduce_scatter(piece, [p.clone() for p in x.chunk(n)])
        return before, _placed(piece, rank, n)
    return before, out.tolist()


def _collectives(names: list[str]) -> dict[str, dict[str, list]]:
    rank, n = dist.get_rank(), dist.get_world_size()
    values = torch.tensor([10 * (rank + 1) + piece for piece in range(n)])
    contributors = torch.full((n,), 1 << rank)
    results = {}
    for name in names:
        before, after = _run(name, values)
        before_from, after_from = _run(name, contributors)
        results[name] = {"before": before, "after": after, "before_from": before_from, "after_from": after_from}
    return results


@dataclasses.dataclass
class Moved:
    """One collective: per rank and piece, the value held before and after (``None``: no piece there), and
    the ranks whose inputs make it up. ``defined[r]``: whether rank r's result is defined by torch's docs."""

    name: str
    call: str
    before: list[list[int | None]]
    after: list[list[int | None]]
    before_from: list[list[tuple[int, ...]]]
    after_from: list[list[tuple[int, ...]]]
    defined: list[bool]

    def __str__(self) -> str:
        def shown(values: list[int | None]) -> str:
            return "[" + " ".join(f"{'-' if v is None else v:>3}" for v in values) + "]"

        lines = [f"{self.call}:"]
        for rank, (before, after) in enumerate(zip(self.before, self.after, strict=True)):
            note = "" if self.defined[rank] else "   (not defined: only dst receives the result)"
            lines.append(f"  rank {rank}  {shown(before)} -> {shown(after)}{note}")
        return "\n".join(lines)


def _ranks_of(masks: list[int | None]) -> list[tuple[int, ...]]:
    return [() if m is None else tuple(r for r in range(m.bit_length()) if m >> r & 1) for m in masks]


def collectives(world_size: int = 4, names: tuple[str, ...] = tuple(CALLS), backend: str | None = None
                ) -> dict[str, Moved]:
    """Run each collective in ``names`` on ``world_size`` ranks, in one launch; ``Moved`` records by name.

    ``backend`` is ``launch``'s choice by default (gloo on CPUs); what ``reduce`` leaves in the other ranks'
    tensors is the backend's own business, so a question about gloo asks for ``"gloo"``.
    """
    unknown = [name for name in names if name not in CALLS]
    if unknown:
        raise ValueError(f"Unknown collectives {unknown}; choose from {list(CALLS)}.")
    ranks = launch(_collectives, world_size, (list(names),), backend=backend)
    moved = {}
    for name in names:
        per_rank = [result[name] for result in ranks]
        moved[name] = Moved(
            name, CALLS[name], [r["before"] for r in per_rank], [r["after"] for r in per_rank],
            [_ranks_of(r["before_from"]) for r in per_rank], [_ranks_of(r["after_from"]) for r in per_rank],
            [name != "reduce" or rank == 0 for rank in range(world_size)])
    return moved
