"""Lesson 18's exercises: which slice of the flat parameters a rank owns, how much Adam state that leaves it,
and a whole ZeRO-1 training program run on 2, 3 and 4 real ranks next to one-device Adam.

The two counting exercises are judged on every rank at once (the learner's function is called once per rank)
and on an exhaustive grid of sizes. The training program is judged on the weights every rank ends with, under
Adam and under SGD (where a gradient summed instead of averaged moves the weights n times too far, a mistake Adam
hides), and on the optimizer state each rank's optimizers hold (``ranks`` measures it in the rank).
"""

import inspect
import itertools

import torch

from dpcourse import examples, ranks
from dpcourse.sharded import zero1
from dpcourse.sharded.collectives import piece_size, shard_range
from dpcourse.ui.words import plural

from .check import Case, Exercise

SLOW = (f"starting the ranks (a few seconds); ranks that wait for each other are stopped after "
        f"{ranks.TIMEOUT:g} s")
NUMEL = ranks.parameter_count()  # the course model's 439 parameters


def _every_rank(function, case: Case) -> list:
    numel, world_size = case.args
    return [function(numel, rank, world_size) for rank in range(world_size)]


def _judge_shard_range(case: Case, answer: list) -> str | None:
    numel, world_size = case.args
    size = piece_size(numel, world_size)
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
            return (f"rank {rank}'s shard ({start}, {stop}) holds {plural(stop - start, 'number')}: every shard holds "
                    f"ceil({numel} / {world_size}) = {size}, until the numbers run out (the last ones are shorter "
                    "or empty), so an all-gather pads only the end")
    if answer[-1][1] != numel:
        return f"the last shard stops at {answer[-1][1]}, but the vector has {plural(numel, 'number')}"
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
    generated=lambda: [Case(f"{plural(numel, 'number')} on {plural(n, 'rank')}", (numel, n))
                       for numel, n in itertools.product(range(41), range(1, 9))],
)


def _judge_state_bytes(case: Case, answer: list) -> str | None:
    numel, world_size = case.args
    expected = [zero1.adam_state_bytes(numel, rank, world_size) for rank in range(world_size)]
    for rank, (want, got) in enumerate(zip(expected, answer, strict=True)):
        if got != want:
            start, stop = shard_range(numel, rank, world_size)
            return (f"rank {rank} (shard of {plural(stop - start, 'number')}): expected {want} bytes, got {got!r}. "
                    "Adam keeps exp_avg and exp_avg_sq, 4 bytes per number each, and a 4-byte step counter for the "
                    "one tensor it steps")
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
    generated=lambda: [Case(f"{plural(numel, 'number')} on {plural(n, 'rank')}", (numel, n))
                       for numel, n in itertools.product(range(1, 41), range(1, 7))],
)


def train_each_case(function, case: Case) -> list[dict]:
    """Run the learner's training program on ``case.args[0]`` ranks, with the case's ``training`` settings, under
    Adam and under SGD (``ranks.under_adam_and_sgd``)."""
    try:
        inspect.signature(function).bind(None, None, None, None)
    except (TypeError, ValueError):
        raise TypeError(f"{getattr(function, '__name__', function)} must take (model, batches, lr, optimizer_class) "
                        "and build this rank's optimizer as optimizer_class([shard], lr=lr): the check runs it with "
                        "torch.optim.Adam and with torch.optim.SGD") from None
    learner = ranks.shippable(function)
    return ranks.train_on_ranks(ranks.under_adam_and_sgd, case.args[0], **case.context["training"],
                                extra={"learner": learner})


def _how_far(got: list, want: list, start: list) -> float:
    """How far the weights moved along one-device SGD's path, as a multiple of its distance (1 is right)."""
    path = torch.cat([(w - s).flatten() for w, s in zip(want, start, strict=True)])
    moved = torch.cat([(g - s).flatten() for g, s in zip(got, start, strict=True)])
    return (moved @ path / (path @ path)).item()


def _sgd_difference(case: Case, answer: list[dict]) -> str | None:
    """Under SGD a step is ``lr * grad``: a gradient summed instead of averaged trains exactly as one-device SGD with
    n times the learning rate, where Adam's step hardly changes. Names that mistake (and dividing twice)."""
    training, world_size = case.context["training"], case.args[0]
    widths = training.get("widths", ranks.WIDTHS)

    def one_device_sgd(lr: float) -> list[torch.Tensor]:
        return ranks.one_device(**{**training, "lr": lr}, optimizer_class=torch.optim.SGD)

    expected = one_device_sgd(ranks.SGD_LR)
    difference = ranks.first_difference(answer, expected, widths, key="sgd", oracle="SGD")
    if difference is None:
        return None
    rank = next(r for r, result in enumerate(answer) if ranks.first_difference([result], expected, widths, key="sgd"))
    start = [p.detach() for p in examples.mlp(tuple(widths), training.get("seed", 0)).parameters()]
    ratio = _how_far(answer[rank]["sgd"], expected, start)
    moved = f"under SGD (lr {ranks.SGD_LR:g}), rank {rank}'s weights moved {ratio:.2f} times as far as one-device SGD's"
    scaled = [(ranks.SGD_LR * world_size, f"n = {world_size} times too far", "Is the summed gradient divided by n? "
               "Adam hides this mistake: its step hardly depends on the gradient's scale"),
              (ranks.SGD_LR / world_size, f"1/n = 1/{world_size} as far", "Is the gradient divided by n twice?")]
    for lr, how, question in scaled if world_size > 1 else []:
        if ranks.first_difference(answer, one_device_sgd(lr), widths, key="sgd") is None:
            return f"{moved}: {how}, exactly where one-device SGD with lr {lr:.3g} ends. {question}"
    return f"under SGD (lr {ranks.SGD_LR:g}), {difference.removesuffix('.')}: it moved {ratio:.2f} times as far." + (
        _AFTER_THE_ALL_GATHER)


_AFTER_THE_ALL_GATHER = " After the all-gather every rank must hold every updated parameter"


def same_weights_and_sharded_state(case: Case, answer: list[dict]) -> str | None:
    """One-device SGD's and Adam's weights on every rank, and no rank's optimizers holding more than a shard's
    state."""
    if (difference := _sgd_difference(case, answer)):
        return difference
    training = case.context["training"]
    widths = training.get("widths", ranks.WIDTHS)
    if (difference := ranks.first_difference(answer, ranks.one_device(**training), widths)):
        return difference + _AFTER_THE_ALL_GATHER
    numel, world_size = ranks.parameter_count(widths), case.args[0]
    tensors = len(widths) * 2 - 2
    for rank, result in enumerate(answer):
        shard = piece_size(numel, world_size)
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
    task="Write zero1_training(model, batches, lr, optimizer_class), run on every rank: ZeRO-1 training with "
         "optimizer_class([shard], lr=lr) over this rank's shard only (the check passes torch.optim.Adam, then "
         "torch.optim.SGD). Each step: backward on the rank's (x, y), all-reduce the flat gradient and average it, "
         "step the shard, then all-gather the updated shards. Return the final full parameters.",
    cases=zero1_cases,
    judge=same_weights_and_sharded_state,
    call=train_each_case,
    slow=SLOW,
)

EXERCISES = (SHARD_RANGE, ADAM_STATE_BYTES, ZERO1_TRAINING)
