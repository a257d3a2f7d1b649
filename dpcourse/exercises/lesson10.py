"""Lesson 10's exercises: a ring all-reduce simulated on a list of ranks, and DistributedSampler's shards."""

import torch
from torch.utils.data import DistributedSampler

from .check import Case, Exercise, equals, first_difference


def _ring_judge(case: Case, answer) -> str | None:
    (tensors,) = case.args
    n = len(tensors)
    if not isinstance(answer, tuple) or len(answer) != 2:
        return "expected a pair (results, transfers)"
    results, transfers = answer
    total = torch.stack(tensors).sum(0)
    difference = first_difference([total] * n, results, "results")
    if difference:
        return difference + " (every rank should end with the sum of all ranks' tensors)"
    if list(transfers) != [2 * (n - 1)] * n:
        return (f"transfers: expected every rank to send 2(n - 1) = {2 * (n - 1)} pieces, got {list(transfers)}: "
                f"n - 1 steps of reduce-scatter, then n - 1 of all-gather, one piece per step")
    return None


def _ranks(seed: int, n: int, length: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(length, generator=generator) for _ in range(n)]


RING_ALL_REDUCE = Exercise(
    name="ring_all_reduce",
    task="Write ring_all_reduce(tensors): tensors[r] is rank r's gradient. Simulate a ring all-reduce (each "
         "tensor cut into n pieces; reduce-scatter, then all-gather, each rank sending one piece per step to "
         "rank r + 1) and return (results, transfers): every rank's final tensor and how many pieces it sent.",
    cases=lambda: [
        Case("2 ranks, 6 values", (_ranks(0, 2, 6),)),
        Case("3 ranks, 7 values", (_ranks(1, 3, 7),),
             "tensor_split(n) gives n pieces even when the length does not divide evenly"),
        Case("4 ranks, 8 values", (_ranks(2, 4, 8),),
             "at reduce-scatter step s, rank r sends piece (r - s) % n; after n - 1 steps rank r holds the "
             "finished piece (r + 1) % n"),
        Case("1 rank", (_ranks(3, 1, 3),), "one rank sends nothing"),
    ],
    judge=_ring_judge,
)


def _distributed_indices(batch: int, rank: int, world: int) -> list[int]:
    return list(DistributedSampler(range(batch), num_replicas=world, rank=rank, shuffle=False))


def _every_rank_of_up_to_5() -> list[Case]:
    return [Case(f"{batch} samples, rank {rank} of {world}", (batch, rank, world)) for batch in range(1, 14)
            for world in range(1, 6) for rank in range(world)]


DISTRIBUTED_INDICES = Exercise(
    name="distributed_indices",
    task="Write distributed_indices(batch, rank, world): the sample indices DistributedSampler(shuffle=False) "
         "gives rank `rank` of `world` ranks, for a data set of `batch` samples.",
    cases=lambda: [
        Case("12 samples, rank 1 of 3", (12, 1, 3), "ranks take turns: rank r gets samples r, r + world, ..."),
        Case("10 samples, rank 0 of 3", (10, 0, 3),
             "every rank gets ceil(10 / 3) = 4 samples: the list is padded with its own first samples"),
        Case("10 samples, rank 2 of 3", (10, 2, 3), "padded to 12: indices 0..9, then 0, 1"),
        Case("2 samples, rank 3 of 4", (2, 3, 4), "padding can repeat the data set more than once"),
    ],
    judge=equals(_distributed_indices),
    generated=_every_rank_of_up_to_5,
)

EXERCISES = (RING_ALL_REDUCE, DISTRIBUTED_INDICES)
