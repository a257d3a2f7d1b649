"""Lesson 24's runs: a rank killed in attempt 0, every rank restarted, resumed from the last snapshot.

``story(directory)`` starts 2 ranks under ``restarts.with_restarts(max_restarts=1)``. Attempt 0 trains the
program of ``resume_training`` twice on each rank: once uninterrupted (its weights saved to disk, the reference),
then again with a snapshot after every 5th step, until rank 1 is killed as step 14 starts. Attempt 1 resumes from
the snapshot of step 10 several ways, each a lane of its own from the same files: with ``resume`` leaving out
the generators, leaving out the data's position, leaving out Adam's state, and last the right way, which writes
snapshots again. Two starts of the ranks in all. ``python -m dpcourse.faults.resume_runs DIRECTORY`` runs the
same rank program under torchrun (``main``): ``torchrun --standalone --nproc-per-node 2 --max-restarts 1``.

``dies_every_attempt(max_restarts)``: rank 1 is killed in every attempt; what the launcher does when the restarts
run out.
"""

import dataclasses
import functools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from ..ranks import init_from_env
from .restarts import MAX_RESTARTS, Attempt, OutOfRestarts, attempt_number, with_restarts
from .resume import resume, snapshot
from .resume_training import EVERY, KILL_STEP, read_log, train

# The lanes of attempt 1, the right one last (it writes snapshots again): what its resume() gives back.
VARIANTS = {"without the generators": ("model", "optimizer", "position"),
            "without the position": ("model", "optimizer", "rng"),
            "without Adam's state": ("model", "rng", "position")}
SNAPSHOT_STEP = (KILL_STEP - 1) // EVERY * EVERY  # 10: the last snapshot before the kill
TIMEOUT = 30.0  # seconds per attempt; an attempt takes about one


def story_rank(directory: str, save: Callable = snapshot, load: Callable = resume, variants: bool = True) -> dict:
    """What each rank runs, in every attempt, under the course's launcher or torchrun (see the module's docstring).
    ``save`` and ``load`` take snapshots and resume from them (a learner's, in the exercise, without ``variants``)."""
    rank = dist.get_rank()
    if attempt_number() == 0:
        torch.save(train(directory, "uninterrupted"), Path(directory, f"uninterrupted-rank-{rank}.pt"))
        train(directory, "interrupted", save=save, load=load, kill_step=KILL_STEP)
    lanes = {name: train(directory, name, load=functools.partial(resume, restore=parts))
             for name, parts in VARIANTS.items() if variants}
    lanes["resumed"] = train(directory, "resumed", save=save, load=load)
    return lanes


@dataclasses.dataclass
class Story:
    """A restarted run: each attempt (``restarts.Attempt``), the ``uninterrupted`` run's record per rank, attempt 1's
    ``lanes`` per rank (``"resumed"`` and the ``VARIANTS``), and ``directory``, where the logs are."""

    attempts: list[Attempt]
    uninterrupted: list[dict]
    lanes: list[dict]
    directory: str

    def log(self, lane: str, attempt: int, rank: int) -> list[dict]:
        """The steps ``lane`` finished on ``rank`` in ``attempt`` (``resume_training.read_log``)."""
        return read_log(self.directory, lane, attempt, rank)


def trained_twice(story: "Story", lane: str, rank: int = 0) -> list[int]:
    """The samples ``rank`` trained on twice in the epoch ``lane`` resumed in: those of attempt 0's steps up to the
    snapshot it resumed from, and those of ``lane``'s own steps in that epoch (``[]`` when none)."""
    epoch, _ = story.lanes[rank][lane]["start"]
    kept = [s for s in story.log("interrupted", 0, rank) if s["epoch"] == epoch and s["step"] <= SNAPSHOT_STEP]
    again = [s for s in story.log(lane, 1, rank) if s["epoch"] == epoch]
    before = {sample for step in kept for sample in step["samples"]}
    return sorted(sample for step in again for sample in step["samples"] if sample in before)


def uninterrupted(directory: str | Path, world_size: int = 2) -> list[dict]:
    """The uninterrupted run's record of each rank, saved by attempt 0."""
    return [torch.load(Path(directory, f"uninterrupted-rank-{rank}.pt"), weights_only=False)
            for rank in range(world_size)]


def story(directory: str | Path) -> Story:
    """Run the story on 2 ranks (two starts of them); ``directory`` keeps the snapshots and the logs."""
    attempts = with_restarts(story_rank, 2, (str(directory),), max_restarts=1, timeout=TIMEOUT)
    return Story(attempts, uninterrupted(directory), attempts[-1].results, str(directory))


def _killed_at_once() -> None:
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def dies_every_attempt(max_restarts: int = 1) -> list[Attempt]:
    """Rank 1 killed at once in every attempt: the attempts the launcher made before it gave up."""
    try:
        return with_restarts(_killed_at_once, 2, max_restarts=max_restarts, timeout=TIMEOUT)
    except OutOfRestarts as out:
        return out.attempts


def main(directory: str) -> None:
    """Under torchrun: one attempt of ``story_rank``; the last writes each rank's lanes to ``result-rank-R.pt``."""
    init_from_env()
    lanes = story_rank(directory)
    result = {"lanes": lanes, "attempt": attempt_number(), "max_restarts": os.environ.get(MAX_RESTARTS)}
    torch.save(result, Path(directory, f"result-rank-{dist.get_rank()}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])

