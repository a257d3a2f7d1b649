"""Lesson 10's quiz experiments measure real DDP ranks, so they can tell a wrong answer from the right one: plant a
DDP that combines the ranks' gradients another way, and the experiment measures the option that DDP would make
true instead of the keyed answer."""

import dataclasses
from collections.abc import Callable

import pytest
import torch

from dpcourse import ddp
from dpcourse.quiz import find_question, run_experiment

REAL_GRADIENTS = ddp.gradients


def ddp_that_combines(combine: Callable[[ddp.Gradients], torch.Tensor]) -> Callable[..., ddp.Gradients]:
    """``ddp.gradients`` on real ranks, but every rank ends with ``combine(run)`` instead of DDP's all-reduce."""

    def gradients(*args, **kwargs) -> ddp.Gradients:
        run = REAL_GRADIENTS(*args, **kwargs)
        return dataclasses.replace(run, synced=[combine(run)] * len(run.synced))

    return gradients


@pytest.mark.parametrize("question_id", ["10-ddp-averages", "10-unequal-shards"])
def test_real_ranks_measure_the_keyed_answer(question_id):
    question = find_question(question_id)
    assert run_experiment(question.experiment).value == question.answer


def test_a_ddp_that_summed_would_be_measured_as_summing(monkeypatch):
    monkeypatch.setattr(ddp, "gradients", ddp_that_combines(lambda run: run.sum_of_local))
    assert run_experiment("ddp_averages_dp_sums").value == "Both sum"


def test_a_ddp_that_weighted_ranks_by_shard_size_would_be_measured_as_exact(monkeypatch):
    monkeypatch.setattr(ddp, "gradients", ddp_that_combines(lambda run: run.size_weighted_mean))
    value = run_experiment("ddp_unequal_shards").value
    assert value == "Yes: the average of two mean-loss gradients is the full-batch gradient"
