"""Lesson 01's exercises: the one-device gradient, how chunk losses must be weighted to rebuild it, and
DataParallel matching it: one step's gradients, and the weights after training."""

import torch

from .. import examples
from ..devices import devices
from ..ui.words import plural
from .check import Case, Exercise, Oracle, equals, first_difference, replicas_that_should_run, with_replica_forwards


def _gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.autograd.grad(examples.loss_fn(model(x), y), list(model.parameters())))


def _gradient_cases() -> list[Case]:
    hint = "the loss is examples.loss_fn(model(x), y), a mean over the batch; differentiate it w.r.t. every parameter"
    return [
        Case(f"{plural(batch, 'row')}, model seed {seed}",
             (examples.make_model(seed), *examples.make_batch(batch, seed)), hint)
        for batch, seed in [(10, 0), (7, 1), (1, 2)]
    ]


FULL_BATCH_GRADIENTS = Exercise(
    name="full_batch_gradients",
    task="Write full_batch_gradients(model, x, y): the gradients of examples.loss_fn(model(x), y) with respect to "
         "model.parameters(), as a list in the same order.",
    cases=_gradient_cases,
    judge=equals(_gradients),
)


def _weights_judge(case: Case, answer) -> str | None:
    (sizes,) = case.args
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    return first_difference([size / sum(sizes) for size in sizes], answer, "weights")


def _every_chunk_split() -> list[Case]:
    """The chunk sizes torch.chunk gives for every batch of 1 to 16 rows on 1 to 6 devices, each split once."""
    splits = {tuple(len(c) for c in torch.arange(batch).chunk(n)) for batch in range(1, 17) for n in range(1, 7)}
    return [Case(f"chunks {list(sizes)}", (list(sizes),)) for sizes in sorted(splits)]


CHUNK_LOSS_WEIGHTS = Exercise(
    name="chunk_loss_weights",
    task="Write chunk_loss_weights(sizes): one weight per chunk, so that the weighted sum of the chunks' mean "
         "losses equals the mean loss over the whole batch.",
    cases=lambda: [
        Case("two equal chunks of 5", ([5, 5],)),
        Case("10 rows on 4 devices: chunks 3, 3, 3, 1", ([3, 3, 3, 1],),
             "a chunk of 1 row holds 1/10 of the samples, not 1/4: weigh each chunk by its share of the rows"),
        Case("chunks 2, 2, 1", ([2, 2, 1],), "the weights are the chunk sizes divided by the batch size"),
        Case("one chunk of 7", ([7],)),
    ],
    judge=_weights_judge,
    generated=_every_chunk_split,
)



def _parallel_gradients_judge(case: Case, answer) -> str | None:
    model, x, y, n = case.args
    gradients, forwards = answer
    return (replicas_that_should_run(len(x), n, forwards)
            or first_difference(case.context["expected"], gradients, "gradients"))


def _parallel_gradient_cases() -> list[Case]:
    hint = "the replicas' gradients are summed into the model's .grad: return [p.grad for p in model.parameters()]"
    return [Case(f"{plural(batch, 'row')} on {plural(n, 'device')}",
                 (examples.make_model(seed).to(devices(n)[0]), *examples.make_batch(batch, seed, devices(n)[0]), n),
                 hint)
            for batch, n, seed in [(7, 2, 0), (10, 4, 1), (5, 3, 2)]]


PARALLEL_GRADIENTS = Exercise(
    name="parallel_gradients",
    task="Write parallel_gradients(model, x, y, n): one forward and backward of examples.loss_fn through "
         "dpcourse.DataParallel on n devices; return the model's parameter gradients, as a list in order.",
    cases=_parallel_gradient_cases,
    judge=Oracle(lambda model, x, y, n: _gradients(model, x, y), _parallel_gradients_judge),
    call=with_replica_forwards,
)


def _train_cases() -> list[Case]:
    cases = []
    for n, steps, seed in [(2, 5, 0), (4, 3, 1), (3, 2, 2)]:
        oracle = examples.make_model(seed).to(devices(n)[0])
        losses = examples.train(oracle, steps=steps)
        cases.append(Case(f"{plural(steps, 'step')} on {plural(n, 'device')}",
                          (examples.make_model(seed).to(devices(n)[0]), n, steps),
                          "the wrapper shares model's parameters: training it trains model",
                          {"oracle": oracle, "losses": losses}))
    return cases


def _train_judge(case: Case, answer) -> str | None:
    model, n, steps = case.args
    losses, forwards = answer
    ran = replicas_that_should_run(10, n, forwards, calls=steps)  # examples.train's batches have 10 rows
    if ran:
        return ran
    difference = examples.max_weight_difference(model, case.context["oracle"])
    if difference > 1e-5:
        return (f"after training, model's weights differ from one-device training's by {difference:.2g}: train "
                f"the model you are given, wrapped, not a copy")
    return first_difference(case.context["losses"], losses, "losses", atol=1e-5)


TRAIN_IN_PARALLEL = Exercise(
    name="train_in_parallel",
    task="Write train_in_parallel(model, n, steps): train model wrapped in dpcourse.DataParallel on n devices for "
         "`steps` steps with examples.train, and return the losses. The check compares its weights with "
         "one-device training's.",
    cases=_train_cases,
    judge=_train_judge,
    call=with_replica_forwards,
)

EXERCISES = (FULL_BATCH_GRADIENTS, CHUNK_LOSS_WEIGHTS, PARALLEL_GRADIENTS, TRAIN_IN_PARALLEL)
