"""Reading the clocks of ``stragglers.observe``: the phases of each rank's steps, and the rank that arrives last.

Under DDP every rank's step ends when the gradient all-reduce ends, and that waits for the last rank to arrive:
a delay on one rank lengthens every rank's step, and the others spend it waiting inside ``loss.backward()``
(pytorch/pytorch#71303: "the allreduce-based gradient synchronization has to wait for the slowest process at
every iteration"). So durations hide the slow rank; *arrival times* at a collective name it:

    arrivals[step][rank]            the clock of each rank as it entered the step's collective
    find_straggler(arrivals)        the rank that kept the others waiting longest, summed over the steps
    waited(arrivals)                per rank, the seconds it spent waiting for the last one to arrive

``arrivals`` is what ``dist.all_gather_object`` gives on every rank when each passes its own reading, one list
per step. Readings must come from one clock: on one machine every process's ``time.perf_counter()`` is.
"""

import math
import statistics
from collections.abc import Sequence

# What each phase spans in a step record of ``stragglers`` (from, to); "gather" only in the probed part.
PHASES = {
    "step": ("start", "end"),
    "forward": ("start", "forward"),
    "gather": ("forward", "gathered"),
    "backward": ("forward", "backward"),
    "waiting": ("arrived", "left"),
    "optimizer": ("backward", "end"),
}


def phase(record: dict[str, float], name: str) -> float:
    """Seconds that ``name`` (a key of ``PHASES``) took in one step record; the probed part's ``backward``
    starts when the probe returned."""
    first, last = PHASES[name]
    if name == "backward" and "gathered" in record:
        first = "gathered"
    return record[last] - record[first]


def median(records: Sequence[dict[str, float]], name: str) -> float:
    """The median over the steps of one rank's ``name`` phase, in seconds: one slow step on a busy machine does
    not move it."""
    return statistics.median(phase(record, name) for record in records)


def arrivals(results: Sequence[dict], part: str, key: str = "arrived") -> list[list[float]]:
    """``arrivals[step][rank]``: each rank's clock at ``key`` (its arrival at DDP's all-reduce) in each step of
    ``part``, as a probe gathered on every rank would hold it."""
    steps = len(results[0][part])
    return [[result[part][step][key] for result in results] for step in range(steps)]


def checked(arrivals: object) -> list[list[float]]:
    """``arrivals`` as lists of floats; ``ValueError`` saying what is wrong with it otherwise."""
    shape = "a list with one entry per step, each a list of every rank's clock reading (arrivals[step][rank])"
    if isinstance(arrivals, str | bytes) or not isinstance(arrivals, Sequence) or not arrivals:
        raise ValueError(f"arrivals must be {shape}; got {arrivals!r}.")
    rows = []
    for step, row in enumerate(arrivals):
        if isinstance(row, str | bytes) or not isinstance(row, Sequence) or not row:
            raise ValueError(f"arrivals[{step}] is {row!r}: each step must hold every rank's reading, {shape}.")
        if len(row) != len(arrivals[0]):
            raise ValueError(f"arrivals[{step}] has {len(row)} readings and arrivals[0] {len(arrivals[0])}: every "
                             "step needs one reading per rank, as all_gather_object gives.")
        if not all(isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) for t in row):
            raise ValueError(f"arrivals[{step}] = {row!r}: every reading must be a finite number of seconds.")
        rows.append([float(t) for t in row])
    return rows


def waited(arrivals: Sequence[Sequence[float]]) -> list[float]:
    """Per rank, the seconds it waited at the collectives: in each step, from its arrival to the last one's."""
    rows = checked(arrivals)
    return [sum(max(row) - row[rank] for row in rows) for rank in range(len(rows[0]))]


def lateness(arrivals: Sequence[Sequence[float]]) -> list[float]:
    """Per rank, summed over the steps, how long after the first rank it arrived: what it cost the others."""
    rows = checked(arrivals)
    return [sum(row[rank] - min(row) for row in rows) for rank in range(len(rows[0]))]


def find_straggler(arrivals: Sequence[Sequence[float]]) -> int:
    """The rank whose lateness, summed over the steps, is the largest: the one the others waited for.

    Not the rank that is last most often (by a hair, on a quiet step), nor the last at one step: a rank slow
    only now and then costs its delay each time. Step durations cannot tell: under DDP they are all equal.
    """
    late = lateness(arrivals)
    return late.index(max(late))


def last_to_arrive(arrivals: Sequence[Sequence[float]]) -> list[int]:
    """The rank that arrived last, step by step."""
    return [row.index(max(row)) for row in checked(arrivals)]
