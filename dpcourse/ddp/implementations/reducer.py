"""DDP's gradient synchronisation, teaching size: buckets, a hook per parameter, async all-reduce, divide by N.

The real one is C++, ``Reducer`` in ``torch/csrc/distributed/c10d/reducer.cpp``; the Python side is
``torch/nn/parallel/distributed.py``. What it does, and what ``GradientBuckets`` does in ~60 lines:

1. At construction, broadcast rank 0's parameters and buffers, so every rank starts equal.
2. Group the parameters into buckets (``bucket_indices``): in ``parameters()`` order, closing a bucket once it
   holds at least ``bucket_bytes`` (DDP: 25 MiB, but 1 MiB for the first, ``_compute_bucket_assignment_by_size``),
   then *reverse* the list of buckets, because backward produces the last layers' gradients first. That is
   DDP's layout with ``find_unused_parameters=True``. With its defaults DDP starts with one bucket for every
   parameter (``torch/nn/parallel/distributed.py:153-154``) and, after the first backward, rebuilds the buckets
   in the order the gradients really arrived (``Reducer::rebuild_buckets``; lesson 19 measures both).
3. Put a hook on every parameter (``register_post_accumulate_grad_hook``: it runs once ``.grad`` holds
   this backward's gradient). When the last gradient of a bucket arrives, flatten the bucket, divide by
   the world size, and start ``all_reduce(SUM)`` with ``async_op=True``: it returns at once and the
   communication overlaps the rest of backward.
4. After backward, wait for every bucket and copy the averages back into ``.grad``. (DDP does this
   inside backward, from a callback it queues on the autograd engine; here you call ``wait()``.)

Buckets are launched strictly in order: collectives are matched by order across ranks, and if rank 0
launched bucket 1 first while rank 1 launched bucket 0 first, the two all-reduces would pair up wrongly.
"""

import dataclasses
from collections.abc import Sequence
from itertools import chain

import torch
import torch.distributed as dist
from torch import nn

from ...examples import flat_grad, make_model, max_difference, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..per_rank import shard, wrap


def bucket_indices(sizes: Sequence[int], bucket_size: int) -> list[list[int]]:
    """The parameters' indices grouped into buckets by step 2 above, DDP's rule with ``find_unused_parameters=True``:
    in order, a bucket closes once it holds at least ``bucket_size``; then the buckets are reversed, as
    ``DistributedDataParallel._ddp_init_helper`` does with what ``dist._compute_bucket_assignment_by_size`` returns
    (``torch/nn/parallel/distributed.py``).

    ``sizes`` and ``bucket_size`` in one unit: bytes for ``GradientBuckets``, as DDP counts; numbers of values for
    ``sharded.zero2``, whose buckets are flat vectors of one dtype."""
    groups: list[list[int]] = [[]]
    filled = 0
    for index, size in enumerate(sizes):
        groups[-1].append(index)
        filled += size
        if filled >= bucket_size and index < len(sizes) - 1:
            groups.append([])
            filled = 0
    return groups[::-1]


class GradientBuckets:
    """Average ``module``'s gradients across all ranks during backward, bucket by bucket.

    Use: ``loss.backward(); buckets.wait(); optimizer.step()``. Only for the default process group.
    ``still_to_come[i]``: how many gradients backward had not produced yet when bucket ``i`` was launched;
    more than 0 means that all-reduce overlapped the rest of backward.
    """

    def __init__(self, module: nn.Module, bucket_bytes: int = 25 * 2**20) -> None:
        for tensor in chain(module.parameters(), module.buffers()):
            dist.broadcast(tensor.data, src=0)
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        # Reversed: the last layers' gradients are ready first, so their bucket goes first.
        groups = bucket_indices([p.numel() * p.element_size() for _, p in named], bucket_bytes)
        self.buckets = [[named[i] for i in group] for group in groups]
        self._bucket_of = {param: i for i, bucket in enumerate(self.buckets) for _, param in bucket}
        for _, param in named:
            param.register_post_accumulate_grad_hook(self._gradient_ready)
        self.still_to_come: list[int] = []
        self._reset()

    def _reset(self) -> None:
        self._arrived = [0] * len(self.buckets)
        self._in_flight: list[tuple[torch.Tensor, dist.Work]] = []

    def _gradient_ready(self, param: nn.Parameter) -> None:
        if not any(self._arrived):  # the first gradient of this backward
            self.still_to_come = []
        self._arrived[self._bucket_of[param]] += 1
        # Launch every bucket that is full, in order: bucket i only after buckets 0..i-1.
        while len(self._in_flight) < len(self.buckets):
            bucket = len(self._in_flight)
            if self._arrived[bucket] < len(self.buckets[bucket]):
                return
            flat = torch.cat([p.grad.flatten() for _, p in self.buckets[bucket]])
            # Divide first, then sum: the average, as allreduce_hook does (ddp_comm_hooks/default_hooks.py).
            flat.div_(dist.get_world_size())
            self._in_flight.append((flat, dist.all_reduce(flat, async_op=True)))
            self.still_to_come.append(len(self._bucket_of) - sum(self._arrived))

    def wait(self) -> None:
        """Wait for every bucket's all-reduce and write the averaged gradients into ``.grad``."""
        if len(self._in_flight) < len(self.buckets):
            stuck = [name for name, _ in self.buckets[len(self._in_flight)]]
            raise RuntimeError(
                f"Backward gave no gradient to some of {stuck}, so their bucket was never all-reduced. Real DDP "
                f"needs find_unused_parameters=True for a model whose forward skips parameters."
            )
        for (flat, work), bucket in zip(self._in_flight, self.buckets, strict=True):
            work.wait()
            offset = 0
            for _, param in bucket:
                param.grad.copy_(flat[offset : offset + param.numel()].view_as(param))
                offset += param.numel()
        self._reset()


def _compare(batch: int, bucket_bytes: int) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    x, y = regression_batch(batch)
    mine = shard(batch, rank, world)
    ddp_model = wrap(make_model(), here)
    regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)).backward()
    ours = make_model(seed=rank).to(here)  # different weights on every rank: GradientBuckets broadcasts rank 0's
    buckets = GradientBuckets(ours, bucket_bytes)
    regression_loss(ours(x[mine].to(here)), y[mine].to(here)).backward()
    buckets.wait()
    return {"ddp": flat_grad(ddp_model.module), "ours": flat_grad(ours), "still_to_come": buckets.still_to_come,
            "buckets": [[name for name, _ in bucket] for bucket in buckets.buckets]}


@dataclasses.dataclass
class BucketCheck:
    """Gradients from real DDP and from ``GradientBuckets`` on every rank, and the bucket layout used."""

    buckets: list[list[str]]
    still_to_come: list[int]
    ddp: list[torch.Tensor]
    ours: list[torch.Tensor]

    @property
    def max_diff(self) -> float:
        return max_difference(self.ddp, self.ours)

    def __str__(self) -> str:
        layout = "\n".join(f"  bucket {i}: {names}, launched with {n} gradients still to come"
                           for i, (names, n) in enumerate(zip(self.buckets, self.still_to_come, strict=True)))
        return (f"buckets, in the order they are all-reduced (last layers first):\n{layout}\n"
                f"max |DDP - ours| over all ranks: {self.max_diff:.1e}")


def check_buckets(world_size: int = 2, batch: int = 8, bucket_bytes: int = 300) -> BucketCheck:
    """One backward on every rank's shard with real DDP and with ``GradientBuckets``; compare the gradients.

    The lesson model has 212 float32 parameters (848 bytes): ``bucket_bytes=300`` gives several buckets.
    """
    results = launch(_compare, world_size, (batch, bucket_bytes))
    return BucketCheck(results[0]["buckets"], results[0]["still_to_come"], [r["ddp"] for r in results],
                       [r["ours"] for r in results])
