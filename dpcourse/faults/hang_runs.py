"""The notebook's side of lesson 22: start the ranks with a fault, bring back what each rank saw, print it.

    run = hang_runs.run(("skip", "other_op"), detail=("skip",))   # one start of 2 ranks, three faults at once
    run.outcomes[0]["skip DETAIL"]["error"]       # what rank 0 raised running "skip" under DETAIL (hangs.Outcome)
    print(hang_runs.table(run, "skip"))

A fault can kill a rank outright: gloo aborts a process (SIGABRT) whose receive gets more bytes than its
tensor holds. Then nothing comes back from the ranks but the launcher's ``RankError`` and what the killed rank
wrote to stderr before dying; ``Run.killed`` and ``Run.logs`` hold those.
"""

import dataclasses
import re
import tempfile
from pathlib import Path

from ..ranks import RankError, launch
from . import hangs

LAUNCH_TIMEOUT = 30.0  # seconds; each fault ends by the group's 2-s timeout, well before
_GLOO_LOG = re.compile(r"(Received data size doesn't match expected size|Ranks? [\d, ]+ failed to pass "
                       r"monitoredBarrier in \d+ ms)")


@dataclasses.dataclass
class Run:
    """One start of the ranks: ``outcomes[rank][fault]`` (``hangs.Outcome`` as a dict), or ``killed``: the rank
    that died and how (``"killed by SIGABRT"``), with nothing else back. ``logs[rank]``: the stable lines that
    rank's C++ code wrote to stderr (``log_lines``)."""

    outcomes: list[dict[str, dict]]
    logs: list[list[str]]
    killed: tuple[int, str] | None = None


def log_lines(text: str) -> list[str]:
    """The lines of a rank's stderr worth showing, without their times and paths: gloo's abort reason, DETAIL's
    monitored-barrier report."""
    return list(dict.fromkeys(match.group(1) for match in _GLOO_LOG.finditer(text)))


def run(faults: tuple[str, ...], detail: tuple[str, ...] = (), world_size: int = 2,
        stacks_after: float | None = None, timeout: float = hangs.GROUP_TIMEOUT) -> Run:
    """Start ``world_size`` ranks once and run there, all at once, each of ``faults`` (``hangs.FAULTS``) and each
    of ``detail`` under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``; ``Run.outcomes[rank][hangs.key(fault, detail)]``."""
    with tempfile.TemporaryDirectory(prefix="dpcourse-hangs-") as logs:
        killed = None
        try:
            outcomes = launch(hangs.observe, world_size, (tuple(faults), tuple(detail), logs, timeout, stacks_after),
                              timeout=LAUNCH_TIMEOUT)
        except RankError as failure:
            how = re.search(r"killed by SIG\w+", str(failure).splitlines()[0])
            if how is None:  # a failure of the program itself, not one the faults cause: say it as it is
                raise
            killed, outcomes = (failure.rank, how.group(0)), []
        texts = [Path(logs, f"rank-{rank}.log") for rank in range(world_size)]
        lines = [log_lines(path.read_text()) if path.exists() else [] for path in texts]
    return Run(outcomes, lines, killed)


def table(run: Run, fault: str) -> str:
    """One line per rank: what it raised and at which step, before or after the timeout, or that it finished."""
    lines = []
    for rank, outcomes in enumerate(run.outcomes):
        outcome = outcomes[fault]
        if outcome["error"] is None:
            lines.append(f"rank {rank}: finished its {hangs.STEPS} steps, no error")
        else:
            when = "after waiting the timeout" if outcome["waited"] else "at once"
            lines.append(f"rank {rank}: raised at step {outcome['failed_step']}, {when}: {outcome['error']}")
    return "\n".join(lines)


def sums(run: Run, fault: str) -> str:
    """What each rank's all-reduces returned, step by step: the first number of each gradient's sum."""
    lines = []
    for rank, outcomes in enumerate(run.outcomes):
        got = [f"{values[0]:g}" for values in outcomes[fault]["sums"]]
        lines.append(f"rank {rank} sent {[10 * rank + step for step in range(hangs.STEPS)]}, got back {got}")
    return "\n".join(lines)


def where_stuck(run: Run, fault: str, keep: tuple[str, ...] = ("hangs.py", "distributed_c10d.py")) -> str:
    """Each rank's stack while stuck, innermost first, the frames of the lesson's program and of torch's
    ``distributed_c10d.py`` only (the launcher's and the threads' frames say nothing about the fault)."""
    lines = []
    for rank, outcomes in enumerate(run.outcomes):
        frames = [frame for frame in outcomes[fault]["stack"] if frame.startswith(keep)]
        lines.append(f"rank {rank}:" + ("".join(f"\n    {frame}" for frame in frames) or " not stuck (finished)"))
    return "\n".join(lines)
