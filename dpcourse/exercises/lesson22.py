"""Lesson 22's exercises: find the rank and the call that diverged in the ranks' records, and write a mean over
ranks that never leaves a rank waiting.

The first takes records as the Flight Recorder gives them (``faults.hang_tools.flight_record``: a list per rank of
``(op, shape)``), and is judged against ``faults.hang_diagnosis.first_divergence`` on described cases (the
lesson's real records among them) and on generated ones: seeded random programs on 2 to 4 ranks with one
planted skip, other collective, other size or early stop, so that comparing only lengths, or only ops, fails.

The second runs the learner's function on real ranks, one of them with no samples, inside ``counted``: every
rank must call the same collectives with tensors of the same size (the mechanism; a rank that skips one leaves
the others waiting, and the check stops them after ``TIMEOUT`` seconds), and every rank must return the mean of
all the samples.
"""

import torch
import torch.distributed as dist

from dpcourse.faults.hang_diagnosis import first_divergence, planted
from dpcourse.ranks.by_source import SourceFunction
from dpcourse.ranks.learner import keep_error, launch_keeping_errors
from dpcourse.ranks.traffic import counted
from dpcourse.ui.words import plural

from .check import Case, Exercise

TIMEOUT = 6.0  # seconds; a right answer on 3 ranks takes about one
A, B = ("all_reduce", (4,)), ("broadcast", (4,))


def _judge_divergence(case: Case, answer) -> str | None:
    expected = first_divergence(case.args[0])
    if expected is None:
        return None if answer is None else f"every rank called the same collectives: expected None, got {answer!r}"
    if not isinstance(answer, list | tuple) or len(answer) != 2 or not isinstance(answer[1], list | tuple):
        return f"expected (index, [ranks]) or None; got {answer!r}"
    index, ranks = answer[0], sorted(answer[1])
    if index != expected[0]:
        return f"the ranks first disagree at call {expected[0]}, not {index!r}"
    if ranks != expected[1]:
        calls = [record[index] if index < len(record) else "nothing" for record in case.args[0]]
        return (f"at call {index} the ranks called {calls}: the rank(s) that differ from the most common call "
                f"(the lowest rank's on a tie) are {expected[1]}, not {ranks}")
    return None


def _generated_divergences() -> list[Case]:
    faults = ("skip", "other_op", "other_size", "stop")
    return [Case(f"generated {number}: a planted {faults[number % 4]}", (planted(number, faults[number % 4])[0],))
            for number in range(80)]


FIRST_DIVERGENCE = Exercise(
    name="first_divergence",
    task="Write first_divergence(records): records[r] is rank r's list of (op, shape) calls. Return "
         "(index, ranks): the first index where the ranks do not all make the same call (a rank whose record "
         "ended has made none there), and the sorted ranks whose call there differs from the most common one "
         "(on a tie, the lowest rank's among the most common); None if every rank made the same calls.",
    cases=lambda: [
        Case("the lesson's skip: rank 1 skipped the second of three all-reduces", ([[A, A, A], [A, A]],),
             "the records agree until rank 1's ends: a skipped call that equals the next one shows only there"),
        Case("the lesson's other collective", ([[A, A], [A, B]],), "compare the op of each call"),
        Case("a different size", ([[A, ("all_reduce", (5,))], [A, A]],),
             "compare the shapes too: two all-reduces of different sizes are different calls; with two ranks, "
             "rank 0's call is the norm"),
        Case("3 ranks, rank 2 stopped after one call", ([[A, B, A], [A, B, A], [A]],),
             "a rank whose record ended has made no call there: that is a difference too"),
        Case("4 ranks, ranks 1 and 3 called a broadcast", ([[A, A], [A, B], [A, A], [A, B]],),
             "2 against 2: the lowest rank's call (rank 0's) is the norm"),
        Case("every rank called the same", ([[A, B], [A, B], [A, B]],), "nothing diverged: return None"),
        Case("3 ranks, rank 0 called one more", ([[A, A, B], [A, A], [A, A]],),
             "at call 2 most ranks made no call: rank 0 is the one that differs"),
    ],
    judge=_judge_divergence,
    generated=_generated_divergences,
)


def mean_on_rank(learner: SourceFunction, losses: list[torch.Tensor], errors: str) -> dict:
    """In each rank: call the learner's function on this rank's losses, counting its collectives (a program for
    ``launch_keeping_errors``)."""
    rank = dist.get_rank()
    try:
        with counted() as traffic:
            value = learner.rebuild()(losses[rank].clone())
        number = float(value)
    except Exception as error:
        keep_error(error, errors)
        raise
    return {"value": number, "calls": traffic.calls}


def _on_ranks(function, case: Case) -> list[dict]:
    (losses,) = case.args
    return launch_keeping_errors(mean_on_rank, len(losses), (SourceFunction.of(function), losses), TIMEOUT)


def _judge_mean(case: Case, answer: list[dict]) -> str | None:
    (losses,) = case.args
    calls = [result["calls"] for result in answer]
    for rank, called in enumerate(calls):
        if called != calls[0]:
            return (f"rank {rank} called {called} but rank 0 called {calls[0]} (collective, bytes): every rank must "
                    "call the same collectives, in the same order, with tensors of the same size")
    if not calls[0]:
        return "no rank called a collective: a rank cannot know the other ranks' losses without one"
    expected = float(torch.cat(losses).mean())
    for rank, result in enumerate(answer):
        if not abs(result["value"] - expected) <= 1e-5 * max(1.0, abs(expected)):
            return (f"rank {rank} returned {result['value']:.6g}, the mean of all {torch.cat(losses).numel()} "
                    f"losses is {expected:.6g}: sum the losses and count them over all ranks, then divide")
    return None


def _losses(*counts: int) -> tuple[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(sum(counts) * 7 + len(counts))
    return ([torch.rand(count, generator=generator) for count in counts],)


MEAN_OVER_RANKS = Exercise(
    name="mean_over_ranks",
    task="Write mean_over_ranks(losses): called on every rank with that rank's 1-D tensor of per-sample losses, "
         "which may be empty, return the mean of all the ranks' losses, the same number on every rank. Every "
         "rank must call the same collectives with tensors of the same size, even a rank with no losses.",
    cases=lambda: [
        Case("3 ranks, rank 1 has no samples", _losses(4, 0, 2),
             "a rank with no samples still calls every collective: it contributes a sum of 0 and a count of 0"),
        Case("2 ranks, rank 0 has no samples", _losses(0, 3), "any rank can be the empty one, not only rank 1"),
        Case("3 ranks, all with samples", _losses(2, 5, 1),
             "the mean of all samples is not the mean of the ranks' means when they hold different numbers"),
    ],
    judge=_judge_mean,
    call=_on_ranks,
    slow=f"starts real ranks for each case (a rank left waiting is stopped after {plural(int(TIMEOUT), 'second')})",
    time_limit=30.0,
)

EXERCISES = (FIRST_DIVERGENCE, MEAN_OVER_RANKS)
