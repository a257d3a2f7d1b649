"""Train the course's model on real ranks with a training program of your own, and compare with one device.

``train_on_ranks(program, world_size)`` starts ``world_size`` ranks. Every rank

1. builds the same seeded MLP (``examples.mlp(widths, seed)``) on its device (``launcher.device()``);
2. takes its shard of each step's batch: step ``s`` uses samples ``s * samples ... (s + 1) * samples - 1`` of
   ``examples.regression_batch``, and rank ``r`` of ``n`` gets the ``r``-th contiguous ``samples / n`` of them;
3. calls ``program(model, batches, lr)`` (with ``**extra`` if given) while ``traffic.counted()`` counts what it
   sends and records each collective it calls, with its size.

``program`` trains with its own optimizer, ``steps`` steps, the loss ``examples.regression_loss`` (mean squared error,
averaged over the rank's samples), gradients averaged over the ranks as DDP does. Then every rank's training
equals full-batch training on one device, which ``one_device`` runs: the oracle. The program returns the final
*full* parameters, in ``model.parameters()`` order (a program that keeps only a shard gathers them first), or a
dict with them as ``"parameters"`` and anything more it wants to report (``"state_bytes"``, say).

A program written in a notebook cell travels to the ranks as its source (``by_source``), as in ``learner``: if it
raises, the learner's own exception is raised here (``learner.launch_keeping_errors``); if the ranks wait for each
other forever, a ``TimeoutError`` says which rank waited in which collective. Bad settings are refused before any
rank starts.

Adam hardly notices a gradient n times too large (it divides by the gradient's running RMS), so a program that sums
the ranks' gradients instead of averaging them ends within a few 1e-6 of one-device Adam. ``under_adam_and_sgd`` runs
a program that takes its optimizer's class twice, with Adam and with SGD, whose step ``lr * grad`` shows the
mistake n times over: compare its ``"sgd"`` weights with ``one_device(optimizer_class=torch.optim.SGD)``.
"""

import contextlib
import copy
import math
import pickle
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from .. import examples
from ..memory.accounting import state_tensors, storage_bytes
from .by_source import SourceFunction
from .launcher import checked_timeout, device
from .learner import keep_error, launch_keeping_errors
from .traffic import counted

# 8 inputs -> 15 -> 15 -> 4 outputs: 439 parameters, a number that 2, 3 and 4 ranks cannot split evenly.
WIDTHS = (8, 15, 15, 4)
TIMEOUT = 60.0  # seconds; three steps on 4 ranks take well under 10, the start of the ranks included
SGD_LR = 1e-2  # where a missing / n ends over 1000 times first_difference's tolerance away (2 to 4 ranks)


def _rank_batches(steps: int, samples: int, seed: int, rank: int, world_size: int
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = examples.regression_batch(steps * samples, seed)
    share = samples // world_size
    starts = [step * samples + rank * share for step in range(steps)]
    return [(x[start:start + share], y[start:start + share]) for start in starts]


@contextlib.contextmanager
def _stepped_optimizers() -> Iterator[list[torch.optim.Optimizer]]:
    """Every optimizer that steps inside the block, once each, seen by torch's global post-step hook
    (``torch/optim/optimizer.py: register_optimizer_step_post_hook``)."""
    stepped: list[torch.optim.Optimizer] = []
    handle = register_optimizer_step_post_hook(
        lambda optimizer, args, kwargs: None if any(o is optimizer for o in stepped) else stepped.append(optimizer))
    try:
        yield stepped
    finally:
        handle.remove()


def _final_parameters(returned: Any, model: torch.nn.Module) -> tuple[list[torch.Tensor], dict]:
    """The parameters the program returned, checked against the model's, on the CPU; and its other results."""
    extra = dict(returned) if isinstance(returned, dict) else {}
    parameters = extra.pop("parameters", None) if isinstance(returned, dict) else returned
    shapes = [tuple(p.shape) for p in model.parameters()]
    if not isinstance(parameters, list | tuple) or len(parameters) != len(shapes):
        raise TypeError(f"the training program returned {type(parameters).__name__}: return the trained model's "
                        f"{len(shapes)} full parameters as a list, in model.parameters() order, or a dict with that "
                        "list as 'parameters'.")
    for index, (tensor, shape) in enumerate(zip(parameters, shapes, strict=True)):
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"parameter {index} returned by the training program is {got}, not a tensor of the "
                             f"model's shape {shape}: gather the full parameters before returning them.")
    return [t.detach().cpu().clone() for t in parameters], extra


def _train(shipped: Any, steps: int, lr: float, widths: tuple[int, ...], samples: int, seed: int,
           extra: dict, errors: str) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = examples.mlp(widths, seed).to(device())
    batches = [(x.to(device()), y.to(device()))
               for x, y in _rank_batches(steps, samples, seed, rank, world_size)]
    try:
        program = shipped.rebuild() if isinstance(shipped, SourceFunction) else shipped
        with counted() as traffic, _stepped_optimizers() as optimizers:
            returned = program(model, batches, lr, **extra)
        parameters, more = _final_parameters(returned, model)
        state = storage_bytes(t for optimizer in optimizers for t in state_tensors(optimizer))
    except Exception as error:
        keep_error(error, errors)
        raise
    return {**more, "parameters": parameters, "sent": traffic.sent, "received": traffic.received,
            "collectives": traffic.calls, "optimizer_state_bytes": state, "backend": dist.get_backend()}


def _importable(program: Callable) -> bool:
    """Whether a rank can import ``program`` by name: a module-level function of a module with a file."""
    module = sys.modules.get(getattr(program, "__module__", "") or "")
    top_level = "<locals>" not in program.__qualname__
    return top_level and module is not None and module.__name__ != "__main__" and hasattr(module, "__file__")


def shippable(program: Callable) -> Callable | SourceFunction:
    """``program`` as a rank can get it: by name if it can import it, else as its source (``TypeError`` if neither)."""
    is_function = isinstance(program, types.FunctionType)
    return program if is_function and _importable(program) else SourceFunction.of(program)


def under_adam_and_sgd(model: torch.nn.Module, batches: list, lr: float, learner: Callable | SourceFunction,
                       sgd_lr: float = SGD_LR) -> dict:
    """A training program: ``learner(model, batches, lr, optimizer_class)`` run twice from the same weights, with
    ``torch.optim.SGD`` at ``sgd_lr`` on a copy of the model (its final parameters returned as ``"sgd"``), and with
    ``torch.optim.Adam`` at ``lr`` on ``model`` (as ``"parameters"``). Why both: see this module's docstring. Pass
    ``learner`` as ``shippable(function)`` in ``train_on_ranks``'s ``extra``."""
    program = learner.rebuild() if isinstance(learner, SourceFunction) else learner
    start = copy.deepcopy(model)
    sgd, _ = _final_parameters(program(start, batches, sgd_lr, torch.optim.SGD), start)
    return {"parameters": program(model, batches, lr, torch.optim.Adam), "sgd": sgd}


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}; got {value!r}.")
    return value


def _checked_settings(world_size: int, steps: int, lr: float, widths: Sequence[int], samples: int, seed: int,
                      extra: dict | None) -> None:
    """Refuse bad settings here, before any rank starts, with the setting's name."""
    _whole("world_size (the number of ranks to start)", world_size, 1)
    _whole("steps", steps, 1)
    _whole("seed", seed, 0)
    _whole("samples (per step, over all ranks)", samples, 1)
    if samples % world_size:
        raise ValueError(f"samples={samples} per step cannot be split evenly over {world_size} ranks: choose a "
                         f"multiple of {world_size} (24 splits over 2, 3 and 4).")
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a finite number > 0; got {lr!r}.")
    if isinstance(widths, str | bytes) or not isinstance(widths, Sequence) or len(widths) < 2:
        raise ValueError(f"widths are the layer widths, inputs first and outputs last, at least two; got {widths!r}.")
    for width in widths:
        _whole("every width", width, 1)
    try:
        pickle.dumps(extra)
    except Exception as error:  # pickle raises many kinds
        raise TypeError(f"extra= travels to every rank pickled, and cannot: {error}. Pass numbers, strings, tensors "
                        "or importable functions in it.") from None


def train_on_ranks(program: Callable, world_size: int, *, steps: int = 3, lr: float = 1e-2,
                   widths: Sequence[int] = WIDTHS, samples: int = 24, seed: int = 0,
                   timeout: float | None = TIMEOUT, extra: dict | None = None) -> list[dict]:
    """Run ``program(model, batches, lr, **extra)`` on ``world_size`` ranks; per rank, a dict of

    ``parameters`` (the returned full parameters, CPU tensors), ``sent`` and ``received`` (bytes point to
    point), ``collectives`` (``(name, bytes)`` per collective called, see ``traffic.counted``),
    ``optimizer_state_bytes`` (the state of every optimizer that stepped in the program, after it), ``backend``
    and whatever else the program returned in its dict. ``samples`` per step must split evenly over the ranks.

    Raises ``ValueError`` or ``TypeError`` for bad settings, and ``TypeError`` if a notebook function's source
    cannot be found or it uses a class of the notebook's, before any rank starts; then the program's own
    exception if it raised in a rank, a ``RankError`` for any other failure of a rank, and a ``TimeoutError``
    if the ranks still run after ``timeout`` seconds (``None``: no limit).
    """
    timeout = checked_timeout(timeout)
    _checked_settings(world_size, steps, lr, widths, samples, seed, extra)
    args = (shippable(program), steps, lr, tuple(widths), samples, seed, dict(extra or {}))
    return launch_keeping_errors(_train, world_size, args, timeout)


def one_device(steps: int = 3, lr: float = 1e-2, widths: Sequence[int] = WIDTHS, samples: int = 24,
               seed: int = 0, optimizer_class: type[torch.optim.Optimizer] = torch.optim.Adam) -> list[torch.Tensor]:
    """The oracle: the same model trained on one device, ``optimizer_class`` (Adam) on each step's whole batch.

    Returns the final parameters, in ``parameters()`` order, on the CPU.
    """
    model = examples.mlp(tuple(widths), seed)
    optimizer = optimizer_class(model.parameters(), lr=lr)
    for x, y in _rank_batches(steps, samples, seed, rank=0, world_size=1):
        optimizer.zero_grad()
        examples.regression_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def first_gradient_square_sum(steps: int = 3, lr: float = 1e-2, widths: Sequence[int] = WIDTHS, samples: int = 24,
                              seed: int = 0) -> float:
    """The oracle's first step seen through its gradient: the sum of squares of one device's gradient on the first
    step's whole batch (the average over all ranks' samples). Where ranks shard that gradient, their shards' squares
    add up to it; a gradient summed over n ranks instead of averaged gives n * n times as much, which Adam's update
    hides (``lr`` is accepted, and unused, so that a case's training settings pass as they are)."""
    model = examples.mlp(tuple(widths), seed)
    x, y = _rank_batches(steps, samples, seed, rank=0, world_size=1)[0]
    examples.regression_loss(model(x), y).backward()
    return sum(float(p.grad.double().square().sum()) for p in model.parameters())


def first_difference(ranks: list[dict], expected: list[torch.Tensor], widths: Sequence[int] = WIDTHS,
                     rtol: float = 1e-5, atol: float = 1e-6, key: str = "parameters", oracle: str = "Adam"
                     ) -> str | None:
    """``None`` if every rank's ``key`` (its ``parameters``) equals ``expected`` within ``rtol`` and ``atol``; else
    a sentence naming the first rank and parameter that differ, and by how much from one-device ``oracle``."""
    names = [name for name, _ in examples.mlp(tuple(widths)).named_parameters()]
    for rank, result in enumerate(ranks):
        for name, got, want in zip(names, result[key], expected, strict=True):
            if not torch.allclose(got, want, rtol=rtol, atol=atol):
                gap = examples.max_difference(got, want)
                scale = want.abs().max().item()
                return (f"rank {rank}'s {name} {tuple(want.shape)} differs from one-device {oracle} by up to "
                        f"{gap:.3g} (its largest entry is {scale:.3g}).")
    return None


def parameter_count(widths: Sequence[int] = WIDTHS) -> int:
    """How many numbers the model's parameters hold: the length of the flat vector ZeRO shards."""
    return sum(math.prod(p.shape) for p in examples.mlp(tuple(widths)).parameters())
