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
    concatenated = out.shape == (10,) and torch.allclose(out, torch.cat([x[:4].sum(0), x[4:].sum(0)]))
    text = (
        "forward returns x.sum(0), shape (5,) per replica; x is (8, 5) on 2 devices.\n"
        f"  dp(x).shape = {out.shape}\n"
        f"  dp(x) == chunk 0's sums followed by chunk 1's: {concatenated}"
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


def _packed_run(lengths: list[int], total_length: bool) -> Exception | None:
    """pack -> LSTM -> unpack on 2 devices for a batch of sequences padded to 5 steps: the error, or None."""
    x = seeded_randn(len(lengths), 5, 3)
    model = seeded_module(lambda: PackedLSTM(total_length=total_length))
    return raised_by(lambda: data_parallel_over(model, 2)(x, torch.tensor(lengths, device=first_device())))


def packed_lstm_total_length() -> Outcome:
    """pack -> LSTM -> unpack on 2 devices: each replica pads to its own longest sequence unless told the length.

    Each fix is tried on its own: a batch already divisible by 2 (unsorted), a batch already sorted (3 rows),
    and ``total_length`` on the lesson's batch, which is both sorted and divisible.
    """
    sorted_even, even, sorted_odd = [5, 3, 2, 1], [3, 5, 1, 2], [5, 3, 1]
    runs = {
        "as is": _packed_run(sorted_even, total_length=False),
        "total_length": _packed_run(sorted_even, total_length=True),
        "divisible": _packed_run(even, total_length=False),
        "sorted": _packed_run(sorted_odd, total_length=False),
    }
    tried = [
        (f"lengths {sorted_even} (sorted, 4 rows divide by 2)", runs["as is"]),
        ("the same with total_length=x.size(1)", runs["total_length"]),
        (f"lengths {even} (divisible by 2, unsorted)", runs["divisible"]),
        (f"lengths {sorted_odd} (sorted, 3 rows)", runs["sorted"]),
    ]
    text = "sequences padded to 5 steps, 2 devices, pad_packed_sequence(out) unless said otherwise:\n" + "\n".join(
        f"  {label:<48} -> {error_summary(error)}" for label, error in tried
    )
    value = only_true(
        {
            "Pass `total_length=x.size(1)` to `pad_packed_sequence`": (
                runs["as is"] is not None and runs["total_length"] is None
            ),
            "Use a batch size divisible by the number of devices": runs["divisible"] is None,
            "Sort the batch by length first": runs["sorted"] is None,
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    scalar_outputs_become_vector,
    gather_concatenates,
    packed_lstm_total_length,
)
