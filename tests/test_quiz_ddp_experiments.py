"""Quiz experiments can tell a wrong answer from the right one: plant a world where a distractor is true (a DDP
that combines the ranks' gradients another way, a GradScaler that raises, ranks that hang, a DataParallel whose
model sits on another replica) and the experiment reports that option, or no option, instead of the keyed answer."""

import dataclasses
from collections.abc import Callable

import pytest
import torch

from dpcourse import ddp
from dpcourse.quiz import run_experiment
from tests.quiz_planting import QUESTIONS, planted

REAL_GRADIENTS = ddp.gradients


def ddp_that_combines(combine: Callable[[ddp.Gradients], torch.Tensor]) -> Callable[..., ddp.Gradients]:
    """``ddp.gradients`` on real ranks, but every rank ends with ``combine(run)`` instead of DDP's all-reduce."""

    def gradients(*args, **kwargs) -> ddp.Gradients:
        run = REAL_GRADIENTS(*args, **kwargs)
        return dataclasses.replace(run, synced=[combine(run)] * len(run.synced))

    return gradients


@pytest.mark.parametrize("question_id", ["10-ddp-averages", "10-unequal-shards"])
def test_real_ranks_measure_the_keyed_answer(question_id):
    question = QUESTIONS[question_id]
    assert run_experiment(question.experiment).value == question.answer


@planted("10-ddp-averages")
def test_a_ddp_that_summed_would_be_measured_as_summing(monkeypatch):
    monkeypatch.setattr(ddp, "gradients", ddp_that_combines(lambda run: run.sum_of_local))
    assert run_experiment("ddp_averages_dp_sums").value == "Both sum"


@planted("10-unequal-shards")
def test_a_ddp_that_weighted_ranks_by_shard_size_would_be_measured_as_exact(monkeypatch):
    monkeypatch.setattr(ddp, "gradients", ddp_that_combines(lambda run: run.size_weighted_mean))
    value = run_experiment("ddp_unequal_shards").value
    assert value == "Yes: the average of two mean-loss gradients is the full-batch gradient"


@planted("16-overflow-skip")
def test_a_scaler_that_raised_on_overflow_would_be_measured_as_raising(monkeypatch):
    from dpcourse import precision

    def raises(*args, **kwargs):
        raise RuntimeError("gradient of 0.weight overflowed")

    monkeypatch.setattr(precision, "scaler_steps", raises)
    value = run_experiment("overflow_skips_the_step").value
    assert value == "`scaler.step` raises an error naming the overflowing parameter"


@planted("17-unused-parameter")
def test_ranks_that_hung_on_the_unused_head_would_be_measured_as_hanging(monkeypatch):
    from dpcourse.ddp.demos import unused

    def hangs(*args, **kwargs):
        raise TimeoutError("DDP ranks [0, 1] were still running after 120 s")

    monkeypatch.setattr(unused, "unused", hangs)
    assert run_experiment("unused_parameter_error").value == "The first backward hangs, waiting for the head's gradient"


@planted("15-dp-most-memory")
def test_dataparallel_memory_follows_the_replica_that_is_the_model(monkeypatch):
    """Plant a replicate whose replica 1, not 0, is the original model: device 1 must then hold the surplus,
    and the quiz experiment must stop reporting device 0."""
    from dpcourse import memory
    from dpcourse.data_parallel import DataParallel
    from dpcourse.memory import Setup

    real = DataParallel.replicate

    def model_on_device_1(self, module, devices):
        replicas = real(self, module, devices)
        return [replicas[1], replicas[0], *replicas[2:]]

    monkeypatch.setattr(DataParallel, "replicate", model_on_device_1)
    small = memory.sized_mlp(width=32, depth=2, classes=10)
    totals = memory.measure(Setup(kind="DataParallel", devices=3, batch=12, model=small)).totals
    assert totals[1] > max(totals[0], totals[2])
    with pytest.raises(RuntimeError, match="these hold: none"):  # no option says "device 1"
        run_experiment("dp_memory_per_device")


@planted("15-dp-most-memory")
def test_equal_devices_would_be_measured_as_all_the_same(monkeypatch):
    from dpcourse import memory
    from dpcourse.memory import Breakdown
    from dpcourse.memory.accounting import device_bytes
    from dpcourse.quiz.experiments.lesson15 import MODEL

    def equal(setup):
        replica = MODEL.parameters * 4
        return Breakdown(setup, [device_bytes(parameters=replica, gradients=replica, activations=100)] * 4, "measured")

    monkeypatch.setattr(memory, "measure", equal)
    value = run_experiment("dp_memory_per_device").value
    assert value == "None: every device holds a full replica and a quarter of the batch, so all four hold the same"
