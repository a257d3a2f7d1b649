"""sharded.collectives, on real gloo ranks: the padded all-gather and reduce-scatter give every rank the vector and
its shard of the sum, for every size against every world size from 1 to 4 (uneven, and empty shards), with gloo's
collectives and inside rings.ring_collectives(), which puts torch's back whatever happens in its block."""

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from dpcourse.ranks.launcher import launch
from dpcourse.ranks.traffic import counted
from dpcourse.sharded import rings
from dpcourse.sharded.collectives import all_gather_padded, piece_size, reduce_scatter_padded, shard_range

NUMELS = (0, 1, 2, 3, 5, 7, 8, 13)  # fewer numbers than ranks, exact multiples, uneven remainders


def vector(numel: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``0.5, 1.5, ...`` past float32's precision: a collective that went through float32 changes them."""
    return torch.arange(numel, dtype=dtype) + 0.5 + 2**24


def _every_size(ring: bool) -> list[str]:
    """Each collective on each of ``NUMELS``; the mismatches this rank found, as sentences (none if right)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    wrong = []
    with rings.ring_collectives() if ring else contextlib.nullcontext():
        for numel in NUMELS:
            full = vector(numel)
            start, stop = shard_range(numel, rank, n)
            gathered, work = all_gather_padded(full[start:stop].clone(), numel)
            if work is not None or not torch.equal(gathered, full):
                wrong.append(f"all_gather_padded of {numel}: {gathered.tolist()}")
            into = torch.full((n * piece_size(numel, n),), -1.0, dtype=full.dtype)
            gathered, work = all_gather_padded(full[start:stop].clone(), numel, into=into, async_op=True)
            if work is not None:
                work.wait()
            if gathered.data_ptr() != into.data_ptr() or not torch.equal(gathered, full):
                wrong.append(f"all_gather_padded of {numel} into a buffer: {gathered.tolist()}")
            mine = reduce_scatter_padded((rank + 1) * full)
            summed = full * (n * (n + 1) // 2)
            if mine.dtype != full.dtype or not torch.equal(mine, summed[start:stop]):
                wrong.append(f"reduce_scatter_padded of {numel}: {mine.tolist()}")
            buffer = torch.zeros(n * piece_size(numel, n), dtype=full.dtype)
            buffer[:numel] = (rank + 1) * full
            mine = reduce_scatter_padded(buffer, numel)
            if not torch.equal(mine, summed[start:stop]):
                wrong.append(f"reduce_scatter_padded of a padded buffer of {numel}: {mine.tolist()}")
    return wrong


@pytest.mark.parametrize("ring", [False, True], ids=["gloo's", "rings"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_padded_collectives_give_the_vector_and_the_shard_of_the_sum(world_size, ring):
    assert launch(_every_size, world_size, (ring,), backend="gloo") == [[]] * world_size


def _sizes_moved() -> list:
    rank, n = dist.get_rank(), dist.get_world_size()
    with counted() as traffic:
        all_gather_padded(vector(7, torch.float32)[slice(*shard_range(7, rank, n))], 7)
        reduce_scatter_padded(vector(7, torch.float32))
    return traffic.calls


def test_each_pads_every_piece_to_ceil_numel_over_n_and_runs_one_collective():
    # 7 numbers on 3 ranks: pieces of 3, so 9 float32 values move in each collective, 2 of them padding.
    assert launch(_sizes_moved, 3, backend="gloo") == [[("all_gather", 36), ("reduce_scatter", 36)]] * 3


def _wrong_buffer() -> str:
    try:
        reduce_scatter_padded(torch.zeros(5), 7)
    except ValueError as error:
        return str(error)
    return "no error"


def test_a_buffer_of_the_wrong_size_is_named():
    message = launch(_wrong_buffer, 2, backend="gloo")[0]
    assert "5 numbers" in message and "2 * ceil(7 / 2) = 8" in message


@pytest.mark.parametrize("world_size", range(1, 9))
def test_shard_range_covers_every_vector_in_order_with_ceil_sized_shards(world_size):
    for numel in range(41):
        pieces = [shard_range(numel, rank, world_size) for rank in range(world_size)]
        assert [n for piece in pieces for n in range(*piece)] == list(range(numel))
        assert [b - a for a, b in pieces] == [len(c) for c in torch.arange(numel).chunk(world_size)] + [0] * (
            world_size - len(torch.arange(numel).chunk(world_size)))
        assert max(b - a for a, b in pieces) == piece_size(numel, world_size)


@pytest.mark.parametrize(("args", "message"), [((10, 2, 2), "rank must be one of 0 ... 1"),
                                                ((-1, 0, 2), "numel must be a whole number >= 0"),
                                                ((10, 0, 0), "world_size must be a whole number >= 1")])
def test_shard_range_names_a_bad_argument(args, message):
    with pytest.raises(ValueError, match=message):
        shard_range(*args)


def test_ring_collectives_put_torchs_back_after_an_exception():
    before = {name: (getattr(dist, name), getattr(distributed_c10d, name)) for name in rings.RINGS}
    with pytest.raises(KeyError), rings.ring_collectives():
        raise KeyError("inside")
    assert {name: (getattr(dist, name), getattr(distributed_c10d, name)) for name in rings.RINGS} == before
