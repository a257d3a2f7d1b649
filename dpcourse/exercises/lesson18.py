"""Lesson 18's exercises: which slice of the flat parameters a rank owns, how much Adam state that leaves it,
and a whole ZeRO-1 training program run on 2, 3 and 4 real ranks next to one-device Adam.

The two counting exercises are judged on every rank at once (the learner's function is called once per rank)
and on an exhaustive grid of sizes. The training program is judged on the weights every rank ends with, and on
the optimizer state each rank's optimizers hold (``sharded.ranks`` measures it in the rank).
"""

import itertools
import math

from dpcourse.sharded import ranks, zero1

from .check import Case, Exercise

SLOW = (f"starting the ranks (a few seconds); ranks that wait for each other are stopped after "
        f"{ranks.TIMEOUT:g} s")
NUMEL = ranks.parameter_count()  # the course model's 439 parameters


def _every_rank(function, case: Case) -> list:
    numel, world_size = case.args
    return [function(numel, rank, world_size) for rank in range(world_size)]


def _judge_shard_range(case: Case, answer: list) -> str | None:
    numel, world_size = case.args
    size = math.ceil(numel / world_size)
    for rank, piece in enumerate(answer):
        if not (isinstance(piece, tuple | list) and len(piece) == 2 and all(isinstance(v, int) for v in piece)):
            return f"rank {rank}: expected (start, stop), two whole numbers, got {piece!r}"
    for rank, (start, stop) in enumerate(answer):
        if start > stop:
            return f"rank {rank}'s shard ({start}, {stop}) starts after it stops"
        previous = answer[rank - 1][1] if rank else 0
        if start != previous:
            where = "the vector's start, 0" if rank == 0 else f"rank {rank - 1}'s stop, {previous}"
            return (f"rank {rank}'s shard starts at {start}, not at {where}: the shards cover 0 ... numel - 1 in "
                    "rank order, without gaps or overlaps")
        if stop - start != min(size, numel - start):
            return (f"rank {rank}'s shard ({start}, {stop}) holds {stop - start} numbers: every shard holds "
                    f"ceil({numel} / {world_size}) = {size}, until the numbers run out (the last ones are shorter "
                    "or empty), so an all-gather pads only the end")
    if answer[-1][1] != numel:
        return f"the last shard stops at {answer[-1][1]}, but the vector has {numel} numbers"
    return None


SHARD_RANGE = Exercise(
    name="shard_range",
    task="Write shard_range(numel, rank, world_size) -> (start, stop): the slice of a flat vector of numel "
         "numbers that rank owns. Shards of ceil(numel / world_size) numbers, in rank order; the last ones "
         "shorter, or empty (start == stop == numel).",
    cases=lambda: [
        Case(f"{NUMEL} parameters on 4 ranks", (NUMEL, 4), "4 shards of ceil(439 / 4) = 110: the last holds 109"),
        Case("5 numbers on 4 ranks", (5, 4), "shards of 2: (0, 2), (2, 4), (4, 5), and rank 3 gets (5, 5)"),
        Case("12 numbers on 3 ranks", (12, 3), "an even split: 4 each"),
    ],
    judge=_judge_shard_range,
    call=_every_rank,
    generated=lambda: [Case(f"{numel} numbers on {n} ranks", (numel, n))
                       for numel, n in itertools.product(range(41), range(1, 9))],
)


def _judge_state_bytes(case: Case, answer: list) -> str | None:
    numel, world_size = case.args
    expected = [zero1.adam_state_bytes(numel, rank, world_size) for rank in range(world_size)]
    for rank, (want, got) in enumerate(zip(expected, answer, strict=True)):
        if got != want:
            start, stop = zero1.shard_range(numel, rank, world_size)
            return (f"rank {rank} (shard of {stop - start} numbers): expected {want} bytes, got {got!r}. Adam keeps "
                    "exp_avg and exp_avg_sq, 4 bytes per number each, and a 4-byte step counter for the one "
                    "tensor it steps")
    return None


ADAM_STATE_BYTES = Exercise(
    name="adam_state_bytes",
    task="Write adam_state_bytes(numel, rank, world_size): the bytes of Adam's state on rank under ZeRO-1, "
         "float32, when the rank's optimizer steps one tensor, its shard of shard_range(numel, rank, world_size).",
    cases=lambda: [
        Case(f"{NUMEL} parameters on 2 ranks", (NUMEL, 2), "rank 0's shard holds 220 numbers, rank 1's 219"),
        Case(f"{NUMEL} parameters on 4 ranks", (NUMEL, 4), "two averages of 4 bytes per number, then the step"),
        Case("3 numbers on 4 ranks", (3, 4), "rank 3's shard is empty: Adam still counts its steps"),
    ],
    judge=_judge_state_bytes,
    call=_every_rank,
    generated=lambda: [Case(f"{numel} numbers on {n} ranks", (numel, n))
                       for numel, n in itertools.product(range(1, 41), range(1, 7))],
)


def train_each_case(function, case: Case) -> list[dict]:
    """Run the learner's training program on ``case.args[0]`` ranks, with the case's ``training`` settings."""
    return ranks.train_on_ranks(function, case.args[0], **case.context["training"])


def same_weights_and_sharded_state(case: Case, answer: list[dict]) -> str | None:
    """One-device Adam's weights on every rank, and no rank's optimizers holding more than a shard's state."""
    training = case.context["training"]
    widths = training.get("widths", ranks.WIDTHS)
    difference = ranks.first_difference(answer, ranks.one_device(**training), widths)
    if difference:
        return difference + " After the all-gather every rank must hold every updated parameter"
    numel, world_size = ranks.parameter_count(widths), case.args[0]
    tensors = len(widths) * 2 - 2
    for rank, result in enumerate(answer):
        shard = math.ceil(numel / world_size)
        if result["optimizer_state_bytes"] > 8 * shard + 4 * tensors:
            return (f"rank {rank}'s optimizer holds {result['optimizer_state_bytes']} bytes of state: the whole "
                    f"model's is {8 * numel + 4 * tensors}. Give its Adam only this rank's shard, about 1/"
                    f"{world_size} of it")
    return None


def zero1_cases() -> list[Case]:
    """2, 3 and 4 ranks, each a different number of steps and learning rate: shards of unequal sizes."""
    return [Case(f"{n} ranks, {steps} steps of Adam, lr {lr:g}", (n,), hint, {"training": {"steps": steps, "lr": lr}})
            for n, steps, lr, hint in [
                (2, 3, 1e-2, "all-reduce the flat gradient and divide it by the number of ranks"),
                (3, 4, 3e-3, "shards of 147, 147 and 145 numbers: pad the last before the all_gather"),
                (4, 3, 1e-2, "after the all-gather, drop the padding and copy the vector into the parameters"),
            ]]


ZERO1_TRAINING = Exercise(
    name="zero1_training",
    task="Write zero1_training(model, batches, lr), run on every rank: ZeRO-1 training with torch.optim.Adam. "
         "Each step: backward on the rank's (x, y), all-reduce the flat gradient and average it, Adam on this "
         "rank's shard only, then all-gather the updated shards. Return the final full parameters.",
    cases=zero1_cases,
    judge=same_weights_and_sharded_state,
    call=train_each_case,
    slow=SLOW,
)

EXERCISES = (SHARD_RANGE, ADAM_STATE_BYTES, ZERO1_TRAINING)
