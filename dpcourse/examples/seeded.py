"""Seeded tensors and modules: the same numbers on every run and every machine, the global random state untouched.

A notebook's cells share torch's global random state: a helper that reseeds it would change what the learner's
next ``torch.randn`` gives. So tensors are drawn from a generator of their own, and modules are built under
``torch.random.fork_rng``, which restores the global state afterwards.
"""

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

Module = TypeVar("Module", bound=nn.Module)


def seeded_randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """``torch.randn(*shape)`` from its own generator seeded with ``seed``, on the CPU.

    The same numbers as ``torch.manual_seed(seed); torch.randn(*shape)``, without reseeding the global state.
    """
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def seeded_module(factory: Callable[[], Module], seed: int = 0) -> Module:
    """``factory()`` with its weights drawn from ``seed``: the global random state is left as it was.

    Modules initialise their parameters from the global generator as they are constructed, so the seed goes
    there, under ``torch.random.fork_rng(devices=[])`` (CPU state only: the weights are drawn on the CPU).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()
