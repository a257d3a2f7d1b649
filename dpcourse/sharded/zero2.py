"""ZeRO-2, teaching size: gradients reduce-scattered during backward, bucket by bucket; each rank keeps its shard.

ZeRO-1 (lesson 18) all-reduces the whole gradient, so every rank holds all of it, and then uses only the shard
its optimizer updates. ZeRO-2 asks the ranks for that shard alone: a **reduce-scatter** gives rank ``r`` the sum
of piece ``r`` and nothing else. ``Zero2`` does it as DDP does its all-reduce (lesson 10's ``GradientBuckets``):

1. Group the parameters into buckets, the course's choice (``bucket_indices``, lesson 10's
   ``ddp/implementations/reducer.py``): in ``parameters()`` order, a bucket closes once it holds at least
   ``bucket_bytes``, and the list is reversed, since backward produces the last layers' gradients first. That is
   DDP's layout under ``find_unused_parameters=True``; with its defaults DDP starts with one bucket and rebuilds them
   after the first step in the order the gradients arrived (``ddp_buckets`` reads both from a comm hook). Each
   bucket is one flat vector; rank ``r`` owns lesson 18's ``shard_range`` of it.
2. Put a hook on every parameter (``register_post_accumulate_grad_hook``: it runs once ``.grad`` holds this
   backward's gradient). The hook copies the gradient into its bucket's flat buffer, padded to ``n`` pieces of
   one size, and sets ``.grad`` to ``None``. When a bucket's last gradient is in, the buffer is divided by ``n``
   and reduce-scattered into this rank's gradient shard (``reduce_scatter_padded``), and the buffer is dropped:
   the full gradient is gone before backward reaches the first layers.
3. After backward, Adam steps this rank's shards only (lesson 18), and an all-gather of every bucket
   (``all_gather_padded``) gives every rank all the updated parameters.

The reduce-scatter here is synchronous, so it does not overlap the rest of backward as DDP's ``async_op=True``
all-reduce does; the point is what each rank holds. The two collectives, with their padding, are in
``collectives.py``; lesson 19 runs them as rings of sends inside ``rings.ring_collectives()`` to count their bytes.
"""

import dataclasses
import itertools
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from ..ddp.implementations.reducer import bucket_indices
from ..examples import regression_loss
from ..memory import storage_bytes
from .collectives import all_gather_padded, piece_size, reduce_scatter_padded, shard_range

LESSON_BUCKET_BYTES = 400  # 100 float32 values: the course's 439-parameter model gets 3 buckets


@dataclasses.dataclass
class Bucket:
    """Parameters whose gradients are reduce-scattered together, and this rank's shard of them.

    The bucket is one flat vector of ``numel`` values, each parameter at its ``offsets`` entry. Rank ``r`` owns
    ``shard_range(numel, r, n)`` of it, ``weights``, which its Adam updates. ``gradients`` is the flat buffer
    being filled during backward, ``None`` between backwards: ``padded_numel`` values, ``n`` pieces of
    ``ceil(numel / n)``, the zeros at its end the padding the reduce-scatter wants.
    """

    parameters: list[nn.Parameter]
    offsets: dict[nn.Parameter, int]
    numel: int
    padded_numel: int
    weights: torch.Tensor
    gradients: torch.Tensor | None = None
    arrived: int = 0


class Zero2:
    """ZeRO-2 for ``model`` on the default process group: ``loss.backward(); zero2.step()`` (module docstring).

    After ``step`` every parameter holds the updated values and no ``.grad``. What it measured:
    ``still_to_come[i]``, how many gradients backward had not produced yet when bucket ``i``'s reduce-scatter
    started (this backward); ``gradient_bytes``, the most gradient memory held at once (full ``.grad`` tensors,
    bucket buffers, the piece being received and the shards), counted at every hook; ``held_at_hooks``, that count
    at each hook of this backward, in order.
    """

    def __init__(self, model: nn.Module, lr: float, bucket_bytes: int = LESSON_BUCKET_BYTES) -> None:
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        parameters = [p for p in model.parameters() if p.requires_grad]
        groups = bucket_indices([p.numel() for p in parameters], bucket_bytes // parameters[0].element_size())
        self.buckets = [self._bucket([parameters[i] for i in group]) for group in groups]
        self._bucket_of = {p: bucket for bucket in self.buckets for p in bucket.parameters}
        self.optimizer = torch.optim.Adam([bucket.weights for bucket in self.buckets], lr=lr)
        for p in parameters:
            p.register_post_accumulate_grad_hook(self._gradient_ready)
        self.still_to_come: list[int] = []
        self.held_at_hooks: list[int] = []
        self.gradient_bytes = 0

    def _bucket(self, parameters: list[nn.Parameter]) -> Bucket:
        flat = torch.cat([p.detach().reshape(-1) for p in parameters])
        start, stop = shard_range(flat.numel(), self.rank, self.n)
        offsets = dict(zip(parameters, itertools.accumulate((p.numel() for p in parameters), initial=0), strict=False))
        padded_numel = self.n * piece_size(flat.numel(), self.n)
        return Bucket(parameters, offsets, flat.numel(), padded_numel, flat[start:stop].clone())

    def held(self, *more: torch.Tensor) -> int:
        """Gradient bytes this rank holds now: full ``.grad`` tensors, bucket buffers, shards, and ``more``."""
        full = [p.grad for p in self._bucket_of]
        buffers = [bucket.gradients for bucket in self.buckets]
        shards = [bucket.weights.grad for bucket in self.buckets]
        return storage_bytes([*full, *buffers, *shards, *more])

    def _gradient_ready(self, param: nn.Parameter) -> None:
        bucket = self._bucket_of[param]
        if bucket.gradients is None:
            bucket.gradients = torch.zeros(bucket.padded_numel, dtype=bucket.weights.dtype,
                                           device=bucket.weights.device)
        start = bucket.offsets[param]
        bucket.gradients[start:start + param.numel()].copy_(param.grad.reshape(-1))
        self.held_at_hooks.append(self.held())
        self.gradient_bytes = max(self.gradient_bytes, self.held_at_hooks[-1])
        param.grad = None  # from here on this gradient lives in the bucket only
        bucket.arrived += 1
        if bucket.arrived < len(bucket.parameters):
            return
        self.still_to_come.append(len(self._bucket_of) - sum(b.arrived for b in self.buckets))
        flat = bucket.gradients.div_(self.n)  # divide, then sum: the average, as DDP's all-reduce hook does
        shard = reduce_scatter_padded(flat, bucket.numel)  # the buffer is padded already: no copy of it
        self.gradient_bytes = max(self.gradient_bytes, self.held(shard))  # the buffer and the piece received
        bucket.weights.grad = shard
        bucket.gradients = None  # ZeRO-2: only the shard is kept

    def step(self) -> None:
        """Adam on this rank's shards, then every bucket all-gathered into the parameters."""
        if any(bucket.arrived < len(bucket.parameters) for bucket in self.buckets):
            raise RuntimeError("step() before backward gave every parameter a gradient: call loss.backward() first. "
                               "(A model whose forward skips a parameter never fills that parameter's bucket.)")
        self.optimizer.step()
        for bucket in self.buckets:
            flat, _ = all_gather_padded(bucket.weights.detach(), bucket.numel)
            with torch.no_grad():
                for p in bucket.parameters:
                    start = bucket.offsets[p]
                    p.copy_(flat[start:start + p.numel()].view_as(p))
            bucket.arrived = 0
        self.still_to_come, self.held_at_hooks = [], []

    @property
    def state_bytes(self) -> int:
        """Bytes of Adam's state on this rank: two averages of this rank's shards, and a step count per bucket."""
        return storage_bytes(t for state in self.optimizer.state.values() for t in state.values()
                             if isinstance(t, torch.Tensor))


def train(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float,
          bucket_bytes: int = LESSON_BUCKET_BYTES) -> dict:
    """A training program for ``ranks.train_on_ranks``: ZeRO-2 with Adam, one step per batch.

    Returns the full parameters and what ``Zero2`` measured: ``gradient_bytes`` (the most at once),
    ``after_backward`` (gradient bytes held when the first backward ended), ``state_bytes``, ``still_to_come`` and
    ``held_at_hooks`` (of the first backward) and ``shard_numels`` (this rank's values per bucket).
    """
    zero2 = Zero2(model, lr, bucket_bytes)
    first: dict = {}
    for x, y in batches:
        regression_loss(model(x), y).backward()
        first = first or {"after_backward": zero2.held(), "still_to_come": zero2.still_to_come,
                          "held_at_hooks": zero2.held_at_hooks}
        zero2.step()
    return {"parameters": [p.detach() for p in model.parameters()], "gradient_bytes": zero2.gradient_bytes,
            "state_bytes": zero2.state_bytes, "shard_numels": [b.weights.numel() for b in zero2.buckets], **first}
