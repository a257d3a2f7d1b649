"""The collectives of sharding, written once: which shard a rank owns, and the padded all-gather and reduce-scatter.

Every ZeRO stage cuts a flat vector of ``numel`` numbers into ``n`` shards, one per rank (``shard_range``), and
moves them with two collectives:

* ``all_gather_padded``: every rank's shard in, the whole vector out, on every rank (ZeRO-1 and ZeRO-2 after
  Adam's step, ZeRO-3 before a layer runs);
* ``reduce_scatter_padded``: every rank's whole vector in, this rank's shard of their sum out (ZeRO-2's and
  ZeRO-3's gradients).

Why padded: ``dist.all_gather`` and ``dist.reduce_scatter`` move one piece per rank, and gloo and NCCL want the
pieces of one size (lesson 18's ``zero1.uneven_all_gather`` shows gloo refusing). The shards are not of one size
when ``n`` does not divide ``numel``: they hold ``piece_size(numel, n) = ceil(numel / n)`` numbers, the last ones
fewer or none (``torch.chunk``'s rule). So each shard is padded with zeros to ``piece_size`` before it travels,
and the padding is cut off what arrives: at most ``n - 1`` numbers sent for nothing, per collective.

FSDP2 keeps all its collectives in one file too, ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``:
``foreach_all_gather`` and ``foreach_reduce`` do what the two functions here do, for many parameters at once
(each parameter's rows padded to ``ceil(rows / n)``, ``_fsdp_common.py: _get_dim0_padded_size``), with
``all_gather_into_tensor`` and ``reduce_scatter_tensor`` on one flat buffer. FSDP2 pads each shard once, when it
shards the parameter (``_fsdp_param.py: FSDPParam._init_sharded_param``, "pre-pad the sharded parameter to avoid
padding before all-gather"); here every call pads, which costs a copy and shows the padding where it is used.

Both look ``dist.all_gather`` and ``dist.reduce_scatter`` up when called, so inside ``rings.ring_collectives()``
they run as rings of point-to-point messages, whose bytes ``ranks.traffic.counted`` counts.
"""

import math

import torch
import torch.distributed as dist


def piece_size(numel: int, world_size: int) -> int:
    """``ceil(numel / world_size)``: the numbers in every rank's piece of a collective, padding included."""
    return math.ceil(numel / world_size)


def shard_range(numel: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(start, stop)``: the slice of a flat vector of ``numel`` numbers that ``rank`` of ``world_size`` owns.

    Every slice but the last ones holds ``piece_size(numel, world_size)`` numbers; they cover ``0 ... numel - 1``
    in rank order; a rank past the end gets an empty slice (``start == stop == numel``).
    """
    for name, value, least in (("numel", numel, 0), ("world_size", world_size, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}; got {value!r}.")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be one of 0 ... {world_size - 1} for world_size={world_size}; got {rank!r}.")
    size = piece_size(numel, world_size)
    return min(rank * size, numel), min((rank + 1) * size, numel)


def _padded(vector: torch.Tensor, numel: int) -> torch.Tensor:
    """A new vector of ``numel`` numbers: ``vector``'s, then zeros; the dtype and device are ``vector``'s."""
    padded = torch.zeros(numel, dtype=vector.dtype, device=vector.device)
    padded[: vector.numel()] = vector
    return padded


def all_gather_padded(shard: torch.Tensor, numel: int, into: torch.Tensor | None = None, async_op: bool = False
                      ) -> tuple[torch.Tensor, dist.Work | None]:
    """Every rank's ``shard`` of a vector of ``numel`` numbers, gathered: the whole vector, on every rank.

    Pad, gather, cut: the shard is padded with zeros to ``piece_size(numel, n)``, every rank's padded piece is
    gathered, in rank order, into one buffer of ``n`` pieces (``into``, if given: ZeRO-3 gathers into memory it
    has freed), and the vector returned is the buffer's first ``numel`` numbers, a view of it. Returns the vector
    and the work to ``wait()`` for before reading it: ``None`` when the gather is done already, always so unless
    ``async_op=True`` (and not even then for a ring, which finishes before it returns).
    """
    n = dist.get_world_size()
    size = piece_size(numel, n)
    mine = _padded(shard, size)
    buffer = torch.empty(n * size, dtype=shard.dtype, device=shard.device) if into is None else into
    work = dist.all_gather(list(buffer.chunk(n)), mine, async_op=async_op)
    return buffer[:numel], work


def reduce_scatter_padded(flat: torch.Tensor, numel: int | None = None) -> torch.Tensor:
    """This rank's shard (``shard_range``) of the sum over the ranks of their ``flat`` vectors of ``numel`` numbers.

    Pad, reduce-scatter, cut: ``flat`` is copied into a vector padded with zeros to ``n`` pieces of
    ``piece_size(numel, n)``; the reduce-scatter sums piece ``r`` over the ranks into rank ``r``; the padding's
    sums, past the shard's end, are nobody's and are cut off. A sum, not an average: divide by ``n`` before or
    after, as DDP does. Given ``numel``, ``flat`` is a buffer the caller padded already (``zero2.Zero2`` fills
    one in place during backward, so that the gradients are not copied twice): no copy, and its pieces are the
    collective's working space (a ring adds into them).
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    size = piece_size(flat.numel() if numel is None else numel, n)
    if numel is None:
        numel, flat = flat.numel(), _padded(flat, n * size)
    elif flat.numel() != n * size:
        raise ValueError(f"reduce_scatter_padded was given {flat.numel()} numbers for a vector of numel={numel} on "
                         f"{n} ranks; a padded buffer holds {n} * ceil({numel} / {n}) = {n * size}: pad it with "
                         "zeros to that size, or leave numel out to have it padded here.")
    mine = torch.empty(size, dtype=flat.dtype, device=flat.device)
    dist.reduce_scatter(mine, list(flat.chunk(n)))
    start, stop = shard_range(numel, rank, n)
    return mine[: stop - start]
