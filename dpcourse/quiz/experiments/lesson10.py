"""Lesson 10's quiz experiments (``quizzes/10_ddp_bridge.toml``): DDP averages the ranks' gradients, measured on
real ranks.

Each experiment starts 2 DDP processes with ``dpcourse.ddp.gradients`` (through ``ddp.launch``: gloo on CPU, NCCL
with a GPU per rank), on the lesson's MLP and data (``examples.make_model``, ``examples.regression_batch``), so its
numbers read next to the lesson's own tables. The first launch in a Python process also starts the server that
forks the ranks, which imports torch: about 3 s on an idle 2-core machine. Later launches take about 0.1 s; in
lesson 10, the cells above the quizzes have started that server already.
"""

import torch

from dpcourse import ddp
from dpcourse.examples import flat_grad, make_model, regression_batch, regression_loss

from ..lab import first_device, replica_gradients, rounded_values, seeded_module
from ..outcome import Outcome, only_true

BIAS = slice(-4, None)  # the last layer's bias, Linear(16, 4).bias: the last 4 entries of a flat gradient


def _row(label: str, gradient: torch.Tensor, comparison: str = "") -> str:
    return f"  {label:<46}{rounded_values(gradient[BIAS])}" + (f"  {comparison}" if comparison else "")


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=1e-6)


def _data_parallel_gradients(batch: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """DataParallel on 2 devices, the lesson's MLP and loss: each replica copy's gradient, and the model's ``.grad``.

    All flattened in ``parameters()`` order, on the CPU, like ``ddp.gradients``' numbers.
    """
    model = seeded_module(make_model)  # the weights every DDP rank starts from: make_model(seed=0)
    x, y = (t.to(first_device()) for t in regression_batch(batch))
    copies = replica_gradients(model, x, lambda out: regression_loss(out, y), 2)
    per_replica = [torch.cat([g.flatten() for g in grads.values()]).cpu() for grads in copies]
    return per_replica, flat_grad(model)


def ddp_averages_dp_sums() -> Outcome:
    """Both for real, on the lesson's MLP and 8 samples: DataParallel on 2 devices, DDP on 2 processes.

    DataParallel: the model's ``.grad`` against its replica copies' gradients. DDP: each rank's gradient after the
    all-reduce against the ranks' own gradients, measured first under ``no_sync()``.
    """
    replicas, dp_grad = _data_parallel_gradients(batch=8)
    run = ddp.gradients(world_size=2, batch=8)
    dp_sums, dp_averages = _close(dp_grad, sum(replicas)), _close(dp_grad, sum(replicas) / 2)
    ddp_sums = all(_close(synced, run.sum_of_local) for synced in run.synced)
    ddp_averages = all(_close(synced, run.mean_of_local) for synced in run.synced)
    text = "\n".join(
        [
            "Gradient of the last layer's bias; lesson MLP, mean-squared-error loss, 8 samples.",
            "DataParallel, 2 devices in one process, one loss on the gathered output:",
            *(_row(f"replica {i}'s copy", g) for i, g in enumerate(replicas)),
            _row("model's .grad", dp_grad, f"= copy 0 + copy 1: {dp_sums}; = their mean: {dp_averages}"),
            "DDP, 2 processes, each rank a mean loss over its own 4 samples:",
            *(_row(f"rank {r} alone (no_sync)", g) for r, g in enumerate(run.local)),
            *(_row(f"rank {r} after the all-reduce", g) for r, g in enumerate(run.synced)),
            f"  every rank = rank 0 + rank 1: {ddp_sums}; = their mean: {ddp_averages}",
            _row("single device, all 8 samples, one loss", run.full_batch),
        ]
    )
    value = only_true(
        {
            "DDP averages over processes; DataParallel sums over replicas": ddp_averages and dp_sums,
            "Both sum": ddp_sums and dp_sums,
            "Both average": ddp_averages and dp_averages,
        }
    )
    return Outcome(text, value)


def _per_sample_gradients(batch: int) -> list[torch.Tensor]:
    """The gradient of each sample's own loss, on one device, flattened like ``ddp.gradients``' numbers."""
    model = seeded_module(make_model)
    x, y = (t.to(first_device()) for t in regression_batch(batch))
    gradients = []
    for i in range(batch):
        model.zero_grad()
        regression_loss(model(x[i : i + 1]), y[i : i + 1]).backward()
        gradients.append(flat_grad(model))
    return gradients


def ddp_unequal_shards() -> Outcome:
    """DDP on 2 processes with shards of 5 and 3 of 8 samples: the all-reduced gradient, weighed sample by sample.

    Compared with one device (every sample 1/8) and with each sample's gradient weighted 1/(2 * its shard's size).
    """
    run = ddp.gradients(world_size=2, batch=8, sizes=[5, 3])
    averaged, full = run.synced[0], run.full_batch
    per_sample = _per_sample_gradients(batch=8)
    weights = {i: 1 / (len(run.shards) * len(shard)) for shard in run.shards for i in shard}
    weighted = sum(weights[i] * g for i, g in enumerate(per_sample))
    same_on_every_rank = all(_close(synced, averaged) for synced in run.synced)
    text = "\n".join(
        [
            "Gradient of the last layer's bias; lesson MLP, 2 DDP processes, each a mean loss over its own shard:",
            *(_row(f"rank {r} alone, {len(run.shards[r])} samples (no_sync)", g) for r, g in enumerate(run.local)),
            _row("DDP, after the all-reduce", averaged, f"(the same on every rank: {same_on_every_rank})"),
            _row("single device, every sample 1/8", full, f"= DDP: {_close(averaged, full)}"),
            _row("samples weighted 1/10 (rank 0), 1/6 (rank 1)", weighted, f"= DDP: {_close(averaged, weighted)}"),
            _row(
                "by shard size, (5 g0 + 3 g1) / 8",
                run.size_weighted_mean,
                f"= single device: {_close(run.size_weighted_mean, full)}",
            ),
        ]
    )
    value = only_true(
        {
            "Yes: the average of two mean-loss gradients is the full-batch gradient": _close(averaged, full),
            "No: rank 1's 3 samples weigh 1/6 each and rank 0's 5 samples 1/10 each, instead of 1/8": (
                not _close(averaged, full) and _close(averaged, weighted)
            ),
            "No: it is twice the full-batch gradient": _close(averaged, 2 * full),
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    ddp_averages_dp_sums,
    ddp_unequal_shards,
)
