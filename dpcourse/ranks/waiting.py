"""Where each rank is waiting: the collective or message it is inside, written down as it enters and leaves it.

A rank blocked in a collective sits in the backend's C++ code: nothing in Python runs there, so nobody can ask it
afterwards where it is. So while a rank runs its function, ``noted(path)`` wraps ``torch.distributed``'s
collectives, ``barrier`` and the blocking ``send``/``recv``: each call first writes one line to the rank's own
file (``{"inside": "all_gather", "call": 3}``) and, when it returns, overwrites it (``{"inside": null, ...}``).
When the ranks overrun their deadline, the launcher reads the files (``read``) and says which rank waited in what
(``describe``): the usual cause is a rank that skipped a collective another rank called.

Two small writes per call, to a file the rank keeps open: microseconds next to any collective.
"""

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import torch.distributed as dist
from torch.distributed import distributed_c10d

from .traffic import swapped

# The calls a rank can wait in for another rank: the collectives, the barrier, a blocking send or recv.
WAITS = (
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter",
    "broadcast_object_list", "barrier", "send", "recv",
)
RETURNED = "its function had returned; waiting in the last barrier for the others"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@contextlib.contextmanager
def noted(path: Path) -> Iterator[None]:
    """Inside the block, every call of the functions in ``WAITS`` is written to ``path`` as it starts and ends."""
    file = open(path, "w")  # noqa: SIM115 (kept open for the whole block, closed in finally)
    calls = [0]
    inside = [0]  # all_gather_into_tensor may call all_gather_single: note the call the program made

    def write(state: dict) -> None:
        file.seek(0)
        file.write(json.dumps(state))
        file.truncate()
        file.flush()

    def noting(name, function):
        def call(*args, **kwargs):
            if inside[0]:
                return function(*args, **kwargs)
            calls[0] += 1
            write({"inside": name, "call": calls[0]})
            inside[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                inside[0] -= 1
                write({"inside": None, "calls": calls[0]})

        return call

    present = [name for name in WAITS if hasattr(dist, name) and hasattr(distributed_c10d, name)]
    write({"inside": None, "calls": 0})
    try:
        with swapped({name: noting(name, getattr(dist, name)) for name in present}):
            yield
    finally:
        file.close()


def mark_returned(path: Path) -> None:
    """The rank's function returned: what it waits in from now on is the launcher's last barrier."""
    path.write_text(json.dumps({"inside": None, "returned": True}))


def read(path: Path) -> dict | None:
    """What ``noted`` last wrote to ``path``; ``None`` if the rank never got that far."""
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


def describe(rank: int, state: dict | None) -> str:
    """One rank's place, as ``rank 0 was waiting in all_gather (its 2nd call that can wait)``."""
    if state is None:
        return f"rank {rank} had not started its function"
    if state.get("returned"):
        return f"rank {rank}: {RETURNED}"
    if state.get("inside"):
        return f"rank {rank} was waiting in {state['inside']} (its {_ordinal(state['call'])} collective call)"
    return f"rank {rank} was running its own code, not in a collective ({state.get('calls', 0)} called so far)"


def explain(states: dict[int, dict | None]) -> str:
    """Every rank's place, and what that usually means."""
    where = "; ".join(describe(rank, state) for rank, state in states.items())
    if any(state and state.get("inside") for state in states.values()):
        hint = ("A rank waits in a collective until every rank of the group calls it: every rank must call the same "
                "collectives in the same order, with tensors of the same size (gloo's all_gather takes pieces of one "
                "size: pad uneven shards), and every send needs a matching recv.")
    else:
        hint = ("No rank was inside a collective: each was still running its own code (a loop that never ends?). "
                "Pass a larger timeout= if the work really takes that long.")
    return f"{where}. {hint}"
