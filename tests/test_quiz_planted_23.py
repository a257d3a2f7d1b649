"""Lesson 23's quiz experiments, each run in a planted world where a wrong answer is true; the experiment must then
measure that wrong answer (``tests/quiz_planting.py``).

Every experiment times real ranks with ``faults.stragglers.observe``; a plant replaces that launch with the clock
readings of a world that works another way (a DDP whose ranks never wait for each other, an optimizer that holds the
wait, a probe that is no collective), built as ``observe`` returns them, so the experiment's own reading runs.
"""

from dpcourse.faults import stragglers
from tests.quiz_planting import planted, reports

DELAY = stragglers.DELAY


def _record(start: float, forward: float, compute: float, waiting: float, optimizer: float,
            gather: float | None = None) -> dict[str, float]:
    """One step's readings, as ``stragglers.Watch`` and ``_step`` take them, from the phases' lengths (seconds)."""
    record = {"start": start, "forward": start + forward}
    before_backward = record["forward"]
    if gather is not None:
        record["gathered"] = before_backward = record["forward"] + gather
    record["arrived"] = before_backward + compute
    record["left"] = record["arrived"] + waiting
    record["backward"] = record["left"] + 0.0002
    record["end"] = record["backward"] + optimizer
    return record


def world(parts: dict[str, list[dict[str, float]]], steps: int = 4) -> list[dict[str, list[dict[str, float]]]]:
    """``observe``'s result for 3 ranks: ``parts[part][rank]`` holds the phases of every step of that rank; a part
    not given runs as ``even`` (no delay, no wait). Steps follow each other on one clock, 0.2 s apart."""
    even = {"forward": 0.001, "compute": 0.001, "waiting": 0.001, "optimizer": 0.001}
    results = []
    for rank in range(3):
        result = {}
        for index, part in enumerate(stragglers.PARTS):
            phases = parts.get(part, [even] * 3)[rank]
            result[part] = [_record(100.0 + index + 0.2 * step, **phases) for step in range(steps)]
        results.append(result)
    return results


def _phases(forward=0.001, compute=0.001, waiting=0.001, optimizer=0.001, gather=None) -> dict[str, float]:
    return {"forward": forward, "compute": compute, "waiting": waiting, "optimizer": optimizer,
            **({} if gather is None else {"gather": gather})}


FAST, SLEPT = _phases(), _phases(forward=DELAY)


def _planted(monkeypatch, parts: dict) -> None:
    monkeypatch.setattr(stragglers, "observe", lambda *args, **kwargs: world(parts))


@planted("23-step-times")
def test_ranks_that_never_waited_for_each_other_would_keep_their_pace(monkeypatch):
    _planted(monkeypatch, {"forward": [FAST, FAST, SLEPT]})
    reports("23-step-times", "Only rank 2's; ranks 0 and 1 keep their pace")


@planted("23-step-times")
def test_ranks_that_hid_half_the_wait_would_grow_by_half(monkeypatch):
    half = _phases(waiting=DELAY * 0.4)
    _planted(monkeypatch, {"forward": [half, half, SLEPT]})
    reports("23-step-times",
            "Rank 2's by the delay; ranks 0 and 1's by about half of it, the rest hidden behind their own work")


@planted("23-where-the-wait-goes")
def test_an_optimizer_that_waited_for_every_rank_would_hold_the_wait(monkeypatch):
    waits_in_step = _phases(optimizer=DELAY)
    _planted(monkeypatch, {"forward": [waits_in_step, waits_in_step, SLEPT]})
    reports("23-where-the-wait-goes", "In `optimizer.step()`: it waits until every rank's gradients are in")


@planted("23-where-the-wait-goes")
def test_a_forward_in_lockstep_would_hold_the_wait(monkeypatch):
    lockstep = _phases(forward=DELAY)
    _planted(monkeypatch, {"forward": [lockstep, lockstep, SLEPT]})
    reports("23-where-the-wait-goes", "In their forward: the ranks run each layer in lockstep")


@planted("23-backward-delay")
def test_a_sleep_that_ran_before_the_backward_would_leave_rank_2_the_shortest(monkeypatch):
    waiting = _phases(waiting=DELAY)
    _planted(monkeypatch, {"backward": [waiting, waiting, _phases(forward=DELAY)]})
    reports("23-backward-delay", "Rank 2's, as before: it arrives last at the all-reduce and waits for no one")


@planted("23-backward-delay")
def test_ranks_that_did_not_wait_would_have_the_shortest_backward(monkeypatch):
    _planted(monkeypatch, {"backward": [FAST, FAST, _phases(compute=DELAY)]})
    reports("23-backward-delay", "Ranks 0 and 1's: only rank 2's backward holds the sleep")


@planted("23-probe-is-a-collective")
def test_a_probe_that_synchronised_nothing_would_leave_the_wait_in_the_all_reduce(monkeypatch):
    quick_probe = _phases(waiting=DELAY, gather=0.001)
    _planted(monkeypatch, {"probed": [quick_probe, quick_probe, _phases(forward=DELAY, gather=0.001)]})
    reports("23-probe-is-a-collective", "In the all-reduce inside `loss.backward()`, as without the probe")


@planted("23-probe-is-a-collective")
def test_a_wait_paid_twice_would_double_the_step(monkeypatch):
    twice = _phases(waiting=DELAY, gather=DELAY)
    _planted(monkeypatch, {"probed": [twice, twice, _phases(forward=2 * DELAY, gather=0.001)]})
    reports("23-probe-is-a-collective",
            "In both: the wait is paid twice, and every step grows by twice the delay")
