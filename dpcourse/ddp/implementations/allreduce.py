"""Two all-reduces written with point-to-point messages: through one rank, and around a ring.

Both sum ``tensor`` over the ranks of ``group`` in place, as ``dist.all_reduce(tensor, group=group)`` does.
They are what lesson 13 measures against each other (``compare``); the learner writes both too.

* ``reduce_then_broadcast``: every rank sends its tensor to rank 0, which adds them up and sends the sum
  back. Rank 0 receives and sends ``(N - 1) * S`` bytes for a tensor of ``S`` bytes; the others ``S`` each.
  It is DataParallel's pattern: gradients are added onto device 0 (reduce-add), and the parameters are
  copied out from device 0 (replicate).
* ``ring_all_reduce``: the tensor is cut into ``N`` pieces and every rank talks only to its neighbours.
  In ``N - 1`` steps of *reduce-scatter* each rank passes one piece to the right and adds the piece coming
  from the left; then every rank holds one finished piece. In ``N - 1`` steps of *all-gather* the finished
  pieces go round. Each rank sends ``2 (N - 1)`` pieces of ``S / N`` bytes: ``2 (N - 1) / N * S``, less than
  ``2 S`` however many ranks there are. Lesson 10's exercise simulates it on a list; here it runs on ranks.

The sends are ``dist.isend``: a blocking ``dist.send`` on gloo returns only once the other rank has posted a
matching receive, so if every rank sent first, every rank would wait (lesson 13 shows it).
"""

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup


def exchange(outgoing: torch.Tensor, incoming: torch.Tensor, right: int, left: int,
             group: ProcessGroup | None) -> None:
    """Send ``outgoing`` to the rank on the right while receiving ``incoming`` from the one on the left."""
    request = dist.isend(outgoing, group=group, group_dst=right)
    dist.recv(incoming, group=group, group_src=left)
    request.wait()


def ring_all_reduce(tensor: torch.Tensor, group: ProcessGroup | None = None) -> None:
    """Sum a contiguous ``tensor`` over the ranks of ``group`` in place, around a ring (module docstring)."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    right, left = (rank + 1) % n, (rank - 1) % n
    pieces = tensor.view(-1).tensor_split(n)  # views: writing into a piece writes into the tensor
    for step in range(n - 1):  # reduce-scatter: afterwards piece (rank + 1) % n here is the full sum
        arriving = pieces[(rank - step - 1) % n]
        incoming = torch.empty_like(arriving)
        exchange(pieces[(rank - step) % n], incoming, right, left, group)
        arriving += incoming
    for step in range(n - 1):  # all-gather: pass the finished pieces on, overwriting the partial sums
        exchange(pieces[(rank + 1 - step) % n], pieces[(rank - step) % n], right, left, group)


def reduce_then_broadcast(tensor: torch.Tensor, group: ProcessGroup | None = None) -> None:
    """Sum ``tensor`` over the ranks of ``group`` in place: everything to rank 0, added there, sent back."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    if rank != 0:
        dist.send(tensor, group=group, group_dst=0)
        dist.recv(tensor, group=group, group_src=0)
        return
    incoming = torch.empty_like(tensor)
    for source in range(1, n):
        dist.recv(incoming, group=group, group_src=source)
        tensor += incoming
    requests = [dist.isend(tensor, group=group, group_dst=destination) for destination in range(1, n)]
    for request in requests:
        request.wait()
