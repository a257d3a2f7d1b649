"""Lesson 06's exercises: reduce-add sums the replicas' gradients, gather's backward splits the output's
gradient, and the weights a mean of chunk means gives each sample."""

import warnings

import torch

from ..data_parallel import DataParallel
from ..devices import devices
from ..examples import ChunkMean, seeded_randn
from ..ui.words import plural
from .check import Case, Exercise, equals


def _grads(seed: int, replicas: int, *shapes: tuple[int, ...]) -> list[list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator) for shape in shapes] for _ in range(replicas)]


def _reduce_add(grads_per_replica: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    return [torch.stack(same_parameter).sum(0) for same_parameter in zip(*grads_per_replica, strict=True)]


def _random_replica_gradients() -> list[Case]:
    """1 to 5 replicas of 1 to 3 parameters of assorted shapes, seeded."""
    shapes = [(2,), (3, 1), (1,), (2, 2), (4,)]
    return [Case(f"{plural(replicas, 'replica')}, {plural(count, 'parameter')}",
                 (_grads(10 * replicas + count, replicas, *shapes[:count]),))
            for replicas in range(1, 6) for count in range(1, 4)]


REDUCE_ADD = Exercise(
    name="reduce_add",
    task="Write reduce_add(grads_per_replica): grads_per_replica[r][j] is replica r's gradient of parameter j; "
         "return, for every parameter, the gradient the original model gets.",
    cases=lambda: [
        Case("2 replicas, 2 parameters", (_grads(0, 2, (3, 2), (3,)),),
             "the original's gradient is the sum of the replicas' gradients, not their mean"),
        Case("4 replicas, 3 parameters", (_grads(1, 4, (4,), (2, 2), (1,)),),
             "every replica's gradient counts: add them all"),
        Case("1 replica", (_grads(2, 1, (5,)),)),
    ],
    judge=equals(_reduce_add),
    generated=_random_replica_gradients,
)


def _random_sizes() -> list[Case]:
    """40 lists of 1 to 5 output sizes (0 to 4 rows each, at least one row in all), seeded."""
    generator = torch.Generator().manual_seed(6)
    cases = []
    while len(cases) < 40:
        sizes = torch.randint(0, 5, (int(torch.randint(1, 6, (1,), generator=generator)),), generator=generator)
        if sizes.sum() > 0:
            rows = seeded_randn(int(sizes.sum()), 3, seed=len(cases))
            cases.append(Case(f"sizes {sizes.tolist()}", (rows, sizes.tolist())))
    return cases


SPLIT_GRADIENT = Exercise(
    name="split_gradient",
    task="Write split_gradient(grad, sizes): the gathered output's gradient `grad` cut into one piece per "
         "replica, replica i getting the rows of its own chunk (sizes[i] rows).",
    cases=lambda: [
        Case("10 rows from chunks 3, 3, 3, 1", (seeded_randn(10, 3, seed=0), [3, 3, 3, 1]),
             "replica 0 produced the first 3 rows of the output, so it gets the gradient's first 3 rows"),
        Case("9 rows from chunks 5, 4", (seeded_randn(9, 3, seed=1), [5, 4])),
        Case("8 rows from chunks 2, 2, 2, 2", (seeded_randn(8, 3, seed=2), [2, 2, 2, 2]),
             "equal sizes hide nothing here: rows must still go back in replica order"),
        Case("outputs of 2, 5, 1 rows", (seeded_randn(8, 3, seed=3), [2, 5, 1]),
             "a replica's output need not have its input's rows: use the sizes you are given, not torch.chunk"),
        Case("4 rows, one replica", (seeded_randn(4, 3, seed=4), [4])),
    ],
    judge=equals(lambda grad, sizes: list(grad.split(sizes))),
    generated=_random_sizes,
)


def _sample_weights(batch: int, n: int) -> torch.Tensor:
    """What dpcourse's DataParallel gives: each sample's weight when the replicas' chunk means are averaged."""
    per_sample = torch.ones(batch, requires_grad=True)
    with warnings.catch_warnings():  # gathering 0-d means warns; expected here
        warnings.simplefilter("ignore")
        DataParallel(ChunkMean(), devices=devices(n))(per_sample).mean().backward()
    return per_sample.grad


def _every_batch_up_to_12_on_up_to_5_devices() -> list[Case]:
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}", (batch, n))
            for batch in range(1, 13) for n in range(1, 6)]


SAMPLE_WEIGHTS = Exercise(
    name="sample_weights",
    task="Write sample_weights(batch, n): a tensor with the weight each sample's loss gets when n replicas "
         "return their chunk's mean loss and you average those means.",
    cases=lambda: [
        Case("8 rows on 4 devices", (8, 4), "equal chunks: every sample weighs 1/8"),
        Case("9 rows on 2 devices", (9, 2),
             "each of the N chunks weighs 1/N, shared by its b rows: a sample weighs 1/(N b)"),
        Case("10 rows on 4 devices", (10, 4), "torch.chunk gives chunks 3, 3, 3, 1"),
        Case("6 rows on 4 devices", (6, 4), "N counts the chunks, not the devices: 6 rows make 3 chunks"),
    ],
    judge=equals(_sample_weights),
    generated=_every_batch_up_to_12_on_up_to_5_devices,
)

EXERCISES = (REDUCE_ADD, SPLIT_GRADIENT, SAMPLE_WEIGHTS)
