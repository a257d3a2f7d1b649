"""DataParallel's forward with its four steps called one by one, and every intermediate value kept.

``DataParallel`` returns only the gathered output. The lessons' step-through, the gradient figures and the
quiz experiments need what came before it too: the chunks, the replicas (whose parameter copies autograd can
be asked about) and each replica's output. They all run this::

    chunks   = scatter(inputs, devices)                # at most one chunk per row: a small batch uses fewer devices
    used     = devices[:len(chunks)]
    replicas = replicate(module, used)
    outputs  = parallel_apply(replicas, chunks, None, used)
    gathered = gather(outputs, output_device)

Inside ``dpcourse.trace()`` each step is recorded as in ``DataParallel``.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .parallel_apply import parallel_apply
from .replicate import replicate
from .scatter_gather import gather, scatter


@dataclasses.dataclass
class Forward:
    """What each step of one forward produced."""

    chunks: list[Any]  # scatter: each replica's inputs (a tuple per replica when the inputs were a tuple)
    replicas: list[nn.Module]  # replicate: replica 0 shares the module's parameters on ``used[0]``
    outputs: list[Any]  # parallel_apply: each replica's output, on its device
    gathered: Any  # gather: the outputs concatenated on the output device

    @property
    def rows(self) -> list[int]:
        """How many rows (samples) each replica got: the first input's chunk sizes."""
        return [(chunk[0] if isinstance(chunk, tuple) else chunk).shape[0] for chunk in self.chunks]

    def parameter_copies(self, names: Sequence[str]) -> list[torch.Tensor]:
        """Each replica's copy of each parameter in ``names``, replica by replica: ``Broadcast``'s outputs, which
        ``torch.autograd.grad(loss, forward.parameter_copies(names))`` can be asked about."""
        return [tensor_at(replica, name) for replica in self.replicas for name in names]

    def by_replica(self, grads: Sequence[torch.Tensor], names: Sequence[str]) -> list[dict[str, torch.Tensor]]:
        """The gradients of ``parameter_copies(names)``, per replica by parameter name."""
        k = len(names)
        return [dict(zip(names, grads[i * k : (i + 1) * k], strict=True)) for i in range(len(self.replicas))]

    def gradients(self, loss: torch.Tensor, names: Sequence[str], also: Sequence[torch.Tensor] = (),
                  retain_graph: bool = False) -> tuple[list[dict[str, torch.Tensor]], list[torch.Tensor]]:
        """The gradient of ``loss`` with respect to every replica's copy of each parameter in ``names`` (per
        replica, by name, each on its replica's device), and with respect to each tensor in ``also`` (the
        original parameters, say: what DataParallel makes of the copies' gradients, their sum)."""
        found = torch.autograd.grad(loss, [*self.parameter_copies(names), *also], retain_graph=retain_graph)
        copies = len(self.replicas) * len(names)
        return self.by_replica(found[:copies], names), list(found[copies:])


def forward(module: nn.Module, inputs: Any, devices: Sequence[torch.device],
            output_device: torch.device | None = None) -> Forward:
    """Run ``module`` on ``inputs`` as ``DataParallel(module, devices)`` does, step by step.

    ``inputs`` is what ``scatter`` takes: a tensor (each chunk is then a tensor) or a tuple of them (each chunk a
    tuple). The outputs are gathered on ``output_device``, by default ``devices[0]``.
    """
    chunks = list(scatter(inputs, devices))
    used = list(devices[: len(chunks)])
    replicas = replicate(module, used)
    outputs = parallel_apply(replicas, chunks, None, used)
    gathered = gather(outputs, devices[0] if output_device is None else output_device)
    return Forward(chunks, replicas, outputs, gathered)


def tensor_at(module: nn.Module, name: str) -> torch.Tensor:
    """The tensor called ``name`` (e.g. ``"fc.weight"``) in ``module`` or in one of its replicas.

    On a replica ``replica.get_parameter(name)`` fails, since replicas own no Parameters: their copies
    are plain attributes. This reads the attribute either way.
    """
    owner, _, attribute = name.rpartition(".")
    return getattr(module.get_submodule(owner), attribute)
