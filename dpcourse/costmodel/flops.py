"""FLOPs of one training step: counted by torch, and the formula that the count follows.

``counted(model, inputs)`` is torch's own count, ``torch.utils.flop_counter.FlopCounterMode``, of one forward and
backward of ``model`` on a batch of ``inputs`` shape. It runs on the ``meta`` device, which keeps shapes and
allocates nothing, so even a model of gigabytes is counted at once. A multiply-add is 2 FLOPs, as GPU datasheets
count them, and only matrix products and convolutions count (``torch/utils/flop_counter.py``: ``mm_flop``,
``addmm_flop``, ``conv_flop``).

The formula: backward runs two products for each of the forward's, the gradient of the layer's weights and the
gradient of its input, except for the first layer, whose input (the data) needs no gradient. So a step is 3 times
the forward, less the first layer's forward. An MLP whose Linear layers hold ``w_i = in_i * out_i`` weights costs
``2 * (3 * sum(w_i) - w_1)`` FLOPs per sample (``mlp``): less than ``6 * P``, by the first layer's share.
tests/test_costmodel.py holds ``mlp`` and ``resnet50_flops`` against ``counted`` on the lessons' own models.
"""

import copy
import itertools
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def counted(model: nn.Module, inputs: Sequence[int]) -> int:
    """FLOPs of one forward and backward of ``model`` on a batch of shape ``inputs``, counted by FlopCounterMode.

    ``inputs`` includes the batch: ``counted(model, (16, 10000))`` is a step of 16 samples of 10,000 features.
    A copy of ``model`` on the meta device is counted, so ``model`` itself is left as it was.
    """
    meta = copy.deepcopy(model).to("meta")
    with FlopCounterMode(display=False) as counter:
        meta(torch.empty(*inputs, device="meta")).sum().backward()
    return counter.get_total_flops()


def mlp(widths: Sequence[int]) -> int:
    """FLOPs per sample of one training step of an MLP of Linear layers ``widths[0] -> widths[1] -> ...``.

    ``2 * (3 * sum(w_i) - w_1)`` with ``w_i`` the weights of layer ``i``: forward, weight gradients, and input
    gradients of every layer but the first (module docstring). Biases and activations cost no FLOPs here.
    """
    weights = [a * b for a, b in itertools.pairwise(widths)]
    return 2 * (3 * sum(weights) - weights[0])


def first_linear_features(model: nn.Module) -> int:
    """The input features of ``model``'s first ``nn.Linear``: the shape of one sample of an MLP."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            return module.in_features
    raise ValueError(f"{type(model).__name__} has no nn.Linear, so its sample shape is unknown: count its FLOPs "
                     f"with costmodel.flops.counted(model, inputs) and pass them as Workload(flops_per_sample=...).")
