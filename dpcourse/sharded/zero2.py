"""ZeRO-2, teaching size: gradients reduce-scattered during backward, bucket by bucket; each rank keeps its shard.

ZeRO-1 (lesson 18) all-reduces the whole gradient, so every rank holds all of it, and then uses only the shard
its optimizer updates. ZeRO-2 asks the ranks for that shard alone: a **reduce-scatter** gives rank ``r`` the sum
of piece ``r`` and nothing else. ``Zero2`` does it as DDP does its all-reduce (lesson 10's ``GradientBuckets``):

1. Group the parameters into buckets, DDP's way (``bucket_indices``): in ``parameters()`` order, a bucket closes
   once it holds ``bucket_bytes``, and the list is reversed, since backward produces the last layers' gradients
   first. Each bucket is one flat vector; rank ``r`` owns lesson 18's ``shard_range`` of it.
2. Put a hook on every parameter (``register_post_accumulate_grad_hook``: it runs once ``.grad`` holds this
   backward's gradient). The hook copies the gradient into its bucket's flat buffer and sets ``.grad`` to
   ``None``. When a bucket's last gradient is in, the buffer is divided by ``n`` and reduce-scattered into this
   rank's gradient shard, and the buffer is dropped: the full gradient is gone before backward reaches the
   first layers.
3. After backward, Adam steps this rank's shards only (lesson 18), and an all-gather of every bucket gives every
   rank all the updated parameters.

The reduce-scatter here is synchronous, so it does not overlap the rest of backward as DDP's ``async_op=True``
all-reduce does; the point is what each rank holds. ``collectives="ring"`` swaps torch's collectives for the
point-to-point rings of ``rings.py``, whose bytes ``traffic.counted`` counts.
"""

import dataclasses
import itertools
import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from ..examples import regression_loss
from ..memory import storage_bytes
from . import rings
from .zero1 import shard_range

LESSON_BUCKET_BYTES = 400  # 100 float32 values: the course's 439-parameter model gets 3 buckets
# Looked up by name when called: ``dist.reduce_scatter`` as it is then (a counting wrapper, say), or the ring's.
COLLECTIVES = {"torch": dist, "ring": rings}


def bucket_indices(numels: Sequence[int], bucket_numel: int) -> list[list[int]]:
    """The parameters' indices grouped into buckets, DDP's rule: in order, a bucket closes once it holds at least
    ``bucket_numel`` values; then the buckets are reversed, as ``DistributedDataParallel._ddp_init_helper`` does
    with what ``dist._compute_bucket_assignment_by_size`` returns (``torch/nn/parallel/distributed.py``)."""
    groups: list[list[int]] = [[]]
    filled = 0
    for index, numel in enumerate(numels):
        groups[-1].append(index)
        filled += numel
        if filled >= bucket_numel and index < len(numels) - 1:
            groups.append([])
            filled = 0
    return groups[::-1]


@dataclasses.dataclass
class Bucket:
    """Parameters whose gradients are reduce-scattered together, and this rank's shard of them.

    The bucket is one flat vector of ``numel`` values, each parameter at its ``offsets`` entry. Rank ``r`` owns
    ``shard_range(numel, r, n)`` of it, ``weights``, which its Adam updates. The collectives want pieces of one
    size, ``piece`` values each, so the flat vector is padded with zeros to ``piece * n`` (FSDP's rule:
    ``torch/distributed/fsdp/_flat_param.py: FlatParamHandle._get_unpadded_shard`` pads every rank's chunk to the
    first one's size). ``gradients`` is the flat buffer being filled during backward, ``None`` between backwards.
    """

    parameters: list[nn.Parameter]
    offsets: dict[nn.Parameter, int]
    numel: int
    piece: int
    weights: torch.Tensor
    gradients: torch.Tensor | None = None
    arrived: int = 0

    def zeros(self, n: int) -> torch.Tensor:
        return torch.zeros(self.piece * n, dtype=self.weights.dtype, device=self.weights.device)


class Zero2:
    """ZeRO-2 for ``model`` on the default process group: ``loss.backward(); zero2.step()`` (module docstring).

    After ``step`` every parameter holds the updated values and no ``.grad``. What it measured:
    ``still_to_come[i]``, how many gradients backward had not produced yet when bucket ``i``'s reduce-scatter
    started (this backward); ``gradient_bytes``, the most gradient memory held at once (full ``.grad`` tensors,
    bucket buffers, the piece being received and the shards), counted at every hook; ``held_at_hooks``, that count
    at each hook of this backward, in order.
    """

    def __init__(self, model: nn.Module, lr: float, bucket_bytes: int = LESSON_BUCKET_BYTES,
                 collectives: str = "torch") -> None:
        if collectives not in COLLECTIVES:
            raise ValueError(f"collectives={collectives!r}: choose 'torch' (dist.reduce_scatter and dist.all_gather) "
                             "or 'ring' (rings.py, written with sends, whose bytes traffic.counted counts).")
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.collectives = COLLECTIVES[collectives]
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
        return Bucket(parameters, offsets, flat.numel(), math.ceil(flat.numel() / self.n), flat[start:stop].clone())

    def held(self, *more: torch.Tensor) -> int:
        """Gradient bytes this rank holds now: full ``.grad`` tensors, bucket buffers, shards, and ``more``."""
        full = [p.grad for p in self._bucket_of]
        buffers = [bucket.gradients for bucket in self.buckets]
        shards = [bucket.weights.grad for bucket in self.buckets]
        return storage_bytes([*full, *buffers, *shards, *more])

    def _gradient_ready(self, param: nn.Parameter) -> None:
        bucket = self._bucket_of[param]
        if bucket.gradients is None:
            bucket.gradients = bucket.zeros(self.n)
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
        piece = torch.empty(bucket.piece, dtype=flat.dtype, device=flat.device)
        self.gradient_bytes = max(self.gradient_bytes, self.held(piece))
        self.collectives.reduce_scatter(piece, list(flat.chunk(self.n)))
        bucket.weights.grad = piece[:bucket.weights.numel()]  # the padding's sums are nobody's gradient
        bucket.gradients = None  # ZeRO-2: only the shard is kept

    def step(self) -> None:
        """Adam on this rank's shards, then every bucket all-gathered into the parameters."""
        if any(bucket.arrived < len(bucket.parameters) for bucket in self.buckets):
            raise RuntimeError("step() before backward gave every parameter a gradient: call loss.backward() first. "
                               "(A model whose forward skips a parameter never fills that parameter's bucket.)")
        self.optimizer.step()
        for bucket in self.buckets:
            mine = bucket.zeros(1)  # every rank sends a piece of one size: its shard, padded
            mine[:bucket.weights.numel()] = bucket.weights.detach()
            flat = bucket.zeros(self.n)
            self.collectives.all_gather(list(flat.chunk(self.n)), mine)
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
          bucket_bytes: int = LESSON_BUCKET_BYTES, collectives: str = "torch") -> dict:
    """A training program for ``ranks.train_on_ranks``: ZeRO-2 with Adam, one step per batch.

    Returns the full parameters and what ``Zero2`` measured: ``gradient_bytes`` (the most at once),
    ``after_backward`` (gradient bytes held when the first backward ended), ``state_bytes``, ``still_to_come`` and
    ``held_at_hooks`` (of the first backward) and ``shard_numels`` (this rank's values per bucket).
    """
    zero2 = Zero2(model, lr, bucket_bytes, collectives)
    first: dict = {}
    for x, y in batches:
        regression_loss(model(x), y).backward()
        first = first or {"after_backward": zero2.held(), "still_to_come": zero2.still_to_come,
                          "held_at_hooks": zero2.held_at_hooks}
        zero2.step()
    return {"parameters": [p.detach() for p in model.parameters()], "gradient_bytes": zero2.gradient_bytes,
            "state_bytes": zero2.state_bytes, "shard_numels": [b.weights.numel() for b in zero2.buckets], **first}
