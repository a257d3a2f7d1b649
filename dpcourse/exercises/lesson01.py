"""Lesson 01's exercises: the one-device gradient, and how chunk losses must be weighted to rebuild it."""

import torch

from .. import examples
from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference


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

EXERCISES = (FULL_BATCH_GRADIENTS, CHUNK_LOSS_WEIGHTS)
