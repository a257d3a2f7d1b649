"""Lesson 14's exercises: the loss weight of each micro-batch, and an accumulation loop that matches one device."""

from fractions import Fraction

import torch

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from .check import Case, Exercise, first_difference


def _loss_weights(sizes: list[int]) -> list[float]:
    return [size / sum(sizes) for size in sizes]


def _weights_judge(case: Case, answer) -> str | None:
    if not isinstance(answer, (list, tuple)):
        return f"expected a list of {len(case.args[0])} numbers, got {type(answer).__name__}"
    expected = _loss_weights(*case.args)
    difference = first_difference(expected, [float(w) for w in answer], "weights")
    if difference:
        shown = ", ".join(str(Fraction(w).limit_denominator(1000)) for w in expected)
        return f"{difference} (the whole list should be {shown})"
    return None


def _every_micro_batching() -> list[Case]:
    """Every batch of 1 to 20 rows cut into micro-batches of 1 to 8 rows, the last one shorter, each once."""
    splits = {tuple(len(c) for c in torch.arange(batch).split(micro))
              for batch in range(1, 21) for micro in range(1, 9)}
    return [Case(f"micro-batches {list(sizes)}", (list(sizes),)) for sizes in sorted(splits)]


LOSS_WEIGHTS = Exercise(
    name="loss_weights",
    task="Write loss_weights(sizes): sizes[k] is the number of rows of micro-batch k, and each micro-batch's loss "
         "is the mean over its rows. Return the number to multiply each loss by before its backward, so that the "
         "accumulated gradient equals one device's gradient of the mean loss over all rows.",
    cases=lambda: [
        Case("3 micro-batches of 8", ([8, 8, 8],), "equal micro-batches: each loss divided by K = 3"),
        Case("4, 4 and a last partial one of 2", ([4, 4, 2],),
             "1/K would give the last 2 samples 1/6 each instead of 1/10: weigh by the share of the rows"),
        Case("one micro-batch", ([5],), "no accumulation at all: the loss as it is"),
        Case("3, 3, 3, 1", ([3, 3, 3, 1],)),
    ],
    judge=_weights_judge,
    generated=_every_micro_batching,
)


def _accumulation_case(description: str, batch: int, micro_batch: int, n_devices: int, hint: str = "") -> Case:
    chosen = devices(n_devices)  # the model and the batch on devices[0], where DataParallel gathers the outputs
    model = examples.make_model(seed=batch).to(chosen[0])
    x, y = examples.make_batch(batch, seed=micro_batch, device=chosen[0])
    oracle = examples.twin(model)
    examples.loss_fn(oracle(x), y).backward()
    runner = model if n_devices == 1 else DataParallel(model, devices=chosen)
    return Case(description, (runner, x, y, micro_batch), hint,
                {"model": model, "expected": [p.grad.clone() for p in oracle.parameters()]})


def _gradients_after(function, case: Case) -> list[torch.Tensor | None]:
    """Run the learner's loop, then read the gradients it left in the model's parameters."""
    function(*case.args)
    return [None if p.grad is None else p.grad.detach().clone() for p in case.context["model"].parameters()]


def _gradients_judge(case: Case, answer: list) -> str | None:
    if any(g is None for g in answer):
        return "some parameters have no .grad: call backward on every micro-batch's loss"
    return first_difference(case.context["expected"], answer, "gradients (parameters() order)", atol=1e-5)


ACCUMULATE_GRADIENTS = Exercise(
    name="accumulate_gradients",
    task="Write accumulate_gradients(model, x, y, micro_batch): cut x, y into micro-batches of micro_batch rows "
         "(the last may be shorter), and backward each one's examples.loss_fn, weighted so that after the loop "
         "the model's .grad is one device's gradient of examples.loss_fn(model(x), y). model may be a "
         "DataParallel. Do not zero the gradients or step: the check reads .grad afterwards.",
    cases=lambda: [
        _accumulation_case("24 rows in micro-batches of 8, one device", 24, 8, 1,
                           "x.split(micro_batch) and y.split(micro_batch) give the micro-batches"),
        _accumulation_case("10 rows in micro-batches of 4, one device", 10, 4, 1,
                           "the last micro-batch has 2 rows: weigh each loss by its rows / all rows, not 1/K"),
        _accumulation_case("10 rows in micro-batches of 3, DataParallel on 2 devices", 10, 3, 2,
                           "the same loop: DataParallel's loss on the gathered output is already the micro-batch "
                           "mean"),
        _accumulation_case("6 rows in micro-batches of 6: no accumulation", 6, 6, 1),
    ],
    judge=_gradients_judge,
    call=_gradients_after,
)

EXERCISES = (LOSS_WEIGHTS, ACCUMULATE_GRADIENTS)
