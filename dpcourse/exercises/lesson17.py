"""Lesson 17's exercises: the samples ``DistributedSampler`` gives a rank in a given epoch, and the global batch
statistics SyncBatchNorm builds from every rank's mean, variance and count."""

import torch
from torch.utils.data import DistributedSampler

from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference


def _epoch_indices(samples: int, rank: int, world: int, epoch: int, seed: int) -> list[int]:
    sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def _every_rank_epoch_and_seed() -> list[Case]:
    return [Case(f"{plural(samples, 'sample')}, rank {rank} of {world}, epoch {epoch}, seed {seed}",
                 (samples, rank, world, epoch, seed))
            for samples in range(1, 12) for world in range(1, 5) for rank in range(world) for epoch in range(3)
            for seed in (0, 7)]


EPOCH_INDICES = Exercise(
    name="epoch_indices",
    task="Write epoch_indices(samples, rank, world, epoch, seed): the sample indices DistributedSampler(shuffle=True, "
         "seed=seed) gives rank `rank` of `world` ranks in epoch `epoch` (after set_epoch(epoch)), in order, for a "
         "data set of `samples` samples.",
    cases=lambda: [
        Case("12 samples, rank 0 of 2, epoch 0", (12, 0, 2, 0, 0),
             "shuffle with torch.randperm(samples, generator=g), g seeded with seed + epoch"),
        Case("12 samples, rank 1 of 2, epoch 0", (12, 1, 2, 0, 0),
             "every rank draws the same permutation; rank r keeps positions r, r + world, ..."),
        Case("12 samples, rank 1 of 2, epoch 1", (12, 1, 2, 1, 0), "the epoch changes the seed: seed + epoch"),
        Case("10 samples, rank 2 of 3, epoch 3, seed 5", (10, 2, 3, 3, 5),
             "pad the permutation with its own first indices up to a multiple of world (12), then take every "
             "world-th"),
    ],
    judge=equals(_epoch_indices),
    generated=_every_rank_epoch_and_seed,
)


def _shards(seed: int, sizes: list[int], channels: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(n, channels, generator=generator) * (1 + r) + 2 * r for r, n in enumerate(sizes)]


def _stats_case(description: str, seed: int, sizes: list[int], hint: str, channels: int = 3) -> Case:
    shards = _shards(seed, sizes, channels)
    means = torch.stack([s.mean(0) for s in shards])
    variances = torch.stack([s.var(0, unbiased=False) for s in shards])
    counts = torch.tensor(sizes, dtype=torch.float32)
    everything = torch.cat(shards)
    expected = (everything.mean(0), everything.var(0, unbiased=False))
    return Case(description, (means, variances, counts), hint, {"expected": expected})


def _stats_judge(case: Case, answer) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "expected a pair (mean, variance), each a tensor with one value per channel"
    mean, variance = case.context["expected"]
    return (first_difference(mean, answer[0], "mean", atol=1e-5)
            or first_difference(variance, answer[1], "variance", atol=1e-5))


def _random_shards() -> list[Case]:
    """30 sets of 1 to 5 ranks with 1 to 9 samples each, seeded."""
    generator = torch.Generator().manual_seed(17)
    cases = []
    for seed in range(30):
        ranks = int(torch.randint(1, 6, (1,), generator=generator))
        sizes = torch.randint(1, 10, (ranks,), generator=generator).tolist()
        cases.append(_stats_case(f"{plural(ranks, 'rank')}, {sizes} samples", 100 + seed, sizes, "", channels=2))
    return cases


GLOBAL_BATCH_STATS = Exercise(
    name="global_batch_stats",
    task="Write global_batch_stats(means, variances, counts): means and variances are (ranks, channels), each "
         "rank's shard mean and biased variance; counts is (ranks,), its number of samples. Return (mean, "
         "variance), each (channels,): the mean and biased variance of all the ranks' samples together, what "
         "SyncBatchNorm normalises with.",
    cases=lambda: [
        _stats_case("2 ranks, 4 samples each", 0, [4, 4],
                    "the global variance is not the mean of the variances: add the spread of the means"),
        _stats_case("2 ranks, 6 and 2 samples", 1, [6, 2], "weight each rank by its count, the mean too"),
        _stats_case("3 ranks, 3, 5 and 8 samples", 2, [3, 5, 8],
                    "variance = sum_r counts_r * (variances_r + (means_r - mean)^2) / sum_r counts_r"),
    ],
    judge=_stats_judge,
    generated=_random_shards,
)

EXERCISES = (EPOCH_INDICES, GLOBAL_BATCH_STATS)
