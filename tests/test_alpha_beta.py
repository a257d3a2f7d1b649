"""Lesson 25: the α-β fit and its predictions (pure math), the collectives timed on real ranks, DDP's buckets on a
timeline, and the lesson's figures."""

import math

import pytest

from dpcourse import costmodel
from dpcourse.costmodel import alpha_beta
from dpcourse.ddp import overlap
from dpcourse.exercises import lesson25
from dpcourse.ranks import collective_times
from dpcourse.viz.alpha_beta import fitted_times, overlap_timeline
from tests.figure_checks import problems

pytestmark = pytest.mark.lesson25


def test_ring_terms_are_the_ring_algorithm_s_steps_and_bytes():
    assert alpha_beta.ring_terms("all_reduce", 4) == (6, 1.5)
    assert alpha_beta.ring_terms("all_gather", 4) == (3, 0.75)
    assert alpha_beta.ring_terms("reduce_scatter", 1) == (0, 0.0)
    with pytest.raises(ValueError, match="collective must be one of"):
        alpha_beta.ring_terms("broadcast", 2)
    with pytest.raises(ValueError, match="whole number >= 1"):
        alpha_beta.ring_terms("all_reduce", 0)


def test_the_fit_recovers_a_known_alpha_and_beta_from_noisy_points():
    sizes, times = lesson25.generated_points(5e-5, 1e9, 2, 1.0, seed=3)
    alpha, beta = alpha_beta.fit_alpha_beta(sizes, times, 2, 1.0)
    assert alpha == pytest.approx(5e-5, rel=0.1) and beta == pytest.approx(1e9, rel=0.05)
    exact = [2 * 5e-5 + n / 1e9 for n in sizes]
    assert alpha_beta.fit_alpha_beta(sizes, exact, 2, 1.0) == pytest.approx((5e-5, 1e9))


def test_the_fit_says_what_is_wrong_with_its_input():
    with pytest.raises(ValueError, match="two sizes at least"):
        alpha_beta.fit_alpha_beta([4096, 4096], [1e-3, 1e-3], 2, 1.0)
    with pytest.raises(ValueError, match="one length"):
        alpha_beta.fit_alpha_beta([4096, 8192], [1e-3], 2, 1.0)
    with pytest.raises(ValueError, match="finite number > 0"):
        alpha_beta.fit_alpha_beta([4096, 8192], [1e-3, -1.0], 2, 1.0)
    with pytest.raises(ValueError, match="no bandwidth fits"):
        alpha_beta.fit_alpha_beta([4096, 2**20], [2e-3, 1e-3], 2, 1.0)


def test_exposed_communication_is_the_last_bucket_plus_what_each_other_exceeds():
    assert alpha_beta.exposed(0.005, 0.03, 4) == 0.005
    assert alpha_beta.exposed(0.05, 0.03, 4) == pytest.approx(0.05 + 3 * 0.02)
    assert alpha_beta.exposed(0.0, 0.03, 4) == 0.0


def test_zero3_communicates_one_and_a_half_times_ddp_s_bytes():
    # alpha = 0: bandwidth only. ZeRO-3 all-gathers twice and reduce-scatters once per layer: 3 (p-1)/p n / beta.
    ddp = alpha_beta.layer_communication("DDP", 4, 2**20, 0.0, 1e9)
    zero3 = alpha_beta.layer_communication("ZeRO-3", 4, 2**20, 0.0, 1e9)
    assert (zero3["forward"] + zero3["backward"]) / ddp["backward"] == pytest.approx(1.5)


def test_communication_stops_hiding_where_a_layer_s_ring_outlasts_its_compute():
    # beta = inf: latency only, 2 (p - 1) alpha against 30 ms of backward: p - 1 > 136.4.
    assert alpha_beta.ranks_where_comm_stops_hiding("DDP", 2**22, 0.0, 0.03, 1.1e-4, math.inf) == 138
    assert alpha_beta.ranks_where_comm_stops_hiding("DDP", 2**22, 0.0, 1.0, 1e-6, 1e12, most=64) is None
    with pytest.raises(ValueError, match="kind must be one of"):
        alpha_beta.ranks_where_comm_stops_hiding("FSDP", 2**22, 0.0, 0.03, 1e-4, 1e9)


def test_the_cost_model_charges_ddp_s_all_reduce_exactly_the_fit_s_prediction():
    fitted = alpha_beta.Fit("all_reduce", 2, 2e-4, 8e8, ((4096, 1e-3), (2**20, 3e-3)))
    hardware = alpha_beta.hardware(costmodel.PRESETS["laptop CPU"], fitted)
    assert (hardware.latency, hardware.bandwidth) == (2e-4, 8e8)
    for n in (2, 4, 8):
        workload = costmodel.Workload(params=2**20, modules=1, batch=1, flops_per_sample=1e-30)
        term = costmodel.step_time("DDP", n, workload, hardware)["allreduce"]
        assert term == pytest.approx(fitted.predict(4 * 2**20, n), rel=1e-9)


@pytest.fixture(scope="module")
def lesson_run():
    return overlap.lesson_run(sizes=(4096, 2**20, 2**22), repeats=3)


def test_collectives_are_timed_on_ranks_and_fitted(lesson_run):
    timings, _ = lesson_run
    assert [(t.collective, t.n_bytes) for t in timings][:3] == [("all_reduce", 4096), ("all_reduce", 2**20),
                                                                ("all_reduce", 2**22)]
    assert all(len(t.rounds) == 3 and t.seconds > 0 and t.world_size == 2 for t in timings)
    fitted = alpha_beta.fit("all_reduce", 2, *collective_times.of(timings, "all_reduce"))
    assert fitted.beta > 0 and math.isfinite(fitted.worst)
    assert problems(fitted_times(timings, {"all_reduce": fitted})) == []


def test_ddp_buckets_are_all_reduced_during_the_backward(lesson_run):
    _, step = lesson_run
    assert [n for _, n, _, _ in step["buckets"]] == [overlap.LAYER_BYTES] * overlap.LAYERS
    assert [layer for layer, _, _ in step["compute"][0]] == list(range(overlap.LAYERS))
    assert step["buckets"][0][2] < step["compute_end"] / 2  # the first all-reduce starts while layers compute
    assert 0 < overlap.tail(step) < step["end"]
    assert problems(overlap_timeline(step, "One DDP backward")) == []


def test_measure_says_what_is_wrong_with_its_arguments():
    with pytest.raises(ValueError, match="collectives are some of"):
        collective_times.measure(collectives=("broadcast",))
    with pytest.raises(ValueError, match="repeats"):
        collective_times.measure(repeats=0)
    with pytest.raises(ValueError, match="sizes are numbers of bytes"):
        collective_times.measure(sizes=(2,))
