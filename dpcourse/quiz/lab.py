"""Helpers the quiz experiments of several lessons share: seeded data and modules, DataParallel on n devices,
errors and warnings caught as results. A helper that only one lesson uses lives in that lesson's module.

Everything runs on ``dpcourse.devices(n)``: n CPU "devices" on a laptop, the GPUs where there are some, so
an experiment shows the same thing on any machine. Data and weights are seeded without touching the
learner's global random state.
"""

import contextlib
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

from dpcourse import by_hand
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.examples import ChunkMean, seeded


def first_device() -> torch.device:
    """``devices[0]``: where the model and the batch start, and where outputs and gradients end up."""
    return choose_devices(1)[0]


def seeded_randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """``examples.seeded_randn(*shape, seed=seed)`` on ``first_device()``, where the quiz's models are."""
    return seeded.seeded_randn(*shape, seed=seed).to(first_device())


def seeded_module(factory: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``examples.seeded_module(factory, seed)`` on ``first_device()``; the global random state is left as it was."""
    return seeded.seeded_module(factory, seed).to(first_device())


def data_parallel_over(module: nn.Module, n_devices: int) -> DataParallel:
    """``dpcourse.DataParallel`` over ``dpcourse.devices(n_devices)``, with the module on ``devices[0]``."""
    return DataParallel(module.to(first_device()), devices=choose_devices(n_devices))


def run_three_forwards(model: nn.Module, n_devices: int, rows: int = 4, features: int = 2) -> nn.Module:
    """Run 3 DataParallel forwards of ``rows`` seeded rows on ``n_devices`` devices; return ``model`` to inspect."""
    dp = data_parallel_over(model, n_devices)
    for _ in range(3):
        dp(seeded_randn(rows, features))
    return model


def raised_by(call: Callable[[], object]) -> Exception | None:
    """The exception ``call()`` raises, or ``None``: experiments show errors as results."""
    try:
        call()
    except Exception as error:
        return error
    return None


def error_summary(error: Exception | None) -> str:
    """``"ValueError: Caught ValueError in replica 3 on device cpu."``: the error's type and first line."""
    return "no error" if error is None else f"{type(error).__name__}: {str(error).splitlines()[0]}"


def rounded_values(tensor: torch.Tensor, digits: int = 4) -> list[float]:
    """A tensor's values, flattened and rounded, for an experiment's text."""
    return [round(value, digits) for value in tensor.flatten().tolist()]


@contextlib.contextmanager
def caught_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Collect every warning raised in the block (even repeated ones) instead of printing it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def replica_gradients(
    model: nn.Module, x: torch.Tensor, loss_of: Callable[[torch.Tensor], torch.Tensor], n_devices: int
) -> list[dict[str, torch.Tensor]]:
    """Run the four steps by hand and backward ``loss_of(gathered output)``; per replica, the gradient of each of
    its parameter copies, by name (``{"weight": ..., "bias": ...}``), on ``first_device()``.

    The copies are ``Broadcast``'s outputs, non-leaf tensors, so ``autograd.grad`` asks for their gradients. The
    same backward fills ``model``'s own ``.grad``: what DataParallel makes of the copies' gradients.
    """
    run = by_hand.forward(model, x, choose_devices(n_devices), first_device())
    loss = loss_of(run.gathered)
    per_replica, _ = run.gradients(loss, [name for name, _ in model.named_parameters()], retain_graph=True)
    loss.backward()
    return [{name: g.to(first_device()) for name, g in mine.items()} for mine in per_replica]


def gathered_means(rows: int, n_devices: int) -> tuple[torch.Tensor, list[str]]:
    """``dp(x)`` for ``examples.ChunkMean`` on ``rows`` rows: the gathered output and the warnings it raised."""
    with caught_warnings() as warned:
        out = data_parallel_over(ChunkMean(), n_devices)(seeded_randn(rows, 3))
    return out, [str(w.message) for w in warned]
