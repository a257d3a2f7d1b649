"""Lesson 21's exercises: which rank owns which parameter under ZeroRedundancyOptimizer, which saved rows a rank
reads when a sharded checkpoint is loaded on another number of ranks, and a whole FSDP2 training run.

The first two take numbers and are judged against the rules torch follows (``sharded.zero_optimizer``,
``sharded.checkpoint_sharded``; ``tests/test_fsdp2.py`` checks those rules against real ranks), on a few
described cases and then on generated ones: seeded random sizes, and every small grid of rows and ranks. The
third runs the learner's training program on real ranks (``ranks.train_on_ranks``) inside ``watched``,
compares the weights with one-device Adam, and looks at the FSDP units the program made: right weights come as
well from one unit for the whole model, which the lesson shows gathering every parameter at once.
"""

import random

from torch import nn
from torch.distributed.fsdp import FSDPModule

from dpcourse import examples, ranks
from dpcourse.ranks.by_source import SourceFunction
from dpcourse.sharded.checkpoint_sharded import rows_to_read
from dpcourse.sharded.zero_optimizer import greedy_partition
from dpcourse.ui.words import plural

from .check import Case, Exercise

# The course's model (ranks.WIDTHS): 0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias.
MODEL_SIZES = [120, 15, 225, 15, 60, 4]


def _judge_owners(case: Case, answer) -> str | None:
    sizes, world_size = case.args
    expected = greedy_partition(sizes, world_size)
    if not isinstance(answer, list | tuple) or len(answer) != len(sizes):
        return f"expected a list of {plural(len(sizes), 'rank')}, one per parameter; got {answer!r}"
    for index, (want, got) in enumerate(zip(expected, answer, strict=True)):
        if want != got:
            owned = [sum(size for size, owner in zip(sizes, expected, strict=True) if owner == rank)
                     for rank in range(world_size)]
            return (f"parameter {index} ({plural(sizes[index], 'element')}) belongs to rank {want}, not {got!r}. "
                    f"With the right rule the ranks own {owned} elements")
    return None


def _owner_cases() -> list[Case]:
    generator = random.Random(21)
    cases = []
    for number in range(60):
        count, world_size = generator.randint(1, 9), generator.randint(1, 4)
        sizes = [generator.choice([1, 2, 3, 5, 8, 8, 13, 40, 40, 120]) for _ in range(count)]
        cases.append(Case(f"case {number}: sizes {sizes} on {plural(world_size, 'rank')}", (sizes, world_size)))
    return cases


ZERO_OWNERS = Exercise(
    name="zero_owners",
    task="Write zero_owners(sizes, world_size): the rank whose Adam owns each parameter under "
         "ZeroRedundancyOptimizer, given the parameters' sizes in order. Go from the largest parameter to the "
         "smallest (equal sizes in their order) and give each to the rank that owns the fewest elements so far, "
         "the lowest such rank on a tie.",
    cases=lambda: [
        Case("the course's model on 3 ranks", (MODEL_SIZES, 3),
             "the largest, 2.weight (225), goes first, to rank 0; then 0.weight (120) to rank 1"),
        Case("the course's model on 2 ranks", (MODEL_SIZES, 2),
             "after 225 on rank 0 and 120 on rank 1, rank 1 owns fewer elements: 60 goes there"),
        Case("four equal sizes on 3 ranks", ([5, 5, 5, 5], 3),
             "equal sizes keep their order (a stable sort); the last one goes to the lowest rank that owns 5"),
        Case("more ranks than parameters", ([3, 7], 4), "ranks 2 and 3 own nothing"),
    ],
    judge=_judge_owners,
    generated=_owner_cases,
)


def _judge_reads(case: Case, answer) -> str | None:
    rows, saved_ranks, rank, world_size = case.args
    expected = rows_to_read(*case.args)
    if not isinstance(answer, list | tuple):
        return f"expected a list of (saved_rank, first, end) triples; got {type(answer).__name__}"
    got = [tuple(piece) if isinstance(piece, list | tuple) else piece for piece in answer]
    if got != expected:
        return (f"rank {rank} of {world_size}, {plural(rows, 'row')} saved by {plural(saved_ranks, 'rank')}: "
                f"expected {expected}, "
                f"got {got}")
    return None


def _read_cases() -> list[Case]:
    return [Case(f"{plural(rows, 'row')}, saved on {saved}, rank {rank} of {world}", (rows, saved, rank, world))
            for rows in range(1, 11) for saved in range(1, 5) for world in range(1, 5) for rank in range(world)]


ROWS_TO_READ = Exercise(
    name="rows_to_read",
    task="Write rows_to_read(rows, saved_ranks, rank, ranks): loading a tensor of `rows` rows, sharded on dim 0 "
         "by saved_ranks ranks, into rank `rank` of `ranks`, which (saved_rank, first, end) pieces does it read? "
         "Both shardings give each rank ceil(rows / n) rows, the last ones fewer or none (torch.chunk's rule). "
         "List each saved shard that overlaps this rank's rows, in saved-rank order, with the global rows "
         "first ... end - 1 taken from it.",
    cases=lambda: [
        Case("0.weight's 15 rows: saved on 3 ranks, rank 0 of 2", (15, 3, 0, 2),
             "rank 0 of 2 holds rows 0 ... 7; the saved shards hold 0 ... 4, 5 ... 9 and 10 ... 14"),
        Case("4.weight's 4 rows: saved on 3 ranks, rank 1 of 2", (4, 3, 1, 2),
             "on 3 ranks the chunks are 2, 2 and 0 rows: saved rank 2 holds nothing, so nothing is read from it"),
        Case("the same number of ranks", (10, 4, 3, 4), "each rank reads its own saved shard, whole"),
    ],
    judge=_judge_reads,
    generated=_read_cases,
)


def watched(model: nn.Module, batches: list, lr: float, learner: SourceFunction) -> dict:
    """Run the learner's program (sent as source), then list the FSDP units it made: the names of the modules
    ``fully_shard`` turned into ``FSDPModule``s, ``""`` for the model itself. A program for ``train_on_ranks``."""
    returned = learner.rebuild()(model, batches, lr)
    result = dict(returned) if isinstance(returned, dict) else {"parameters": returned}
    return {**result, "units": [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]}


def _on_ranks(function, case: Case) -> list[dict]:
    (world_size,) = case.args
    return ranks.train_on_ranks(watched, world_size, steps=3, extra={"learner": SourceFunction.of(function)})


def _units_difference(rank: int, units: list[str]) -> str | None:
    """What is wrong with rank ``rank``'s FSDP units, if anything: one per ``nn.Linear``, and the model."""
    layers = [name for name, module in examples.mlp(ranks.WIDTHS).named_modules() if isinstance(module, nn.Linear)]
    if units == ["", *layers]:
        return None
    if units == [""]:
        return (f"rank {rank}'s only FSDP unit is the model itself: fully_shard(model) alone makes one unit, so "
                "every forward gathers the whole model at once, and a rank holds all of it while any layer runs. "
                f"Call fully_shard on each nn.Linear ({', '.join(layers)}) first, then on the model: a layer is whole "
                "only while it runs")
    named = {"": "the model", **{name: f"layer {name}" for name in units + layers if name}}
    missing = [named[name] for name in ["", *layers] if name not in units]
    extra = [named[name] for name in units if name not in ["", *layers]]
    if "" not in units:
        return (f"rank {rank}'s FSDP units are {units}; the model is not one. fully_shard each nn.Linear, then "
                "the model: the model's own call makes it the root, which takes what is left and the step's "
                "bookkeeping")
    if missing:
        one = len(missing) == 1
        return (f"rank {rank}'s FSDP units are {units}; {', '.join(missing)} {'is' if one else 'are'} not one, so "
                f"{'its' if one else 'their'} parameters belong to the root's unit, gathered for the whole forward. "
                "fully_shard each nn.Linear, then the model")
    return (f"rank {rank}'s FSDP units are {units}; {', '.join(extra)} should not be one: fully_shard each "
            "nn.Linear and then the model, the units the lesson measures")


def _judge_training(case: Case, answer: list[dict]) -> str | None:
    difference = ranks.first_difference(answer, ranks.one_device(steps=3))
    if difference:
        return (difference + " FSDP2 averages the gradients over the ranks itself, and the optimizer must be "
                "built after fully_shard, from the sharded parameters")
    for rank, result in enumerate(answer):
        types = result.get("types")
        if not isinstance(types, list | tuple) or len(types) != len(MODEL_SIZES) or set(types) != {"DTensor"}:
            return (f"rank {rank} reported 'types' {types!r}: expected 'DTensor' for each of the "
                    f"{len(MODEL_SIZES)} parameters, [type(p).__name__ for p in model.parameters()] after "
                    "fully_shard")
        units = _units_difference(rank, result["units"])
        if units:
            return units
    return None


TRAIN_WITH_FSDP2 = Exercise(
    name="train_with_fsdp2",
    task="Write train_with_fsdp2(model, batches, lr), run on every rank: fully_shard each nn.Linear of the model, "
         "then the model, on init_device_mesh(x.device.type, (dist.get_world_size(),)); train with "
         "torch.optim.Adam(lr=lr), one step per (x, y) in batches, loss F.mse_loss(model(x), y); return a dict with "
         "'parameters', the full parameters (p.full_tensor()), and 'types', the type names of the parameters while "
         "sharded.",
    cases=lambda: [
        Case("3 ranks, 3 steps (rank 2 holds no row of 4.weight)", (3,),
             "build the optimizer after fully_shard, from the DTensor parameters; each rank's loss is the mean "
             "over its own samples, and FSDP2 averages the gradients over the ranks"),
    ],
    judge=_judge_training,
    call=_on_ranks,
    slow=f"starting the ranks and training (a few seconds); ranks that wait for each other are stopped after "
         f"{ranks.TIMEOUT:g} s",
)

EXERCISES = (TRAIN_WITH_FSDP2, ROWS_TO_READ, ZERO_OWNERS)
