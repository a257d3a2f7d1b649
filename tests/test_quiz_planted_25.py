"""Lesson 25's quiz experiments, each run in a planted world where a wrong answer is true: the experiment must then
measure that wrong answer (``tests/quiz_planting.py``). The plants replace what the ranks would have measured
(``collective_times.measure``, ``overlap.measure``) with the numbers of the wrong world, so no rank starts.
"""

from dpcourse.ddp import overlap
from dpcourse.ranks import collective_times
from tests.quiz_planting import planted, reports


def times_by_size(seconds):
    def measure(sizes, collectives, repeats):
        return [collective_times.Timing("all_reduce", 2, n, seconds(n), (seconds(n),)) for n in sizes]

    return measure


@planted("25-growing-messages")
def test_a_link_with_no_latency_would_take_16_times_longer_at_every_size(monkeypatch):
    monkeypatch.setattr(collective_times, "measure", times_by_size(lambda n: n / 1e9))
    reports("25-growing-messages", "About 16 times longer at both sizes: the time is the bytes over the bandwidth")


@planted("25-growing-messages")
def test_a_link_of_infinite_bandwidth_would_cost_the_same_at_every_size(monkeypatch):
    monkeypatch.setattr(collective_times, "measure", times_by_size(lambda n: 5e-4))
    reports("25-growing-messages", "It barely changes at both sizes: a message costs its latency, whatever its size")


def planted_step(starts, compute_end, end):
    buckets = [(i, overlap.LAYER_BYTES, start, start + 0.005) for i, start in enumerate(starts)]
    return lambda *args, **kwargs: {"compute": [[]], "buckets": buckets, "compute_end": compute_end, "end": end,
                                    "all_reduce": 0.005}


@planted("25-first-all-reduce")
def test_a_ddp_that_all_reduced_after_the_backward_would_start_at_its_end(monkeypatch):
    monkeypatch.setattr(overlap, "measure", planted_step([0.12, 0.125, 0.13, 0.135], 0.12, 0.14))
    reports("25-first-all-reduce", "Once the whole backward is over: DDP all-reduces every gradient at the end")


@planted("25-first-all-reduce")
def test_a_ddp_that_sent_during_the_forward_would_start_before_the_backward(monkeypatch):
    monkeypatch.setattr(overlap, "measure", planted_step([-0.01, 0.03, 0.06, 0.09], 0.12, 0.125))
    reports("25-first-all-reduce", "Before the backward: DDP starts sending when the forward ends")


@planted("25-what-shows")
def test_a_backward_that_waited_for_every_all_reduce_would_show_all_of_it(monkeypatch):
    monkeypatch.setattr(overlap, "measure", planted_step([0.12, 0.125, 0.13, 0.135], 0.12, 0.14))
    reports("25-what-shows", "All of it: backward() waits for every all-reduce after computing")


@planted("25-what-shows")
def test_a_backward_that_ended_with_its_compute_would_show_none(monkeypatch):
    monkeypatch.setattr(overlap, "measure", planted_step([0.03, 0.06, 0.09, 0.115], 0.12, 0.1205))
    reports("25-what-shows", "None of it: every all-reduce hides behind the compute")
