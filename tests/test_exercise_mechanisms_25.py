"""Lesson 25's checks watch the mechanism, not only the number: the plausible wrong fits and step predictions fail,
each with a message that names the mistake.

The fit's third case times this machine's all-reduce on 2 ranks once per session; the wrong fits here are judged
on the described generated cases and the generated ones only (``_generated_only``), so no rank starts.
"""

import dataclasses

import numpy as np
import pytest

from dpcourse import exercises
from dpcourse.costmodel import alpha_beta
from dpcourse.exercises import lesson25
from dpcourse.exercises.check import FAILED, PASSED

pytestmark = pytest.mark.lesson25


def _generated_only(exercise: exercises.Exercise) -> exercises.Exercise:
    return dataclasses.replace(exercise, cases=lambda: exercise.cases()[:2], slow="")


def _failure(exercise, function) -> str:
    report = exercises.run(exercise, function)
    assert report.status == FAILED, repr(report)
    assert "Traceback" not in repr(report)
    return next(o.detail for o in report.outcomes if o.verdict == FAILED)


def largest_only(sizes, times, steps, factor):
    return 0.0, factor * sizes[-1] / times[-1]


def through_zero(sizes, times, steps, factor):
    x, t = factor * np.asarray(sizes, dtype=float), np.asarray(times)
    return 0.0, float((x * x).sum() / (x * t).sum())


def plain_least_squares(sizes, times, steps, factor):
    rows = np.stack([np.full(len(sizes), float(steps)), factor * np.asarray(sizes, dtype=float)], axis=1)
    per_step, per_byte = np.linalg.lstsq(rows, np.asarray(times), rcond=None)[0]
    return float(per_step), float(1 / per_byte)


def without_steps(sizes, times, steps, factor):
    return lesson25.alpha_beta.fit_alpha_beta(sizes, times, 1, factor)


WRONG_FITS = [
    (largest_only, "the largest size alone"),
    (through_zero, "a line through zero"),
    (plain_least_squares, "plain least squares on seconds"),
    (without_steps, "expected alpha"),
]


@pytest.mark.parametrize("wrong, named", WRONG_FITS)
def test_wrong_fits_fail_and_are_named(wrong, named):
    assert named in _failure(_generated_only(lesson25.FIT_ALPHA_BETA), wrong)


def test_the_right_fit_passes_every_case_without_ranks():
    report = exercises.run(_generated_only(lesson25.FIT_ALPHA_BETA), alpha_beta.fit_alpha_beta)
    assert report.status == PASSED, repr(report)


def test_the_fit_is_judged_on_this_machine_s_measurements(monkeypatch):
    monkeypatch.setattr(lesson25, "measured_all_reduce", lambda: ((4096, 65536, 2**20, 2**22),
                                                                  (6e-4, 6.5e-4, 1.8e-3, 5.5e-3)))
    case = lesson25.FIT_ALPHA_BETA.cases()[2]
    assert case.args[0] == [4096, 65536, 2**20, 2**22]
    assert lesson25.FIT_ALPHA_BETA.judge(case, alpha_beta.fit_alpha_beta(*case.args)) is None
    assert "largest size alone" in lesson25.FIT_ALPHA_BETA.judge(case, largest_only(*case.args))


def _step(all_reduce=(2, 2), gathers_backward=2, gathers_forward=1, hide=True):
    """A predict_step with one planted mistake: the all-reduce's (rounds, factor rounds), ZeRO-3's gathers."""

    def predict_step(kind, world_size, layers, layer_bytes, forward, backward, alpha, beta):
        p = world_size

        def ring(rounds, factor_rounds=None, per_rank=True):
            share = (p - 1) / p if per_rank else 1
            return rounds * (p - 1) * alpha + (factor_rounds or rounds) * share * layer_bytes / beta

        def exposed(m, c):
            if not hide:
                return layers * m
            return m + (layers - 1) * max(0.0, m - c) if m else 0.0

        if kind == "DDP":
            rounds, factor_rounds = all_reduce
            forward_comm, backward_comm = 0.0, ring(rounds, factor_rounds, per_rank=factor_rounds != 0)
            if factor_rounds == 0:
                backward_comm = ring(rounds, 2, per_rank=False)
        else:
            forward_comm = ring(1) * gathers_forward
            backward_comm = ring(1) * (gathers_backward - 1) + ring(1)
        return {"compute": layers * (forward + backward), "forward_exposed": exposed(forward_comm, forward),
                "backward_exposed": exposed(backward_comm, backward)}

    return predict_step


WRONG_STEPS = [
    (_step(all_reduce=(2, 0)), "without the (p - 1) / p factor"),
    (_step(all_reduce=(1, 1)), "without its 2"),
    (_step(hide=False), "none hidden"),
    (_step(gathers_backward=1), "reduce-scatter only"),
    (_step(gathers_forward=0), "without the forward's all-gather"),
]


@pytest.mark.parametrize("wrong, named", WRONG_STEPS)
def test_wrong_step_predictions_fail_and_are_named(wrong, named):
    assert named in _failure(lesson25.PREDICT_STEP, wrong)


def test_the_right_step_prediction_passes():
    report = exercises.run(lesson25.PREDICT_STEP, alpha_beta.step_terms)
    assert report.status == PASSED, repr(report)


def test_a_step_with_missing_terms_is_told_which_keys_to_return():
    detail = _failure(lesson25.PREDICT_STEP, lambda *args: {"total": 1.0})
    assert "expected a dict with the keys" in detail


# The planted mistakes, by exercise (tests/test_exercises.py counts them).
MISTAKES = {"fit_alpha_beta": [named for _, named in WRONG_FITS], "predict_step": [named for _, named in WRONG_STEPS]}
