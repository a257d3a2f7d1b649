"""Lesson 13 on real ranks: the five collectives as torch documents them, the two hand-written all-reduces
against ``dist.all_reduce`` with their bytes counted, DataParallel's bytes through device 0, a learner's
function sent to the ranks as source, and what the check shows when that function raises or deadlocks.

The oracle is torch: every rank's ``dist.all_reduce`` of the same tensor, and the collectives' docstrings.
No timing is asserted.
"""

import functools
import linecache

import pytest
import torch
import torch.distributed as dist

from dpcourse import exercises
from dpcourse.ddp.demos import collectives, compare, pointtopoint
from dpcourse.exercises.check import FAILED
from dpcourse.ranks import by_source, learner


@functools.cache
def _moved(world_size: int) -> dict[str, collectives.Moved]:
    return collectives.collectives(world_size)


@pytest.mark.parametrize("n", [2, 3])
def test_each_collective_leaves_what_its_docstring_promises(n: int) -> None:
    moved = _moved(n)
    inputs = [[10 * (rank + 1) + piece for piece in range(n)] for rank in range(n)]
    total = [sum(column) for column in zip(*inputs, strict=True)]
    everyone = tuple(range(n))
    assert all(m.before == inputs for name, m in moved.items() if name != "all_gather")
    assert moved["broadcast"].after == [inputs[0]] * n
    assert moved["broadcast"].after_from == [[(0,)] * n] * n
    assert moved["reduce"].after[0] == total and moved["reduce"].after_from[0] == [everyone] * n
    assert moved["reduce"].defined == [True] + [False] * (n - 1)
    assert moved["all_reduce"].after == [total] * n and moved["all_reduce"].after_from == [[everyone] * n] * n
    diagonal = [inputs[rank][rank] for rank in range(n)]
    assert moved["all_gather"].before == [[v if p == r else None for p, v in enumerate(diagonal)] for r in range(n)]
    assert moved["all_gather"].after == [diagonal] * n
    assert moved["all_gather"].after_from == [[(r,) for r in range(n)]] * n
    assert moved["reduce_scatter"].after == [[total[p] if p == r else None for p in range(n)] for r in range(n)]
    assert moved["reduce_scatter"].after_from[1] == [everyone if p == 1 else () for p in range(n)]


def test_the_table_names_undefined_results_and_an_unknown_collective_is_refused() -> None:
    assert "rank 1" in str(_moved(2)["reduce"]) and "not defined" in str(_moved(2)["reduce"])
    assert "not defined" not in str(_moved(2)["all_reduce"])
    with pytest.raises(ValueError, match="allreduce"):
        collectives.collectives(2, ("allreduce",))


def test_both_all_reduces_equal_dist_all_reduce_and_send_the_bytes_their_formulas_say() -> None:
    runs = compare.compare(numels=(12, 7), world_sizes=(2, 3, 4), repeats=1)
    assert all(run.correct for run in runs.runs)
    for n in (2, 3, 4):
        nbytes = 48
        assert runs.find("reduce-then-broadcast", n, nbytes).sent == [(n - 1) * nbytes] + [nbytes] * (n - 1)
        assert runs.find("reduce-then-broadcast", n, nbytes).received == [(n - 1) * nbytes] + [nbytes] * (n - 1)
        assert runs.find("ring", n, nbytes).sent == [2 * (n - 1) * nbytes // n] * n
        assert runs.find("gloo", n, nbytes).sent == [0] * n  # inside the backend: not counted
        uneven = runs.find("ring", n, 28)
        assert sum(uneven.sent) == sum(uneven.received) == 2 * (n - 1) * 28
    assert "4 ranks, ring" in runs.bytes_table(48) and "(1.50 S)" in runs.bytes_table(48)
    assert runs.time_table().count("\n") == 3 * 2


@pytest.mark.cuda
def test_both_all_reduces_equal_nccls_and_send_as_many_bytes_on_gpus() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs a GPU per rank: 2 GPUs")
    runs = compare.compare(numels=(12,), world_sizes=(2,), repeats=1, backend="nccl")
    assert all(run.correct for run in runs.runs)
    assert runs.find("ring", 2, 48).sent == runs.find("reduce-then-broadcast", 2, 48).sent == [48, 48]


def test_dataparallel_sends_n_minus_1_copies_out_of_device_0_and_takes_as_many_back() -> None:
    for n in (1, 2, 4):
        counted = compare.dataparallel_bytes(n)
        assert counted["replicate"] == counted["reduce-add"] == (n - 1) * counted["parameters"]


def test_isend_then_recv_passes_to_the_right_and_a_blocking_send_first_waits() -> None:
    assert pointtopoint.pass_right(3) == [2, 0, 1]
    with pytest.raises(TimeoutError):
        pointtopoint.pass_right(2, blocking=True, timeout=3)


# A learner's function, sent by source.

SCALE = 3


def _helper(x):
    return x * SCALE


def _uses_outside_names(x):
    return _helper(torch.as_tensor(x)).tolist()


def test_a_function_travels_with_its_modules_helpers_values_and_closure() -> None:
    offset = 1

    def shifted(x):
        return _uses_outside_names(x)[0] + offset

    sent = by_source.SourceFunction.of(shifted)
    assert isinstance(sent.names["_uses_outside_names"], by_source.SourceFunction)
    assert sent.names["offset"] == 1
    rebuilt = sent.rebuild()
    assert rebuilt is not shifted and rebuilt([2]) == 7


def test_a_value_that_cannot_be_pickled_stays_behind() -> None:
    lock = __import__("threading").Lock()

    def uses_a_lock():
        return lock.locked()

    with pytest.raises(NameError, match="lock"):
        by_source.SourceFunction.of(uses_a_lock).rebuild()()


def test_lambdas_and_functions_without_source_are_refused_with_a_sentence() -> None:
    with pytest.raises(TypeError, match="def"):
        by_source.SourceFunction.of(lambda tensor: None)
    namespace: dict = {}
    exec("def made_by_exec(tensor):\n    pass\n", namespace)
    with pytest.raises(TypeError, match="source of made_by_exec cannot be found"):
        by_source.SourceFunction.of(namespace["made_by_exec"])
    linecache.checkcache()


def _sends_then_calls_all_reduce(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    request = dist.isend(tensor.clone(), (rank + 1) % n)
    incoming = torch.empty_like(tensor)
    dist.recv(incoming, (rank - 1) % n)
    request.wait()
    dist.all_reduce(tensor)


def test_run_on_ranks_counts_bytes_and_notes_collectives() -> None:
    tensors = [torch.full((5,), float(rank)) for rank in range(3)]
    ranks = learner.run_on_ranks(_sends_then_calls_all_reduce, tensors)
    assert [r["sent"] for r in ranks] == [r["received"] for r in ranks] == [20, 20, 20]
    assert all(r["collectives"] == ["all_reduce"] for r in ranks)
    assert all(torch.equal(r["result"], torch.full((5,), 3.0)) and torch.equal(r["expected"], r["result"])
               for r in ranks)


def _fails_on_rank_1(tensor):
    if dist.get_rank() == 1:
        raise KeyError("rank 1's own mistake")
    dist.recv(tensor, 1)  # rank 0 would wait for ever: the failing rank stops it


def test_the_learners_own_exception_comes_back_and_the_other_ranks_are_stopped() -> None:
    with pytest.raises(KeyError, match="rank 1's own mistake"):
        learner.run_on_ranks(_fails_on_rank_1, [torch.zeros(2), torch.zeros(2)])


def _receives_a_smaller_tensor(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    request = dist.isend(tensor, (rank + 1) % n)
    dist.recv(torch.empty(tensor.numel() - 1), (rank - 1) % n)
    request.wait()


def test_a_rank_that_gloo_aborts_is_explained_without_a_pid() -> None:
    with pytest.raises(RuntimeError, match="aborted inside torch.distributed") as caught:
        learner.run_on_ranks(_receives_a_smaller_tensor, [torch.zeros(4), torch.zeros(4)])
    assert "pid" not in str(caught.value)


def _every_rank_sends_first(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    dist.send(tensor, (rank + 1) % n)
    dist.recv(tensor, (rank - 1) % n)


def test_a_deadlocked_answer_is_one_failed_line_naming_the_cause(monkeypatch) -> None:
    monkeypatch.setattr(learner, "TIMEOUT", 2.0)
    report = exercises.check("ring_all_reduce_on_ranks", _every_rank_sends_first)
    assert report.status == FAILED
    detail = report.outcomes[0].detail
    assert detail.startswith("raised TimeoutError: ranks [0, 1] were still running after 2 s")
    assert "dist.isend" in detail
    assert "rank 0 was waiting in send" in detail and "rank 1 was waiting in send" in detail
    assert "Traceback" not in repr(report)
