"""Lesson 05's quiz experiments (``quizzes/05_gather.toml``): gather concatenates, 0-d outputs become a vector,
and packed sequences come back at each replica's own length.
"""

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from dpcourse import viz

from ..lab import (
    data_parallel_over,
    error_summary,
    first_device,
    gathered_means,
    raised_by,
    seeded_module,
    seeded_randn,
)
from ..outcome import Outcome, only_true


def scalar_outputs_become_vector() -> Outcome:
    """Replicas returning 0-d tensors: gather makes a vector with one entry per replica that ran, and warns."""
    out, warned = gathered_means(6, 4)
    text = (
        f"forward returns x.mean(); 6 rows on 4 devices -> chunks {[len(c) for c in torch.arange(6).chunk(4)]}\n"
        f"  dp(x).shape = {out.shape}\n  warning: {warned}"
    )
    return Outcome(text, tuple(out.shape), viz.gather_view([2, 2, 2], scalars=True))


class ColumnSums(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)


def gather_concatenates() -> Outcome:
    """Each replica returns a vector of 5 column sums; gather concatenates them, it does not add them."""
    x = seeded_randn(8, 5)
    out = data_parallel_over(ColumnSums(), 2)(x)
    text = (
        "forward returns x.sum(0), shape (5,) per replica; x is (8, 5) on 2 devices.\n"
        f"  dp(x).shape = {out.shape}\n"
        f"  dp(x)[:5] == chunk 0's sums: {torch.allclose(out[:5], x[:4].sum(0))}; "
        f"dp(x)[5:] == chunk 1's sums: {torch.allclose(out[5:], x[4:].sum(0))}"
    )
    return Outcome(text, tuple(out.shape), viz.gather_view([5, 5]))


class PackedLSTM(nn.Module):
    def __init__(self, total_length: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 2, batch_first=True)
        self.total_length = total_length

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=x.size(1) if self.total_length else None)[0]


def packed_lstm_total_length() -> Outcome:
    """pack -> LSTM -> unpack on 2 devices: each replica pads to its own longest sequence unless told the length."""
    x, lengths = seeded_randn(4, 5, 3), torch.tensor([5, 3, 2, 1], device=first_device())
    runs = {}
    for fixed in (False, True):
        model = seeded_module(lambda fixed=fixed: PackedLSTM(total_length=fixed))
        runs[fixed] = raised_by(lambda model=model: data_parallel_over(model, 2)(x, lengths))
    text = (
        "x: 4 sequences padded to 5 steps, lengths [5, 3, 2, 1] (sorted, and 4 rows divide by 2 devices):\n"
        f"  pad_packed_sequence(out)                      -> {error_summary(runs[False])}\n"
        f"  pad_packed_sequence(out, total_length=x.size(1)) -> {error_summary(runs[True])}"
    )
    value = only_true(
        {
            "Pass `total_length=x.size(1)` to `pad_packed_sequence`": runs[False] is not None and runs[True] is None,
            "Use a batch size divisible by the number of devices": runs[False] is None,
            "Sort the batch by length first": runs[False] is None,
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    scalar_outputs_become_vector,
    gather_concatenates,
    packed_lstm_total_length,
)
