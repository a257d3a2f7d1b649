"""Restart every rank when one dies, as ``torchrun --max-restarts N`` does, with the course's launcher.

``torchrun --max-restarts N`` runs an agent beside the workers (``torch/distributed/elastic/agent/server/api.py:
SimpleElasticAgent._invoke_run``). It watches them; when one fails, it stops **all** the others, whatever they were
doing, and starts the whole group again, a new rendezvous and all, at most ``N`` times. The workers of attempt
``k`` find ``k`` in ``TORCHELASTIC_RESTART_COUNT`` and ``N`` in ``TORCHELASTIC_MAX_RESTARTS``. Nothing of a dead
attempt survives but what it wrote to disk: a restarted worker starts from ``main()``, and only a snapshot it
reads lets it resume where the group was.

``with_restarts(worker, world_size, args, max_restarts)`` does the same with ``dpcourse.ranks.launch``: attempt
``k`` is one ``launch``, on a fresh port, whose ranks see torchrun's variables (``RANK``, ``WORLD_SIZE``,
``MASTER_PORT``...) and the two above; a ``RankError`` (a rank raised, exited, or was killed) ends it, ``launch``
stops the other ranks, and attempt ``k + 1`` starts, until one succeeds or ``max_restarts`` restarts are spent.
It starts in a second instead of torchrun's several, and never fails to rendezvous because a port of the last
attempt is still taken (the flakiness ``tests/test_resume.py`` measures under torchrun).
"""

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..ranks import RankError, launch

RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
MAX_RESTARTS = "TORCHELASTIC_MAX_RESTARTS"


@dataclasses.dataclass
class Attempt:
    """One start of all the ranks: its ``number`` (0 first), and either its ``results`` (by rank) or the
    ``failure`` that ended it, with the rank that failed first (``failed_rank``) and every rank's ``pids``."""

    number: int
    results: list[Any] | None = None
    failure: str = ""
    failed_rank: int | None = None
    pids: list[int] = dataclasses.field(default_factory=list)


class OutOfRestarts(RuntimeError):
    """Every attempt failed: ``attempts`` says how each one ended."""

    def __init__(self, message: str, attempts: list[Attempt]) -> None:
        super().__init__(message)
        self.attempts = attempts


def attempt_number() -> int:
    """In a rank: which attempt this is, 0 for the first, from torchrun's ``TORCHELASTIC_RESTART_COUNT``."""
    return int(os.environ.get(RESTART_COUNT, "0"))


def _as_attempt(number: int, max_restarts: int, worker: Callable[..., Any], *args: Any) -> Any:
    """What each rank runs: torchrun's two restart variables set, then ``worker(*args)``."""
    os.environ[RESTART_COUNT] = str(number)
    os.environ[MAX_RESTARTS] = str(max_restarts)
    return worker(*args)


def with_restarts(worker: Callable[..., Any], world_size: int = 2, args: Sequence[Any] = (),
                  max_restarts: int = 1, timeout: float | None = 60.0) -> list[Attempt]:
    """Run ``worker(*args)`` on ``world_size`` ranks; when a rank fails, stop them all and start them all again, at
    most ``max_restarts`` times. Returns every attempt, the last one with the results.

    Raises ``ValueError`` for a bad ``max_restarts``; ``OutOfRestarts`` when the last attempt failed too (its
    message names each attempt's cause); and ``TimeoutError`` when an attempt's ranks wait past ``timeout``
    seconds, a hang, which torchrun's agent would not see either: a restart is for ranks that end.
    """
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts is how many times the ranks may be started again, a whole number >= 0 "
                         f"(torchrun's --max-restarts); got {max_restarts!r}.")
    attempts = []
    for number in range(max_restarts + 1):
        try:
            results = launch(_as_attempt, world_size, (number, max_restarts, worker, *args), timeout=timeout)
        except RankError as failure:
            attempts.append(Attempt(number, failure=str(failure), failed_rank=failure.rank, pids=failure.pids))
            continue
        attempts.append(Attempt(number, results=results))
        return attempts
    causes = "\n".join(f"attempt {a.number}: {a.failure.splitlines()[0]}" for a in attempts)
    raise OutOfRestarts(f"all {len(attempts)} attempts failed ({max_restarts} restarts allowed):\n{causes}", attempts)
