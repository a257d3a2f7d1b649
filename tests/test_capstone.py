"""The capstone's checks pass the lesson's own solutions, wait for the stubs, and reject planted mistakes."""

import copy

import pytest
import torch

from dpcourse import exercises
from tests.capstone_pieces import PIECES, SOLUTION, checked, lesson_namespace, with_piece
from tests.helpers import one_thread_each  # a thread per replica, errors left in the threads


@pytest.mark.parametrize("name", PIECES)
def test_the_lessons_solutions_pass(name):
    report = checked(name, SOLUTION)
    assert report.passed, report


@pytest.mark.parametrize("name", PIECES)
def test_the_lessons_solutions_pass_where_devices_0_stands_in_for_a_gpu(name, stand_in_gpu):
    # The judge runs dpcourse.DataParallel on explicit CPU devices, as the learner's pieces compute on the CPU.
    report = checked(name, SOLUTION)
    assert report.passed, report


@pytest.mark.parametrize("name", PIECES)
def test_the_student_editions_stubs_are_not_attempted_yet(name):
    report = checked(name, lesson_namespace(student=True))
    assert report.status == "not attempted yet" and "not attempted yet" in repr(report)


class AveragingBroadcast(torch.autograd.Function):
    forward = SOLUTION["Broadcast"].forward

    @staticmethod
    def backward(ctx, *grads):
        summed = SOLUTION["Broadcast"].backward(ctx, *grads)
        replicas = len(grads) // ctx.count
        return (None, *[g / replicas for g in summed[1:]])


class CopyingBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, n, *tensors):
        ctx.count = len(tensors)
        return tuple(t.clone() for _ in range(n) for t in tensors)

    backward = SOLUTION["Broadcast"].backward


def replicas_with_copied_buffers(module, copies):
    replicas = SOLUTION["replicate"](module, copies)
    for name, buffer in list(replicas[0].body[1]._buffers.items()):
        replicas[0].body[1]._buffers[name] = buffer.clone()
    return replicas


def deep_copies(module, copies):
    return [copy.deepcopy(module) for _ in copies]


def one_after_another(functions, inputs):
    return [f(x) for f, x in zip(functions, inputs, strict=True)]


def reversed_gather(outputs):
    return torch.cat(outputs[::-1])


PLANTED = {
    "averaging instead of summing": (with_piece(Broadcast=AveragingBroadcast), ["capstone_broadcast"]),
    "no replica-0 aliasing of parameters": (with_piece(Broadcast=CopyingBroadcast), ["capstone_broadcast"]),
    "no replica-0 aliasing of buffers": (
        with_piece(replicate=replicas_with_copied_buffers), ["capstone_replicate", "capstone_data_parallel"]),
    "tensor_split instead of chunk": (
        with_piece(scatter=lambda x, n: list(x.tensor_split(n))), ["capstone_scatter", "capstone_data_parallel"]),
    "gradients sent to the wrong replica": (
        with_piece(gather=reversed_gather), ["capstone_gather", "capstone_data_parallel"]),
    "deep copies instead of replicas": (
        with_piece(replicate=deep_copies), ["capstone_replicate", "capstone_data_parallel"]),
    "no threads": (
        with_piece(parallel_apply=one_after_another), ["capstone_parallel_apply", "capstone_data_parallel"]),
}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the mistake: errors stay there
def test_a_parallel_apply_that_leaves_errors_in_the_threads_fails_only_the_failing_replica_case():
    report = checked("capstone_parallel_apply", with_piece(parallel_apply=one_thread_each))
    assert [outcome.verdict for outcome in report.outcomes] == ["passed"] * 3 + ["failed"]
    assert "the caller never saw the error" in report.outcomes[-1].detail


@pytest.mark.parametrize("mistake", PLANTED)
def test_planted_mistakes_fail_their_checks(mistake):
    namespace, names = PLANTED[mistake]
    for name in names:
        report = checked(name, namespace)
        assert report.status == "failed", f"{mistake} passed {name}:\n{report}"


def test_a_failing_case_shows_one_line_and_a_hint_not_a_traceback():
    report = exercises.check("capstone_gather", lambda outputs: 1 / 0)
    text = repr(report)
    assert "raised ZeroDivisionError: division by zero" in text and "hint:" in text and "Traceback" not in text
    assert "<table>" in report._repr_html_()


@pytest.mark.parametrize(("mistake", "pointer"), [
    ("no replica-0 aliasing of buffers", "Look at replicate"),
    ("gradients sent to the wrong replica", "Look at scatter and gather"),
    ("deep copies instead of replicas", "not copy.deepcopy"),
    ("no threads", "Look at parallel_apply"),
])
def test_the_whole_step_points_to_the_piece_that_broke(mistake, pointer):
    """The walkthrough's BatchNorm-buffer bug got "gradients are summed, never averaged": hints follow failures."""
    report = checked("capstone_data_parallel", PLANTED[mistake][0])
    failed = [outcome.detail for outcome in report.outcomes if outcome.verdict == "failed"]
    assert failed and all(pointer in detail for detail in failed), failed
    assert "never averaged" not in " ".join(failed) or pointer == "Look at Broadcast"
