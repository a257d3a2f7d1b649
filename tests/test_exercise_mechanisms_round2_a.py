"""Issue 36, round 2: the mutation report's survivors in lessons 04, 05, 13 and 16 now fail their checks.

``run_replicas`` notes every exception that a thread it started let escape (an extra thread indexing past the
last replica); ``gather_structure`` has a one-replica case; ``in_thread_with_autocast`` is called outside any
autocast block and inside one that names a dtype but is off, and wants the output still in the model's graph;
``ring_all_reduce_on_ranks`` has a size where ``chunk(n)`` gives fewer than n pieces. Each survivor is written
out as the mistake a learner would make, next to other mistakes of the same kind and the lesson's own answer.
"""

import dataclasses
import threading

import pytest
import torch
import torch.distributed as dist

from dpcourse import exercises
from dpcourse.exercises import lesson13
from dpcourse.exercises.check import FAILED, PASSED, run
from tests.lesson_solutions import solution


def _failures(report) -> list[str]:
    return [outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED]


# Lesson 04: every thread the answer starts is watched, not only the replicas' results.

def _threads(functions, inputs, count, work=None):
    """Run ``work(i)`` (by default: replica i into its slot) in ``count`` threads, all started, then all joined."""
    outputs = [None] * len(functions)

    def replica(i):
        outputs[i] = functions[i](inputs[i])

    threads = [threading.Thread(target=work or replica, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outputs


def one_thread_too_many(functions, inputs):
    """The report's survivor: range(len(functions) + 1), whose last thread dies of an IndexError unseen."""
    if len(functions) == 1:
        return [functions[0](inputs[0])]
    return _threads(functions, inputs, len(functions) + 1)


def extra_thread_for_inputs(functions, inputs):
    """Threads counted from a list one longer than the replicas (a spare input): the extra one fails."""
    if len(functions) == 1:
        return [functions[0](inputs[0])]
    return _threads(functions, [*inputs, None], len(functions) + 1)


def worker_that_fails_after_its_result(functions, inputs):
    """Each thread stores its output, then raises on a later line (a wrong log call): the failure goes unseen."""
    if len(functions) == 1:
        return [functions[0](inputs[0])]
    outputs = [None] * len(functions)

    def work(i):
        outputs[i] = functions[i](inputs[i])
        raise KeyError(f"replica {i}")

    _threads(functions, inputs, len(functions), work)
    return outputs


@pytest.mark.parametrize("mistake", [one_thread_too_many, extra_thread_for_inputs, worker_that_fails_after_its_result])
def test_a_thread_that_fails_unseen_is_rejected(mistake):
    report = exercises.check("run_replicas", mistake)
    failures = _failures(report)
    assert report.status == FAILED and failures
    assert all("a thread the function started raised" in detail for detail in failures), failures


def test_the_lessons_run_replicas_starts_no_failing_thread():
    assert exercises.check("run_replicas", solution("run_replicas")).status == PASSED


# Lesson 05: one replica, where outputs[1] does not exist.

def _gather_structure(index: int = 0, cat_one: bool = True):
    """The lesson's gather_structure, reading the structure from ``outputs[index]``; ``cat_one=False`` returns a
    single replica's output list instead of its structure."""

    def gather_structure(outputs):
        if len(outputs) == 1 and not cat_one:
            return outputs
        first = outputs[index]
        if first is None:
            return None
        if isinstance(first, torch.Tensor):
            return torch.cat(outputs)
        if isinstance(first, dict):
            return type(first)((key, gather_structure([out[key] for out in outputs])) for key in first)
        items = [gather_structure(same_position) for same_position in zip(*outputs, strict=True)]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)

    return gather_structure


@pytest.mark.parametrize(("mistake", "expected"), [
    (_gather_structure(index=1), "IndexError"),
    (_gather_structure(index=-2), "IndexError"),
    (_gather_structure(cat_one=False), "expected a tuple, got list"),
])
def test_gather_structure_with_one_replica_is_checked(mistake, expected):
    report = exercises.check("gather_structure", mistake)
    failures = _failures(report)
    assert len(failures) == 1 and expected in failures[0], failures
    assert report.outcomes[-1].verdict == FAILED


def test_the_lessons_gather_structure_passes_the_one_replica_case():
    assert exercises.check("gather_structure", solution("gather_structure")).status == PASSED


# Lesson 16: autocast off (no block, or a block that names a dtype), and the output kept in the graph.

def _in_thread(read_enabled: bool = True, detach: bool = False, no_grad: bool = False):
    """The lesson's in_thread_with_autocast; ``read_enabled=False`` enters autocast with the caller's dtype only."""

    def in_thread_with_autocast(function, x):
        enabled, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
        result = []

        def work():
            block = torch.autocast("cpu", enabled=enabled, dtype=dtype) if read_enabled else torch.autocast(
                "cpu", dtype=dtype)
            with block, torch.set_grad_enabled(not no_grad):
                result.append(function(x))

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        return result[0].detach() if detach else result[0]

    return in_thread_with_autocast


@pytest.mark.parametrize(("mistake", "failed", "expected"), [
    (_in_thread(read_enabled=False), 2, "enabled flag *and* dtype"),
    (_in_thread(detach=True), 4, "cut from the model's graph"),
    (_in_thread(no_grad=True), 4, "cut from the model's graph"),
])
def test_autocast_off_and_a_detached_output_are_rejected(mistake, failed, expected):
    failures = _failures(exercises.check("in_thread_with_autocast", mistake))
    assert len(failures) == failed and all(expected in detail for detail in failures), failures


def test_the_lessons_in_thread_with_autocast_passes_with_autocast_off():
    assert exercises.check("in_thread_with_autocast", solution("in_thread_with_autocast")).status == PASSED


# Lesson 13: the ring on 3 ranks and 4 values, where chunk(3) gives 2 pieces. Rank code travels as source.

def _ring_in(split: str):
    def ring_all_reduce_on_ranks(tensor):
        rank, n = dist.get_rank(), dist.get_world_size()
        right, left = (rank + 1) % n, (rank - 1) % n
        flat = tensor.view(-1)
        pieces = flat.chunk(n) if split == "chunk" else flat.split(max(flat.numel() // n, 1))
        for step in range(n - 1):
            arriving = pieces[(rank - step - 1) % n]
            incoming = torch.empty_like(arriving)
            request = dist.isend(pieces[(rank - step) % n], dst=right)
            dist.recv(incoming, src=left)
            request.wait()
            arriving += incoming
        for step in range(n - 1):
            request = dist.isend(pieces[(rank + 1 - step) % n], dst=right)
            dist.recv(pieces[(rank - step) % n], src=left)
            request.wait()

    return ring_all_reduce_on_ranks


def _uneven_case() -> lesson13.Exercise:
    """The ring exercise with its 3-rank, 4-value case only (a case on ranks takes seconds)."""
    exercise = lesson13.RING_ALL_REDUCE_ON_RANKS
    (case,) = [case for case in exercise.cases() if "4 values" in case.description]
    return dataclasses.replace(exercise, cases=lambda: [case])


@pytest.mark.parametrize(("split", "expected"), [("chunk", "IndexError"), ("split(numel // n)", "rank 0")])
def test_a_ring_whose_pieces_are_not_n_is_rejected(split, expected):
    report = run(_uneven_case(), _ring_in(split))
    assert report.status == FAILED and expected in report.outcomes[0].detail, report.outcomes[0].detail


def test_the_lessons_ring_passes_where_chunk_gives_fewer_than_n_pieces():
    assert run(_uneven_case(), solution("ring_all_reduce_on_ranks")).status == PASSED


# Lesson 13: an isend whose request nobody waits for. On gloo the bytes usually arrive anyway, so the sums alone
# cannot tell; traffic.counted watches dist.Work.wait.
def reduce_then_broadcast_without_wait(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank != 0:
        dist.send(tensor, dst=0)
        dist.recv(tensor, src=0)
        return
    incoming = torch.empty_like(tensor)
    for source in range(1, n):
        dist.recv(incoming, src=source)
        tensor += incoming
    for other in range(1, n):
        dist.isend(tensor, dst=other)


def test_an_isend_never_waited_for_is_rejected():
    report = exercises.check("reduce_then_broadcast", reduce_then_broadcast_without_wait)
    assert report.status != PASSED
    assert any("never waited for" in outcome.detail for outcome in report.outcomes), repr(report)


def test_the_lessons_reduce_then_broadcast_waits_for_its_sends():
    assert exercises.check("reduce_then_broadcast", solution("reduce_then_broadcast")).status == PASSED
