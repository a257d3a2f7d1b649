"""Lesson 06's quiz experiments (``quizzes/06_backward.toml``): backward sums the replicas' gradients, so a mean
loss on the gathered output gives the single-device gradient and a sum of per-replica means does not.
"""

import torch
from torch import nn
from torch.nn.functional import mse_loss

from dpcourse import viz

from ..lab import (
    caught_warnings,
    data_parallel_over,
    replica_gradients,
    rounded_values,
    seeded_module,
    seeded_randn,
)
from ..outcome import Outcome, only_true


def gradients_are_summed() -> Outcome:
    """Replicate a Linear on 2 devices, backward the outputs' sum, compare the original's grad with the copies'."""
    model = seeded_module(lambda: nn.Linear(3, 1))
    grads = [copies["weight"] for copies in replica_gradients(model, seeded_randn(4, 3), lambda out: out.sum(), 2)]
    total = model.weight.grad
    text = (
        f"replica 0's copy of the weight: grad {rounded_values(grads[0])}\n"
        f"replica 1's copy of the weight: grad {rounded_values(grads[1])}\n"
        f"model.weight.grad:                   {rounded_values(total)}\n"
        f"  == copy 0 + copy 1: {torch.allclose(total, grads[0] + grads[1])}; "
        f"== their mean: {torch.allclose(total, (grads[0] + grads[1]) / 2)}\n"
        "The figure measures the same for a small MLP (4 rows, 2 devices, MSE on the gathered output)."
    )
    value = only_true(
        {
            "They are summed into `model.weight.grad`": torch.allclose(total, grads[0] + grads[1]),
            "They are averaged over the replicas": torch.allclose(total, (grads[0] + grads[1]) / 2),
            "Only replica 0's gradient is kept": torch.allclose(total, grads[0]),
        }
    )
    return Outcome(text, value, viz.gradient_sum(batch=4, n_devices=2))


def _first_weight_gradient(model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    """The gradient of ``loss`` with respect to the model's first weight (``.grad`` is left untouched)."""
    return torch.autograd.grad(loss, next(model.parameters()))[0]


def mean_loss_matches_single_device() -> Outcome:
    """``mse_loss(dp(x), y)`` on 4 devices, 10 rows (uneven chunks): the same gradient as on one device."""
    model, x, y = seeded_module(lambda: nn.Linear(3, 1)), seeded_randn(10, 3), seeded_randn(10, 1, seed=1)
    single = _first_weight_gradient(model, mse_loss(model(x), y))
    parallel = _first_weight_gradient(model, mse_loss(data_parallel_over(model, 4)(x), y))
    text = (
        f"weight gradient, one device: {rounded_values(single)}\n"
        f"4 devices (3, 3, 3, 1 rows):  {rounded_values(parallel)}"
    )
    value = only_true(
        {
            "Identical to the single-device gradient (up to rounding)": torch.allclose(parallel, single, atol=1e-6),
            "4 times the single-device gradient": torch.allclose(parallel, 4 * single, atol=1e-6),
            "A quarter of the single-device gradient": torch.allclose(parallel, single / 4, atol=1e-6),
        }
    )
    return Outcome(text, value)


class ChunkLoss(nn.Module):
    """Returns the mean squared error of its own chunk: the "compute the loss inside forward" pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return mse_loss(self.linear(x), y)


def summed_replica_losses() -> Outcome:
    """Each replica returns its chunk's mean loss; ``.sum()`` of the 2 losses doubles the gradient."""
    model, x, y = seeded_module(ChunkLoss), seeded_randn(8, 3), seeded_randn(8, 1, seed=1)
    single = _first_weight_gradient(model, model(x, y))
    with caught_warnings():
        parallel = _first_weight_gradient(model, data_parallel_over(model, 2)(x, y).sum())
    ratio = ((parallel * single).sum() / (single * single).sum()).item()
    text = (
        f"weight gradient, one device (mean loss over 8 rows): {rounded_values(single)}\n"
        f"2 devices, dp(x, y).sum() of the two chunk means:  {rounded_values(parallel)}\n"
        f"ratio = {ratio:.6f}; parallel == ratio x single: {torch.allclose(parallel, ratio * single, atol=1e-6)}"
    )
    return Outcome(text, round(ratio, 6))


EXPERIMENTS = (
    gradients_are_summed,
    mean_loss_matches_single_device,
    summed_replica_losses,
)
