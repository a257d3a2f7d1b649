"""SyncBatchNorm against per-replica BatchNorm: the statistics of the global batch or of each rank's shard.

Under DDP (and DataParallel) a ``BatchNorm`` layer normalises each rank's shard with that shard's mean and
variance, and updates its running statistics from them. ``nn.SyncBatchNorm`` uses the global batch's instead:
every rank computes its shard's mean, inverse standard deviation and count, an ``all_gather`` brings every
rank's to every rank, and ``torch.batch_norm_gather_stats_with_counts`` combines them, weighting each rank by
its count (``torch/nn/modules/_functions.py``: ``SyncBatchNorm.forward``). Backward all-reduces two sums of
the gradient (``SyncBatchNorm.backward``).

torch 2.13 runs it on GPUs (and XPU, HPU) only: on CPU tensors its forward raises ``ValueError`` before
anything is gathered (``torch/nn/modules/batchnorm.py``: ``SyncBatchNorm.forward``), and the kernels it calls,
``batch_norm_stats`` among them, have no CPU implementation. ``SyncBatchNorm1d`` below does the same
arithmetic with ``dist.all_gather`` and ordinary tensor operations, so it runs on the CPU under gloo. It
gathers the variance where torch gathers the inverse standard deviation: the same information.
"""

import torch
import torch.distributed as dist
from torch import nn


class _AllGather(torch.autograd.Function):
    """``dist.all_gather`` with a backward: every rank's row, stacked; each rank's gradient flows back home."""

    @staticmethod
    def forward(ctx, local: torch.Tensor) -> torch.Tensor:
        rows = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, local.contiguous())
        return torch.stack(rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        # Every rank's loss depends on my row: my row's gradient is the sum of theirs.
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad[dist.get_rank()]


def combine_stats(means: torch.Tensor, variances: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The mean and (biased) variance of the union of shards, from each shard's mean, variance and count.

    ``means`` and ``variances`` are ``(ranks, channels)``, ``counts`` is ``(ranks, 1)``. The global mean weights
    each shard by its count; the global variance adds the spread of the shards' means around it to the
    shards' own variances (the law of total variance), which is why averaging the variances is not enough.
    """
    total = counts.sum()
    mean = (counts * means).sum(0) / total
    variance = (counts * (variances + (means - mean) ** 2)).sum(0) / total
    return mean, variance, total


def global_stats(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(mean, biased variance, count)`` per channel of every rank's ``x`` together; ``x`` is ``(batch, channels)``.

    One all-gather of ``2 * channels + 1`` numbers per rank: how SyncBatchNorm's forward communicates.
    """
    channels = x.shape[1]
    count = torch.full((1,), x.shape[0], dtype=x.dtype, device=x.device)
    local = torch.cat([x.mean(0), x.var(0, unbiased=False), count])
    means, variances, counts = _AllGather.apply(local).split([channels, channels, 1], dim=1)
    return combine_stats(means, variances, counts)


class SyncBatchNorm1d(nn.BatchNorm1d):
    """``nn.SyncBatchNorm``'s training forward for ``(batch, channels)`` inputs, on any device, under any backend.

    In training with more than one rank it normalises with the global batch's statistics and updates the
    running ones as ``nn.BatchNorm1d`` would on one device with the whole batch: the running variance takes the
    *unbiased* variance of the global batch. Otherwise it is ``nn.BatchNorm1d``. ``momentum`` must be a number.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        if self.momentum is None:
            raise ValueError("SyncBatchNorm1d needs a number for momentum (it does not keep a cumulative average).")
        mean, variance, count = global_stats(x)
        if self.track_running_stats:
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(variance * count / (count - 1), self.momentum)
                self.num_batches_tracked += 1
        normalised = (x - mean) * torch.rsqrt(variance + self.eps)
        return normalised * self.weight + self.bias if self.affine else normalised
