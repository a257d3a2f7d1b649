"""Experiments for lesson 24 (resume): each starts real gloo ranks under the course's restarting launcher.

Most run ``faults.resume_runs.story``, the lesson's own run: 2 ranks, rank 1 killed as step 14 of 16 starts,
every rank restarted and resumed from the snapshot of step 10, the right way and leaving one state out.
"""

import tempfile

import torch

from ..outcome import Outcome, only_true

BIT_IDENTICAL = "Bit-identical: dropout and the augmentation draw the same numbers anyway"
CLOSE = "Within 1e-6 but not bit-identical: the generators only decide a little noise"
DIFFERENT = "Different, by more than 1e-3"


def _story():
    from dpcourse.faults import resume_runs

    directory = tempfile.TemporaryDirectory(prefix="dpcourse-quiz24-")
    story = resume_runs.story(directory.name)
    story.keep = directory  # the logs live there as long as the story does
    return story


def _gap(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def forgotten_generators() -> Outcome:
    """Resume from the snapshot of step 10 without giving back torch's and Python's generators, on both ranks."""
    story = _story()
    reference, lane = story.uninterrupted[0]["parameters"], story.lanes[0]["without the generators"]["parameters"]
    gap = _gap(reference, lane)
    equal = all(torch.equal(x, y) for x, y in zip(reference, lane, strict=True))
    text = ("resumed without the generators, after step 16, rank 0: " +
            ("bit-identical to the uninterrupted run" if equal else
             f"largest difference from the uninterrupted run {gap:.1e}" if gap >= 1e-6 else
             "not bit-identical, but within 1e-6 of the uninterrupted run"))
    value = only_true({BIT_IDENTICAL: equal, CLOSE: not equal and gap < 1e-6, DIFFERENT: gap > 1e-3})
    return Outcome(text, value)


def when_a_rank_dies() -> Outcome:
    """Rank 1 killed in attempt 0: how far rank 0 got, and which processes run attempt 1."""
    story = _story()
    first = story.attempts[0]
    last_step = max((step["step"] for step in story.log("interrupted", 0, 0)), default=0)
    new = [story.lanes[rank]["resumed"]["pid"] != first.pids[rank] for rank in range(2)]
    starts = [story.lanes[rank]["resumed"]["start"] for rank in range(2)]
    text = (f"attempt 0: {first.failure.splitlines()[0].split(' (pid')[0]} killed by SIGKILL; rank 0 finished steps "
            f"1 to {last_step} of 16 in it.\nattempt 1: rank 0 in a new process: {new[0]}, rank 1: {new[1]}; "
            f"both resumed at (epoch, done) = {starts[0]} and {starts[1]}")
    value = only_true({
        "Rank 0 trains on to step 16; only rank 1's work is lost": last_step == 16,
        "The launcher stops rank 0 too and starts both again; both resume from the snapshot": (
            last_step < 16 and all(new)),
        "Only rank 1 is started again; it rejoins rank 0 where rank 0 is": last_step < 16 and new == [False, True],
    })
    return Outcome(text, value)


def out_of_restarts() -> Outcome:
    """Rank 1 killed at once in every attempt, one restart allowed: the attempts made, and how the run ends."""
    from dpcourse.faults import resume_runs

    attempts = resume_runs.dies_every_attempt(max_restarts=1)
    failed = [attempt.results is None for attempt in attempts]
    text = "\n".join(f"attempt {a.number}: " + (a.failure.splitlines()[0].split(" (pid")[0] + " killed by SIGKILL"
                                                 if a.failure else "finished") for a in attempts)
    text += f"\n{len(attempts)} attempts, " + ("the run failed" if all(failed) else "the run finished")
    value = only_true({
        "It fails after 2 attempts: the first, and 1 restart": len(attempts) == 2 and all(failed),
        "It fails at once: --max-restarts 1 means 1 attempt in all": len(attempts) == 1 and all(failed),
        "It keeps restarting until an attempt finishes": len(attempts) > 2,
        "It finishes with rank 0 alone": not all(failed),
    })
    return Outcome(text, value)


def epoch_from_its_start() -> Outcome:
    """Resume with ``set_epoch(1)`` but from the first batch of epoch 1, not after the 2 done before the snapshot."""
    from dpcourse.faults import resume_runs

    story = _story()
    lane = "without the position"
    twice = [len(resume_runs.trained_twice(story, lane, rank)) for rank in range(2)]
    reference, got = story.uninterrupted[0]["parameters"], story.lanes[0][lane]["parameters"]
    equal = all(torch.equal(x, y) for x, y in zip(reference, got, strict=True))
    text = (f"epoch 1 from its first batch: samples trained on twice in epoch 1, rank 0: {twice[0]}, rank 1: "
            f"{twice[1]}; after step 16 the weights are " +
            ("bit-identical to the uninterrupted run's" if equal else
             f"{_gap(reference, got):.1e} away from the uninterrupted run's"))
    value = only_true({
        "Nothing: set_epoch(1) gives the same order, so the run ends with the same weights": equal and not any(twice),
        "The 2 batches done before the snapshot are trained on again: 8 samples per rank twice, other weights": (
            twice == [8, 8] and not equal),
        "Every rank trains on another rank's samples": not equal and not any(twice),
    })
    return Outcome(text, value)


EXPERIMENTS = (forgotten_generators, when_a_rank_dies, out_of_restarts, epoch_from_its_start)
