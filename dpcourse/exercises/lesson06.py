"""Lesson 06's exercises: reduce-add sums the replicas' gradients, gather's backward splits the output's
gradient, the weights a mean of chunk means gives each sample, and the reduction that repairs it."""

import warnings

import torch

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from ..examples import ChunkMean, seeded_randn
from ..ui.words import plural
from .check import Case, Exercise, Oracle, equals, first_difference, replicas_that_should_run, with_replica_forwards
from .lesson01 import _gradients


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



def _size_weighted_judge(case: Case, answer) -> str | None:
    model, x, y, n = case.args
    loss, forwards = answer
    ran = replicas_that_should_run(len(x), n, forwards)
    if ran:
        return ran
    if not isinstance(loss, torch.Tensor) or loss.shape != ():
        return f"expected a 0-d loss to call .backward() on, got {getattr(loss, 'shape', type(loss).__name__)}"
    loss.backward()
    gradients = [p.grad for p in model.parameters()]
    if any(g is None for g in gradients):
        return "the loss does not reach the model's parameters: reduce the chunk means DataParallel returns"
    difference = first_difference(case.context["expected"], gradients, "gradients")
    return difference and f"{difference}: weigh each chunk's mean by its share of the batch's rows"


def _loss_inside_case(description: str, rows: int, n: int, hint: str = "") -> Case:
    first = devices(n)[0]
    model, (x, y) = examples.make_model(seed=rows).to(first), examples.make_batch(rows, seed=n, device=first)
    return Case(description, (model, x, y, n), hint)


SIZE_WEIGHTED_LOSS = Exercise(
    name="size_weighted_loss",
    task="Write size_weighted_loss(model, x, y, n): run LossInside(model) under DataParallel on n devices (one mean "
         "per chunk) and reduce those means, weighing each by its chunk's size, to the loss whose gradient is the "
         "one-device gradient. Return the loss: the check calls backward.",
    cases=lambda: [
        _loss_inside_case("10 rows on 4 devices: chunks 3, 3, 3, 1", 10, 4,
                          "the mean of the chunk means gives the lone row of the last chunk 3 times its weight"),
        _loss_inside_case("9 rows on 2 devices", 9, 2),
        _loss_inside_case("8 rows on 4 devices", 8, 4),
        _loss_inside_case("6 rows on 4 devices: 3 chunks", 6, 4, "N counts the chunks, not the devices"),
    ],
    judge=Oracle(lambda model, x, y, n: _gradients(model, x, y), _size_weighted_judge),
    call=with_replica_forwards,
)

EXERCISES = (REDUCE_ADD, SPLIT_GRADIENT, SAMPLE_WEIGHTS, SIZE_WEIGHTED_LOSS)
