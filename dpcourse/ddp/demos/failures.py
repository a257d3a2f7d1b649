"""What the parent sees when one rank fails: an exception naming the rank, and no process left behind.

``crash(how)`` starts the ranks, lets them meet in one ``all_reduce``, then makes one rank fail while the
others wait for it in a second ``all_reduce``:

* ``"raise"``: the rank raises ``ValueError``. ``launch`` raises ``RankError`` with that rank and its
  traceback; the waiting ranks' all-reduce fails too (the peer closed its connections), which the error
  lists as a consequence.
* ``"kill"``: the rank is killed with SIGKILL, as the out-of-memory killer would; no traceback exists,
  the error says which rank died and by which signal.
* ``"hang"``: the rank sleeps. Nobody fails; the others wait for it in their all-reduce, and ``launch``'s
  deadline (``timeout=``; the process group's own comes 30 s later) stops everything with a ``TimeoutError``
  that says where each rank waited.
"""

import os
import signal
import time

import torch
import torch.distributed as dist

from ...ranks.launcher import launch


def _crash(how: str, failing_rank: int) -> int:
    rank = dist.get_rank()
    together = torch.ones(1)
    dist.all_reduce(together)  # every rank is up and connected
    if rank == failing_rank:
        if how == "raise":
            raise ValueError(f"rank {rank} failed on purpose")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)
    dist.all_reduce(together)  # the other ranks wait here for the failing one
    return rank


def crash(how: str = "raise", rank: int = 1, world_size: int = 2, timeout: float = 60.0) -> list[int]:
    """Make ``rank`` fail (``"raise"``, ``"kill"`` or ``"hang"``); the error ``launch`` raises is the lesson."""
    if how not in ("raise", "kill", "hang"):
        raise ValueError(f"how must be 'raise', 'kill' or 'hang', not {how!r}.")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} does not exist among {world_size} ranks (0..{world_size - 1}).")
    return launch(_crash, world_size, (how, rank), timeout=timeout)
