"""Lesson 19's exercises: when ZeRO-2 reduce-scatters each bucket, how many bytes a rank sends per step, and a
whole ZeRO-2 training program run on 2, 3 and 4 real ranks next to one-device Adam.

The first two are judged against ``sharded.zero2``'s rule and the ring's arithmetic on generated grids of
parameter and bucket sizes (a test holds that arithmetic to the bytes ``traffic.counted`` counts on real ranks);
the schedule's grids include buckets that fill exactly, where "at least" and "more than" part. The training
program travels to the ranks as its source and runs inside ``sharded.zero2_check.watched``, which also sees what
the learner's code leaves behind: the collectives it called, the full gradients it held during backward and when
Adam stepped, and how many values Adam keeps state for on each rank.
"""

import itertools
import random

from dpcourse import ranks
from dpcourse.sharded import zero2, zero2_check
from dpcourse.sharded.collectives import piece_size
from dpcourse.ui.words import plural

from .check import Case, Exercise

SLOW = (f"starting the ranks and training (a few seconds); ranks that wait for each other are stopped after "
        f"{ranks.TIMEOUT:g} s")
COURSE_NUMELS = [120, 15, 225, 15, 60, 4]  # the course model's parameters: 8 -> 15 -> 15 -> 4
BUCKET = zero2.LESSON_BUCKET_BYTES // 4  # values per bucket, float32


def schedule(numels: list[int], bucket_numel: int) -> list[tuple[list[int], int]]:
    """The oracle: the course's buckets in the order ZeRO-2 reduce-scatters them, each with the gradients still to
    come.

    Backward produces the gradients in reverse parameter order, so a bucket is full when its first parameter's
    gradient arrives, and the gradients still to come are those of the parameters before it.
    """
    return [(bucket, min(bucket)) for bucket in zero2.bucket_indices(numels, bucket_numel)]


def _random_sizes(count: int, seed: int) -> list[list[int]]:
    generator = random.Random(seed)
    return [[generator.randint(1, 300) for _ in range(generator.randint(1, 7))] for _ in range(count)]


def _exact_fills(count: int, seed: int) -> list[tuple[list[int], int]]:
    """Models whose running sum of sizes meets the bucket size exactly: the boundary of "at least". The bucket
    size is the sum of the first k parameters, so the k-th closes the first bucket with not a value to spare;
    with equal sizes every bucket fills exactly, the last one with the model's last parameter."""
    generator = random.Random(seed)
    grids = []
    for _ in range(count):
        numels = [generator.randint(1, 300) for _ in range(generator.randint(2, 7))]
        grids.append((numels, sum(numels[:generator.randint(1, len(numels) - 1)])))
        size, per_bucket = generator.randint(1, 50), generator.randint(1, 3)
        grids.append(([size] * per_bucket * generator.randint(1, 4), size * per_bucket))
    return grids


def _judge_schedule(case: Case, answer) -> str | None:
    numels, bucket_numel = case.args
    expected = schedule(numels, bucket_numel)
    got = [(list(bucket), still) for bucket, still in answer] if isinstance(answer, list | tuple) and all(
        isinstance(item, list | tuple) and len(item) == 2 for item in answer) else answer
    if got == expected:
        return None
    if not isinstance(got, list):
        return f"expected a list of (indices, still_to_come) pairs, got {answer!r}"
    buckets = [bucket for bucket, _ in got]
    if buckets != [bucket for bucket, _ in expected]:
        return (f"expected the buckets {[bucket for bucket, _ in expected]}, got {buckets}. The course's rule: in "
                f"parameter order, add parameters to a bucket until it holds at least {bucket_numel} values (the "
                "parameter that reaches it is in it), then start the next; the last layers' bucket goes first")
    return (f"expected gradients still to come {[still for _, still in expected]}, got {[still for _, still in got]}."
            " Backward produces the gradients from the last parameter to the first: when a bucket is full, the "
            "parameters before its first one have no gradient yet")


REDUCE_SCATTER_SCHEDULE = Exercise(
    name="reduce_scatter_schedule",
    task="Write reduce_scatter_schedule(numels, bucket_numel): the buckets of parameter indices in the order "
         "ZeRO-2 reduce-scatters them, each with the number of gradients backward has still to produce when it "
         "starts, as a list of (indices, still_to_come). Buckets follow the course's rule, DDP's under "
         "find_unused_parameters=True (in parameter order, a bucket closes once it holds at least bucket_numel "
         "values; then the list is reversed); backward produces the "
         "gradients from the last parameter to the first.",
    cases=lambda: [
        Case("the course model, buckets of 100 values", (COURSE_NUMELS, BUCKET),
             "[3, 4, 5] closes the model: 15 + 60 + 4 values; it goes first, with 3 gradients to come"),
        Case("one bucket for everything", (COURSE_NUMELS, 10_000), "one bucket, full only when backward ends"),
        Case("a bucket per parameter", (COURSE_NUMELS, 1), "every parameter fills a bucket on its own"),
        Case("buckets of 135 values: 0.weight and 0.bias fill one exactly", (COURSE_NUMELS, 135),
             "120 + 15 = 135 values: the bucket holds at least 135, so it closes there, and 2.weight starts the "
             "next"),
        Case("buckets of 120 values: 0.weight fills one on its own", (COURSE_NUMELS, 120),
             "120 values reach 120: 0.weight's bucket closes with 0.weight alone"),
        Case("four parameters of 4 values, buckets of 8", ([4, 4, 4, 4], 8),
             "every pair fills a bucket exactly; the last pair closes the model, and no empty bucket follows it"),
        Case("one parameter that fills one bucket", ([10], 10), "one bucket, [0], with no gradient to come"),
    ],
    judge=_judge_schedule,
    generated=lambda: [Case(f"parameters of {numels} values, buckets of {bucket_numel}", (numels, bucket_numel))
                       for numels, bucket_numel in [
                           *itertools.product(_random_sizes(20, 19), (1, 50, 100, 250, 10**4)),
                           *_exact_fills(20, 191)]],
)


def bytes_per_step(bucket_numels: list[int], world_size: int) -> int:
    """The oracle: bytes one rank sends per ZeRO-2 step with ring collectives, float32. Each bucket is padded to
    ``n`` pieces of ``ceil(numel / n)`` values; its reduce-scatter and its all-gather each send ``n - 1`` pieces."""
    return sum(2 * (world_size - 1) * piece_size(numel, world_size) * 4 for numel in bucket_numels)


def _judge_bytes(case: Case, answer) -> str | None:
    bucket_numels, world_size = case.args
    expected = bytes_per_step(bucket_numels, world_size)
    if isinstance(answer, bool) or not isinstance(answer, int | float) or answer != int(answer):
        return f"expected a whole number of bytes, got {answer!r}"
    if answer == expected:
        return None
    return (f"expected {expected:,} bytes, got {answer:,.0f}. Per bucket: a reduce-scatter and an all-gather, each "
            f"sending n - 1 = {plural(world_size - 1, 'piece')} of ceil(numel / n) float32 values (the padded piece "
            "size)")


ZERO2_BYTES_PER_STEP = Exercise(
    name="zero2_bytes_per_step",
    task="Write zero2_bytes_per_step(bucket_numels, world_size): the bytes one rank sends in one ZeRO-2 step, "
         "float32, when the reduce-scatter of each bucket's gradients and the all-gather of its parameters are "
         "rings (rings.py): each bucket padded to world_size pieces of ceil(numel / world_size) values.",
    cases=lambda: [
        Case("the course model's buckets on 4 ranks", ([79, 240, 120], 4),
             "79 values make pieces of 20 (one of them padded): 3 pieces sent per collective"),
        Case("the same buckets on 2 ranks", ([79, 240, 120], 2), "2 ranks: one piece per collective, half a bucket"),
        Case("one rank", ([439], 1), "alone, a rank sends nothing"),
    ],
    judge=_judge_bytes,
    generated=lambda: [Case(f"buckets of {numels} values on {plural(n, 'rank')}", (numels, n))
                       for numels, n in itertools.product(_random_sizes(12, 20), range(1, 7))],
)


def _train(function, case: Case) -> list[dict]:
    return zero2_check.train_learners(function, case.args[0], **case.context["training"])


TRAIN_ZERO2 = Exercise(
    name="train_zero2",
    task="Write train_zero2(model, batches, lr), run on every rank: ZeRO-2 training with torch.optim.Adam. Put "
         "a hook on every parameter (register_post_accumulate_grad_hook); when a bucket's last gradient has "
         "arrived, reduce-scatter the bucket's averaged gradients (dist.reduce_scatter, padded to n equal pieces) "
         "into this rank's shard and set the bucket's .grad to None. After backward: Adam on the shards, then "
         "dist.all_gather the updated shards into the parameters. Return the final full parameters.",
    cases=lambda: [
        Case(f"{n} ranks, {steps} steps of Adam, lr {lr:g}", (n,), hint, {"training": {"steps": steps, "lr": lr}})
        for n, steps, lr, hint in [
            (2, 3, 1e-2, "divide the flat gradients by n before the reduce-scatter: it sums"),
            (3, 4, 3e-3, "pad each bucket with zeros to n * ceil(numel / n) values before cutting it into pieces"),
            (4, 3, 1e-2, "the all-gather gives every rank every padded shard: drop the padding, copy into the "
                         "parameters under torch.no_grad()"),
        ]],
    judge=zero2_check.judge,
    call=_train,
    slow=SLOW,
)

EXERCISES = (REDUCE_SCATTER_SCHEDULE, ZERO2_BYTES_PER_STEP, TRAIN_ZERO2)
