"""All-gather and reduce-scatter as rings of point-to-point messages: the two halves of lesson 13's ring all-reduce.

gloo runs ``dist.all_gather`` and ``dist.reduce_scatter`` inside the backend, where
``ranks.traffic.counted`` sees that they were called but not what they sent. Written with ``dist.isend`` and
``dist.recv``, as ``ddp.implementations.allreduce.ring_all_reduce`` is, every byte goes through the process group's
``send`` and ``recv``, and ``counted`` counts it. Both take one piece per rank, of one size, as the collectives do:

* ``all_gather(pieces, mine)``: afterwards ``pieces[r]`` holds rank ``r``'s ``mine`` on every rank. Each of the
  ``n - 1`` steps passes one piece to the right: every rank sends ``(n - 1)`` pieces.
* ``reduce_scatter(out, pieces)``: afterwards ``out`` holds the sum over the ranks of their ``pieces[rank]``.
  Each step passes one partial sum to the right and adds the one arriving from the left: ``(n - 1)`` pieces.

So a ring all-reduce, a reduce-scatter then an all-gather, sends ``2 (n - 1)`` pieces, and ZeRO-3's two
all-gathers and one reduce-scatter per layer send ``3 (n - 1)``: 1.5 times as many.

``ring_collectives()`` swaps them in for ``dist.all_gather`` and ``dist.reduce_scatter``, with lesson 13's ring for
``dist.all_reduce``, while a block runs: the ZeRO code keeps calling ``dist``, and the measurements count its bytes.
"""

import contextlib

import torch
import torch.distributed as dist

from ..ddp.implementations.allreduce import exchange, ring_all_reduce
from ..ranks.traffic import swapped


def all_gather(pieces: list[torch.Tensor], mine: torch.Tensor, async_op: bool = False) -> None:
    """Every rank's ``mine`` into ``pieces``, in rank order, around a ring; returns ``None`` (done, no work).

    ``async_op`` lets it stand in for ``dist.all_gather`` (ZeRO-3 asks to prefetch): the ring finishes before it
    returns, whatever is asked."""
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    pieces[rank].copy_(mine)
    for step in range(n - 1):  # pass on the piece that arrived last step: after n - 1 steps all have arrived
        exchange(pieces[(rank - step) % n], pieces[(rank - step - 1) % n], right, left, None)


def reduce_scatter(out: torch.Tensor, pieces: list[torch.Tensor]) -> None:
    """The sum over the ranks of their ``pieces[rank]`` into ``out``, around a ring; ``pieces`` are working space."""
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):  # lesson 13's reduce-scatter phase, one piece earlier: it ends on piece ``rank``
        arriving = pieces[(rank - step - 2) % n]
        incoming = torch.empty_like(arriving)
        exchange(pieces[(rank - step - 1) % n], incoming, right, left, None)
        arriving += incoming
    out.copy_(pieces[rank])


RINGS = {"all_reduce": ring_all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather}


def ring_collectives() -> contextlib.AbstractContextManager[None]:
    """``with ring_collectives():``, ``dist.all_reduce``, ``dist.reduce_scatter`` and ``dist.all_gather`` are the
    rings of ``RINGS``, written with ``dist.isend`` and ``dist.recv``: the same results, and ``traffic.counted``
    counts their bytes. A function that took ``dist.all_gather`` before the block keeps torch's."""
    return swapped(RINGS)
