"""Lesson 23's checks watch the mechanism the exercise teaches, not only the rank it names.

``find_straggler``: each plausible shortcut (the last rank at the first or the last step, the rank last most
often, the longest time between arrivals, the median lateness, the rank that waited most) must fail, on a
described case that names the mistake or on the generated ones. ``train_step``: readings taken elsewhere than
between the forward and the all-reduce, readings not gathered, readings taken after a synchronisation, and a step
that does not train must fail on real ranks, with a message that says what is wrong, though most of them could
name the slow rank.
"""

import statistics
import time

import pytest
import torch.distributed as dist
import torch.nn.functional as F

from dpcourse import exercises
from dpcourse.exercises import lesson23
from dpcourse.exercises.check import FAILED

pytestmark = pytest.mark.lesson23


def _waits(arrivals):
    return [sum(max(row) - row[rank] for row in arrivals) for rank in range(len(arrivals[0]))]


def last_at_the_first_step(arrivals):
    return arrivals[0].index(max(arrivals[0])), _waits(arrivals)


def last_at_the_last_step(arrivals):
    return arrivals[-1].index(max(arrivals[-1])), _waits(arrivals)


def last_most_often(arrivals):
    counts = [0] * len(arrivals[0])
    for row in arrivals:
        counts[row.index(max(row))] += 1
    return counts.index(max(counts)), _waits(arrivals)


def longest_between_arrivals(arrivals):  # a "step time" per rank: the same on every rank under DDP
    spans = [arrivals[-1][rank] - arrivals[0][rank] for rank in range(len(arrivals[0]))]
    return spans.index(max(spans)), _waits(arrivals)


def median_lateness(arrivals):
    late = [statistics.median(row[rank] - min(row) for row in arrivals) for rank in range(len(arrivals[0]))]
    return late.index(max(late)), _waits(arrivals)


def waited_most(arrivals):
    waits = _waits(arrivals)
    return waits.index(max(waits)), waits


def counted_from_one(arrivals):
    waits = _waits(arrivals)
    return waits.index(min(waits)) + 1, waits


SHORTCUTS = {
    "the last rank at the first step": (last_at_the_first_step, "slow at steps 1 and 2 only"),
    "the last rank at the last step": (last_at_the_last_step, "slow at steps 1 and 2 only"),
    "the rank last most often": (last_most_often, "last by 2 ms at four steps"),
    "the longest time between a rank's first and last arrival": (longest_between_arrivals, None),
    "the largest median lateness": (median_lateness, "slow at steps 1 and 2 only"),
    "the rank that waited most": (waited_most, "arrives 150 ms late at every collective"),
    "ranks counted from 1": (counted_from_one, "arrives 150 ms late at every collective"),
}


@pytest.mark.parametrize("mistake", SHORTCUTS)
def test_a_shortcut_fails_find_straggler(mistake):
    function, case = SHORTCUTS[mistake]
    report = exercises.check("find_straggler", function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    failed = [o for o in report.outcomes if o.verdict == FAILED]
    if case:
        assert any(case in o.case.description for o in failed), repr(report)
    assert all("is not the one the others waited for" in o.detail for o in failed), repr(report)


def lateness_for_waits(arrivals):  # how long after the first rank, not how long until the last one
    late = [sum(row[rank] - min(row) for row in arrivals) for rank in range(len(arrivals[0]))]
    return late.index(max(late)), late


def waits_of_the_last_step(arrivals):
    row = arrivals[-1]
    waits = [max(row) - t for t in row]
    return _waits(arrivals).index(min(_waits(arrivals))), waits


@pytest.mark.parametrize("function", [lateness_for_waits, waits_of_the_last_step])
def test_wrong_waits_fail_find_straggler_though_the_rank_is_right(function):
    report = exercises.check("find_straggler", function)
    assert report.status == FAILED and report.outcomes[0].detail.startswith("waits["), repr(report)


@pytest.mark.parametrize("answer, message", [(2, "expected a pair"), ((2.0, [0.0, 0.0, 0.0]), "expected the rank"),
                                             ((True, [0.0, 0.0, 0.0]), "expected the rank"),
                                             ((2, [0.0]), "expected waits as 3 numbers")])
def test_answers_of_the_wrong_form_are_refused(answer, message):
    report = exercises.check("find_straggler", lambda arrivals: answer)
    assert report.status == FAILED and message in report.outcomes[0].detail, repr(report)


def read_after_the_backward(model, x, y, optimizer):
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
    arrivals = [None] * dist.get_world_size()
    dist.all_gather_object(arrivals, time.perf_counter())
    return arrivals


def read_before_the_forward(model, x, y, optimizer):
    arrived = time.perf_counter()
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    arrivals = [None] * dist.get_world_size()
    dist.all_gather_object(arrivals, arrived)
    loss.backward()
    optimizer.step()
    return arrivals


def never_gathered(model, x, y, optimizer):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    arrivals = [0.0] * dist.get_world_size()
    arrivals[dist.get_rank()] = time.perf_counter()
    loss.backward()
    optimizer.step()
    return arrivals


def read_after_a_barrier(model, x, y, optimizer):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    dist.barrier()
    arrivals = [None] * dist.get_world_size()
    dist.all_gather_object(arrivals, time.perf_counter())
    loss.backward()
    optimizer.step()
    return arrivals


def gradients_never_zeroed(model, x, y, optimizer):
    loss = F.mse_loss(model(x), y)
    arrivals = [None] * dist.get_world_size()
    dist.all_gather_object(arrivals, time.perf_counter())
    loss.backward()
    optimizer.step()
    return arrivals


PROBES = {
    "the clock read after the backward": (read_after_the_backward, "was not taken between the end of its forward"),
    "the clock read before the forward": (read_before_the_forward, "was not taken between the end of its forward"),
    "no gather: each rank its own reading": (never_gathered, "returned other readings than rank 0"),
    "the clock read after a barrier": (read_after_a_barrier, "do not show the rank that slept arriving last"),
    "gradients never zeroed": (gradients_never_zeroed, "differ from SGD on one device"),
}


@pytest.mark.parametrize("mistake", PROBES)
def test_a_wrong_probe_fails_train_step(mistake):
    function, message = PROBES[mistake]
    report = exercises.check("train_step", function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    assert message in report.outcomes[0].detail and "Traceback" not in repr(report), repr(report)


def test_a_guess_that_names_the_rank_without_reading_clocks_fails():
    slow = lesson23.TRAIN_STEP.cases()[0].args[0]

    def guessed(model, x, y, optimizer):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        return [1.0 if rank == slow else 0.0 for rank in range(dist.get_world_size())]

    report = exercises.check("train_step", guessed)
    assert report.status == FAILED and "called 0 all-gathers" in report.outcomes[0].detail, repr(report)


# The planted mistakes, by exercise (tests/test_exercises.py counts them).
MISTAKES = {
    "find_straggler": [*SHORTCUTS, "lateness for waits", "the waits of the last step"],
    "train_step": [*PROBES, "a guess that names the rank without reading clocks"],
}
