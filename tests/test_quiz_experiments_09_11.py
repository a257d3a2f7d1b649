"""Lessons 09-11's quiz experiments can report a distractor: planted into a world where it is true, they measure it."""

from dpcourse.quiz import run_experiment
from dpcourse.quiz.experiments import lesson09
from tests.quiz_planting import QUESTIONS, planted


def test_modules_per_forward_measures_the_keyed_answer():
    question = QUESTIONS["09-modules-per-forward"]
    assert run_experiment(question.experiment).value == question.answer


@planted("09-modules-per-forward")
def test_a_replicate_whose_replica_0_were_the_model_would_be_measured_as_building_153(monkeypatch):
    real = lesson09.replicate

    def replica_0_is_the_model(module, devices):
        return [module, *real(module, devices)[1:]]

    monkeypatch.setattr(lesson09, "replicate", replica_0_is_the_model)
    outcome = run_experiment("modules_per_forward")
    assert outcome.value == 153 and "replica 0 is the model itself: True" in outcome.text
