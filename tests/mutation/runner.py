"""Run one solution (the reference or a mutant) through its exercise's check, in a forked process with a time limit.

A mutant may loop forever or leave ranks waiting for each other, and may change the objects it is given: so each
runs in a child forked from a process that has imported torch and rebuilt the lesson's namespace (milliseconds,
no second import), in a session of its own, so that a timeout kills it and every process it started. Its
check's output goes to /dev/null; the child sends back one JSON line: ``{"outcome": ..., "detail": ...}``.
"""

import contextlib
import dataclasses
import json
import multiprocessing
import os
import select
import signal
import time
from multiprocessing import forkserver, resource_tracker

from . import exercises

PASSED, FAILED, TIMEOUT, CRASHED = "passed", "failed", "timeout", "crashed"
# What dpcourse's launcher preloads in the forkserver it starts the ranks from (dpcourse/ranks/launcher.py).
PRELOAD = ["dpcourse.ddp", "torch._dynamo", "dpcourse.sharded.zero1", "dpcourse.sharded.zero2",
           "dpcourse.sharded.zero3", "dpcourse.sharded.fsdp2"]


def share_forkserver() -> None:
    """Start multiprocessing's forkserver in this process, once, for every child to start its ranks from.

    Otherwise each child would start a server of its own, which imports torch, dpcourse and torch._dynamo again:
    seconds per mutant of a rank-based check. A child reaches its parent's server through the address it
    inherits; ``_child`` stops it from checking the server with ``waitpid``, which only its parent may call. A
    timed-out child's ranks end by themselves: they exit when their launcher's pipe closes (``launcher._follow``).
    """
    if "forkserver" in multiprocessing.get_all_start_methods():
        forkserver.set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one run went: ``outcome`` PASSED (the check passed it), FAILED, TIMEOUT or CRASHED (no answer)."""

    outcome: str
    detail: str
    seconds: float


def run(exercise: exercises.Exercise, namespace: dict, solution: str, label: str, limit: float) -> Outcome:
    """``exercises.check(exercise.name, <solution's target>)`` in a forked child, killed after ``limit`` s."""
    start = time.monotonic()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        os.setsid()
        _child(exercise, namespace, solution, label, write_end)
    os.close(write_end)
    text = _read(read_end, start + limit)
    os.close(read_end)
    if text is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    if text is None:
        return Outcome(TIMEOUT, f"stopped after {limit:.0f} s", seconds)
    if not text:
        return Outcome(CRASHED, "the process died without an answer", seconds)
    answer = json.loads(text)
    return Outcome(answer["outcome"], answer["detail"], seconds)


def _read(fd: int, deadline: float) -> str | None:
    """Everything the child writes until it closes the pipe, or ``None`` if it is still open at ``deadline``."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks).decode()
        chunks.append(chunk)


def _child(exercise: exercises.Exercise, namespace: dict, solution: str, label: str, fd: int) -> None:
    """Define the solution, check it, write the outcome to ``fd`` and exit (``os._exit``: no cleanup of the
    parent's objects, which the child only borrowed)."""
    import torch

    from dpcourse import exercises as course_exercises

    # torch's intra-op thread pool does not survive a fork: a child that runs a parallel kernel after its parent
    # used the pool from several threads (a check's replicas, say) waits forever for workers it does not have.
    torch.set_num_threads(1)
    if forkserver._forkserver._forkserver_pid is not None:  # the parent's server runs (share_forkserver)
        forkserver._forkserver.ensure_running = resource_tracker.ensure_running
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the check's and its ranks' output
    os.dup2(quiet, 2)
    try:
        function = exercises.define(exercise, solution, namespace, label)
        report = course_exercises.check(exercise.name, function)
        outcome = PASSED if report.passed else FAILED
        failed = [o.detail for o in report.outcomes if o.verdict == "failed"]
        detail = failed[0] if failed else report.status
    except BaseException as error:  # the mutant does not even define: a failed (killed) mutant
        outcome, detail = FAILED, f"{type(error).__name__}: {error}"
    os.write(fd, json.dumps({"outcome": outcome, "detail": detail[:300]}).encode())
    os.close(fd)
    os._exit(0)
