"""Small helpers the quiz experiments share: seeded data and modules, DataParallel on n devices, caught errors.

Everything runs on ``dpcourse.devices(n)``: n CPU "devices" on a laptop, the GPUs where there are some, so
an experiment shows the same thing on any machine. Data and weights are seeded without touching the
learner's global random state.
"""

import contextlib
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

import dpcourse


def home() -> torch.device:
    """``devices[0]``: where the model and the batch start, and where outputs and gradients end up."""
    return dpcourse.devices(1)[0]


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    """A reproducible ``torch.randn(*shape)`` on ``home()``."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(home())


def seeded_module(factory: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``factory()`` with its weights drawn from seed ``seed``, on ``home()``; the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory().to(home())


def data_parallel(module: nn.Module, n_devices: int) -> dpcourse.DataParallel:
    """``dpcourse.DataParallel`` over ``dpcourse.devices(n_devices)``, with the module on ``devices[0]``."""
    return dpcourse.DataParallel(module.to(home()), devices=dpcourse.devices(n_devices))


def three_forwards(model: nn.Module, n_devices: int, rows: int = 4, features: int = 2) -> nn.Module:
    """Run 3 DataParallel forwards of ``rows`` seeded rows on ``n_devices`` devices; return ``model`` to inspect."""
    dp = data_parallel(model, n_devices)
    for _ in range(3):
        dp(seeded(rows, features))
    return model


def error_of(call: Callable[[], object]) -> Exception | None:
    """The exception ``call()`` raises, or ``None``: experiments show errors as results."""
    try:
        call()
    except Exception as error:
        return error
    return None


def headline(error: Exception | None) -> str:
    """``"ValueError: Caught ValueError in replica 3 on device cpu."``: the error's type and first line."""
    return "no error" if error is None else f"{type(error).__name__}: {str(error).splitlines()[0]}"


def rounded(tensor: torch.Tensor, digits: int = 4) -> list[float]:
    """A tensor's values, flattened and rounded, for an experiment's text."""
    return [round(value, digits) for value in tensor.flatten().tolist()]


@contextlib.contextmanager
def caught_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Collect every warning raised in the block (even repeated ones) instead of printing it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


class Counter(nn.Module):
    """``self.calls += 1`` on a plain int in every forward: the attribute the DataParallel docs warn about."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 1)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x)


class ChunkLoss(nn.Module):
    """Returns the mean squared error of its own chunk: the "compute the loss inside forward" pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self.linear(x), y)


class Mean(nn.Module):
    """Returns ``x.mean()``, a 0-d tensor: what a module that computes its own loss returns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean()


def gathered_means(rows: int, n_devices: int) -> tuple[torch.Tensor, list[str]]:
    """``dp(x)`` for ``Mean`` on ``rows`` rows: the gathered output and the warnings it raised."""
    with caught_warnings() as warned:
        out = data_parallel(Mean(), n_devices)(seeded(rows, 3))
    return out, [str(w.message) for w in warned]
