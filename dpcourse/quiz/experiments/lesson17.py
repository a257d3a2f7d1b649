"""Experiments for lesson 17, DDP in practice: each runs real ranks (2 processes, gloo) through ``dpcourse.ddp``.

See ``experiments`` for how an experiment reports its ``Outcome``.
"""

from dpcourse.ddp.demos import batchnorm, sampling, uneven, unused

from ..lab import raised_by
from ..outcome import Outcome, only_true


def no_sampler_trains_twice() -> Outcome:
    """2 ranks, the same shuffled DataLoader over 12 samples, no DistributedSampler: count one epoch's samples."""
    coverage = sampling.coverage(samples=12, epochs=1)
    trained = coverage.times_trained("no sampler", 0)
    ranks = coverage.orders["no sampler"]
    text = (
        f"rank 0 trained on {len(ranks[0][0])} samples, rank 1 on {len(ranks[1][0])}: {sum(trained)} in all\n"
        f"times each of the 12 samples was trained on: {trained}\n"
        f"the two ranks' orders are the same: {ranks[0][0] == ranks[1][0]}"
    )
    value = only_true({
        "12: DDP hands each rank half of the data": sum(trained) == 12 and max(trained) == 1,
        "12: each rank trains on a different random half": sum(trained) == 12 and max(trained) > 1,
        "24: every rank trains on all 12, so each sample counts twice": trained == [2] * 12,
    })
    return Outcome(text, value)


def no_set_epoch_repeats() -> Outcome:
    """DistributedSampler on 2 ranks, 3 epochs, set_epoch never called: compare each epoch's order with epoch 0's."""
    coverage = sampling.coverage(samples=12, epochs=3)
    orders = coverage.orders["no set_epoch"]
    trained = [coverage.times_trained("no set_epoch", epoch) for epoch in range(3)]
    text = "\n".join(f"rank {rank}, epochs 0, 1, 2: {by_epoch}" for rank, by_epoch in enumerate(orders))
    text += f"\nwith set_epoch(epoch): rank 0's epochs {coverage.orders['set_epoch'][0]}"
    repeats = coverage.repeats_epoch_0("no set_epoch")
    overlap = any(max(t) > 1 for t in trained)
    value = only_true({
        "The same samples in the same order as epoch 0, on every rank": repeats and not overlap,
        "A fresh shuffle: the sampler draws new random numbers every epoch": not repeats and not overlap,
        "A fresh shuffle on each rank, but the ranks now overlap": not repeats and overlap,
    })
    return Outcome(text, value)


def uneven_without_join() -> Outcome:
    """Rank 0 has 3 batches, rank 1 has 2, no join(): what stops rank 0, and when (a 1 s process-group timeout)."""
    result = uneven.uneven(batches=(3, 2), timeout=1.0)
    steps, errors = result.steps("no join"), result.errors("no join")
    waited = result.waited_for_timeout("no join")
    text = (
        f"no join: steps finished per rank {steps}\n"
        f"rank 0: {errors[0] or 'no error'}; it failed only after the timeout: {waited[0]}\n"
        f"rank 1: {errors[1] or 'no error'}\n"
        f"with join(): steps finished per rank {result.steps('join')}"
    )
    value = only_true({
        "Rank 0's backward waits for an all-reduce that rank 1 never starts, until the process group times out": (
            steps == [2, 2] and waited[0]
        ),
        "Rank 0 trains on it alone and both ranks finish": steps == [3, 2] and not any(errors),
        "DDP raises at once: it checks that every rank has as many batches": any(errors) and not waited[0],
    })
    return Outcome(text, value)


def unused_parameter_error() -> Outcome:
    """A DDP model whose forward skips one head, default options, three steps on 2 ranks: where does it fail?

    Ranks that never return are a result too: ``launch`` then raises ``TimeoutError`` at its deadline.
    """
    results: list[unused.Unused] = []
    error = raised_by(lambda: results.append(unused.unused(timing_steps=1)))
    hung = isinstance(error, TimeoutError)
    if error is not None and not hung:
        raise error
    result = results[0] if results else None
    failed = result is not None and result.error is not None
    second_forward = failed and result.error.startswith("Expected to have finished reduction in the prior iteration")
    text = f"the ranks hung: {error}" if hung else f"{result}\n\ntorch's message on rank 0:\n{result.error}"
    value = only_true({
        "The first backward hangs, waiting for the head's gradient": hung,
        "Training runs; the unused head's gradient is zero on every rank": result is not None and not failed,
        "DDP raises in its constructor: it checks which parameters forward uses": failed and not second_forward,
        "The first step runs; the second forward raises RuntimeError: the reduction of the first never finished": (
            second_forward
        ),
    })
    return Outcome(text, value)


def global_variance_of_two_shards() -> Outcome:
    """One channel on 2 ranks, [-1, 1] and [1, 3]: each shard's variance, and the global one SyncBatchNorm1d gathers."""
    shards = [[-1.0, 1.0], [1.0, 3.0]]
    combined = batchnorm.global_variance(shards)
    text = (
        f"rank 0's shard {shards[0]}: mean 0, variance 1; rank 1's {shards[1]}: mean 2, variance 1\n"
        f"gathered on real ranks and combined: mean {combined['mean']:g}, variance {combined['variance']:g} "
        f"over {combined['count']:g} values\n"
        f"per-replica BatchNorm would use variance 1 on each rank; the mean of the shards' variances is 1 too"
    )
    return Outcome(text, combined["variance"])


EXPERIMENTS = (
    no_sampler_trains_twice,
    no_set_epoch_repeats,
    uneven_without_join,
    unused_parameter_error,
    global_variance_of_two_shards,
)
