"""What both training scripts share, so that only the parallel part differs: the data, the model, the settings."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

SEED, SAMPLES, BATCH, LR = 0, 64, 16, 0.1  # BATCH: samples per optimizer step, over all devices


def make_dataset() -> TensorDataset:
    """``SAMPLES`` inputs of 8 features and targets of 4: a noisy sine of the first 4 features."""
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, 8, generator=generator)
    return TensorDataset(x, torch.sin(x[:, :4]) + 0.1 * torch.randn(SAMPLES, 4, generator=generator))


def make_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
