"""Lesson 26's quiz in planted worlds (``tests/quiz_planting.py``): each experiment, run on the real tour, measures
the keyed answer; run on a tour changed so that a wrong option is true (the rows a rank holds, the collectives of a
group, the bytes of the all-reduce, the bytes a rank holds), it must report that option. The tour runs once on 4
real ranks; ``hsdp.tour`` is then replaced by a changed copy of its results."""

import copy

import pytest

from dpcourse.quiz import run_experiment
from dpcourse.quiz.bank import load_lesson
from dpcourse.sharded import hsdp
from tests.quiz_planting import planted, reports

pytestmark = pytest.mark.lesson26

QUESTIONS = {question.id: question for question in load_lesson("26_hsdp")}


@pytest.fixture(scope="module")
def tour() -> list[dict]:
    return hsdp.tour()


def _plant(monkeypatch, results: list[dict]) -> None:
    monkeypatch.setattr(hsdp, "tour", lambda world_size=hsdp.WORLD_SIZE, steps=hsdp.STEPS: results)


@pytest.mark.parametrize("question_id", list(QUESTIONS))
def test_the_real_tour_measures_the_keyed_answer(question_id, tour, monkeypatch):
    _plant(monkeypatch, copy.deepcopy(tour))
    assert run_experiment(QUESTIONS[question_id].experiment).value == QUESTIONS[question_id].answer


def _with_rank_3_rows(tour, rows):
    results = copy.deepcopy(tour)
    results[3]["rows"] = rows
    return results


@planted("26-rank-three-rows")
@pytest.mark.parametrize(("rows", "option"), [
    ((0, 8), "Rows 0 ... 7, the same rows as rank 2"),
    ((12, 16), "Rows 12 ... 15, its own quarter, as FSDP2 on 4 ranks would"),
    ((0, 16), "All 16 rows: ranks 2 and 3 are the replicas"),
])
def test_a_mesh_laid_out_otherwise_would_be_measured(rows, option, tour, monkeypatch):
    _plant(monkeypatch, _with_rank_3_rows(tour, rows))
    reports("26-rank-three-rows", option)


@planted("26-replicate-collective")
@pytest.mark.parametrize(("calls", "option"), [
    ({"all-gather": 6, "reduce-scatter": 3}, "All-gathers and reduce-scatters, as in the shard group"),
    ({}, "None: the replicas only meet when the model is saved"),
])
def test_a_replicate_group_that_ran_other_collectives_would_be_measured(calls, option, tour, monkeypatch):
    results = copy.deepcopy(tour)
    results[0]["traffic"]["replicate"]["calls"] = calls
    _plant(monkeypatch, results)
    reports("26-replicate-collective", option)


@planted("26-replicate-bytes")
@pytest.mark.parametrize(("factor", "option"), [
    (2, "The same: every gradient, as DDP"),
    (0.5, "A quarter: one rank of 4"),
])
def test_an_all_reduce_of_another_size_would_be_measured(factor, option, tour, monkeypatch):
    results = copy.deepcopy(tour)
    results[0]["traffic"]["replicate"]["size"] = int(results[0]["traffic"]["replicate"]["size"] * factor)
    _plant(monkeypatch, results)
    reports("26-replicate-bytes", option)


@planted("26-memory")
@pytest.mark.parametrize(("like", "option"), [
    ("FSDP2", "As FSDP2's: both shard everything"),
    ("DDP", "As DDP's: the replicas hold everything"),
])
def test_an_hsdp_that_held_as_much_as_another_kind_would_be_measured(like, option, tour, monkeypatch):
    results = copy.deepcopy(tour)
    results[0]["bytes"] = dict(results[0][like]["bytes"])
    _plant(monkeypatch, results)
    reports("26-memory", option)
