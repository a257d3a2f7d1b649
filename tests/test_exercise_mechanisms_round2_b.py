"""Round 2 of issue 36 for the capstone (lesson 12): the mutation report's survivors now fail.

``capstone_broadcast`` has a case with one tensor, where grouping the gradients off by one drops the last replica's;
``capstone_parallel_apply`` counts the threads the learner's call starts, so a spare thread that fails where no one
sees it is rejected; ``capstone_data_parallel`` has a model with one parameter, where grouping Broadcast's output off
by one drops the last replica. Each survivor is planted here with more wrong answers of its kind.
"""

import threading

import pytest
import torch

from dpcourse.exercises import capstone
from dpcourse.exercises.check import FAILED, PASSED
from tests.capstone_pieces import SOLUTION, checked, with_piece

Broadcast, scatter, replicate, gather = (SOLUTION[name] for name in ("Broadcast", "scatter", "replicate", "gather"))
parallel_apply = SOLUTION["parallel_apply"]


def _failed(report) -> dict[str, str]:
    return {outcome.case.description: outcome.detail for outcome in report.outcomes if outcome.verdict == FAILED}


# capstone_broadcast: a case with one tensor.

def _broadcast(backward):
    return type("PlantedBroadcast", (torch.autograd.Function,),
                {"forward": Broadcast.forward, "backward": staticmethod(backward)})


def _grouping_stops_one_short(ctx, *grads):
    """The mutation report's survivor: range(0, len(grads) - 1, ctx.count)."""
    per_replica = [grads[i : i + ctx.count] for i in range(0, len(grads) - 1, ctx.count)]
    return (None, *[sum(copies) for copies in zip(*per_replica, strict=True)])


def _grouping_leaves_out_the_last_replica(ctx, *grads):
    """Counts the replicas as len(grads) // count - 1 and groups that many."""
    replicas = len(grads) // ctx.count - 1 or 1
    per_replica = [grads[r * ctx.count : (r + 1) * ctx.count] for r in range(replicas)]
    return (None, *[sum(copies) for copies in zip(*per_replica, strict=True)])


def _sums_the_copies_only(ctx, *grads):
    """Skips replica 0 ("the original already has its gradient"): only the clones' gradients are summed."""
    per_replica = [grads[i : i + ctx.count] for i in range(ctx.count, len(grads), ctx.count)] or [grads[: ctx.count]]
    return (None, *[sum(copies) for copies in zip(*per_replica, strict=True)])


def _pairs_the_gradients(ctx, *grads):
    """Adds the gradients two by two, as if every parameter had two tensors (the 2-tensor cases' shape)."""
    return (None, *[grads[i] + grads[i + ctx.count] if i + ctx.count < len(grads) else grads[i]
                    for i in range(ctx.count)])


BROADCAST_MISTAKES = {
    "grouping stops one short": _grouping_stops_one_short,
    "the last replica left out": _grouping_leaves_out_the_last_replica,
    "replica 0's gradient left out": _sums_the_copies_only,
    "two replicas added, not all": _pairs_the_gradients,
}


@pytest.mark.parametrize("mistake", BROADCAST_MISTAKES)
def test_a_broadcast_backward_that_drops_a_replica_fails_the_one_tensor_case(mistake):
    report = checked("capstone_broadcast", with_piece(Broadcast=_broadcast(BROADCAST_MISTAKES[mistake])))
    detail = _failed(report).get("3 replicas of 1 tensor")
    assert detail is not None, f"{mistake} passed the one-tensor case:\n{report!r}"
    assert "every replica's gradient" in detail or "raised" in detail, detail


def test_the_survivor_passed_every_case_but_the_one_tensor_case():
    report = checked("capstone_broadcast", with_piece(Broadcast=_broadcast(_grouping_stops_one_short)))
    assert list(_failed(report)) == ["3 replicas of 1 tensor"], repr(report)


# capstone_parallel_apply: the threads the call starts are counted.

def _parallel_apply_with_spare_threads(spare: int, target=None):
    """The lesson's parallel_apply, starting ``spare`` more threads than replicas: by default the survivor's
    range(len(functions) + 1), whose extra thread fails with an IndexError that no one sees."""
    def planted(functions, inputs):
        outputs = [None] * len(functions)

        def run(i):
            try:
                outputs[i] = functions[i](inputs[i])
            except Exception as error:
                outputs[i] = error

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(functions))]
        threads += [threading.Thread(target=target or run, args=(len(functions) + k,)) for k in range(spare)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for output in outputs:
            if isinstance(output, Exception):
                raise output
        return outputs

    return planted


def _a_thread_per_input_and_one_more(functions, inputs):
    """Threads over range(len(inputs) + 1), each writing to a list of that length: the last output is None."""
    outputs = [None] * (len(inputs) + 1)

    def run(i):
        try:
            outputs[i] = functions[i](inputs[i])
        except Exception as error:
            outputs[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs) + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outputs = outputs[: len(inputs)]
    for output in outputs:
        if isinstance(output, Exception):
            raise output
    return outputs


PARALLEL_APPLY_MISTAKES = {
    "one thread too many (the survivor)": _parallel_apply_with_spare_threads(1),
    "a spare thread that does nothing": _parallel_apply_with_spare_threads(1, target=lambda i: None),
    "two spare threads": _parallel_apply_with_spare_threads(2),
    "threads over len(inputs) + 1": _a_thread_per_input_and_one_more,
}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the mistake: errors stay there
@pytest.mark.parametrize("mistake", PARALLEL_APPLY_MISTAKES)
def test_a_parallel_apply_that_starts_more_threads_than_replicas_fails_every_case(mistake):
    report = checked("capstone_parallel_apply", with_piece(parallel_apply=PARALLEL_APPLY_MISTAKES[mistake]))
    failed = _failed(report)
    assert len(failed) == len(report.outcomes), f"{mistake} passed a case:\n{report!r}"
    assert all("threads for" in detail and "no more" in detail for detail in failed.values()), failed


def test_the_thread_count_sees_only_the_callers_threads_and_is_restored():
    start = threading.Thread.start
    exercise = capstone.CAPSTONE_PARALLEL_APPLY
    case = exercise.cases()[2]  # 4 replicas
    outputs = exercise.call(parallel_apply, case)
    assert len(case.context["started"]) == 4 and exercise.judge(case, outputs) is None
    assert threading.Thread.start is start


def test_a_parallel_apply_may_run_one_replica_in_the_caller():
    def caller_for_one(functions, inputs):
        return [functions[0](inputs[0])] if len(functions) == 1 else parallel_apply(functions, inputs)

    assert checked("capstone_parallel_apply", with_piece(parallel_apply=caller_for_one)).status == PASSED


# capstone_data_parallel: a model with one parameter.

def _data_parallel(copies_of):
    """The lesson's data_parallel with another grouping of Broadcast's flat output into replicas' copies."""
    def planted(module, x, n):
        chunks = scatter(x, n)
        parameters = list(module.parameters())
        flat = Broadcast.apply(len(chunks), *parameters)
        return gather(parallel_apply(replicate(module, copies_of(flat, len(parameters), len(chunks))), chunks))

    return planted


DATA_PARALLEL_MISTAKES = {
    "grouping stops one short (the survivor)":
        lambda flat, p, n: [list(flat[i : i + p]) for i in range(0, len(flat) - 1, p)],
    "one replica fewer than chunks":
        lambda flat, p, n: [list(flat[r * p : (r + 1) * p]) for r in range(max(len(flat) // p - 1, 1))],
    "stepping by the number of chunks":
        lambda flat, p, n: [list(flat[i : i + p]) for i in range(0, len(flat), n)],
    "replica 0 left out (the originals are not copies)":
        lambda flat, p, n: [list(flat[i : i + p]) for i in range(p, len(flat), p)] or [list(flat[:p])],
}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("mistake", DATA_PARALLEL_MISTAKES)
def test_a_data_parallel_that_drops_a_replica_fails_the_one_parameter_case(mistake):
    planted = _data_parallel(DATA_PARALLEL_MISTAKES[mistake])  # not with_piece: it puts back the lesson's own
    report = checked("capstone_data_parallel", {**SOLUTION, "data_parallel": planted})
    assert "7 rows on 3 CPU devices, a model with one parameter" in _failed(report), f"{mistake} passed:\n{report!r}"


def test_the_new_cases_have_hints_and_the_lessons_solutions_pass_them():
    new = {"capstone_broadcast": "3 replicas of 1 tensor",
           "capstone_data_parallel": "7 rows on 3 CPU devices, a model with one parameter"}
    for name, description in new.items():
        report = checked(name, SOLUTION)
        outcome = next(o for o in report.outcomes if o.case.description == description)
        assert outcome.verdict == PASSED and outcome.case.hint, report
