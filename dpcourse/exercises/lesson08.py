"""Lesson 08's exercise: a loss inside forward that survives uneven chunks."""

import warnings

import torch

from .. import examples
from ..scatter_gather import gather
from ..ui.words import plural
from .check import Case, Exercise


def _per_replica_then_gather(function, case: Case) -> torch.Tensor:
    """What DataParallel does with a loss computed in forward: one call per chunk, then gather."""
    output, target, n = case.args
    losses = [function(o, t) for o, t in zip(output.chunk(n), target.chunk(n), strict=True)]
    with warnings.catch_warnings():  # 0-d losses gather into a vector with a warning; the judge explains it
        warnings.simplefilter("ignore")
        return gather(losses, "cpu")


def _judge(case: Case, answer) -> str | None:
    output, target, n = case.args
    if not isinstance(answer, torch.Tensor):
        return f"expected a tensor of losses, got {type(answer).__name__}"
    if answer.shape != target.shape:
        return (f"the gathered losses have shape {list(answer.shape)} for {plural(len(target), 'row')} on "
                f"{plural(n, 'device')}: return one loss per sample, shape [rows]")
    expected = examples.loss_fn(output, target)
    if not torch.isclose(answer.mean(), expected, atol=1e-6):
        return f"the gathered losses' mean is {answer.mean().item():.6g}, the full-batch loss is {expected.item():.6g}"
    return None


def _case(description: str, batch: int, n: int, hint: str = "") -> Case:
    x, y = examples.make_batch(batch, seed=batch)
    with torch.no_grad():
        output = examples.make_model()(x)
    return Case(description, (output, y, n), hint)


PER_SAMPLE_LOSS = Exercise(
    name="per_sample_loss",
    task="Write per_sample_loss(output, target): the cross-entropy loss of every sample of a replica's chunk, "
         "so that gathering the replicas' results and taking .mean() gives the full-batch loss.",
    cases=lambda: [
        _case("8 rows on 2 devices", 8, 2),
        _case("10 rows on 4 devices: chunks 3, 3, 3, 1", 10, 4,
              "a mean per replica weighs the lone row of chunk 3 like 3 rows: use reduction='none'"),
        _case("7 rows on 3 devices: chunks 3, 3, 1", 7, 3, "a sum per replica is too big by the chunk sizes"),
    ],
    judge=_judge,
    call=_per_replica_then_gather,
)

EXERCISES = (PER_SAMPLE_LOSS,)
