"""Lesson 07's exercises: a DataParallel training loop that matches one device, checkpoints without the
``module.`` prefix (written, and loaded from either kind), and which batches a BatchNorm model trains on."""

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from .. import examples
from ..data_parallel import DataParallel
from ..devices import devices
from ..trace import Trace, trace
from .check import Case, Exercise, equals, first_difference


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


@dataclasses.dataclass
class _Watched:
    """The learner's answer, what ``dpcourse.trace()`` saw while it ran, and how many gradients reached each of
    the given model's parameters."""

    answer: object
    steps: Trace
    gradients: list[int]


def _watched(function: Callable, case: Case) -> _Watched:
    """Run the learner's loop under ``dpcourse.trace()`` (which sees every scatter, replicate, replica forward and
    reduce-add, from outside), counting the gradients accumulated into the given model's own parameters."""
    parameters = list(case.args[0].parameters())
    gradients = [0] * len(parameters)

    def count(i: int) -> Callable[[torch.Tensor], None]:
        return lambda _: gradients.__setitem__(i, gradients[i] + 1)

    hooks = [p.register_post_accumulate_grad_hook(count(i)) for i, p in enumerate(parameters)]
    try:
        with trace() as steps:
            answer = function(*case.args)
    finally:
        for hook in hooks:
            hook.remove()
    return _Watched(answer, steps, gradients)


def _replicas_per_forward(steps: Trace) -> list[set[int]]:
    """For each replicate the trace saw (one per DataParallel forward on several devices), the replicas that ran
    a forward after it: spans are in start order, and a step's replicas start after its replicate."""
    forwards: list[set[int]] = []
    for span in steps.spans:
        if span.step == "replicate":
            forwards.append(set())
        elif span.step == "forward" and forwards:
            forwards[-1].add(span.replica)
    return forwards


def _mechanism_judge(case: Case, watched: _Watched) -> str | None:
    """What DataParallel must have done: one forward on n replicas per step, and a reduce-add per step into the
    model the learner was given."""
    n, steps = case.args[3], case.args[4]
    wrap = f"wrap the model in dpcourse.DataParallel(model, devices=dpcourse.devices({n})) and call the wrapper"
    forwards = _replicas_per_forward(watched.steps)
    if not any(len(replicas) == n for replicas in forwards):
        ran = f" (they ran on {max(len(r) for r in forwards)})" if forwards else ""
        return f"no step ran on {n} replicas{ran}: {wrap}"
    if len(forwards) != steps or any(len(replicas) != n for replicas in forwards):
        return (f"expected one forward on {n} replicas in each of the {steps} steps, got forwards on "
                f"{[len(replicas) for replicas in forwards]} replicas: one call of the wrapper per step")
    summed = len(watched.steps.steps("reduce-add"))
    if summed != steps:
        return (f"the replicas' gradients were summed into the model in {summed} of {steps} steps: call "
                f"backward() on the loss of the wrapper's output, once per step")
    if any(count != steps for count in watched.gradients):
        return (f"the model you were given got gradients in {min(watched.gradients)} of {steps} steps: wrap that "
                f"model itself, not a copy")
    return None


def _training_judge(case: Case, watched: _Watched) -> str | None:
    model = case.args[0]
    if (missing := _mechanism_judge(case, watched)):
        return missing
    answer = watched.answer
    if answer is not model and not (isinstance(answer, DataParallel) and answer.module is model):
        return f"expected the model you were given, trained in place, got {type(answer).__name__}"
    weights = [p.detach() for p in model.parameters()]
    return first_difference(case.context["expected"], weights, "weights", atol=1e-5)


TRAIN_ON_DEVICES = Exercise(
    name="train_on_devices",
    task="Write train_on_devices(model, x, y, n, steps, lr): train `model` for `steps` steps of plain SGD "
         "(p -= lr * p.grad) on the batch x, y with dpcourse.DataParallel on n devices, and return the model. "
         "The check watches every step run on n replicas and compares the weights with one device's.",
    cases=lambda: [
        _training_case("10 rows, 2 devices, 3 steps", 10, 2, 3, 0.1,
                       "each step: zero the gradients, forward through the wrapper, examples.loss_fn, backward, "
                       "update"),
        _training_case("10 rows, 4 devices, 4 steps", 10, 4, 4, 0.2,
                       "gradients accumulate unless you zero them every step; DataParallel's sum needs no "
                       "division by n"),
        _training_case("7 rows, 3 devices, 2 steps", 7, 3, 2, 0.5),
    ],
    judge=_training_judge,
    call=_watched,
)


class _Holder(nn.Module):
    """A model whose own submodule is called ``module``: its keys start with ``module.`` even unwrapped."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(2, 2)


def _prefix_case(description: str, model: nn.Module, hint: str = "") -> Case:
    chosen = devices(2)
    wrapped = DataParallel(model.to(chosen[0]), devices=chosen)
    expected = {key: value.clone() for key, value in model.state_dict().items()}  # not the tensors it is given
    return Case(description, (wrapped.state_dict(),), hint, {"expected": expected})


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



def _load_case(description: str, model: nn.Module, wrapped: bool, hint: str = "") -> Case:
    chosen = devices(2)
    saved = DataParallel(model.to(chosen[0]), devices=chosen) if wrapped else model.to(chosen[0])
    expected = {key: value.clone() for key, value in model.state_dict().items()}
    bare = examples.make_model(seed=9, batchnorm="running_mean" in " ".join(expected)).to(chosen[0])
    state = saved.state_dict()
    return Case(description, (bare, state), hint, {"expected": expected, "keys": list(state)})


def _loaded_judge(case: Case, answer) -> str | None:
    """The checkpoint loaded into the model given, and the checkpoint itself left as the caller saved it."""
    if answer is not case.args[0]:
        return "expected the model you were given, with the checkpoint loaded into it"
    if list(case.args[1]) != case.context["keys"]:
        return (f"the checkpoint's keys changed, {case.context['keys'][:2]} became {list(case.args[1])[:2]}: the "
                f"caller still holds it, so strip the prefix from a copy")
    return first_difference(case.context["expected"], answer.state_dict(), "the loaded model's state_dict")


LOAD_INTO_BARE = Exercise(
    name="load_into_bare",
    task="Write load_into_bare(model, state): load a checkpoint `state`, saved from a DataParallel model or from a "
         "bare one, into the bare `model`, and return it.",
    cases=lambda: [
        _load_case("saved from DataParallel", examples.make_model(seed=3), True,
                   "DataParallel's keys start with 'module.': torch.nn.modules.utils has a helper"),
        _load_case("saved from the bare model", examples.make_model(seed=4), False,
                   "a bare model's keys have no prefix: leave them as they are"),
        _load_case("the BatchNorm model, saved from DataParallel", examples.make_model(seed=5, batchnorm=True), True),
    ],
    judge=_loaded_judge,
)


def _trains(batch: int, n: int) -> bool:
    """Whether one forward of the BatchNorm model in training mode runs under DataParallel on n devices."""
    model = examples.make_model(batchnorm=True).to(devices(n)[0])
    try:
        DataParallel(model, devices=devices(n))(examples.make_batch(batch, device=devices(n)[0])[0])
    except ValueError:
        return False
    return True


def _batches_on_2_to_4_devices() -> list[Case]:
    return [Case(f"{batch} rows on {n} devices", (batch, n)) for batch in range(2, 21) for n in range(2, 5)]


BATCHNORM_TRAINS = Exercise(
    name="batchnorm_trains",
    task="Write batchnorm_trains(batch, n): whether the BatchNorm model (examples.make_model(batchnorm=True)) "
         "trains under DataParallel on n devices with a batch of `batch` rows. Find out by running it.",
    cases=lambda: [
        Case("10 rows on 4 devices", (10, 4), "BatchNorm in training mode refuses a chunk of a single row"),
        Case("11 rows on 4 devices", (11, 4)),
        Case("12 rows on 4 devices", (12, 4)),
        Case("5 rows on 2 devices", (5, 2)),
    ],
    judge=equals(_trains),
    generated=_batches_on_2_to_4_devices,
)

EXERCISES = (TRAIN_ON_DEVICES, BARE_STATE_DICT, LOAD_INTO_BARE, BATCHNORM_TRAINS)
