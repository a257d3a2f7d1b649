"""Lesson 22's checks watch the mechanism: which call and which ranks diverged, and that every rank calls the same
collectives. Plausible wrong answers, some with the right result on the easy cases, must fail with a message that
names what is wrong; the mean over ranks runs on real ranks."""

import dataclasses
from collections import Counter

import pytest
import torch
import torch.distributed as dist

from dpcourse import exercises
from dpcourse.exercises import lesson22
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.faults.hang_diagnosis import first_divergence

pytestmark = pytest.mark.lesson22


def lengths_only(records):
    lengths = [len(record) for record in records]
    if len(set(lengths)) == 1:
        return None
    shortest = min(lengths)
    return shortest, [rank for rank, length in enumerate(lengths) if length == shortest]


def ops_only(records):
    return first_divergence([[(op, ()) for op, _ in record] for record in records])


def rank_zero_is_the_norm(records):
    length = max(len(record) for record in records)
    for index in range(length):
        calls = [tuple(r[index]) if index < len(r) else None for r in records]
        if len(set(calls)) > 1:
            return index, [rank for rank, call in enumerate(calls) if call != calls[0]]
    return None


def ignoring_ended_records(records):
    length = min(len(record) for record in records)
    for index in range(length):
        calls = [tuple(r[index]) for r in records]
        if len(set(calls)) > 1:
            counts = Counter(calls)
            norm = next(c for c in calls if counts[c] == max(counts.values()))
            return index, [rank for rank, call in enumerate(calls) if call != norm]
    return None


def most_common_without_tie_rule(records):
    length = max(len(record) for record in records)
    for index in range(length):
        calls = [tuple(r[index]) if index < len(r) else None for r in records]
        if len(set(calls)) > 1:
            norm = Counter(calls).most_common()[-1][0] if len(calls) == 2 else Counter(calls).most_common(1)[0][0]
            return index, [rank for rank, call in enumerate(calls) if call != norm]
    return None


WRONG_DIAGNOSES = [lengths_only, ops_only, rank_zero_is_the_norm, ignoring_ended_records, most_common_without_tie_rule]


@pytest.mark.parametrize("wrong", WRONG_DIAGNOSES)
def test_a_plausible_wrong_diagnosis_fails(wrong):
    report = exercises.check("first_divergence", wrong)
    assert report.status == FAILED, repr(report)
    assert "Traceback" not in repr(report)


def test_the_oracle_passes_every_case():
    assert exercises.check("first_divergence", first_divergence).status == PASSED


def _first_case_only(exercise):
    return dataclasses.replace(exercise, cases=lambda: exercise.cases()[:1])


def _detail(function) -> str:
    report = exercises.run(_first_case_only(lesson22.MEAN_OVER_RANKS), function)
    assert report.status == FAILED, repr(report)
    return report.outcomes[0].detail


def test_a_rank_that_returns_early_leaves_the_others_waiting():
    def mean_over_ranks(losses):
        if losses.numel() == 0:
            return torch.tensor(0.0)
        total = torch.tensor([losses.sum(), losses.numel()])
        dist.all_reduce(total)
        return total[0] / total[1]

    assert "was waiting in all_reduce" in _detail(mean_over_ranks)


def test_a_mean_of_the_ranks_means_is_not_the_mean():
    def mean_over_ranks(losses):
        mean = losses.mean() if losses.numel() else torch.tensor(0.0)
        dist.all_reduce(mean)
        return mean / dist.get_world_size()

    assert "the mean of all 6 losses" in _detail(mean_over_ranks)


def test_an_empty_rank_with_a_tensor_of_another_size_is_caught_by_its_record():
    def mean_over_ranks(losses):
        if losses.numel() == 0:
            total = torch.zeros(4)  # "zeros will do", of the wrong size: gloo returns, with a wrong sum
        else:
            total = torch.tensor([losses.sum(), losses.numel()])
        dist.all_reduce(total)
        return total[0] / total[1]

    detail = _detail(mean_over_ranks)
    assert "every rank must call the same collectives" in detail or "killed by SIGABRT" in detail \
        or "aborted" in detail or "waiting" in detail


def test_the_lessons_solution_passes():
    def mean_over_ranks(losses):
        total = torch.tensor([losses.sum(), losses.numel()])
        dist.all_reduce(total)
        return total[0] / total[1]

    assert exercises.check("mean_over_ranks", mean_over_ranks).status == PASSED


# The planted mistakes, by exercise (tests/test_exercises.py counts them).
MISTAKES = {
    "first_divergence": [wrong.__name__ for wrong in WRONG_DIAGNOSES],
    "mean_over_ranks": ["a rank that returns early", "a mean of the ranks' means",
                        "an empty rank's tensor of another size"],
}
