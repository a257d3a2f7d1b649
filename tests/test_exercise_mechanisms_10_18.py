"""Issue 36 for lessons 10, 12 and 18: the checks watch the mechanism, not only the result.

``ring_all_reduce`` (lesson 10) sends through the check's ``send``: the audit's chunk-based ring (M10a) and plain sum
(M10b) fail, and so do planted rings that send the wrong way, too few steps, or in the wrong order. ``zero1_training``
(lesson 18) and ``capstone_zero1`` (lesson 12) also run under SGD, where the audit's missing ``/ n`` (M18-3, MC-4),
which Adam hides, moves the weights n times too far: rejected by over 100 times the tolerance, with a message that
names it. Rank-based tests run one case on 2 ranks.
"""

import dataclasses
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from dpcourse import exercises, ranks
from dpcourse.exercises import capstone, lesson10, lesson18
from dpcourse.exercises.check import FAILED, NOT_ATTEMPTED, PASSED, run
from tests.lesson_solutions import solution


def _details(report) -> list[str]:
    return [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]


# Lesson 10: the ring, message by message.

def _ring(tensors, send, split="tensor_split", order=("reduce-scatter", "all-gather"), neighbour=1, steps=None,
          gather_from=1, gather_adds=False):
    """The lesson's ring with one planted mistake: another split, phase order, neighbour or number of steps, the
    all-gather starting from another piece than the finished one, or adding what arrives."""
    n = len(tensors)
    pieces = [list(getattr(t, split)(n)) for t in tensors]
    for phase in order:
        for step in range(n - 1 if steps is None else steps):
            k_of = [(r - step) % n if phase == "reduce-scatter" else (r + gather_from - step) % n for r in range(n)]
            arrived = [send(r, (r + neighbour) % n, pieces[r][k_of[r]]) for r in range(n)]
            for r in range(n):
                receiver, k = (r + neighbour) % n, k_of[r]
                adds = phase == "reduce-scatter" or gather_adds
                pieces[receiver][k] = pieces[receiver][k] + arrived[r] if adds else arrived[r]
    return [torch.cat(p) for p in pieces]


def m10a_chunk(tensors, send):
    """The audit's M10a: chunk(n) instead of tensor_split(n)."""
    return _ring(tensors, send, split="chunk")


def m10b_plain_sum(tensors, send):
    """The audit's M10b: no ring at all (the transfer counts it reported have no place to go now)."""
    total = torch.stack(tensors).sum(0)
    return [total.clone() for _ in tensors]


def plain_sum_with_fake_traffic(tensors, send):
    """M10b made to look busy: 2(n - 1) sends of its own pieces to rank r + 1, the sum computed directly."""
    n = len(tensors)
    for r, t in enumerate(tensors):
        for step in range(2 * (n - 1)):
            send(r, (r + 1) % n, t.tensor_split(n)[step % n])
    return m10b_plain_sum(tensors, send)


def everyone_to_everyone(tensors, send):
    n = len(tensors)
    for r in range(n):
        for target in range(n):
            if target != r:
                send(r, target, tensors[r])
    return m10b_plain_sum(tensors, send)


RING_MISTAKES = {
    "M10a: chunk(n) instead of tensor_split(n)": (m10a_chunk, "tensor_split(3) cuts 7 values into pieces of [3, 2, 2]"),
    "M10b: a plain sum, nothing sent": (m10b_plain_sum, "rank 0 sent 0 pieces, expected 2(n - 1) = 2"),
    "M10b with 2(n - 1) sends of its own pieces": (plain_sum_with_fake_traffic, "is not a piece of the sum"),
    "sends to rank r - 1": (lambda t, send: _ring(t, send, neighbour=-1), "in a ring, rank r sends only to rank r + 1"),
    "only n - 1 steps: reduce-scatter without all-gather": (
        lambda t, send: _ring(t, send, order=("reduce-scatter",)), "rank 0 sent 1 piece, expected 2(n - 1) = 2"),
    "all-gather before reduce-scatter": (
        lambda t, send: _ring(t, send, order=("all-gather", "reduce-scatter")), "is not a finished piece"),
    "n - 2 steps per phase": (lambda t, send: _ring(t, send, steps=max(len(t) - 2, 0)), "expected 2(n - 1)"),
    "all-gather starts from piece r, not the finished r + 1": (
        lambda t, send: _ring(t, send, gather_from=0), "(all-gather step 0"),
    "all-gather adds what arrives": (lambda t, send: _ring(t, send, gather_adds=True), "(all-gather step 1"),
    "every rank sends its tensor to every other": (everyone_to_everyone, "in a ring, rank r sends only to rank r + 1"),
}


@pytest.mark.lesson10
@pytest.mark.parametrize("mistake", RING_MISTAKES)
def test_a_wrong_ring_is_rejected_by_what_it_sends(mistake):
    function, says = RING_MISTAKES[mistake]
    report = exercises.check("ring_all_reduce", function)
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    assert any(says in detail for detail in _details(report)), repr(report)


def _generated_ring(n: int, length: int):
    """The exercise's own generated case of ``n`` ranks holding ``length`` values each."""
    wanted = f"{n} ranks, {length} values"
    return next(case for case in lesson10.RING_ALL_REDUCE.generated() if case.description == wanted)


@pytest.mark.lesson10
def test_the_chunk_ring_fails_on_every_size_where_chunk_gives_fewer_than_n_pieces():
    for n, length in [(4, 6), (3, 4), (4, 5), (5, 8)]:
        case = _generated_ring(n, length)
        assert len(torch.empty(length).chunk(n)) < n
        with pytest.raises(IndexError):
            m10a_chunk(*case.args, lambda source, target, piece: piece)
        results = solution("ring_all_reduce")(*case.args, lambda source, target, piece: piece.clone())
        assert all(torch.allclose(result, sum(case.args[0]), atol=1e-6) for result in results)
    generated = {case.description for case in lesson10.RING_ALL_REDUCE.generated()}
    assert {"4 ranks, 6 values", "3 ranks, 4 values", "4 ranks, 5 values", "5 ranks, 8 values", "1 rank, 3 values",
            "3 ranks, 2 values", "5 ranks, 0 values"} <= generated


@pytest.mark.lesson10
def test_the_lessons_ring_passes_every_case_and_sends_what_a_ring_sends():
    report = exercises.check("ring_all_reduce", solution("ring_all_reduce"))
    assert report.status == PASSED, repr(report)
    case = _generated_ring(4, 6)
    results, messages = lesson10.RING_ALL_REDUCE.call(solution("ring_all_reduce"), case)
    assert [(source, target) for source, target, _ in messages[:4]] == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert [len(piece) for _, _, piece in messages[:4]] == [2, 2, 1, 1]  # rank r sends piece r first
    assert len(messages) == 4 * 2 * 3


@pytest.mark.lesson10
def test_the_oracle_uses_its_own_copies_made_before_the_ring_runs():
    def zeroes_its_inputs(tensors, send):
        results = solution("ring_all_reduce")(tensors, send)
        for t in tensors:
            t.zero_()
        return results

    assert exercises.check("ring_all_reduce", zeroes_its_inputs).status == PASSED


@pytest.mark.lesson10
def test_a_send_of_something_else_than_a_tensor_names_the_learners_line():
    def sends_a_list(tensors, send):
        return [send(0, 1 % len(tensors), t.tolist()) for t in tensors]

    detail = _details(exercises.check("ring_all_reduce", sends_a_list))[0]
    assert detail.startswith("raised TypeError: send(source, target, piece): piece must be a tensor, got list")
    assert "(line" in detail and "t.tolist()" in detail


# Lessons 12 and 18: ZeRO-1 under Adam and under SGD. The planted programs travel to the ranks as their source.

def _zero1(model, batches, lr, optimizer_class, mistake):
    """The lessons' ZeRO-1 with one planted ``mistake`` ("" for none)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    parameters = list(model.parameters())
    flat = parameters_to_vector(parameters).detach()
    numel = flat.numel()
    size = math.ceil(numel / n)
    start, stop = min(rank * size, numel), min((rank + 1) * size, numel)
    if mistake == "array_split":  # numpy's rule, the first numel % n ranks one longer; gathered as ceil-sized
        base, extra = divmod(numel, n)
        start = rank * base + min(rank, extra)
        stop = start + base + (rank < extra)
    mine = flat[start:stop].clone().requires_grad_()
    optimizer = optimizer_class(parameters if mistake == "whole model" else [mine], lr=lr)
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        gradient = parameters_to_vector(p.grad for p in parameters)
        if mistake != "no all-reduce":
            dist.all_reduce(gradient)
        divisor = {"sum": 1, "no all-reduce": 1, "twice": n * n}.get(mistake, n)
        if mistake == "whole model":  # DDP: every rank steps every parameter, with the whole optimizer state
            vector_to_parameters(gradient / divisor, [p.grad for p in parameters])
            optimizer.step()
            continue
        if mistake != "gather first":
            mine.grad = gradient[start:stop] / divisor
            optimizer.step()
        if mistake == "no all-gather":  # only this rank's shard moves: the others' updates never arrive
            with torch.no_grad():
                flat = parameters_to_vector(parameters)
                flat[start:stop] = mine
                vector_to_parameters(flat, parameters)
            continue
        padded = mine.detach().new_zeros(size)
        padded[: stop - start] = mine.detach()
        pieces = [torch.empty_like(padded) for _ in range(n)]
        dist.all_gather(pieces, padded)
        with torch.no_grad():
            vector_to_parameters(torch.cat(pieces)[:numel], parameters)
        if mistake == "gather first":  # the step after the all-gather: its update reaches the others a step late
            mine.grad = gradient[start:stop] / divisor
            optimizer.step()
    return parameters


def zero1_with(mistake):
    """A learner's ``zero1_training`` with ``mistake`` planted (see ``_zero1``)."""
    def zero1_training(model, batches, lr, optimizer_class):
        return _zero1(model, batches, lr, optimizer_class, mistake)

    return zero1_training


DIVIDE = "n = 2 times too far, exactly where one-device SGD with lr 0.02 ends. Is the summed gradient divided by n?"
ZERO1_MISTAKES = {
    "M18-3 / MC-4: the all-reduced gradient not divided by n": ("sum", DIVIDE),
    "the gradient divided by n twice": ("twice", "1/n = 1/2 as far, exactly where one-device SGD with lr 0.005 ends"),
    "the all-gather before the step": ("gather first", "differs from one-device SGD"),
    "no all-reduce: each rank steps with its own gradient": ("no all-reduce", "differs from one-device SGD"),
    "Adam state not sharded: every rank steps the whole model (DDP)": ("whole model", "Give its Adam only"),
}


EXERCISES = [pytest.param(lesson18.ZERO1_TRAINING, marks=pytest.mark.lesson18),
             pytest.param(capstone.CAPSTONE_ZERO1, marks=pytest.mark.lesson12)]


def _first_case(exercise):
    """``exercise`` with its first case only: 2 ranks."""
    return dataclasses.replace(exercise, cases=lambda: exercise.cases()[:1])


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
@pytest.mark.parametrize("mistake", ZERO1_MISTAKES)
def test_a_planted_zero1_mistake_is_rejected_with_a_message_that_names_it(exercise, mistake):
    planted, says = ZERO1_MISTAKES[mistake]
    report = run(_first_case(exercise), zero1_with(planted))
    assert report.status == FAILED, f"{mistake} passed:\n{report!r}"
    assert says in _details(report)[0], repr(report)


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_a_missing_division_by_n_fails_by_over_100_times_the_tolerance(exercise):
    case = exercise.cases()[0]
    answer = lesson18.train_each_case(zero1_with("sum"), case)
    training = case.context["training"]
    expected = ranks.one_device(**{**training, "lr": ranks.SGD_LR}, optimizer_class=torch.optim.SGD)
    tolerance = [1e-6 + 1e-5 * want.abs() for want in expected]
    worst = max(((got - want).abs() / tol).max().item()
                for got, want, tol in zip(answer[0]["sgd"], expected, tolerance, strict=True))
    assert worst > 100
    assert DIVIDE in lesson18.same_weights_and_sharded_state(case, answer)
    # Adam alone hides it: its weights are within a few 1e-6 of one-device Adam's
    adam = ranks.one_device(**training)
    assert max((got - want).abs().max().item() for got, want in zip(answer[0]["parameters"], adam, strict=True)) < 1e-4


@pytest.mark.lesson18
def test_the_planted_program_without_a_mistake_passes_on_2_ranks():
    report = run(_first_case(lesson18.ZERO1_TRAINING), zero1_with(""))
    assert report.status == PASSED, repr(report)


@pytest.mark.lesson18
def test_a_program_without_an_optimizer_class_is_told_the_signature_before_any_rank_starts():
    def zero1_training(model, batches, lr):
        raise AssertionError("never called")

    detail = _details(run(_first_case(lesson18.ZERO1_TRAINING), zero1_training))[0]
    assert "must take (model, batches, lr, optimizer_class)" in detail


@pytest.mark.lesson18
def test_the_stub_is_still_not_attempted_yet():
    def zero1_training(model, batches, lr, optimizer_class):
        raise NotImplementedError

    assert run(_first_case(lesson18.ZERO1_TRAINING), zero1_training).status == NOT_ATTEMPTED
