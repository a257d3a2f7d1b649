"""Lesson 10's exercises: a ring all-reduce simulated on a list of ranks, DistributedSampler's shards and the
samples it repeats, the full-batch gradient from unequal shards, and the batch at which DDP pays off.

The ring is judged on its messages, which it sends through a ``send`` the check passes in: every rank sends only
to the next, 2(n - 1) pieces, each a piece of ``tensor_split(n)`` holding the partial sum a ring has reached at
that step (reduce-scatter, then all-gather); then on the sums every rank ends with.
"""

import dataclasses

import torch
from torch.utils.data import DistributedSampler

from .. import costmodel
from ..examples import seeded_randn
from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference


def _ring_sizes(length: int, n: int) -> list[int]:
    return [len(piece) for piece in torch.empty(length).tensor_split(n)]


def _with_send(function, case: Case) -> tuple:
    """Call ``function(tensors, send)``; the answer is its results and every ``(source, target, piece)`` sent."""
    messages = []

    def send(source: int, target: int, piece: torch.Tensor) -> torch.Tensor:
        """Send ``piece`` from rank ``source`` to rank ``target``; returns what ``target`` receives, a copy."""
        if not isinstance(piece, torch.Tensor):
            raise TypeError(f"send(source, target, piece): piece must be a tensor, got {type(piece).__name__}")
        messages.append((source, target, piece.detach().clone()))
        return piece.detach().clone()

    return function(*case.args, send), messages


def _span(rank: int, step: int, n: int) -> list[int]:
    """The ranks whose values a piece sent by ``rank`` at reduce-scatter ``step`` holds: itself and ``step`` before."""
    return [(rank - j) % n for j in range(step, -1, -1)]


def _message_difference(tensors: list[torch.Tensor], rank: int, number: int, piece: torch.Tensor) -> str | None:
    """Whether rank ``rank``'s message ``number`` (0-based) is what a ring sends then: a piece of tensor_split(n)
    summed over the ranks it has passed (reduce-scatter), then a finished piece, summed over all (all-gather)."""
    n, length = len(tensors), len(tensors[0])
    phase, step = ("reduce-scatter", number) if number < n - 1 else ("all-gather", number - (n - 1))
    ranks = _span(rank, step, n) if phase == "reduce-scatter" else list(range(n))
    pieces = torch.stack([tensors[r] for r in ranks]).sum(0).tensor_split(n)
    if any(piece.shape == want.shape and torch.allclose(piece, want, atol=1e-5) for want in pieces):
        return None
    cut = f"tensor_split({n}) cuts {length} values into pieces of {_ring_sizes(length, n)}"
    where = f"rank {rank}'s message {number + 1} ({phase} step {step}, {plural(piece.numel(), 'value')})"
    if phase == "reduce-scatter":
        return (f"{where} is not a piece of the sum of the tensors of ranks {ranks} ({cut}): reduce-scatter comes "
                "first, and at its step s rank r sends a piece holding its own values and the s previous ranks'")
    return (f"{where} is not a finished piece, one summed over every rank ({cut}): after n - 1 steps of "
            "reduce-scatter rank r holds the finished piece (r + 1) % n, and all-gather passes on finished pieces")


def _ring_judge(case: Case, answer) -> str | None:
    tensors = case.context["tensors"]  # copied when the case was made: the oracle never sees the learner's changes
    n = len(tensors)
    results, messages = answer
    for source, target, _ in messages:
        if source not in range(n) or target not in range(n):
            return f"send({source!r}, {target!r}, piece): source and target are ranks, 0 ... {n - 1}"
        if target != (source + 1) % n:
            return (f"rank {source} sent a piece to rank {target}: in a ring, rank r sends only to rank r + 1 "
                    f"(mod n), here {(source + 1) % n}")
    for rank in range(n):
        sent = [piece for source, _, piece in messages if source == rank]
        if len(sent) != 2 * (n - 1):
            return (f"rank {rank} sent {plural(len(sent), 'piece')}, expected 2(n - 1) = {2 * (n - 1)}: n - 1 "
                    "steps of reduce-scatter, then n - 1 of all-gather, one piece per step")
        difference = next(filter(None, (_message_difference(tensors, rank, i, p) for i, p in enumerate(sent))), None)
        if difference:
            return difference
    total = torch.stack(tensors).sum(0)
    difference = first_difference([total] * n, results, "results")
    return difference and difference + " (every rank should end with the sum of all ranks' tensors)"


def _ranks(seed: int, n: int, length: int, hint: str = "") -> Case:
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(length, generator=generator) for _ in range(n)]
    description = f"{plural(n, 'rank')}, {plural(length, 'value')}"
    return Case(description, (tensors,), hint, {"tensors": [t.clone() for t in tensors]})


def _small_rings() -> list[Case]:
    """Every length 0 ... 2n + 1 on 1 to 5 ranks: lengths below n (empty pieces), and the sizes where chunk(n) gives
    fewer than n pieces (6 values on 4 ranks, 4 on 3, 5 on 4, 8 on 5)."""
    return [_ranks(10 * n + length, n, length) for n in range(1, 6) for length in range(2 * n + 2)]


RING_ALL_REDUCE = Exercise(
    name="ring_all_reduce",
    task="Write ring_all_reduce(tensors, send): tensors[r] is rank r's gradient. Simulate a ring all-reduce: cut "
         "each tensor into n pieces with tensor_split(n); n - 1 steps of reduce-scatter, then n - 1 of all-gather, "
         "each rank sending one piece per step to rank r + 1 (mod n) by calling send(r, (r + 1) % n, piece), which "
         "returns what arrives. Return every rank's final tensor.",
    cases=lambda: [
        _ranks(0, 2, 6),
        _ranks(1, 3, 7, "tensor_split(3) cuts 7 values into 3, 2 and 2; chunk(3) would give 3, 3 and 1"),
        _ranks(2, 4, 8, "at reduce-scatter step s, rank r sends piece (r - s) % n; after n - 1 steps rank r holds "
                        "the finished piece (r + 1) % n"),
        _ranks(4, 4, 6, "tensor_split(4) gives 4 pieces of 2, 2, 1 and 1 values; chunk(4) only 3"),
        _ranks(3, 1, 3, "one rank sends nothing"),
    ],
    judge=_ring_judge,
    call=_with_send,
    generated=_small_rings,
)


def _distributed_indices(batch: int, rank: int, world: int) -> list[int]:
    return list(DistributedSampler(range(batch), num_replicas=world, rank=rank, shuffle=False))


def _every_rank_of_up_to_5() -> list[Case]:
    return [Case(f"{plural(batch, 'sample')}, rank {rank} of {world}", (batch, rank, world)) for batch in range(1, 14)
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



def _shards(sizes: list[int], seed: int) -> tuple[list[torch.Tensor], list[int]]:
    """A per-rank gradient for each shard size: random, as the shards' own mean gradients would be."""
    return [seeded_randn(3, 2, seed=seed + rank) for rank in range(len(sizes))], sizes


FULL_BATCH_GRADIENT = Exercise(
    name="full_batch_gradient",
    task="Write full_batch_gradient(local, sizes): the full-batch gradient, from each rank's own gradient "
         "local[r] (the mean over its shard of sizes[r] samples).",
    cases=lambda: [
        Case("shards of 5 and 3 samples", _shards([5, 3], 0),
             "a rank's gradient is a mean over its own shard: the mean of the ranks' gradients weighs a small shard "
             "too much"),
        Case("shards of 4 and 4", _shards([4, 4], 1)),
        Case("shards of 2, 7 and 1", _shards([2, 7, 1], 2)),
        Case("one shard of 6", _shards([6], 3)),
    ],
    judge=equals(lambda local, sizes: sum(n * gradient for gradient, n in zip(local, sizes, strict=True)) / sum(sizes)),
)


def _seen_twice(samples: int, ranks: int) -> list[int]:
    seen = [i for rank in range(ranks) for i in _distributed_indices(samples, rank, ranks)]
    return sorted({i for i in seen if seen.count(i) > 1})


SEEN_TWICE = Exercise(
    name="seen_twice",
    task="Write seen_twice(samples, ranks): the samples, sorted, that the ranks see more than once in one epoch "
         "of DistributedSampler(range(samples), num_replicas=ranks, shuffle=False).",
    cases=lambda: [
        Case("10 samples on 3 ranks", (10, 3), "DistributedSampler pads every rank to the same length"),
        Case("12 samples on 3 ranks", (12, 3)),
        Case("7 samples on 4 ranks", (7, 4)),
    ],
    judge=equals(_seen_twice),
    generated=lambda: [Case(f"{plural(samples, 'sample')} on {plural(ranks, 'rank')}", (samples, ranks))
                       for samples in range(1, 15) for ranks in range(1, 6)],
)

BATCHES = (32, 64, 128, 256, 512, 1024)


def _speedup(batch: int, preset: str) -> float:
    """DDP's predicted speed-up on the preset's 8 GPUs over one, for ResNet-50 with this batch."""
    return costmodel.predict_speedup(preset, dataclasses.replace(costmodel.EXAMPLE, batch=batch)).ddp[-1]


def _smallest_batch(target: float, preset: str) -> int | None:
    return next((batch for batch in BATCHES if _speedup(batch, preset) >= target), None)


SMALLEST_BATCH = Exercise(
    name="smallest_batch",
    task=f"Write smallest_batch(target, preset): with the cost model, the smallest batch in {BATCHES} at which DDP "
         f"on the preset's GPUs is at least `target` times faster than one GPU for ResNet-50 (costmodel.EXAMPLE with "
         f"another batch), or None.",
    cases=lambda: [
        Case("6x on 8 GPUs, PCIe", (6.0, "8 GPUs, PCIe"),
             "predict_speedup(...).ddp lists the speed-ups for 1 to 8 GPUs: the last is 8 GPUs'"),
        Case("7.6x on 8 GPUs, PCIe", (7.6, "8 GPUs, PCIe")),
        Case("7.8x on 8 GPUs, PCIe", (7.8, "8 GPUs, PCIe")),
        Case("7.9x on 8 GPUs, PCIe", (7.9, "8 GPUs, PCIe")),
        Case("7.5x on 8 GPUs, NVLink", (7.5, "8 GPUs, NVLink")),
        Case("exactly batch 128's speed-up on 8 GPUs, PCIe", (_speedup(128, "8 GPUs, PCIe"), "8 GPUs, PCIe"),
             "at least the target: a batch that reaches it exactly counts"),
        Case("5x on 8 GPUs, PCIe", (5.0, "8 GPUs, PCIe")),
        Case("9x on 8 GPUs, PCIe", (9.0, "8 GPUs, PCIe"), "no batch of the list reaches 9x: return None"),
    ],
    judge=equals(_smallest_batch),
)

EXERCISES = (RING_ALL_REDUCE, DISTRIBUTED_INDICES, FULL_BATCH_GRADIENT, SEEN_TWICE, SMALLEST_BATCH)
