"""Point-to-point messages: every rank sends to its right neighbour and receives from its left one.

That is one step of a ring. Written with a blocking ``dist.send`` first on every rank, it never finishes on
gloo: ``send`` is ``isend`` followed by ``wait`` (``torch/distributed/distributed_c10d.py: send``), and the
wait returns only once the receiving rank has posted a matching ``recv``, which it never does, because it is
itself waiting in its own ``send``. Every rank waits for another: a deadlock. Starting the send with
``dist.isend``, then receiving, then waiting for the send, lets every rank reach its ``recv``.
"""

import torch
import torch.distributed as dist

from ...ranks.launcher import device, launch


def _pass_right(blocking: bool, numel: int) -> int:
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    outgoing = torch.full((numel,), rank, device=device())
    incoming = torch.empty_like(outgoing)
    if blocking:
        dist.send(outgoing, right)
        dist.recv(incoming, left)
    else:
        request = dist.isend(outgoing, right)
        dist.recv(incoming, left)
        request.wait()
    return int(incoming[0])


def pass_right(world_size: int = 3, blocking: bool = False, numel: int = 10, timeout: float = 10.0,
               backend: str | None = None) -> list[int]:
    """Each rank sends ``numel`` copies of its rank number to the right; returns what each one received.

    With ``blocking=True`` the ranks deadlock on gloo, and ``launch`` stops them after ``timeout`` seconds with
    a ``TimeoutError``. ``backend`` is ``launch``'s choice by default (gloo on CPUs).
    """
    return launch(_pass_right, world_size, (blocking, numel), backend=backend, timeout=timeout)
