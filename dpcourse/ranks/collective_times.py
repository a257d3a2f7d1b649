"""How long torch's all-reduce, all-gather and reduce-scatter take on this machine's ranks, by message size.

``measure(sizes, world_size)`` starts the ranks once and times every collective at every size, ``repeats`` times,
in turns (each round runs every size and collective once, so a burst of load elsewhere on the machine hits all of
them alike rather than one size). Before each call the ranks meet in a barrier, so the clock starts when all are
ready; a call's time is its slowest rank's (a collective is over when the last rank has its result). The median
over the rounds is the collective's time at that size: on a shared machine a round can be slowed by someone
else's work, and a median ignores the rounds that were.

The size is the whole tensor's bytes, as ``costmodel.alpha_beta`` counts it: the tensor all-reduced, the output
of an all-gather (every rank's piece), the input of a reduce-scatter. ``costmodel.alpha_beta.fit`` fits α and β.
What gloo runs is its own choice of algorithm (``ProcessGroupGloo``); the α-β form is the ring's, and the fit
says how well it describes gloo's.
"""

import dataclasses
import statistics
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist

from .launcher import device, launch

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
KIB, MIB = 2**10, 2**20
SIZES = (4 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB)
_LATEST: list = []  # the timings this process measured last: lesson 25's exercise reuses them


@dataclasses.dataclass(frozen=True)
class Timing:
    """One collective at one size: ``seconds``, the median over ``rounds`` (each its slowest rank's time)."""

    collective: str
    world_size: int
    n_bytes: int
    seconds: float
    rounds: tuple[float, ...]


def _call(collective: str, whole: torch.Tensor, piece: torch.Tensor) -> None:
    # The names every supported torch has (2.8 has no all_gather_single, which 2.13's all_gather_into_tensor calls).
    if collective == "all_reduce":
        dist.all_reduce(whole)
    elif collective == "all_gather":
        dist.all_gather_into_tensor(whole, piece)
    else:
        dist.reduce_scatter_tensor(piece, whole)


def time_on_this_rank(sizes: Sequence[int], collectives: Sequence[str], repeats: int) -> dict:
    """Run on every rank: ``{(collective, bytes): [seconds per round]}`` as this rank saw them; one untimed call of
    each first (gloo sets up its buffers and connections on first use)."""
    world = dist.get_world_size()
    tensors = {}
    for n_bytes in sizes:
        numel = -(-n_bytes // (4 * world)) * world  # float32, a whole piece per rank
        tensors[n_bytes] = (torch.ones(numel, device=device()), torch.ones(numel // world, device=device()))
    seen = {(c, n): [] for c in collectives for n in sizes}  # by collective, then size: the order of the results
    for repeat in range(repeats + 1):
        for n_bytes in sizes:
            for collective in collectives:
                dist.barrier()
                started = time.perf_counter()
                _call(collective, *tensors[n_bytes])
                if repeat:  # round 0 warms up
                    seen[collective, n_bytes].append(time.perf_counter() - started)
    return seen


def measure(sizes: Sequence[int] = SIZES, world_size: int = 2, collectives: Sequence[str] = COLLECTIVES,
            repeats: int = 7, timeout: float = 60.0) -> list[Timing]:
    """Every collective at every size on ``world_size`` new ranks: one ``Timing`` each, in the order given."""
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise ValueError(f"collectives are some of {list(COLLECTIVES)}; {unknown} is not.")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats is how many timed rounds to run, a whole number >= 1; got {repeats!r}.")
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 4 for n in sizes):
        raise ValueError(f"sizes are numbers of bytes, whole numbers >= 4 (one float32); got {list(sizes)!r}.")
    per_rank = launch(time_on_this_rank, world_size, (list(sizes), list(collectives), repeats), timeout=timeout)
    return from_ranks(per_rank)


def from_ranks(per_rank: Sequence[dict]) -> list[Timing]:
    """One ``Timing`` per collective and size from every rank's ``time_on_this_rank``: per round the slowest rank's
    time, then the median over the rounds."""
    timings = []
    for collective, n_bytes in per_rank[0]:
        rounds = tuple(max(times) for times in zip(*(rank[collective, n_bytes] for rank in per_rank), strict=True))
        timings.append(Timing(collective, len(per_rank), n_bytes, statistics.median(rounds), rounds))
    _LATEST[:] = timings
    return timings


def latest() -> list[Timing]:
    """The timings this process measured last (``[]`` before any): what a check may reuse rather than start the
    ranks again."""
    return list(_LATEST)


def of(timings: Sequence[Timing], collective: str) -> tuple[list[int], list[float]]:
    """``(sizes, seconds)`` of one collective, by size: what ``costmodel.alpha_beta.fit`` takes."""
    chosen = sorted((t.n_bytes, t.seconds) for t in timings if t.collective == collective)
    return [n for n, _ in chosen], [s for _, s in chosen]


def at(timings: Sequence[Timing], collective: str, n_bytes: int) -> float:
    """The measured seconds of ``collective`` at ``n_bytes``."""
    return next(t.seconds for t in timings if t.collective == collective and t.n_bytes == n_bytes)
