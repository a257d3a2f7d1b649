"""A rank that skips a collective, calls another one, or one of another size: what each rank sees, and why.

Every rank runs ``train_steps``: ``STEPS`` all-reduces of a gradient of ``WIDTH`` numbers, as DDP would. Rank
``FAULTY_RANK`` goes wrong at step ``FAULTY_STEP`` in one of three ways (``FAULTS``):

    skip        it does not call the all-reduce (a rank with no batch that step, say);
    other_op    it calls a broadcast instead;
    other_size  its gradient has WIDTH + 1 numbers.

``observe`` runs several faults at once on one start of the ranks, each on its own process group with a short
timeout (``dist.new_group(timeout=...)``), each in its own thread, so that their timeouts overlap: one start and
one timeout for most of what the lesson shows. The launcher's default group is left healthy for its last barrier.

What comes back from each rank, per fault (``Outcome`` below): what it raised, at which step, whether before
the timeout, the sums it received; the collectives the Flight Recorder logged (``hang_tools.flight_record``);
and its Python stack while it was stuck (``hang_tools.stacks``). A fault can also run on a group made under
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (``hang_tools.debug_level``), which checks every collective first.
"""

import dataclasses
import datetime
import os
import threading
import time

import torch
import torch.distributed as dist

from . import hang_tools

FAULTS = ("skip", "other_op", "other_size")
STEPS, WIDTH = 3, 4
FAULTY_RANK, FAULTY_STEP = 1, 1
GROUP_TIMEOUT = 2.0  # seconds: short, so that a hang ends in a moment; long enough for a loaded 2-core machine
# Rank r's groups wait GROUP_TIMEOUT + r * STAGGER seconds. With equal timeouts, two ranks waiting for each other
# race: the first timer to fire gives up and closes the connection, and the other rank reads "Connection closed
# by peer" instead of its own timeout. Staggered, rank 0 always gives up first and every run reads the same.
STAGGER = 1.0


@dataclasses.dataclass
class Outcome:
    """What one rank saw while running one fault: the lesson prints these, the figure draws ``record``."""

    fault: str
    rank: int
    sums: list[list[float]]  # what each all-reduce that returned left in the gradient, in step order
    error: str | None = None  # the stable part of what the rank raised (``hang_tools.key_phrase``)
    step: int = 0  # the step it was at last
    failed_step: int | None = None  # the step whose collective raised
    waited: bool = False  # it raised only after waiting about the group's timeout
    record: list[tuple[str, tuple[int, ...]]] = dataclasses.field(default_factory=list)  # (op, shape) per call
    states: list[str] = dataclasses.field(default_factory=list)  # the Flight Recorder's state of each call
    recorder_variables: dict[str, str | None] = dataclasses.field(default_factory=dict)  # its size, as the rank saw
    stack: list[str] = dataclasses.field(default_factory=list)  # where it was while stuck: "file:function: line"


def train_steps(fault: str, group: dist.ProcessGroup, outcome: Outcome) -> None:
    """The program every rank runs; rank ``FAULTY_RANK`` goes wrong at step ``FAULTY_STEP`` as ``fault`` says.

    ``outcome.step`` is the step whose collective runs now; each sum that comes back is appended to ``sums``.
    """
    rank = dist.get_rank()
    for step in range(STEPS):
        outcome.step = step
        gradient = torch.full((WIDTH,), float(10 * rank + step))
        if rank == FAULTY_RANK and step == FAULTY_STEP and fault == "skip":
            continue  # the rank had nothing to send this step, say: the others do not know
        if rank == FAULTY_RANK and step == FAULTY_STEP and fault == "other_op":
            dist.broadcast(gradient, src=0, group=group)
        else:
            if rank == FAULTY_RANK and step == FAULTY_STEP and fault == "other_size":
                gradient = torch.full((WIDTH + 1,), float(10 * rank + step))
            dist.all_reduce(gradient, group=group)
        outcome.sums.append(gradient.tolist())


def _run(fault: str, group: dist.ProcessGroup, timeout: float, outcome: Outcome) -> None:
    started = time.monotonic()
    try:
        train_steps(fault, group, outcome)
    except RuntimeError as error:
        outcome.error = hang_tools.key_phrase(str(error))
        outcome.failed_step = outcome.step
        outcome.waited = time.monotonic() - started >= 0.8 * timeout


def key(fault: str, detail: bool) -> str:
    """How ``observe`` names a fault's outcome: ``"skip"``, or ``"skip DETAIL"`` when run under DETAIL."""
    return f"{fault} DETAIL" if detail else fault


def observe(faults: tuple[str, ...], detail_faults: tuple[str, ...], logs: str, timeout: float = GROUP_TIMEOUT,
            stacks_after: float | None = None) -> dict[str, dict]:
    """Run on every rank (``ranks.launch(observe, 2, args=...)``): each fault of ``faults``, and each of
    ``detail_faults`` under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, on a group of its own with a ``timeout``-second
    timeout (plus ``STAGGER`` per rank), all at once; this rank's ``Outcome`` per fault, as a dict, by
    ``key(fault, detail)``.

    ``stacks_after``: seconds after which every thread's Python stack is dumped
    (``faulthandler.dump_traceback_later``), while the ranks are stuck. What torch's C++ code writes to stderr
    goes to ``logs/rank-<r>.log`` (``hang_tools.stderr_to``): gloo's abort message, DETAIL's log lines.
    """
    unknown = [fault for fault in faults + detail_faults if fault not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) {unknown}: name some of {FAULTS}.")
    plan = [(fault, False) for fault in faults] + [(fault, True) for fault in detail_faults]
    groups = {}
    for fault, detail in plan:  # every rank makes the groups in the same order; DETAIL decides when one is made
        with hang_tools.debug_level("DETAIL" if detail else "OFF"):
            waits = timeout + STAGGER * dist.get_rank()
            groups[key(fault, detail)] = dist.new_group(timeout=datetime.timedelta(seconds=waits))
    outcomes = {key(fault, detail): Outcome(fault, dist.get_rank(), []) for fault, detail in plan}
    threads = {name: threading.Thread(target=_run, args=(outcome.fault, groups[name], timeout, outcome),
                                      name=f"fault-{name}") for name, outcome in outcomes.items()}
    with hang_tools.stderr_to(f"{logs}/rank-{dist.get_rank()}.log"), hang_tools.stacks(stacks_after) as dumped:
        for thread in threads.values():
            thread.start()
        for thread in threads.values():
            thread.join()
    records = hang_tools.flight_record()
    for name, outcome in outcomes.items():
        logged = records.get(dist.distributed_c10d._get_process_group_name(groups[name]), [])
        outcome.record, outcome.states = [(op, shape) for op, shape, _ in logged], [state for *_, state in logged]
        outcome.stack = dumped.get(threads[name].ident, [])
        outcome.recorder_variables = {v: os.environ.get(v) for v in hang_tools.RECORDER_VARIABLES}
    return {name: dataclasses.asdict(outcome) for name, outcome in outcomes.items()}  # plain data, for torch.load
