"""Lesson 07's exercises: a DataParallel training loop that matches one device, and checkpoints without the
``module.`` prefix."""

import torch
from torch import nn

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from .check import Case, Exercise, first_difference


def _train_one_device(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list:
    for _ in range(steps):
        model.zero_grad()
        examples.loss_fn(model(x), y).backward()
        examples.sgd_step(model, lr)
    return [p.detach().clone() for p in model.parameters()]


def _training_case(description: str, batch: int, n: int, steps: int, lr: float, hint: str = "") -> Case:
    first = devices(n)[0]  # the model and the batch start where DataParallel wants them, as in the lesson
    model, (x, y) = examples.make_model(seed=batch).to(first), examples.make_batch(batch, seed=n, device=first)
    expected = _train_one_device(examples.twin(model), x, y, steps, lr)
    return Case(description, (model, x, y, n, steps, lr), hint, {"expected": expected})


def _weights_judge(case: Case, answer) -> str | None:
    if isinstance(answer, nn.Module):
        answer = list(answer.parameters())
    return first_difference(case.context["expected"], answer, "weights", atol=1e-5)


TRAIN_ON_DEVICES = Exercise(
    name="train_on_devices",
    task="Write train_on_devices(model, x, y, n, steps, lr): train `model` for `steps` steps of plain SGD "
         "(p -= lr * p.grad) on the batch x, y with dpcourse.DataParallel on n devices, and return the model.",
    cases=lambda: [
        _training_case("10 rows, 2 devices, 3 steps", 10, 2, 3, 0.1,
                       "each step: zero the gradients, forward through the wrapper, examples.loss_fn, backward, "
                       "update"),
        _training_case("10 rows, 4 devices, 4 steps", 10, 4, 4, 0.2,
                       "gradients accumulate unless you zero them every step; DataParallel's sum needs no "
                       "division by n"),
        _training_case("7 rows, 3 devices, 2 steps", 7, 3, 2, 0.5),
    ],
    judge=_weights_judge,
)


class _Holder(nn.Module):
    """A model whose own submodule is called ``module``: its keys start with ``module.`` even unwrapped."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(2, 2)


def _prefix_case(description: str, model: nn.Module, hint: str = "") -> Case:
    chosen = devices(2)
    wrapped = DataParallel(model.to(chosen[0]), devices=chosen)
    return Case(description, (wrapped.state_dict(),), hint, {"expected": model.state_dict()})


BARE_STATE_DICT = Exercise(
    name="bare_state_dict",
    task="Write bare_state_dict(state_dict): the state_dict of a DataParallel model with each key's leading "
         "'module.' removed, so that it loads into the bare model.",
    cases=lambda: [
        _prefix_case("the course model", examples.make_model()),
        _prefix_case("the BatchNorm model", examples.make_model(batchnorm=True), "buffers are in the state_dict too"),
        _prefix_case("a model with a submodule called 'module'", _Holder(),
                     "only the leading 'module.' is DataParallel's: str.removeprefix, not str.replace"),
    ],
    judge=lambda case, answer: first_difference(case.context["expected"], answer, "state_dict"),
)

EXERCISES = (TRAIN_ON_DEVICES, BARE_STATE_DICT)
