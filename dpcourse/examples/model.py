"""The running example's model: an MLP described by its widths, built with seeded weights."""

import itertools
from collections.abc import Sequence

import torch
from torch import nn

FEATURES, HIDDEN, CLASSES = 8, 16, 4

def make_model(seed: int = 0, batchnorm: bool = False) -> nn.Sequential:
    """The running example: a 2-layer MLP (optionally with BatchNorm after the first layer).

    ``seed`` fixes the weights without touching the global random state, so a notebook's other cells
    draw the same random numbers whether or not they built a model first.
    """
    return mlp((FEATURES, HIDDEN, CLASSES), seed, batchnorm)


def mlp(widths: Sequence[int], seed: int = 0, batchnorm: bool = False, relu: bool = True) -> nn.Sequential:
    """Linear layers of ``widths`` (input first, outputs last) with a ReLU between each two, seeded like ``make_model``.

    ``mlp((8, 16, 4))`` is the running example; wider and deeper ones are what the DDP lessons, the cost
    model and the timings train. ``batchnorm`` puts a BatchNorm1d after the first layer, ``relu=False``
    leaves the ReLUs out. Built under ``torch.random.fork_rng``: the global random state is left as it was.
    """
    if len(widths) < 2 or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"widths={tuple(widths)!r} must be 2 or more whole numbers >= 1: input first, outputs last.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (width_in, width_out) in enumerate(itertools.pairwise(widths)):
            if i and relu:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(width_in, width_out))
            if i == 0 and batchnorm:
                layers.append(nn.BatchNorm1d(width_out))
        return nn.Sequential(*layers)
