"""Lesson 24's exercises: a learner's ``snapshot`` and ``resume`` on real ranks with a kill, and where a resumed run
starts.

``snapshot_and_resume`` runs ``faults.resume_runs.story_rank`` with the learner's two functions under
``faults.restarts.with_restarts``: attempt 0 trains uninterrupted (the reference, with no snapshot), then again
with the learner's snapshots until rank 1 is killed as step 14 starts; attempt 1 resumes with the learner's
``resume``. Equal final weights are not enough: a resume that found nothing and trained all 16 steps again ends
with them too. So the judge checks, on every rank, where the resumed run started, then each state it holds right
after ``resume`` (weights, Adam's state, torch's and Python's generators) against the uninterrupted run's after the
same step, and last the final weights, with ``torch.equal``.

``resume_point`` is arithmetic, judged on described and generated cases by ``faults.resume_training``'s rule.
The capstone's Part IV (``capstone.CAPSTONE_RESUME``) is judged by the first.
"""

import contextlib
import pickle
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from dpcourse.faults.restarts import OutOfRestarts, with_restarts
from dpcourse.faults.resume_runs import SNAPSHOT_STEP, TIMEOUT, story_rank, uninterrupted
from dpcourse.faults.resume_training import EPOCHS, EVERY, KILL_STEP, KILLED_RANK, STEPS_PER_EPOCH
from dpcourse.ranks import shippable
from dpcourse.ranks.by_source import SourceFunction
from dpcourse.ranks.learner import keep_error

from .check import Case, Exercise

STATES = {"model": "weights (model.state_dict())", "optimizer": "Adam state (optimizer.state_dict())",
          "torch_rng": "torch generator (torch.get_rng_state())", "python_rng": "Python generator (random.getstate())"}


def _kept(function, errors: str):
    """``function`` in a rank, its exceptions kept as the learner's (``learner.keep_error``)."""
    def call(*args):
        try:
            return function(*args)
        except Exception as error:
            keep_error(error, errors)
            raise
    return call


def _checked_load(load, errors: str):
    def call(directory, model, optimizer):
        position = load(directory, model, optimizer)
        if position is not None and not (isinstance(position, tuple | list) and len(position) == 2
                                         and all(isinstance(n, int) and n >= 0 for n in position)):
            error = TypeError(f"resume returned {position!r} on rank {dist.get_rank()}: return (epoch, done), two "
                              "whole numbers, where the data stood, or None when there is no snapshot yet")
            keep_error(error, errors)
            raise error
        return position
    return call


def learners_rank(directory: str, save, load, errors: str) -> dict:
    """In each rank: ``story_rank`` with the learner's ``snapshot`` and ``resume`` (sent as source), no variants."""
    save = _kept(save.rebuild() if isinstance(save, SourceFunction) else save, errors)
    load = _checked_load(_kept(load.rebuild() if isinstance(load, SourceFunction) else load, errors), errors)
    return story_rank(directory, save, load, variants=False)


def _pair(functions) -> tuple:
    if not (isinstance(functions, tuple | list) and len(functions) == 2 and all(map(callable, functions))):
        raise TypeError(f"check gets the pair (snapshot, resume), your two functions; got {functions!r}.")
    return tuple(functions)


def _run(functions, case: Case) -> dict:
    save, load = _pair(functions)
    with tempfile.TemporaryDirectory(prefix="dpcourse-lesson24-") as directory, \
            tempfile.TemporaryDirectory(prefix="dpcourse-lesson24-errors-") as errors:
        try:
            attempts = with_restarts(learners_rank, 2, (directory, shippable(save), shippable(load), errors),
                                     max_restarts=1, timeout=TIMEOUT)
        except OutOfRestarts as out:
            attempts = out.attempts
        for note in sorted(Path(errors).glob("rank-*.pickle")):
            raise pickle.loads(note.read_bytes())
        reference = None
        with contextlib.suppress(FileNotFoundError):
            reference = uninterrupted(directory)
        return {"attempts": attempts, "uninterrupted": reference, "resumed": attempts[-1].results}


def _start_difference(rank: int, start) -> str | None:
    expected = divmod(SNAPSHOT_STEP, STEPS_PER_EPOCH)
    if tuple(start or ()) == expected:
        return None
    if start is None:
        return (f"rank {rank}'s resume returned None in attempt 1: it found no snapshot, so the run began again at "
                f"step 1 and trained all {EPOCHS * STEPS_PER_EPOCH} steps. The right weights, at the cost of "
                "everything attempt 0 did: did snapshot write where resume looks?")
    epoch, done = start
    if tuple(start) == (0, 0):
        return (f"rank {rank} resumed at step 1, epoch 0, though a snapshot was taken after step {SNAPSHOT_STEP}: "
                "return the saved (epoch, done)")
    if (epoch, done) == (expected[0], 0):
        return (f"rank {rank} resumed at the start of epoch {epoch}: its first {expected[1]} batches, done before the "
                f"snapshot of step {SNAPSHOT_STEP}, would be trained on twice. Save and return how many batches of "
                "the epoch were done")
    return (f"rank {rank} resumed at epoch {epoch} after {done} of its batches, but the snapshot was taken after "
            f"step {SNAPSHOT_STEP}, epoch {expected[0]} after {expected[1]}: save the (epoch, done) snapshot is given")


def _state_difference(rank: int, got: dict, expected: dict) -> str | None:
    for part, words in STATES.items():
        want, have = expected[part], got[part]
        same = (len(want) == len(have) and all(torch.equal(a, b) for a, b in zip(want, have, strict=True))
                if part in ("model", "optimizer") else
                torch.equal(want, have) if part == "torch_rng" else want == have)
        if not same:
            whose = " its own, as each rank draws differently: a file per rank" if part.endswith("rng") else ""
            return (f"right after resume, rank {rank}'s {words} is not what it was after step {SNAPSHOT_STEP} of "
                    f"the uninterrupted run: save it in snapshot and load it back in resume,{whose}".rstrip(","))
    return None


def _judge(case: Case, answer: dict) -> str | None:
    attempts = answer["attempts"]
    first = attempts[0]
    if first.failed_rank != KILLED_RANK or "SIGKILL" not in first.failure:
        return f"attempt 0 should end when rank {KILLED_RANK} is killed, but: {first.failure or 'it did not fail'}"
    if answer["resumed"] is None:
        return f"attempt 1 failed too: {attempts[-1].failure.splitlines()[0]}"
    runs = list(enumerate(zip(answer["uninterrupted"], [lanes["resumed"] for lanes in answer["resumed"]],
                              strict=True)))
    for rank, (reference, resumed) in runs:  # every rank's start and states first: they name the cause
        difference = (_start_difference(rank, resumed["start"])
                      or _state_difference(rank, resumed["resumed_state"], reference["states"][SNAPSHOT_STEP]))
        if difference:
            return difference
    for rank, (reference, resumed) in runs:
        if not all(torch.equal(a, b) for a, b in zip(reference["parameters"], resumed["parameters"], strict=True)):
            return (f"rank {rank}'s final weights are not bit-identical to the uninterrupted run's, though every state "
                    "was right after resume: does snapshot change anything it saves (draw a random number, step)?")
    return None


SNAPSHOT_AND_RESUME = Exercise(
    name="snapshot_and_resume",
    task="Write snapshot(directory, model, optimizer, epoch, done), which saves everything this rank's next step "
         "reads, and resume(directory, model, optimizer), which loads it back and returns (epoch, done), or None "
         "when there is no snapshot; check the pair (snapshot, resume).",
    cases=lambda: [Case(f"2 ranks, rank {KILLED_RANK} killed as step {KILL_STEP} starts, snapshots every {EVERY} "
                        "steps", (), "every rank saves its own file: its generators are its own")],
    judge=_judge,
    call=_run,
    slow="two starts of 2 ranks, a few seconds",
)


def last_snapshot(kill_step: int, every: int, steps_per_epoch: int) -> tuple[int, int, int]:
    """The rule of ``faults.resume_training``: the (epoch, done) of the last snapshot before the kill, and the
    finished steps lost."""
    step = (kill_step - 1) // every * every
    return (*divmod(step, steps_per_epoch), kill_step - 1 - step)


def _judge_point(case: Case, answer) -> str | None:
    kill_step, every, steps_per_epoch = case.args
    expected = last_snapshot(*case.args)
    got = tuple(answer) if isinstance(answer, tuple | list) else answer
    if got == expected:
        return None
    step = (kill_step - 1) // every * every
    return (f"killed as step {kill_step} starts, snapshots every {every} steps, {steps_per_epoch} steps per epoch: "
            f"the last snapshot is after step {step}, so expected {expected}, got {got!r}")


def _point_cases() -> list[Case]:
    return [Case(f"kill at {kill}, every {every}, {per} per epoch", (kill, every, per))
            for kill in range(1, 26) for every in range(1, 8) for per in (1, 3, 4, 8)]


RESUME_POINT = Exercise(
    name="resume_point",
    task="Write resume_point(kill_step, every, steps_per_epoch): steps are numbered from 1 across epochs, a snapshot "
         "is taken after every step that is a multiple of every, and a rank dies as step kill_step starts. Return "
         "(epoch, done, lost): the epoch (from 0) and the batches of it done at the last snapshot, (0, 0) if there "
         "is none, and how many finished steps are lost and trained again.",
    cases=lambda: [
        Case("the lesson's run", (KILL_STEP, EVERY, STEPS_PER_EPOCH),
             "steps 1 to 13 finished; snapshots after steps 5 and 10"),
        Case("killed before the first snapshot", (4, 5, 8), "no snapshot yet: everything is lost"),
        Case("killed just after a snapshot", (11, 5, 8), "the snapshot after step 10 holds every finished step"),
        Case("a snapshot at the end of an epoch", (10, 8, 8),
             "after all 8 batches of epoch 0 the next batch is the first of epoch 1"),
        Case("killed as a snapshot step starts", (15, 5, 8),
             "step 15 never finished, so no snapshot was taken after it"),
    ],
    judge=_judge_point,
    generated=_point_cases,
)

EXERCISES = (RESUME_POINT, SNAPSHOT_AND_RESUME)
