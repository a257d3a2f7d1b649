"""Lessons 00-08's quiz experiments can report a distractor: planted into a world where it is true, they measure it."""

from dpcourse.data_parallel import DataParallel
from dpcourse.quiz import run_experiment
from tests.quiz_planting import QUESTIONS, planted


def test_custom_parameter_measures_the_keyed_answer():
    question = QUESTIONS["08-custom-parameter"]
    assert run_experiment(question.experiment).value == question.answer


@planted("08-custom-parameter")
def test_a_replicate_that_copied_nothing_would_be_measured_as_not_copied(monkeypatch):
    """Every "replica" is the model itself: the gradient still matches one device, so only what the replicas
    hold can tell; the experiment must report the "not copied" option."""
    monkeypatch.setattr(DataParallel, "replicate", lambda self, module, devices: [module] * len(devices))
    outcome = run_experiment("custom_parameter_replicated")
    assert outcome.value == "It is not copied: every replica reads the one weight on `devices[0]`"
    assert "equal: True" in outcome.text


@planted("08-custom-parameter")
def test_a_replica_whose_weight_gradient_were_lost_would_be_measured_as_needing_a_move(monkeypatch):
    """Replica 1 gets a copy cut off from autograd, as a weight the matmul could not use would be: the gradient
    differs from one device, and the experiment must not report the keyed answer."""
    real = DataParallel.replicate

    def replica_1_detached(self, module, devices):
        replicas = real(self, module, devices)
        replicas[1].weight = replicas[1].weight.detach().clone()
        return replicas

    monkeypatch.setattr(DataParallel, "replicate", replica_1_detached)
    outcome = run_experiment("custom_parameter_replicated")
    assert outcome.value == "The matmul may use a weight on the wrong device: call `self.weight.to(x.device)` first"
    assert "equal: False" in outcome.text
