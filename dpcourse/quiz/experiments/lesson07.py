"""Lesson 07's quiz experiments (``quizzes/07_end_to_end.toml``): a training step end to end, saving, placement,
and what uneven chunks do to a mean of means and to BatchNorm.
"""

import torch
from torch import nn

from dpcourse import viz
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.examples import ChunkMean

from ..lab import (
    caught_warnings,
    data_parallel_over,
    error_summary,
    first_device,
    raised_by,
    rounded_values,
    seeded_module,
    seeded_randn,
)
from ..outcome import Outcome, only_true


def state_dict_prefix() -> Outcome:
    """The wrapped model is the submodule ``module``, so every state_dict key gains ``module.``."""
    dp = data_parallel_over(seeded_module(lambda: nn.Linear(4, 2)), 2)
    keys = list(dp.state_dict())
    error = raised_by(lambda: nn.Linear(4, 2).load_state_dict(dp.state_dict()))
    text = (
        f"dp.state_dict() keys: {keys}\nnn.Linear(4, 2).load_state_dict(dp.state_dict()) -> {error_summary(error)}\n"
        f"dp.module.state_dict() keys: {list(dp.module.state_dict())}  (save this one)"
    )
    return Outcome(text, str(keys))


def placement_checked_at_forward() -> Outcome:
    """A model left on another device (here ``meta``): wrapping succeeds, the forward raises."""
    model = nn.Linear(2, 2, device="meta")
    wrapped = []
    wrap_error = raised_by(lambda: wrapped.append(DataParallel(model, devices=choose_devices(2))))
    forward_error = raised_by(lambda: wrapped[0](seeded_randn(4, 2))) if wrapped else None
    text = (
        f"DataParallel(model on meta, 2 devices) -> {error_summary(wrap_error)}\n"
        f"dp(x) -> {error_summary(forward_error)}"
    )
    value = only_true(
        {
            "When you wrap it: `DataParallel(model, devices)` raises": wrap_error is not None,
            "At forward: `dp(x)` checks every time, and raises a `RuntimeError`": wrap_error is None
            and isinstance(forward_error, RuntimeError),
            "Never: DataParallel moves the model to `devices[0]` for you": wrap_error is None and forward_error is None,
        }
    )
    return Outcome(text, value)


def lone_sample_weight() -> Outcome:
    """Each replica returns its chunk's mean loss; ``.mean()`` of those weighs the lone 10th sample 1/4, not 1/10."""
    losses = torch.ones(10, device=first_device(), requires_grad=True)  # stand-ins for 10 per-sample losses
    with caught_warnings():
        data_parallel_over(ChunkMean(), 4)(losses).mean().backward()
    text = (
        "d loss / d (sample i's loss), 10 samples on 4 devices (chunks 3, 3, 3, 1):\n"
        f"  {rounded_values(losses.grad)}\n  with one device every sample weighs 1/10 = 0.1"
    )
    return Outcome(text, losses.grad[-1].item(), viz.per_replica_mean_bias(10, 4))


def batchnorm_one_row_chunk() -> Outcome:
    """BatchNorm1d in training mode, 10 rows on 4 devices: the last replica gets a single row."""
    error = raised_by(lambda: data_parallel_over(nn.BatchNorm1d(2), 4)(seeded_randn(10, 2)))
    message = str(error)
    chunks = [len(c) for c in torch.arange(10).chunk(4)]
    text = f"chunks {chunks}; dp(x) -> {error_summary(error)}\n  ...{message.strip().splitlines()[-1]}"
    value = only_true(
        {
            "It trains normally": error is None,
            'A `ValueError` from replica 3: "Expected more than 1 value per channel when training"': isinstance(
                error, ValueError
            )
            and "in replica 3" in message
            and "Expected more than 1 value per channel" in message,
        }
    )
    return Outcome(text, value)


class RunningStats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.stats = torch.zeros(10)  # a plain tensor attribute: neither a parameter nor a buffer


def plain_tensor_stays() -> Outcome:
    """``model.to(device)`` moves parameters and buffers only: a plain tensor attribute stays where it was."""
    model = RunningStats().to("meta")  # meta: a second device that exists on every machine
    text = (
        "model.to('meta'):\n"
        f"  model.linear.weight.device = {model.linear.weight.device}\n"
        f"  model.stats.device         = {model.stats.device}"
    )
    value = only_true(
        {
            "On `device`, like the parameters": model.stats.device == model.linear.weight.device,
            "Still on the CPU, where it was created": model.stats.device.type == "cpu",
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    state_dict_prefix,
    placement_checked_at_forward,
    lone_sample_weight,
    batchnorm_one_row_chunk,
    plain_tensor_stays,
)
