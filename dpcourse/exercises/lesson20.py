"""Lesson 20's exercises: ZeRO-3's bytes per step, its all-gather and its reduce-scatter, the last two on real ranks.

``zero3_bytes_per_step`` is judged against ``sharded.zero3_measure.bytes_per_step`` on a grid of layer sizes and
ranks (a test holds that formula to the bytes ``ddp.processes.traffic.counted`` counts on real ranks).
``gather_full`` and ``shard_of_gradient`` travel to 3 ranks as their source (``sharded.ranks.train_on_ranks``), are
called once on known numbers, then replace the library's collective in ZeRO-3 training, whose weights after 3 steps
must equal one-device Adam's.
"""

import itertools

import torch

from dpcourse.ddp.processes.by_source import SourceFunction
from dpcourse.sharded import ranks, zero3_measure
from dpcourse.sharded.zero1 import shard_range

from .check import Case, Exercise, first_difference

# One case each: a launch of the ranks costs seconds, and 3 ranks give uneven slices of the known vector (14
# numbers: 5, 5, 4) and of the model's last layer (64 parameters: 22, 22, 20).
SLOW = f"starting the ranks and training 3 steps (a few seconds; stopped after {ranks.TIMEOUT:g} s)"


def _bytes_cases(grid: list[tuple[tuple[int, ...], int, bool]]) -> list[Case]:
    return [Case(f"layers of {list(numels)} parameters, {n} ranks, reshard={reshard}", (list(numels), n, reshard))
            for numels, n, reshard in grid]


def _judge_bytes(case: Case, answer) -> str | None:
    numels, n, reshard = case.args
    expected = zero3_measure.bytes_per_step(numels, n, reshard)
    if not isinstance(answer, int) or isinstance(answer, bool):
        return f"expected a whole number of bytes, got {answer!r}"
    if answer != expected:
        return f"expected {expected:,} bytes, got {answer:,}"
    return None


ZERO3_BYTES_PER_STEP = Exercise(
    name="zero3_bytes_per_step",
    task="Write zero3_bytes_per_step(numels, world_size, reshard): the bytes one rank sends in one ZeRO-3 step "
         "with ring collectives, for float32 layers of numels[i] parameters each: per layer an all-gather before "
         "forward, one before backward if reshard, and a reduce-scatter of the gradient; each sends n - 1 pieces "
         "of the padded shard, ceil(numel / n) numbers.",
    cases=lambda: _bytes_cases([((135, 240, 64), 2, True), ((135, 240, 64), 3, False), ((7,), 4, True)]),
    judge=_judge_bytes,
    generated=lambda: _bytes_cases([(numels, n, reshard) for numels, n, reshard in itertools.product(
        [(1,), (5, 3), (10, 11, 12), (135, 240, 64), (2295, 65280, 1024)], [1, 2, 3, 4, 5, 8], [True, False])]),
)


def _on_ranks(role: str):
    def call(function, case: Case) -> list[dict]:
        (world_size,) = case.args
        return ranks.train_on_ranks(zero3_measure.learners, world_size, extra={role: SourceFunction.of(function)})

    return call


def _trained(case: Case, answer: list[dict]) -> str | None:
    error = next((result["error"] for result in answer if "error" in result), None)
    if error:
        return f"with your function inside ZeRO-3, training raised {error}"
    difference = ranks.first_difference(answer, ranks.one_device())
    return difference and f"with your function inside ZeRO-3, {difference}"


def _judge_gather(case: Case, answer: list[dict]) -> str | None:
    (n,) = case.args
    known = zero3_measure.known_vector(n)
    for rank, result in enumerate(answer):
        got = result["direct"]["gathered"]
        if not isinstance(got, torch.Tensor):
            return f"rank {rank}'s gather_full returned {type(got).__name__}: return the whole vector as a tensor"
        if got.shape != known.shape:
            return (f"rank {rank} gathered {got.numel()} numbers for a vector of {known.numel()}: pad every shard "
                    f"to ceil(numel / n) = {-(-known.numel() // n)} before the all-gather, and cut the padding "
                    "off the end afterwards")
        wrong = first_difference(known, got, f"rank {rank}'s gathered vector")
        if wrong:
            return wrong + " (the shards go in rank order: rank 0's first)"
    return _trained(case, answer)


def _judge_scatter(case: Case, answer: list[dict]) -> str | None:
    (n,) = case.args
    known = zero3_measure.known_vector(n)
    average = known * (n + 1) / 2  # rank r held (r + 1) * known
    for rank, result in enumerate(answer):
        got = result["direct"]["scattered"]
        start, stop = shard_range(known.numel(), rank, n)
        expected = average[start:stop]
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            found = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return (f"rank {rank}'s shard_of_gradient returned {found}; its slice of a vector of {known.numel()} "
                    f"numbers is {expected.numel()} long (zero1.shard_range): cut the padding off")
        wrong = first_difference(expected, got, f"rank {rank}'s slice of the averaged gradient")
        if wrong:
            return wrong + (" (rank r held (r + 1) times the same vector: the average is (n + 1) / 2 times it, "
                            "the sum n (n + 1) / 2 times)")
    return _trained(case, answer)


GATHER_FULL = Exercise(
    name="gather_full",
    task="Write gather_full(shard, numel), run on every rank: all-gather every rank's shard of a vector of numel "
         "numbers and return the whole vector, on every rank. Pad the shard with zeros to ceil(numel / n) numbers "
         "first (an all-gather wants one size from every rank), and cut the padding off afterwards.",
    cases=lambda: [
        Case("3 ranks, uneven slices", (3,), "pieces = [torch.empty_like(padded) for _ in range(n)]; "
             "dist.all_gather(pieces, padded); then torch.cat(pieces)[:numel]: the padding is at the end"),
    ],
    judge=_judge_gather,
    call=_on_ranks("gather"),
    slow=SLOW,
)

SHARD_OF_GRADIENT = Exercise(
    name="shard_of_gradient",
    task="Write shard_of_gradient(full_grad), run on every rank: this rank's slice (zero1.shard_range) of the "
         "gradient averaged over the ranks, with one dist.reduce_scatter of full_grad padded with zeros to "
         "n * ceil(numel / n) numbers, cut into n pieces.",
    cases=lambda: [
        Case("3 ranks, uneven slices", (3,), "mine = torch.empty(size); dist.reduce_scatter(mine, "
             "list(padded.chunk(n))); it sums: divide by n, and keep only this rank's stop - start numbers"),
    ],
    judge=_judge_scatter,
    call=_on_ranks("scatter"),
    slow=SLOW,
)

EXERCISES = (ZERO3_BYTES_PER_STEP, GATHER_FULL, SHARD_OF_GRADIENT)
