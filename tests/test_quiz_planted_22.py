"""Lesson 22's quiz experiments, each run in a planted world where a wrong answer is true; the experiment must then
measure that wrong answer (``tests/quiz_planting.py``).

Each experiment starts real ranks through ``faults.hang_runs.run``; the plants replace that function with one that
returns what the ranks would have reported in the wrong world, built with the package's own ``Run`` and
``hangs.Outcome``, so that no rank starts.
"""

import dataclasses

from dpcourse.faults import hang_runs, hangs
from tests.quiz_planting import planted, reports


def _outcome(fault: str, rank: int, sums=(), error=None, failed_step=None, waited=False, record=(),
             variables=None) -> dict:
    outcome = hangs.Outcome(fault, rank, [list(s) for s in sums], error=error, failed_step=failed_step,
                            waited=waited, record=list(record), states=["scheduled"] * len(record))
    outcome.recorder_variables = variables or {name: None for name in ("TORCH_FR_BUFFER_SIZE",
                                                                       "TORCH_NCCL_TRACE_BUFFER_SIZE")}
    return dataclasses.asdict(outcome)


def _plant(monkeypatch, outcomes: list[dict], logs=None, killed=None) -> None:
    world = hang_runs.Run(outcomes, logs or [[] for _ in outcomes], killed)
    monkeypatch.setattr(hang_runs, "run", lambda *args, **kwargs: world)


TIMED_OUT = "Timed out waiting 2000ms for recv operation to complete"
A = ("all_reduce", (4,))


@planted("22-skip")
def test_a_backend_that_named_the_missing_rank_would_make_both_raise_at_once(monkeypatch):
    _plant(monkeypatch, [{"skip": _outcome("skip", r, [[10] * 4], "rank 1 missed all_reduce", 1)} for r in (0, 1)])
    reports("22-skip", "Both raise at step 1 at once: gloo notices that rank 1 did not call the all-reduce")


@planted("22-skip")
def test_collectives_matched_by_step_would_time_out_at_the_skipped_step(monkeypatch):
    _plant(monkeypatch, [{"skip": _outcome("skip", 0, [[10] * 4], TIMED_OUT, 1, waited=True)},
                         {"skip": _outcome("skip", 1, [[10] * 4, [14] * 4])}])
    reports("22-skip", "Rank 0 waits in step 1's all-reduce until the timeout and raises there; rank 1 goes on")


@planted("22-skip")
def test_an_all_reduce_that_returned_alone_would_let_both_finish(monkeypatch):
    _plant(monkeypatch, [{"skip": _outcome("skip", 0, [[10] * 4, [1] * 4, [14] * 4])},
                         {"skip": _outcome("skip", 1, [[10] * 4, [14] * 4])}])
    reports("22-skip", "Nothing goes wrong: rank 0's step 1 returns its own gradient, and both finish")


@planted("22-size")
def test_a_gloo_that_waited_on_the_missing_bytes_would_time_out(monkeypatch):
    _plant(monkeypatch, [{"other_size": _outcome("other_size", r, [[10] * 4], TIMED_OUT, 1, True)} for r in (0, 1)])
    reports("22-size", "Both ranks wait until the timeout and raise \"Timed out waiting 2000ms\"")


@planted("22-size")
def test_a_gloo_that_checked_sizes_first_would_raise_at_once(monkeypatch):
    _plant(monkeypatch, [{"other_size": _outcome("other_size", r, [[10] * 4], "sizes 4 and 5 differ", 1)}
                         for r in (0, 1)])
    reports("22-size", "Both ranks raise a RuntimeError at once that names the two sizes")


@planted("22-size")
def test_a_gloo_that_reduced_the_common_part_would_return(monkeypatch):
    _plant(monkeypatch, [{"other_size": _outcome("other_size", r, [[10] * 4, [12] * 4, [14] * 4])} for r in (0, 1)])
    reports("22-size", "It returns: each rank gets the sum of the first 4 numbers, the fifth is left as it was")


def _detail(caught: set[str], skip_error: str = TIMED_OUT, skip_step: int = 2) -> list[dict]:
    def one(rank: int) -> dict:
        outcomes = {}
        for fault in hangs.FAULTS:
            if fault in caught:
                outcome = _outcome(fault, rank, [[10] * 4], "Detected mismatch between collectives on ranks", 1)
            elif fault == "skip":
                outcome = _outcome(fault, rank, [[10] * 4, [13] * 4], skip_error if rank == 0 else None,
                                   skip_step if rank == 0 else None, waited=True)
            else:
                outcome = _outcome(fault, rank, [[10] * 4], TIMED_OUT, 1, waited=True)
            outcomes[hangs.key(fault, True)] = outcome
        return outcomes

    return [one(0), one(1)]


@planted("22-detail")
def test_a_check_that_saw_the_skip_would_catch_all_three(monkeypatch):
    _plant(monkeypatch, _detail(set(hangs.FAULTS)))
    reports("22-detail", "All three: DETAIL compares every rank's call before it runs")


@planted("22-detail")
def test_a_fingerprint_of_shapes_only_would_catch_the_size_alone(monkeypatch):
    _plant(monkeypatch, _detail({"other_size"}))
    reports("22-detail", "Only the 5 numbers: the fingerprint holds shapes, not which collective")


@planted("22-detail")
def test_a_detail_that_only_logged_would_catch_nothing(monkeypatch):
    _plant(monkeypatch, _detail(set()))
    reports("22-detail", "None: DETAIL adds log lines, and the faults time out as before")


def _recorded(records: list[list]) -> list[dict]:
    return [{"other_op": _outcome("other_op", rank, [[10] * 4], TIMED_OUT, 1, True, record)}
            for rank, record in enumerate(records)]


@planted("22-flight-recorder")
def test_a_recorder_of_nccl_only_would_log_nothing_on_gloo(monkeypatch):
    _plant(monkeypatch, _recorded([[], []]))
    reports("22-flight-recorder", "No: it is part of ProcessGroupNCCL, gloo's collectives are not recorded")


@planted("22-flight-recorder")
def test_a_snapshot_at_the_timeout_would_hold_one_call(monkeypatch):
    _plant(monkeypatch, _recorded([[A], [("broadcast", (4,))]]))
    reports("22-flight-recorder", "Only the collective that timed out: the recorder is a snapshot taken at the timeout")
