"""Lesson 23's room, ``dpcourse.faults.stragglers`` and its readers: one real run of the ranks whose every claim the
lesson keys its quiz on, the readings' arithmetic, the errors a learner meets, the figure, and the exercises'
reference solutions.

The run sleeps 150 ms per step on one rank and the claims compare medians with half or a quarter of that, so
they hold on a loaded 2-core machine; ``tests/test_quiz_planted_23.py`` runs each experiment where they do not.
"""

import time

import pytest
import torch.distributed as dist
import torch.nn.functional as F

from dpcourse import exercises
from dpcourse.faults import straggler_reading, straggler_report, stragglers
from dpcourse.quiz import load_lesson, run_experiment
from dpcourse.viz.stragglers import straggler_timeline
from tests.figure_checks import problems

pytestmark = pytest.mark.lesson23

SLOW, DELAY = stragglers.SLOW_RANK, stragglers.DELAY


@pytest.fixture(scope="module")
def results():
    return stragglers.observe()


def test_every_part_has_every_reading(results):
    assert len(results) == stragglers.WORLD_SIZE
    for result in results:
        assert sorted(result) == sorted(stragglers.PARTS)
        for part, records in result.items():
            assert len(records) == stragglers.STEPS
            for record in records:
                assert record["start"] <= record["forward"] <= record["arrived"] <= record["left"] <= record[
                    "backward"] <= record["end"]
                assert ("gathered" in record) == (part == "probed")


def test_the_lesson_s_claims_hold_on_real_ranks(results):
    assert straggler_report.steps(results, SLOW, DELAY)[1] == {"every": True, "only slow": False, "part": False}
    grew = straggler_report.phases(results, "forward", SLOW, DELAY)[1]
    assert grew == {"forward": False, "backward": True, "waiting": True, "optimizer": False}
    assert straggler_report.backwards(results, SLOW, DELAY)[1] == {"slow shortest": False, "others shortest": False,
                                                                   "equal": True}
    assert straggler_report.probed(results, SLOW, DELAY)[1] == {"gather": True, "all-reduce": False, "twice": False}
    for part in ("forward", "backward"):
        assert straggler_reading.find_straggler(straggler_reading.arrivals(results, part)) == SLOW
    # With the probe, the ranks reach the all-reduce together: the arrival at the probe (the forward's end) tells.
    assert straggler_reading.find_straggler(straggler_reading.arrivals(results, "probed", "forward")) == SLOW


def test_every_experiment_measures_its_keyed_answer(results, monkeypatch):
    monkeypatch.setattr(stragglers, "observe", lambda *args, **kwargs: results)
    for question in load_lesson("23_stragglers"):
        outcome = run_experiment(question.experiment)
        assert outcome.value == question.answer, f"{question.id}:\n{outcome.text}"


def test_the_figure_shows_the_last_rank_and_its_text_is_readable(results):
    fig = straggler_timeline(results)
    assert fig.dpcourse_data["last"] == [SLOW] * 3
    assert problems(fig) == []
    with pytest.raises(ValueError, match="observe"):
        straggler_timeline([{"even": []}])


def test_readings_arithmetic():
    arrivals = [[10.0, 10.1, 10.3], [11.0, 11.0, 11.2]]
    assert straggler_reading.lateness(arrivals) == pytest.approx([0.0, 0.1, 0.5])
    assert straggler_reading.waited(arrivals) == pytest.approx([0.5, 0.4, 0.0])
    assert straggler_reading.find_straggler(arrivals) == 2
    assert straggler_reading.last_to_arrive(arrivals) == [2, 2]


@pytest.mark.parametrize("arrivals, message", [
    ([], "one entry per step"),
    ("10.0", "one entry per step"),
    ([[1.0, 2.0], []], r"arrivals\[1\] is \[\]"),
    ([[1.0, 2.0], [1.0]], "has 1 readings and arrivals"),
    ([[1.0, "2"]], "finite number of seconds"),
    ([[1.0, float("nan")]], "finite number of seconds"),
])
def test_bad_arrivals_are_refused_with_what_is_wrong(arrivals, message):
    with pytest.raises(ValueError, match=message):
        straggler_reading.find_straggler(arrivals)


@pytest.mark.parametrize("slow_rank, delay, message", [
    (3, 0.15, "is not one of the 3 ranks"),
    (True, 0.15, "is not one of the 3 ranks"),
    (1, -1, "seconds the slow rank sleeps"),
    (1, "0.1", "seconds the slow rank sleeps"),
])
def test_a_bad_plant_is_refused_before_any_rank_starts(slow_rank, delay, message):
    with pytest.raises(ValueError, match=message):
        stragglers.observe(slow_rank=slow_rank, delay=delay)
    with pytest.raises(ValueError, match=message):
        stragglers.probe_on_ranks(lambda model, x, y, optimizer: None, slow_rank, delay=delay)


def test_the_reference_solutions_pass():
    def find_straggler(arrivals):
        return straggler_reading.find_straggler(arrivals), straggler_reading.waited(arrivals)

    assert exercises.check("find_straggler", find_straggler).passed

    def train_step(model, x, y, optimizer):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        arrived = time.perf_counter()
        arrivals = [None] * dist.get_world_size()
        dist.all_gather_object(arrivals, arrived)
        loss.backward()
        optimizer.step()
        return arrivals

    report = exercises.check("train_step", train_step)
    assert report.passed, repr(report)


def test_a_learner_s_exception_in_train_step_comes_back_as_it_was_raised():
    def train_step(model, x, y, optimizer):
        raise KeyError("no such rank")

    with pytest.raises(KeyError, match="no such rank"):
        stragglers.probe_on_ranks(train_step, 1)
