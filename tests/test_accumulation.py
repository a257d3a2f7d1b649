"""Gradient accumulation (dpcourse.accumulation, dpcourse.ddp.demos.accumulation) against one device's full batch.

One device and DataParallel run in this process; the DDP runs start 2 gloo ranks once for the whole module.
"""

import pytest
import torch

import dpcourse
from dpcourse import accumulation, examples
from dpcourse.ddp.demos import accumulation as ddp_accumulation


def error_and_ratio(model: torch.nn.Module, batch: int, micro_batch: int, rule: str, n_devices: int = 1):
    """Accumulate ``batch`` rows; return max |g - g_one_device| and the last bias gradient over one device's."""
    oracle = examples.twin(model)
    x, y = examples.make_batch(batch)
    runner = model if n_devices == 1 else dpcourse.DataParallel(model, devices=dpcourse.devices(n_devices))
    accumulation.accumulate(runner, x, y, micro_batch, rule)
    examples.loss_fn(oracle(x), y).backward()
    got, single = model[2].bias.grad, oracle[2].bias.grad
    return examples.max_grad_difference(model, oracle), (got @ single / (single @ single)).item()


@pytest.mark.parametrize("n_devices", [1, 2, 3])
def test_equal_micro_batches_divided_by_k_give_the_full_batch_gradient(n_devices):
    error, _ = error_and_ratio(examples.make_model(), 24, 8, "1/K", n_devices)
    assert error < 1e-6


def test_without_a_weight_the_gradient_is_k_times_the_full_batch_gradient():
    error, ratio = error_and_ratio(examples.make_model(), 24, 6, "none")
    assert error > 0.1 and ratio == pytest.approx(4, abs=1e-5)


@pytest.mark.parametrize("n_devices", [1, 2])
def test_a_short_last_micro_batch_needs_weights_by_rows(n_devices):
    assert error_and_ratio(examples.make_model(), 10, 4, "1/K", n_devices)[0] > 0.01
    assert error_and_ratio(examples.make_model(), 10, 4, "b_k/B", n_devices)[0] < 1e-6


def test_accumulate_returns_the_micro_batch_sizes_and_rejects_bad_arguments():
    x, y = examples.make_batch(10)
    assert accumulation.accumulate(examples.make_model(), x, y, 4) == [4, 4, 2]
    with pytest.raises(ValueError, match="micro_batch is a number of rows"):
        accumulation.accumulate(examples.make_model(), x, y, 0)
    with pytest.raises(ValueError, match="Unknown rule 'mean'"):
        accumulation.accumulate(examples.make_model(), x, y, 4, rule="mean")


def test_sample_weights_show_the_short_micro_batch_and_the_mean_of_means():
    by_steps = accumulation.sample_weights(10, 4, "1/K")
    torch.testing.assert_close(by_steps.weights, torch.tensor([1 / 12] * 8 + [1 / 6] * 2))
    by_rows = accumulation.sample_weights(10, 4, "b_k/B", n_devices=2)
    torch.testing.assert_close(by_rows.weights, torch.full((10,), 0.1))
    mean_of_means = accumulation.sample_weights(10, 3, "1/K", n_devices=2, per_replica_mean=True)
    torch.testing.assert_close(mean_of_means.weights, torch.tensor([1 / 16, 1 / 16, 1 / 8] * 3 + [1 / 4]))
    assert mean_of_means.chunks == [[2, 1], [2, 1], [2, 1], [1]]
    assert "micro-batch 4 (chunks [1]): 1/4" in str(mean_of_means)
    for weights in (by_steps, by_rows, mean_of_means):  # every rule here weighs the micro-batches to 1 in all
        assert weights.weights.sum().item() == pytest.approx(1)


@pytest.fixture(scope="module")
def schedules() -> ddp_accumulation.Accumulation:
    return ddp_accumulation.compare_schedules(world_size=2)


def test_without_no_sync_every_micro_step_all_reduces_and_with_it_only_the_last(schedules):
    every, no_sync, forward_outside = schedules.runs[:3]
    assert every.allreduces == [[1, 1, 1]] * 2
    assert no_sync.allreduces == [[0, 0, 1]] * 2
    assert forward_outside.allreduces == [[1, 1, 1]] * 2  # the forward decides, not the backward
    for run in (every, no_sync, forward_outside):
        assert run.global_batch == 24 and run.max_diff_to_full_batch < 1e-6
        torch.testing.assert_close(run.grads[0], run.grads[1], rtol=0, atol=0)  # the ranks agree exactly
    torch.testing.assert_close(no_sync.grads[0], every.grads[0], rtol=0, atol=1e-7)


def test_under_ddp_the_weight_matters_as_on_one_device(schedules):
    unweighted, short_by_steps, short_by_rows = schedules.runs[3:]
    torch.testing.assert_close(unweighted.grads[0], 3 * unweighted.full_batch, rtol=0, atol=1e-6)
    assert short_by_steps.global_batch == 20 and short_by_steps.max_diff_to_full_batch > 0.01
    assert short_by_rows.max_diff_to_full_batch < 1e-6
    assert "[0, 0, 1] on every rank" in str(schedules)


def test_compare_schedules_rejects_an_unknown_schedule_before_starting_ranks():
    with pytest.raises(ValueError, match="the schedule must be one of"):
        ddp_accumulation.compare_schedules(runs=[("sometimes", (4, 4), "1/K")])
    with pytest.raises(ValueError, match="the rule one of"):
        ddp_accumulation.compare_schedules(runs=[("no_sync", (4, 4), "mean")])
