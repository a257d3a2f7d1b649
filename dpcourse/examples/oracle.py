"""The single-device oracle: the same step on one device, and how far a parallel run is from it.

``train`` is the DataParallel lessons' oracle (cross-entropy, SGD with momentum), ``single_device`` the DDP
lessons' (mean squared error, plain SGD, one slice of ``regression_batch`` per step).
"""

import copy
from collections.abc import Iterable, Mapping

import torch
from torch import nn

from .data import loss_fn, make_batch, regression_batch, regression_loss
from .model import make_model


def twin(model: nn.Module) -> nn.Module:
    """An independent copy with the same weights, to run the oracle beside the parallel version."""
    return copy.deepcopy(model)


Tensors = torch.Tensor | Iterable[torch.Tensor] | Mapping[str, torch.Tensor]


def max_difference(a: Tensors, b: Tensors) -> float:
    """The largest elementwise ``|a - b|`` (0.0 = identical): how far a parallel run is from the oracle, or two ranks
    from each other.

    ``a`` and ``b`` are two tensors, or two collections of tensors paired in order (lists, ``model.parameters()``),
    or two dicts paired by key (``dict(model.named_parameters())``); a collection of another length is a
    ``ValueError``. The tensors of a pair must be on one device.
    """
    if isinstance(a, torch.Tensor):
        a, b = [a], [b]
    elif isinstance(a, Mapping):
        a, b = a.values(), [b[name] for name in a]
    with torch.no_grad():  # parameters need no graph to be compared
        return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


FLOAT_ROUNDING = 1e-6


def gap(difference: float, rounding: float = FLOAT_ROUNDING) -> str:
    """``difference`` as text that every CPU prints the same: ``"below 1e-6"`` where it is float rounding, else
    its value to 2 significant digits (``"0.031"``).

    Sums taken in another order differ in their last bits, and the order a CPU takes depends on its vector
    instructions (AVX-512, AVX2, NEON) and its thread count: the same step gives 3e-08 on one machine, 6e-08 or
    exactly 0 on another. What a lesson means is the bound, so the bound is what it prints.
    """
    if difference < rounding:
        mantissa, exponent = f"{rounding:.0e}".split("e")
        return f"below {mantissa}e{int(exponent)}"
    return f"{difference:.2g}"


def max_grad_difference(a: nn.Module, b: nn.Module) -> float:
    """``max_difference`` of the two models' parameter gradients, ``.grad``, in ``parameters()`` order."""
    return max_difference([p.grad for p in a.parameters()], [p.grad for p in b.parameters()])


def max_weight_difference(a: nn.Module, b: nn.Module) -> float:
    """``max_difference`` of the two models' parameters, in ``parameters()`` order."""
    return max_difference(a.parameters(), b.parameters())


def flat_grad(module: nn.Module) -> torch.Tensor:
    """Every parameter's ``.grad`` as one vector, in ``parameters()`` order, on the CPU."""
    return torch.cat([p.grad.detach().flatten() for p in module.parameters()]).cpu()


def flat_weights(module: nn.Module) -> torch.Tensor:
    """Every parameter as one vector, in ``parameters()`` order, on the CPU: a DDP rank's weights to compare."""
    return torch.cat([p.detach().flatten() for p in module.parameters()]).cpu()


def sgd_step(model: nn.Module, lr: float, momentum: float = 0.0, velocities: list[torch.Tensor] | None = None) -> None:
    """``torch.optim.SGD(lr=lr, momentum=momentum)``'s update, written out (a test checks they agree).

    The first construction of a torch optimizer imports torch._dynamo, about 2 s that a lesson or a widget
    click cannot spare. ``velocities`` holds one momentum buffer per parameter, kept by the caller.
    """
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            step = p.grad
            if velocities is not None:
                step = velocities[i].mul_(momentum).add_(p.grad)
            p -= lr * step


def train(model: nn.Module, steps: int = 20, batch: int = 10, lr: float = 0.1, momentum: float = 0.9) -> list[float]:
    """``steps`` of SGD with momentum on fresh seeded batches; returns the losses. Works for DataParallel too.

    The batches go where the model's parameters are (for DataParallel, ``devices[0]``).
    """
    velocities = [torch.zeros_like(p) for p in model.parameters()]
    device = next(model.parameters()).device
    losses = []
    for step in range(steps):
        x, y = make_batch(batch, seed=100 + step, device=device)
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        sgd_step(model, lr, momentum, velocities)
        losses.append(loss.item())
    return losses


def single_device(steps: int, batch: int, lr: float) -> dict[str, list[torch.Tensor]]:
    """The DDP lessons' reference: plain SGD on one device, step ``s`` on the ``s``-th slice of ``batch`` samples.

    ``make_model()`` from seed 0, ``regression_batch(steps * batch)`` and ``regression_loss``, with
    ``torch.optim.SGD`` as every DDP rank uses it. Returns the flat weights after and the gradient of every step.
    """
    reference = make_model()
    x, y = regression_batch(steps * batch)
    optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
    weights, grads = [], []
    for step in range(steps):
        optimizer.zero_grad()
        part = slice(step * batch, (step + 1) * batch)
        regression_loss(reference(x[part]), y[part]).backward()
        grads.append(flat_grad(reference))
        optimizer.step()
        weights.append(flat_weights(reference))
    return {"weights": weights, "grads": grads}
