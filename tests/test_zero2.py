"""Lesson 19, ZeRO-2: the teaching implementation (``sharded.zero2``) on 2, 3 and 4 real ranks against one-device
Adam, its bytes and gradient memory as the lesson states them, the quiz's experiments in planted worlds, and the
exercises' planted mistakes."""

import functools
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpcourse import examples, exercises, ranks
from dpcourse.exercises import lesson19
from dpcourse.exercises.check import FAILED, PASSED
from dpcourse.quiz import run_experiment
from dpcourse.quiz.bank import load_lesson
from dpcourse.sharded import ddp_buckets, zero1, zero2, zero2_measure
from dpcourse.viz.zero2 import gradient_bytes
from tests import zero1_programs
from tests.figure_checks import problems
from tests.lesson_solutions import solution

pytestmark = pytest.mark.lesson19

QUESTIONS = {question.id: question for question in load_lesson("19_zero2")}
EXPECTED = ranks.one_device()
NUMELS = [p.numel() for p in examples.mlp(ranks.WIDTHS).parameters()]
BUCKETS = [sum(NUMELS[i] for i in bucket) for bucket in zero2.bucket_indices(NUMELS, zero2.LESSON_BUCKET_BYTES // 4)]


# The teaching implementation, on real ranks.

@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_zero2_trains_as_one_device_adam_and_keeps_a_shard_of_the_gradients(world_size):
    results = ranks.train_on_ranks(zero2.train, world_size)
    assert ranks.first_difference(results, EXPECTED) is None
    pieces = [math.ceil(numel / world_size) for numel in BUCKETS]
    assert {result["after_backward"] for result in results} == {4 * sum(pieces)}
    assert [result["shard_numels"] for result in results] == [
        [stop - start for start, stop in (zero1.shard_range(numel, rank, world_size) for numel in BUCKETS)]
        for rank in range(world_size)]
    assert results[0]["still_to_come"] == [3, 1, 0]
    assert results[0]["collectives"] == (
        [("reduce_scatter", 4 * piece * world_size) for piece in pieces]
        + [("all_gather", 4 * piece * world_size) for piece in pieces]) * 3


def test_default_ddp_all_reduces_one_bucket_then_rebuilds_them_in_arrival_order_and_find_unused_keeps_the_courses():
    recorded = ddp_buckets.recorded(world_size=2, steps=3)
    sizes = {unused: [[bucket["bytes"] for bucket in step] for step in steps] for unused, steps in recorded.items()}
    assert sizes[False] == [[242_400], [121_200, 121_200], [121_200, 121_200]]
    assert recorded[False][1][0]["parameters"] == ["5.bias", "5.weight", "4.bias", "4.weight", "3.bias", "3.weight"]
    numels = [p.numel() for p in ddp_buckets.model().parameters()]
    cap = int(ddp_buckets.BUCKET_CAP_MB * 2**20) // 4
    course = [4 * sum(numels[i] for i in bucket) for bucket in zero2.bucket_indices(numels, cap)]
    assert sizes[True] == [course] * 3 == [[400, 121_200, 120_800]] * 3


def test_ddps_own_report_of_its_buckets_keeps_the_total_across_the_rebuild():
    assert ranks.launch(zero1_programs.logged_bucket_bytes_before_and_after_a_rebuild, 2)[0] == [242_400, 242_400]


def test_the_course_models_buckets_are_uneven_over_2_3_and_4_ranks():
    assert BUCKETS == [79, 240, 120]
    assert [[numel % n for numel in BUCKETS] for n in (2, 3, 4)] == [[1, 0, 0], [1, 0, 0], [3, 0, 0]]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_with_rings_zero2_sends_its_formulas_bytes_and_ddp_as_many_up_to_the_padding(world_size):
    compared = zero2_measure.compare(world_size)
    assert set(compared.differences.values()) == {None}
    zero2_wire, ddp_wire, zero1_wire = (compared.ranks_of(name, "wire") for name in ("ZeRO-2", "DDP", "ZeRO-1"))
    assert set(zero2_wire) == {lesson19.bytes_per_step(BUCKETS, world_size)}
    padding = 2 * (world_size - 1) * 4 * sum(math.ceil(b / world_size) - b / world_size for b in BUCKETS)
    assert all(abs(z - d - padding) <= 4 * 2 * (world_size - 1) for z, d in zip(zero2_wire, ddp_wire, strict=True))
    assert sum(zero1_wire) == sum(ddp_wire) + sum(
        (world_size - 1) * 4 * math.ceil(sum(NUMELS) / world_size) for _ in range(world_size))


def test_one_bucket_holds_every_gradient_at_once_and_starts_after_backward():
    results = ranks.train_on_ranks(zero2.train, 2, extra={"bucket_bytes": 10**6})
    assert ranks.first_difference(results, EXPECTED) is None
    assert results[0]["still_to_come"] == [0]
    assert results[0]["gradient_bytes"] >= 4 * sum(NUMELS)


def _step_first(model, batches, lr):
    zero2.Zero2(model, lr).step()


def test_a_step_before_backward_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"call loss.backward\(\) first"):
        ranks.train_on_ranks(_step_first, 2)


def test_bucket_indices_is_ddps_rule_reversed():
    assert zero2.bucket_indices(NUMELS, 100) == [[3, 4, 5], [1, 2], [0]]
    assert zero2.bucket_indices(NUMELS, 10**6) == [[0, 1, 2, 3, 4, 5]]
    assert zero2.bucket_indices([5], 1) == [[0]]


def test_post_accumulate_grad_hooks_run_in_the_order_they_were_registered():
    """zero2_check.watched counts the gradients before the learner's hook on the same parameter can free them."""
    weight = torch.ones(3, requires_grad=True)
    order = []
    weight.register_post_accumulate_grad_hook(lambda p: order.append(("first", p.grad is not None)))
    weight.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None) or order.append(("second", True)))
    (weight * 2).sum().backward()
    assert order == [("first", True), ("second", True)] and weight.grad is None


def test_the_gradient_bytes_figure_is_readable_for_both_models():
    compared = zero2_measure.compare(2)
    for runs in (compared.runs[0], compared.deep[0]):
        shown = {name: run for name, run in runs.items() if "held_at_hooks" in run}
        assert list(shown) == ["DDP", "ZeRO-2"]
        assert problems(gradient_bytes(shown, "Rank 0's gradients during the first backward, the deeper model, "
                                              "2 ranks")) == []


# The quiz: each experiment measures the keyed answer, and another answer in a planted world.

@pytest.mark.parametrize("question_id", QUESTIONS)
def test_the_experiment_measures_the_keyed_answer(question_id):
    question = QUESTIONS[question_id]
    assert run_experiment(question.experiment).value == question.answer


def test_a_zero2_that_all_reduced_would_be_measured_as_sending_one_and_a_half_times(monkeypatch):
    monkeypatch.setitem(zero2_measure.PROGRAMS, "ZeRO-2", zero1.zero1_program)
    value = run_experiment("wire_bytes_against_ddp").value
    assert value == "One and a half times DDP's: an all-gather on top of the gradients' collective"


def test_a_zero2_that_kept_the_full_gradients_would_be_measured_as_holding_all(monkeypatch):
    monkeypatch.setitem(zero2_measure.PROGRAMS, "ZeRO-2", zero2_measure.ddp_by_hand)
    value = run_experiment("gradient_bytes_after_backward").value
    assert value == "All of DDP's: every rank computed every gradient in backward"


def test_a_zero2_with_one_bucket_would_be_measured_as_starting_after_backward(monkeypatch):
    monkeypatch.setitem(zero2_measure.PROGRAMS, "ZeRO-2", functools.partial(zero2.train, bucket_bytes=10**6))
    value = run_experiment("first_reduce_scatter_during_backward").value
    assert value == "After backward: the bucket waits until every gradient exists"


# The exercises: the lesson's solutions pass; planted mistakes fail, each with a message that says why.

def _forward_order(numels, bucket_numel):
    return [(bucket, min(bucket)) for bucket in reversed(zero2.bucket_indices(numels, bucket_numel))]


def _counted_after(numels, bucket_numel):
    return [(bucket, len(numels) - 1 - max(bucket)) for bucket in zero2.bucket_indices(numels, bucket_numel)]


def _closes_before_overflowing(numels, bucket_numel):
    buckets, filled = [[]], 0
    for index, numel in enumerate(numels):
        if buckets[-1] and filled + numel > bucket_numel:
            buckets.append([])
            filled = 0
        buckets[-1].append(index)
        filled += numel
    return [(bucket, min(bucket)) for bucket in buckets[::-1]]


def _already_produced(numels, bucket_numel):
    return [(bucket, len(numels) - min(bucket)) for bucket in zero2.bucket_indices(numels, bucket_numel)]


def _zero2(reduce_scatter=True, free=True, bucket_numel=100, all_gather=True):
    """A learner's ZeRO-2 with one mistake switched on by a flag (the flags travel to the ranks as closure values)."""

    def train_zero2(model, batches, lr):
        rank, n = dist.get_rank(), dist.get_world_size()
        parameters = list(model.parameters())
        device = parameters[0].device
        buckets = [[parameters[i] for i in group]
                   for group in zero2.bucket_indices([p.numel() for p in parameters], bucket_numel)]
        pieces = [math.ceil(sum(p.numel() for p in bucket) / n) for bucket in buckets]

        def padded(tensors, piece):
            flat = torch.zeros(n * piece, device=device)
            values = torch.cat([t.reshape(-1) for t in tensors])
            flat[:values.numel()] = values
            return flat

        shards = [padded([p.detach() for p in bucket], piece).chunk(n)[rank].clone()
                  for bucket, piece in zip(buckets, pieces, strict=True)]
        optimizer = torch.optim.Adam(shards, lr=lr)

        def when_full(bucket, shard, piece):
            def hook(param):
                if all(p.grad is not None for p in bucket) and shard.grad is None:
                    flat = padded([p.grad for p in bucket], piece) / n
                    if reduce_scatter:
                        shard.grad = torch.empty_like(shard)
                        dist.reduce_scatter(shard.grad, list(flat.chunk(n)))
                    else:
                        dist.all_reduce(flat)
                        shard.grad = flat.chunk(n)[rank].clone()
                    if free:
                        for p in bucket:
                            p.grad = None
            return hook

        for bucket, shard, piece in zip(buckets, shards, pieces, strict=True):
            for p in bucket:
                p.register_post_accumulate_grad_hook(when_full(bucket, shard, piece))
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            for bucket, shard, piece in zip(buckets, shards, pieces, strict=True):
                shard.grad = None
                if all_gather:
                    flat = torch.empty(n * piece, device=device)
                    dist.all_gather(list(flat.chunk(n)), shard.detach())
                else:
                    flat = padded([p.detach() for p in bucket], piece)
                    flat.chunk(n)[rank].copy_(shard.detach())
                with torch.no_grad():
                    start = 0
                    for p in bucket:
                        p.copy_(flat[start:start + p.numel()].view_as(p))
                        start += p.numel()
        return parameters

    return train_zero2


MISTAKES = {
    "reduce_scatter_schedule": {
        "buckets in parameter order, not reversed": _forward_order,
        "counted from the end: the gradients after the bucket": _counted_after,
        "a bucket closes before it would overflow": _closes_before_overflowing,
        "the gradients already produced": _already_produced,
    },
    "zero2_bytes_per_step": {
        "no padding: (n - 1) / n of each bucket": lambda numels, n: sum(2 * (n - 1) * b * 4 / n for b in numels),
        "the reduce-scatter only": lambda numels, n: sum((n - 1) * math.ceil(numel / n) * 4 for numel in numels),
        "n pieces per collective, not n - 1": lambda numels, n: sum(2 * n * math.ceil(b / n) * 4 for b in numels),
        "pieces rounded down": lambda numels, n: sum(2 * (n - 1) * (numel // n) * 4 for numel in numels),
    },
    "train_zero2": {
        "an all-reduce instead of a reduce-scatter": _zero2(reduce_scatter=False),
        "the full gradients kept": _zero2(free=False),
        "one bucket for the whole model": _zero2(bucket_numel=10**6),
        "no all-gather: each rank keeps only its own updates": _zero2(all_gather=False),
    },
}


@pytest.mark.parametrize("name", MISTAKES)
def test_the_lessons_solution_passes(name):
    assert exercises.check(name, solution(name)).status == PASSED


@pytest.mark.parametrize(("name", "mistake"), [(name, mistake) for name in MISTAKES for mistake in MISTAKES[name]])
def test_a_planted_mistake_fails_with_a_message(name, mistake):
    report = exercises.check(name, MISTAKES[name][mistake])
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]
    assert failed and "Traceback" not in repr(report)
    assert all(detail.startswith(("expected", "your code", "rank", "after training")) for detail in failed), failed
