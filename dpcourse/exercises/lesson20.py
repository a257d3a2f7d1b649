"""Lesson 20's exercises: ZeRO-3's bytes per step (and against a ring all-reduce), its all-gather and its
reduce-scatter, the last two on real ranks.

``zero3_bytes_per_step`` is judged against ``sharded.zero3_measure.bytes_per_step`` on a grid of layer sizes and
ranks (a test holds that formula to the bytes ``ranks.traffic.counted`` counts on real ranks).
``gather_full`` and ``shard_of_gradient`` travel to 3 ranks as their source (``ranks.train_on_ranks``), are
called once on known numbers, then replace the library's collective in ZeRO-3 training, whose weights after 3 steps
must equal one-device Adam's, then are called once more on float64 numbers that float32 cannot hold, which must come
back exactly, in float64. ``watched`` counts the collectives of every call of the learner's function
(``traffic.counted``): right numbers are not enough, they must come from the one collective the exercise names,
moving the padded vector, not from an all-reduce that moves every rank's whole vector.
"""

import itertools

import torch
import torch.distributed as dist

from dpcourse import ranks
from dpcourse.ranks.by_source import SourceFunction
from dpcourse.ranks.launcher import device
from dpcourse.ranks.learner import placed
from dpcourse.ranks.traffic import counted
from dpcourse.sharded import zero3_measure
from dpcourse.sharded.collectives import piece_size, shard_range
from dpcourse.ui.words import plural

from .check import Case, Exercise, equals, first_difference

# One case each: a launch of the ranks costs seconds, and 3 ranks give uneven slices of the known vector (14
# numbers: 5, 5, 4) and of the model's last layer (64 parameters: 22, 22, 20).
SLOW = f"starting the ranks and training 3 steps (a few seconds; stopped after {ranks.TIMEOUT:g} s)"


def _bytes_cases(grid: list[tuple[tuple[int, ...], int, bool]]) -> list[Case]:
    return [Case(f"layers of {list(numels)} parameters, {plural(n, 'rank')}, reshard={reshard}",
                 (list(numels), n, reshard)) for numels, n, reshard in grid]


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


def known_in_float64(world_size: int) -> torch.Tensor:
    """The known numbers past float32's 24 bits of mantissa, in float64: ``2**24 + 0.5`` has no float32 (the nearest
    are 2**24 and 2**24 + 2), so a function that passes them through float32 anywhere returns other numbers."""
    return zero3_measure.known_vector(world_size).double() + 2**24


def watched(model, batches: list, lr: float, role: str, learner: SourceFunction) -> dict:
    """``zero3_measure.learners`` with the learner's function as ``role`` ("gather" or "scatter"), each call of it
    counted: per call, the ``(collective, bytes)`` it ran and the bytes of its vector padded to ``n`` equal pieces
    (``n * ceil(numel / n)`` numbers), the size of the one collective it should run. Then one more call, on
    ``known_in_float64``: a function that pads in float32 whatever it is given returns float32, or other numbers.
    A training program for ``ranks.train_on_ranks``; its result gains ``"calls"`` and ``"float64"``."""
    function, calls, stage = learner.rebuild(), [], ["on the known numbers"]

    def counting(*args):
        numel = args[1] if role == "gather" else args[0].numel()
        n = dist.get_world_size()
        try:
            with counted() as traffic:
                returned = function(*args)
        except Exception as error:  # training reports it as text: say where now, while the traceback is here
            placed(error)
            raise
        which = stage[0] if stage[0] != "in training" else f"in training, its call {len(calls) + 1}"
        calls.append({"calls": traffic.calls, "padded_bytes": n * piece_size(numel, n) * args[0].element_size(),
                      "which": which})
        stage[0] = "in training"
        return returned

    result = zero3_measure.learners(model, batches, lr, **{role: counting})
    stage[0] = "on the known numbers in float64"
    rank, n = dist.get_rank(), dist.get_world_size()
    known = known_in_float64(n).to(device())
    start, stop = shard_range(known.numel(), rank, n)
    args = (known[start:stop].clone(), known.numel()) if role == "gather" else ((rank + 1) * known,)
    returned = counting(*args)
    float64 = returned.detach().cpu() if isinstance(returned, torch.Tensor) else returned
    return {**result, "calls": calls, "float64": float64}


def _on_ranks(role: str):
    def call(function, case: Case) -> list[dict]:
        (world_size,) = case.args
        return ranks.train_on_ranks(watched, world_size, extra={"role": role, "learner": SourceFunction.of(function)})

    return call


# What each function should run, once per call and nothing else: the collective, and what another one costs.
COLLECTIVE = {"gather_full": ("all_gather", "all_gather_into_tensor"),
              "shard_of_gradient": ("reduce_scatter", "reduce_scatter_tensor")}
WHY = {"gather_full": "each rank sends only its padded shard and receives everyone's",
       "shard_of_gradient": "each rank receives only the sum of its own slice, not the whole vector"}
ALL_REDUCE = {"gather_full": "every rank then sends a whole vector, mostly zeros, n times its shard",
              "shard_of_gradient": "every rank then receives the whole summed vector, n times the slice it keeps "
                                   "(ZeRO-1's way: twice a reduce-scatter's bytes)"}


def _mechanism(name: str, answer: list[dict]) -> str | None:
    """``None`` if every call of the learner's ``name`` on every rank ran exactly one of ``COLLECTIVE[name]``, of
    the padded vector's size; else what it ran instead."""
    wanted = COLLECTIVE[name]
    for rank, result in enumerate(answer):
        for call in result["calls"]:
            names = [collective for collective, _ in call["calls"]]
            which = call["which"]
            ran = ", ".join(f"dist.{collective}" for collective in names) or "no collective"
            if "all_reduce" in names:
                return (f"rank {rank}'s {name} called dist.all_reduce ({which}): {ALL_REDUCE[name]}. Use one "
                        f"dist.{wanted[0]}: {WHY[name]}")
            if sum(collective in wanted for collective in names) != 1 or len(names) != 1:
                return (f"rank {rank}'s {name} ran {ran} ({which}); the exercise asks for exactly one "
                        f"dist.{wanted[0]}, and nothing else: {WHY[name]}")
            size = call["calls"][0][1]
            if size != call["padded_bytes"]:
                return (f"rank {rank}'s dist.{names[0]} ({which}) moved a vector of {size:,} bytes; padded to n * "
                        f"ceil(numel / n) numbers the vector is {call['padded_bytes']:,} bytes: pad with zeros "
                        "to that size and cut it into n pieces")
    return None


def _in_float64(name: str, answer: list[dict], expected: list[torch.Tensor], made: str) -> str | None:
    """``None`` if every rank's call on float64 numbers returned exactly ``expected[rank]``, in float64; else what
    it returned. ``made`` names the tensor the learner's function made that should carry the input's dtype."""
    for rank, result in enumerate(answer):
        got = result["float64"]
        if not isinstance(got, torch.Tensor) or got.dtype != torch.float64:
            found = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
            return (f"rank {rank}'s {name} was given float64 numbers and returned {found}: make {made} with the "
                    "input's dtype (torch.zeros(..., dtype=..., device=...)), or the numbers lose their precision")
        where = f"rank {rank}'s {name} on float64 numbers past float32's precision (2**24 + 0.5, ...)"
        wrong = first_difference(expected[rank], got, where)
        if wrong is None and not torch.equal(got, expected[rank]):  # isclose's rtol would forgive float32's rounding
            index = int((got != expected[rank]).nonzero()[0])
            wrong = f"{where}[{index}]: expected {expected[rank][index].item()!r}, got {got[index].item()!r}"
        if wrong:
            return wrong + f": a tensor in float32 on the way loses them; make {made} with the input's dtype"
    return None


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
            return (f"rank {rank} gathered {plural(got.numel(), 'number')} for a vector of {known.numel()}: pad "
                    f"every shard to ceil(numel / n) = {piece_size(known.numel(), n)} before the all-gather, and cut "
                    "the padding off the end afterwards")
        wrong = first_difference(known, got, f"rank {rank}'s gathered vector")
        if wrong:
            return wrong + " (the shards go in rank order: rank 0's first)"
    return (_in_float64("gather_full", answer, [known_in_float64(n)] * n, "the padded shard")
            or _mechanism("gather_full", answer) or _trained(case, answer))


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
    average = known_in_float64(n) * (n + 1) / 2
    slices = [average[slice(*shard_range(known.numel(), rank, n))] for rank in range(n)]
    return (_in_float64("shard_of_gradient", answer, slices, "the padded gradient")
            or _mechanism("shard_of_gradient", answer) or _trained(case, answer))


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



def _against_all_reduce(numels: list[int], world_size: int) -> dict[str, int]:
    return {"reshard": zero3_measure.bytes_per_step(numels, world_size, True),
            "no reshard": zero3_measure.bytes_per_step(numels, world_size, False),
            "all-reduce": 2 * (world_size - 1) * -(-sum(numels) // world_size) * 4}


ZERO3_AGAINST_ALL_REDUCE = Exercise(
    name="zero3_against_all_reduce",
    task="Write zero3_against_all_reduce(numels, world_size): the bytes one rank sends per step, with "
         "zero3_measure.bytes_per_step, for ZeRO-3 with resharding ('reshard') and without ('no reshard'), and "
         "for a ring all-reduce of all the layers' float32 gradients as one padded vector ('all-reduce'), as a dict.",
    cases=lambda: [
        Case("layers of [135, 240, 64] parameters on 8 ranks", ([135, 240, 64], 8),
             "a ring all-reduce sends 2 (n - 1) pieces of ceil(total / n) numbers, 4 bytes each"),
        Case("layers of [7, 5] on 3 ranks", ([7, 5], 3), "12 numbers split evenly on 3 ranks: no padding"),
        Case("one layer of 10 on 4 ranks", ([10], 4), "10 numbers on 4 ranks are padded to 12"),
    ],
    judge=equals(_against_all_reduce),
    generated=lambda: [Case(f"layers of {list(numels)} parameters, {plural(n, 'rank')}", (list(numels), n))
                       for numels, n in itertools.product([(1,), (5, 3), (10, 11, 12), (2295, 65280, 1024)],
                                                          [1, 2, 3, 5, 8])],
)

EXERCISES = (ZERO3_BYTES_PER_STEP, GATHER_FULL, SHARD_OF_GRADIENT, ZERO3_AGAINST_ALL_REDUCE)
