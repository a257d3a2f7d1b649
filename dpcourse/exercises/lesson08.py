"""Lesson 08's exercises: a loss inside forward that survives uneven chunks, a custom layer's gradient under
DataParallel, and state a forward returns instead of setting."""

import warnings

import torch

from .. import examples
from ..devices import devices
from ..scatter_gather import gather
from ..ui.words import plural
from .check import Case, Exercise, Oracle, first_difference, replicas_that_should_run, with_replica_forwards


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



class _CustomLayer(torch.nn.Module):
    """The article's ``MyCustomLayer``: its own ``nn.Parameter``s, multiplied with ``torch.mm``."""

    def __init__(self, in_features: int, out_features: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(in_features, out_features, generator=generator))
        self.bias = torch.nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.weight) + self.bias


def _example2_case(rows: int, n: int, seed: int) -> Case:
    first = devices(n)[0]
    model = torch.nn.Sequential(_CustomLayer(10, 5, seed), torch.nn.Linear(5, 2)).to(first)
    inputs = torch.randn(rows, 10, generator=torch.Generator().manual_seed(seed)).to(first)
    return Case(f"{plural(rows, 'row')} on {plural(n, 'device')}", (model, inputs, n))


def _one_device_gradients(model: torch.nn.Module, inputs: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(torch.autograd.grad(model(inputs).pow(2).mean(), list(model.parameters())))


def _example2_judge(case: Case, answer) -> str | None:
    model, inputs, n = case.args
    gradients, forwards = answer
    return (replicas_that_should_run(len(inputs), n, forwards)
            or first_difference(case.context["expected"], gradients, "gradients", atol=1e-5))


EXAMPLE2_GRADIENTS = Exercise(
    name="example2_gradients",
    task="Write example2_gradients(model, inputs, n): one forward of `model` (the article's Example 2, with "
         "MyCustomLayer) under DataParallel on n devices, the loss output.pow(2).mean(), backward; return the "
         "model's parameter gradients as a list, in order.",
    cases=lambda: [_example2_case(10, 4, 0), _example2_case(7, 2, 1), _example2_case(5, 3, 2)],
    judge=Oracle(_one_device_gradients, _example2_judge),
    call=with_replica_forwards,
)


def _accumulate_judge(case: Case, answer) -> str | None:
    batch, n = case.args
    model, forwards = answer
    ran = replicas_that_should_run(len(batch), n, forwards)
    if ran:
        return ran
    if "internal_state" not in dict(model.named_buffers()):
        return "the returned model has no buffer internal_state: return the ReturnedState you ran"
    difference = first_difference(batch.sum(dim=0), model.internal_state, "internal_state", atol=1e-5)
    return difference and (f"{difference}: every replica returns its rows' sums; add them all into the model's "
                           f"state once, after forward")


def _accumulate_case(rows: int, n: int) -> Case:
    batch = torch.randn(rows, 10, generator=torch.Generator().manual_seed(rows)).to(devices(n)[0])
    return Case(f"{plural(rows, 'row')} on {plural(n, 'device')}", (batch, n))


ACCUMULATE = Exercise(
    name="accumulate",
    task="Write accumulate(batch, n): a new ReturnedState, run once under DataParallel on n devices on `batch`, "
         "whose internal_state then equals the column sums of the batch; return the model.",
    cases=lambda: [_accumulate_case(7, 3), _accumulate_case(10, 4), _accumulate_case(5, 2)],
    judge=_accumulate_judge,
    call=with_replica_forwards,
)

EXERCISES = (PER_SAMPLE_LOSS, EXAMPLE2_GRADIENTS, ACCUMULATE)
