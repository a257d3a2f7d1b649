"""Gradient accumulation: several small backwards into the same ``.grad``, then one optimizer step.

    accumulate(model, x, y, micro_batch=4)   # backward on x[0:4], x[4:8], ...: .grad += each one's gradient
    optimizer.step(); optimizer.zero_grad()

Autograd *adds* every backward's gradient into a leaf's ``.grad`` (``AccumulateGrad``, the same ``+=`` that
sums DataParallel's replicas in lesson 06), so K backwards before one step give the sum of K gradients. For
that sum to be the gradient of the one big batch, each micro-batch's loss must be weighted: by ``1/K`` when
the micro-batches are equal, by ``b_k / B`` (its share of the samples) in general. ``model`` may be a plain
module or a ``DataParallel``: the loop is the same, and so is the weighting.
"""

import dataclasses
import re
import warnings
from collections.abc import Callable
from fractions import Fraction

import torch
from torch import nn

from . import examples
from ._functions import SCALAR_GATHER_WARNING
from .data_parallel import DataParallel
from .devices import devices
from .examples import ChunkMean

# How each micro-batch's loss is weighted before its backward.
RULES = {
    "none": "loss, unweighted: the K gradients are summed",
    "1/K": "loss / K, K = the number of micro-batches: right when they are all the same size",
    "b_k/B": "loss * b_k / B, the micro-batch's share of the samples: right for any sizes",
}
LossOf = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def mean_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The course's loss on the model's output: cross-entropy, a mean over the rows of ``x``."""
    return examples.loss_fn(model(x), y)


def micro_batches(x: torch.Tensor, y: torch.Tensor, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(x, y)`` cut into consecutive micro-batches of ``size`` rows; the last one may be shorter."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"micro_batch is a number of rows, a whole number >= 1; got {size!r}.")
    return list(zip(x.split(size), y.split(size), strict=True))


def weight(rule: str, rows: int, sizes: list[int]) -> float:
    """What the loss of a micro-batch of ``rows`` rows is multiplied by, under ``rule`` (one of ``RULES``)."""
    if rule not in RULES:
        raise ValueError(f"Unknown rule {rule!r}; use one of {list(RULES)}.")
    return {"none": 1.0, "1/K": 1 / len(sizes), "b_k/B": rows / sum(sizes)}[rule]


def accumulate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, micro_batch: int, rule: str = "b_k/B",
    loss_of: LossOf = mean_loss,
) -> list[int]:
    """Backward every micro-batch of ``(x, y)`` into ``model``'s ``.grad``, its loss weighted by ``rule``.

    Does not zero ``.grad`` first and takes no optimizer step: that is the caller's loop, as in training.
    ``loss_of(model, x_k, y_k)`` computes one micro-batch's loss (a mean over its rows by default).
    Returns the micro-batch sizes.
    """
    parts = micro_batches(x, y, micro_batch)
    sizes = [len(x_k) for x_k, _ in parts]
    for x_k, y_k in parts:
        (loss_of(model, x_k, y_k) * weight(rule, len(x_k), sizes)).backward()
    return sizes


@dataclasses.dataclass
class SampleWeights:
    """How much each sample's loss counts in an accumulated gradient; one device gives each ``1/batch``."""

    weights: torch.Tensor
    sizes: list[int]  # rows per micro-batch
    chunks: list[list[int]]  # rows per replica, per micro-batch
    rule: str
    per_replica_mean: bool

    def __str__(self) -> str:
        start, parts = 0, []
        for k, (size, chunks) in enumerate(zip(self.sizes, self.chunks, strict=True), start=1):
            shares = [Fraction(w).limit_denominator(10_000) for w in self.weights[start : start + size].tolist()]
            parts.append(f"micro-batch {k} (chunks {chunks}): " + ", ".join(map(str, dict.fromkeys(shares))))
            start += size
        return "\n".join(parts)


def sample_weights(
    batch: int, micro_batch: int, rule: str = "b_k/B", n_devices: int = 1, per_replica_mean: bool = False
) -> SampleWeights:
    """Measure the weight of every sample's loss in the accumulated gradient (one device: ``1/batch`` each).

    Runs ``accumulate`` for real, under ``DataParallel`` on ``n_devices`` devices, on a stand-in model whose
    inputs are the per-sample losses, all ones; their ``.grad`` is then each sample's weight. With
    ``per_replica_mean`` each replica averages its own chunk first: a sample in chunk j of micro-batch k then
    weighs ``weight(rule) / (n_k * c_kj)`` (n_k chunks, c_kj rows in its chunk).
    """
    losses = torch.ones(batch, device=devices(1)[0], requires_grad=True)
    model = DataParallel(ChunkMean() if per_replica_mean else nn.Identity(), devices=devices(n_devices))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(SCALAR_GATHER_WARNING))  # n scalars become a vector
        sizes = accumulate(model, losses, losses, micro_batch, rule, loss_of=lambda m, x, _: m(x).mean())
    chunks = [[len(c) for c in torch.arange(size).chunk(n_devices)] for size in sizes]
    return SampleWeights(losses.grad.cpu(), sizes, chunks, rule, per_replica_mean)
