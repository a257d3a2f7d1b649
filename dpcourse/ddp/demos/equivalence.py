"""Three DDP experiments with numbers: gradients are averaged, weights track single-device training, buffers
come from rank 0.

Each experiment is a pair: a worker (``_gradients``, ...) that runs in every rank under ``launch``, and a
function the notebook calls (``gradients(...)``, ...) that starts the ranks and returns their numbers next
to the single-device reference, as a dataclass whose ``str()`` is a small table. The ranks hand back CPU
tensors (``examples.flat_grad``), under NCCL too; the reference, computed in this process, is put on the same
device as theirs, so that every comparison runs on one device.
"""

import dataclasses
import os
from collections.abc import Sequence

import torch
import torch.distributed as dist

from ...examples import (
    flat_grad,
    flat_weights,
    gap,
    make_model,
    max_difference,
    regression_batch,
    regression_loss,
    single_device,
)
from ...ranks.launcher import device, launch
from ..per_rank import shard, wrap


def _row(name: str, values: torch.Tensor) -> str:
    return f"{name:<28}" + "".join(f"{v:>10.4f}" for v in values.tolist())


def _gradients(batch: int, sizes: Sequence[int] | None) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    ddp_model = wrap(make_model(), here)
    x, y = regression_batch(batch)
    mine = shard(batch, rank, world, sizes)
    with ddp_model.no_sync():  # backward without the all-reduce: this rank's own gradient
        regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)).backward()
    local = flat_grad(ddp_model.module)
    ddp_model.zero_grad()
    regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)).backward()
    return {"shard": mine, "local": local, "synced": flat_grad(ddp_model.module)}


@dataclasses.dataclass
class Gradients:
    """Each rank's own gradient, the gradient every rank holds after DDP's all-reduce, and the full-batch one."""

    shards: list[list[int]]
    local: list[torch.Tensor]
    synced: list[torch.Tensor]
    full_batch: torch.Tensor

    @property
    def mean_of_local(self) -> torch.Tensor:
        return torch.stack(self.local).mean(0)

    @property
    def sum_of_local(self) -> torch.Tensor:
        return torch.stack(self.local).sum(0)

    @property
    def size_weighted_mean(self) -> torch.Tensor:
        """Each rank's gradient weighted by its shard's size: the full-batch gradient, whatever the sizes."""
        sizes = torch.tensor([len(s) for s in self.shards], dtype=self.local[0].dtype, device=self.local[0].device)
        return (torch.stack(self.local) * sizes[:, None]).sum(0) / sizes.sum()

    def __str__(self) -> str:
        sizes = [len(s) for s in self.shards]
        lines = [f"shard sizes {sizes}, each rank's loss a mean over its shard; gradient of Linear(16, 4).bias:"]
        lines += [_row(f"rank {r} alone (no_sync)", g[-4:]) for r, g in enumerate(self.local)]
        lines += [_row("sum of ranks", self.sum_of_local[-4:]), _row("mean of ranks", self.mean_of_local[-4:])]
        lines += [_row("DDP, on rank 0", self.synced[0][-4:]), _row("single device, full batch", self.full_batch[-4:])]
        lines.append(_row("mean weighted by shard size", self.size_weighted_mean[-4:]))
        lines.append(f"DDP = mean of ranks: max |diff| {gap(max_difference(self.synced[0], self.mean_of_local))}")
        lines.append(f"DDP = full batch:    max |diff| {gap(max_difference(self.synced[0], self.full_batch))}")
        return "\n".join(lines)


def gradients(world_size: int = 2, batch: int = 8, sizes: Sequence[int] | None = None) -> Gradients:
    """One backward under DDP on ``world_size`` ranks, each on its shard of one batch (``per_rank.shard``).

    With equal shards the averaged gradient equals the full-batch gradient; with ``sizes=[5, 3]`` it does
    not, because each rank's mean gives its samples weight ``1/(N * b_rank)`` instead of ``1/B``.
    """
    results = launch(_gradients, world_size, (batch, None if sizes is None else list(sizes)))
    full_batch = single_device(steps=1, batch=batch, lr=0.0)["grads"][0].to(results[0]["local"].device)
    return Gradients([r["shard"] for r in results], [r["local"] for r in results], [r["synced"] for r in results],
                     full_batch)


def _training(steps: int, batch: int, lr: float) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    module = make_model(seed=rank)  # every rank starts from different weights, on purpose
    before = flat_weights(module)
    ddp_model = wrap(module, here)
    after_wrap = flat_weights(module)
    storage = [p.data_ptr() for p in module.parameters()]
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    x, y = regression_batch(steps * batch)
    weights, losses, same_storage = [], [], True
    for step in range(steps):
        mine = [step * batch + i for i in shard(batch, rank, world)]
        optimizer.zero_grad()
        loss = regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here))
        loss.backward()
        optimizer.step()
        weights.append(flat_weights(module))
        losses.append(loss.item())
        same_storage = same_storage and [p.data_ptr() for p in module.parameters()] == storage
    return {"before_wrap": before, "after_wrap": after_wrap, "weights": weights, "losses": losses,
            "same_storage": same_storage, "pid": os.getpid(), "device": str(here), "backend": dist.get_backend()}


@dataclasses.dataclass
class Training:
    """Weights per rank: before DDP, after wrapping, after every step; and single-device SGD's weights."""

    ranks: list[dict]
    single_device: list[torch.Tensor]

    def max_diff_to_single_device(self) -> list[float]:
        """Per step: the largest difference between any rank's weights and single-device training's."""
        return [max(max_difference(r["weights"][s], w) for r in self.ranks) for s, w in enumerate(self.single_device)]

    def matches_single_device(self, tolerance: float = 1e-6) -> bool:
        return max(self.max_diff_to_single_device()) <= tolerance

    def __str__(self) -> str:
        start = [max_difference(r["before_wrap"], self.ranks[0]["before_wrap"]) for r in self.ranks]
        wrapped = [max_difference(r["after_wrap"], self.ranks[0]["before_wrap"]) for r in self.ranks]
        same = all(r["same_storage"] for r in self.ranks)
        lines = [f"rank {i}/{len(self.ranks)}: pid {r['pid']}, {r['device']}, {r['backend']}"
                 for i, r in enumerate(self.ranks)]
        lines += [f"before DDP(model), max |w_rank - w_rank0| per rank: {[f'{d:.3f}' for d in start]}",
                  f"after  DDP(model) (rank 0's weights were broadcast):  {[f'{d:.0e}' for d in wrapped]}",
                  f"same parameter tensors at every step (never copied again): {same}"]
        for step, diff in enumerate(self.max_diff_to_single_device()):
            losses = ", ".join(f"{r['losses'][step]:.4f}" for r in self.ranks)
            lines.append(f"step {step + 1}: local losses [{losses}]  max |w - w_single_device| {diff:.1e}")
        lines.append(f"weights equal single-device training: {self.matches_single_device()}")
        return "\n".join(lines)


def train(world_size: int = 2, steps: int = 3, batch: int = 16, lr: float = 0.1) -> Training:
    """``steps`` SGD steps under DDP, each rank on its ``DistributedSampler`` shard of every batch.

    Every rank builds its model from a different seed; DDP's constructor copies rank 0's weights to all,
    once. After that only gradients travel, and every rank's optimizer applies the same averaged gradient,
    so the weights stay equal to each other and to single-device training on the whole batch.
    """
    ranks = launch(_training, world_size, (steps, batch, lr))
    here = ranks[0]["weights"][0].device
    return Training(ranks, [weights.to(here) for weights in single_device(steps, batch, lr)["weights"]])


def _buffers(batch: int, sync_buffers: bool) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    module = make_model(batchnorm=True)
    norm = module[1]
    norm.running_mean.fill_(float(rank))  # every rank starts with different buffers, on purpose
    before = norm.running_mean.clone()
    ddp_model = wrap(module, here, sync_buffers=sync_buffers)
    after_wrap = norm.running_mean.clone()
    at_start: list[torch.Tensor] = []
    # Runs inside DDP's forward, after DDP's own buffer broadcast, before BatchNorm updates its statistics.
    norm.register_forward_pre_hook(lambda m, _: at_start.append(m.running_mean.detach().cpu().clone()))
    x, y = regression_batch(2 * batch)
    after_forward = []
    for step in range(2):
        mine = [step * batch + i for i in shard(batch, rank, world)]
        regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)).backward()
        after_forward.append(norm.running_mean.detach().cpu().clone())
    return {"before": before.cpu(), "after_wrap": after_wrap.cpu(), "at_start": at_start, "after": after_forward}


@dataclasses.dataclass
class Buffers:
    """BatchNorm's ``running_mean`` on each rank at every stage (``at_start[i]``: inside forward ``i``)."""

    sync_buffers: bool
    ranks: list[dict]

    def __str__(self) -> str:
        lines = [f"forward_sync_buffers={self.sync_buffers}; first running_mean entries per rank:"]
        for stage, label in [("before", "before DDP(model)"), ("after_wrap", "after DDP(model)")]:
            lines += [_row(f"{label}, rank {i}", r[stage][:3]) for i, r in enumerate(self.ranks)]
        for step in range(2):
            for stage, label in [("at_start", "start of forward"), ("after", "after forward")]:
                lines += [_row(f"{label} {step + 1}, rank {i}", r[stage][step][:3]) for i, r in enumerate(self.ranks)]
        return "\n".join(lines)


def buffers(world_size: int = 2, sync_buffers: bool = True, batch: int = 8) -> Buffers:
    """Two training steps of a BatchNorm model whose ranks start with different ``running_mean`` buffers.

    DDP's constructor broadcasts rank 0's buffers. With ``sync_buffers`` it broadcasts them again at the
    start of every forward, so inside forward 2 every rank sees rank 0's statistics from forward 1;
    each rank's own update (from its shard) lives only until the next forward.
    """
    return Buffers(sync_buffers, launch(_buffers, world_size, (batch, sync_buffers)))
