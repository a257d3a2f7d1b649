"""From every rank's record of collectives to the rank and the call that diverged: the oracle of lesson 22.

A record is what one rank called, in order, one ``(op, shape)`` per collective: what the Flight Recorder logs
(``hang_tools.flight_record``), e.g. ``[("all_reduce", (4,)), ("broadcast", (4,))]``.

``first_divergence(records)`` compares the ranks call by call. At the first index where they do not all agree
(a rank whose record ended counts as having called nothing there), the call most ranks made is the norm, and
the ranks that made another one (or none) diverged. A tie goes to the call of the lowest rank among them, so
with two ranks rank 0 is the reference. What a record cannot show: a skipped call that is the same as the next
one. The ranks then agree until one record ends, so the divergence is found there, later than the skip.
"""

import random
from collections import Counter
from itertools import zip_longest

Call = tuple[str, tuple[int, ...]]
OPS = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")


def _calls(record: list) -> list[Call]:
    """A record's calls as ``(op, shape)`` tuples, however they were spelled (``["all_reduce", [4]]`` too)."""
    return [(op, tuple(shape)) for op, shape in record]


def first_divergence(records: list[list[Call]]) -> tuple[int, list[int]] | None:
    """``(index, ranks)``: the first call where the ranks disagree and the ranks that differ from the norm there;
    ``None`` when every rank called the same collectives."""
    for index, calls in enumerate(zip_longest(*map(_calls, records))):  # None where a record has ended
        if len(set(calls)) == 1:
            continue
        counts = Counter(calls)
        most = max(counts.values())
        norm = next(call for call in calls if counts[call] == most)  # the lowest rank's, among the most common
        return index, [rank for rank, call in enumerate(calls) if call != norm]
    return None


def planted(seed: int, fault: str) -> tuple[list[list[Call]], tuple[int, list[int]] | None]:
    """Records of 2 to 4 ranks running one random program, one rank going wrong once as ``fault`` says
    ("skip", "other_op", "other_size" or "stop": its record ends early); with the answer."""
    generator = random.Random(seed)
    program = [(generator.choice(OPS), (generator.choice((4, 8, 16)),)) for _ in range(generator.randint(3, 8))]
    world_size = generator.randint(2, 4)
    faulty, at = generator.randrange(world_size), generator.randrange(len(program))
    records = [list(program) for _ in range(world_size)]
    op, shape = program[at]
    if fault == "skip":
        del records[faulty][at]
    elif fault == "other_op":
        records[faulty][at] = (generator.choice([other for other in OPS if other != op]), shape)
    elif fault == "other_size":
        records[faulty][at] = (op, (shape[0] + generator.choice((1, 4, -2)),))
    elif fault == "stop":
        del records[faulty][at:]
    else:
        raise ValueError(f"fault is one of skip, other_op, other_size, stop; got {fault!r}.")
    return records, first_divergence(records)
