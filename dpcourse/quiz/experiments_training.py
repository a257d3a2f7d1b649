"""Experiments for lessons 06, 07 and 10: gradients, a training step end to end, and DDP's convention.

See ``experiments`` for how an experiment reports its ``Outcome``.
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.functional import mse_loss

import dpcourse
from dpcourse import viz

from .lab import (
    ChunkLoss,
    Mean,
    caught_warnings,
    data_parallel,
    error_of,
    headline,
    home,
    rounded,
    seeded,
    seeded_module,
)
from .outcome import Outcome, experiment, only_true


def _copy_gradients(
    model: nn.Module, x: torch.Tensor, loss_of: Callable[[torch.Tensor], torch.Tensor], n_devices: int
) -> list[torch.Tensor]:
    """Run the four steps by hand, backward ``loss_of(gathered output)``, return each replica copy's weight grad.

    ``model.weight.grad`` receives what DataParallel's backward makes of those copies' gradients.
    """
    devices = dpcourse.devices(n_devices)
    chunks = dpcourse.scatter(x, devices)
    replicas = dpcourse.replicate(model, devices[: len(chunks)])
    outputs = dpcourse.parallel_apply(replicas, chunks, devices=devices[: len(chunks)])
    loss = loss_of(dpcourse.gather(outputs, home()))
    copies = [replica.weight for replica in replicas]  # non-leaf tensors: Broadcast's outputs
    grads = torch.autograd.grad(loss, copies, retain_graph=True)
    loss.backward()
    return [g.to(home()) for g in grads]


@experiment
def gradients_are_summed() -> Outcome:
    """Replicate a Linear on 2 devices, backward the outputs' sum, compare the original's grad with the copies'."""
    model = seeded_module(lambda: nn.Linear(3, 1))
    grads = _copy_gradients(model, seeded(4, 3), lambda out: out.sum(), 2)
    total = model.weight.grad
    text = (
        f"replica 0's copy of the weight: grad {rounded(grads[0])}\n"
        f"replica 1's copy of the weight: grad {rounded(grads[1])}\n"
        f"model.weight.grad:                   {rounded(total)}\n"
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


def _weight_grad(model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
    """The gradient of ``loss`` with respect to the model's first weight (``.grad`` is left untouched)."""
    return torch.autograd.grad(loss, next(model.parameters()))[0]


@experiment
def mean_loss_matches_single_device() -> Outcome:
    """``mse_loss(dp(x), y)`` on 4 devices, 10 rows (uneven chunks): the same gradient as on one device."""
    model, x, y = seeded_module(lambda: nn.Linear(3, 1)), seeded(10, 3), seeded(10, 1, seed=1)
    single = _weight_grad(model, mse_loss(model(x), y))
    parallel = _weight_grad(model, mse_loss(data_parallel(model, 4)(x), y))
    text = f"weight gradient, one device: {rounded(single)}\n4 devices (3, 3, 3, 1 rows):  {rounded(parallel)}"
    value = only_true(
        {
            "Identical to the single-device gradient (up to rounding)": torch.allclose(parallel, single, atol=1e-6),
            "4 times the single-device gradient": torch.allclose(parallel, 4 * single, atol=1e-6),
            "A quarter of the single-device gradient": torch.allclose(parallel, single / 4, atol=1e-6),
        }
    )
    return Outcome(text, value)


@experiment
def summed_replica_losses() -> Outcome:
    """Each replica returns its chunk's mean loss; ``.sum()`` of the 2 losses doubles the gradient."""
    model, x, y = seeded_module(ChunkLoss), seeded(8, 3), seeded(8, 1, seed=1)
    single = _weight_grad(model, model(x, y))
    with caught_warnings():
        parallel = _weight_grad(model, data_parallel(model, 2)(x, y).sum())
    ratio = ((parallel * single).sum() / (single * single).sum()).item()
    text = (
        f"weight gradient, one device (mean loss over 8 rows): {rounded(single)}\n"
        f"2 devices, dp(x, y).sum() of the two chunk means:  {rounded(parallel)}\n"
        f"ratio = {ratio:.6f}; parallel == ratio x single: {torch.allclose(parallel, ratio * single, atol=1e-6)}"
    )
    return Outcome(text, round(ratio, 6))


@experiment
def state_dict_prefix() -> Outcome:
    """The wrapped model is the submodule ``module``, so every state_dict key gains ``module.``."""
    dp = data_parallel(seeded_module(lambda: nn.Linear(4, 2)), 2)
    keys = list(dp.state_dict())
    error = error_of(lambda: nn.Linear(4, 2).load_state_dict(dp.state_dict()))
    text = (
        f"dp.state_dict() keys: {keys}\nnn.Linear(4, 2).load_state_dict(dp.state_dict()) -> {headline(error)}\n"
        f"dp.module.state_dict() keys: {list(dp.module.state_dict())}  (save this one)"
    )
    return Outcome(text, str(keys))


@experiment
def placement_checked_at_forward() -> Outcome:
    """A model left on another device (here ``meta``): wrapping succeeds, the forward raises."""
    model = nn.Linear(2, 2, device="meta")
    wrapped = []
    wrap_error = error_of(lambda: wrapped.append(dpcourse.DataParallel(model, devices=dpcourse.devices(2))))
    forward_error = error_of(lambda: wrapped[0](seeded(4, 2))) if wrapped else None
    text = f"DataParallel(model on meta, 2 devices) -> {headline(wrap_error)}\ndp(x) -> {headline(forward_error)}"
    value = only_true(
        {
            "When you wrap it: `DataParallel(model, devices)` raises": wrap_error is not None,
            "At forward: `dp(x)` checks every time, and raises a `RuntimeError`": wrap_error is None
            and isinstance(forward_error, RuntimeError),
            "Never: DataParallel moves the model to `devices[0]` for you": wrap_error is None and forward_error is None,
        }
    )
    return Outcome(text, value)


class RunningStats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.stats = torch.zeros(10)  # a plain tensor attribute: neither a parameter nor a buffer


@experiment
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


@experiment
def lone_sample_weight() -> Outcome:
    """Each replica returns its chunk's mean loss; ``.mean()`` of those weighs the lone 10th sample 1/4, not 1/10."""
    losses = torch.ones(10, device=home(), requires_grad=True)  # stand-ins for 10 per-sample losses
    with caught_warnings():
        data_parallel(Mean(), 4)(losses).mean().backward()
    text = (
        "d loss / d (sample i's loss), 10 samples on 4 devices (chunks 3, 3, 3, 1):\n"
        f"  {rounded(losses.grad)}\n  with one device every sample weighs 1/10 = 0.1"
    )
    return Outcome(text, losses.grad[-1].item(), viz.per_replica_mean_bias(10, 4))


@experiment
def batchnorm_one_row_chunk() -> Outcome:
    """BatchNorm1d in training mode, 10 rows on 4 devices: the last replica gets a single row."""
    error = error_of(lambda: data_parallel(nn.BatchNorm1d(2), 4)(seeded(10, 2)))
    message = str(error)
    chunks = [len(c) for c in torch.arange(10).chunk(4)]
    text = f"chunks {chunks}; dp(x) -> {headline(error)}\n  ...{message.strip().splitlines()[-1]}"
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


@experiment
def ddp_averages_dp_sums() -> Outcome:
    """DP: the original's gradient is the sum of its copies'. DDP (simulated): the average of the processes'."""
    model, x, y = seeded_module(lambda: nn.Linear(3, 1)), seeded(8, 3), seeded(8, 1, seed=1)
    full = _weight_grad(model, mse_loss(model(x), y))
    # Two DDP processes: each takes the mean loss of its own half; the all-reduce adds, then DDP divides by 2.
    local = [_weight_grad(model, mse_loss(model(xs), ys)) for xs, ys in zip(x.chunk(2), y.chunk(2), strict=True)]
    copies = _copy_gradients(model, x, lambda out: mse_loss(out, y), 2)
    dp_sums = torch.allclose(model.weight.grad, copies[0] + copies[1], atol=1e-6)
    ddp_average = torch.allclose((local[0] + local[1]) / 2, full, atol=1e-6)
    text = (
        f"one device, 8 rows:            {rounded(full)}\n"
        f"DataParallel, copy 0 + copy 1: {rounded(copies[0] + copies[1])}\n"
        f"  == model.weight.grad: {dp_sums}\n"
        f"DDP (simulated), (process 0 + process 1) / 2: {rounded((local[0] + local[1]) / 2)}\n"
        f"  == one device: {ddp_average}; without the division: {rounded(local[0] + local[1])}"
    )
    value = only_true(
        {
            "DDP averages over processes; DataParallel sums over replicas": dp_sums and ddp_average,
            "Both sum": dp_sums and torch.allclose(local[0] + local[1], full, atol=1e-6),
            "Both average": not dp_sums and ddp_average,
        }
    )
    return Outcome(text, value)


@experiment
def ddp_unequal_shards() -> Outcome:
    """Two DDP processes (simulated) with 5 and 3 of 8 rows, each a mean loss: their average vs the full batch."""
    model, x, y = seeded_module(lambda: nn.Linear(3, 1)), seeded(8, 3), seeded(8, 1, seed=1)
    full = _weight_grad(model, mse_loss(model(x), y))
    shards = (slice(0, 5), slice(5, 8))
    local = [_weight_grad(model, mse_loss(model(x[rows]), y[rows])) for rows in shards]
    average = (local[0] + local[1]) / 2  # what DDP's all-reduce and division by 2 give
    weighted = (5 * local[0] + 3 * local[1]) / 8
    text = (
        f"one device, 8 rows:                 {rounded(full)}\n"
        f"rank 0 alone (5 rows, mean loss):   {rounded(local[0])}\n"
        f"rank 1 alone (3 rows, mean loss):   {rounded(local[1])}\n"
        f"DDP (simulated), (g0 + g1) / 2:     {rounded(average)}   == one device: "
        f"{torch.allclose(average, full, atol=1e-6)}\n"
        f"by shard size, (5 g0 + 3 g1) / 8:   {rounded(weighted)}   == one device: "
        f"{torch.allclose(weighted, full, atol=1e-6)}"
    )
    value = only_true(
        {
            "Yes: the average of two mean-loss gradients is the full-batch gradient": torch.allclose(
                average, full, atol=1e-6
            ),
            "No: rank 1's 3 samples weigh 1/6 each and rank 0's 5 samples 1/10 each, instead of 1/8": (
                not torch.allclose(average, full, atol=1e-6) and torch.allclose(weighted, full, atol=1e-6)
            ),
            "No: it is twice the full-batch gradient": torch.allclose(average, 2 * full, atol=1e-6),
        }
    )
    return Outcome(text, value)
