"""Experiments for lessons 04 and 05 (replicas in threads, gathering their outputs) and recurrent models.

See ``experiments`` for how an experiment reports its ``Outcome``.
"""

import os
import threading

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dpcourse
from dpcourse import viz

from .lab import data_parallel, error_of, gathered_means, headline, home, seeded, seeded_module
from .outcome import Outcome, experiment, only_true


class FailsOnNegative(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x < 0).any():
            raise ValueError("this chunk holds a negative value")
        return x


@experiment
def replica_error_message() -> Outcome:
    """Row 2 of 4 makes the module raise; on 2 devices that row is in replica 1's chunk."""
    x = torch.ones(4, 1, device=home())
    x[2] = -1.0
    error = error_of(lambda: data_parallel(FailsOnNegative(), 2)(x))
    text = (
        f"dp(x) on 2 devices, the module raises on a negative value (row 2):\n  {headline(error)}\n"
        f"  ...the original traceback follows, ending in: {str(error).strip().splitlines()[-1]}"
    )
    value = only_true(
        {
            'A `ValueError` whose message starts "Caught ValueError in replica 1 on device …"': isinstance(
                error, ValueError
            )
            and str(error).startswith("Caught ValueError in replica 1 on device"),
            "A `RuntimeError` from the worker thread": isinstance(error, RuntimeError),
            "Nothing: replica 1's rows are just missing from the output": error is None,
        }
    )
    return Outcome(text, value)


class WhereAmI(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.places: list[tuple[str, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.places.append((threading.current_thread().name, os.getpid()))
        return x


@experiment
def one_thread_per_replica() -> Outcome:
    """Record the thread and process of every replica's forward on 4 devices."""
    model = WhereAmI()
    with dpcourse.trace() as recorded:
        data_parallel(model, 4)(seeded(8, 2))
    threads, processes = {t for t, _ in model.places}, {p for _, p in model.places}
    text = f"caller: thread {threading.current_thread().name}, process {os.getpid()}\n" + "\n".join(
        f"  replica forward in thread {t}, process {p}" for t, p in sorted(model.places)
    )
    value = only_true(
        {
            "One Python thread per replica, all in one process": len(threads) == 4 and len(processes) == 1,
            "One process per device": len(processes) == 4,
            "One thread runs the replicas one after another": len(threads) == 1,
        }
    )
    return Outcome(text, value, viz.timeline(recorded))


@experiment
def hooks_per_replica() -> Outcome:
    """A forward hook on the wrapped module fires once per replica: the hook dict is shared, not copied."""
    model = seeded_module(lambda: nn.Linear(2, 2))
    calls: list[str] = []
    model.register_forward_hook(lambda module, args, output: calls.append(threading.current_thread().name))
    data_parallel(model, 4)(seeded(8, 2))
    text = f"One dp(x), 8 rows on 4 devices: the forward hook ran {len(calls)} times, in threads {sorted(calls)}"
    return Outcome(text, len(calls))


@experiment
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


@experiment
def gather_concatenates() -> Outcome:
    """Each replica returns a vector of 5 column sums; gather concatenates them, it does not add them."""
    x = seeded(8, 5)
    out = data_parallel(ColumnSums(), 2)(x)
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


@experiment
def packed_lstm_total_length() -> Outcome:
    """pack -> LSTM -> unpack on 2 devices: each replica pads to its own longest sequence unless told the length."""
    x, lengths = seeded(4, 5, 3), torch.tensor([5, 3, 2, 1], device=home())
    runs = {}
    for fixed in (False, True):
        model = seeded_module(lambda fixed=fixed: PackedLSTM(total_length=fixed))
        runs[fixed] = error_of(lambda model=model: data_parallel(model, 2)(x, lengths))
    text = (
        "x: 4 sequences padded to 5 steps, lengths [5, 3, 2, 1] (sorted, and 4 rows divide by 2 devices):\n"
        f"  pad_packed_sequence(out)                      -> {headline(runs[False])}\n"
        f"  pad_packed_sequence(out, total_length=x.size(1)) -> {headline(runs[True])}"
    )
    value = only_true(
        {
            "Pass `total_length=x.size(1)` to `pad_packed_sequence`": runs[False] is not None and runs[True] is None,
            "Use a batch size divisible by the number of devices": runs[False] is None,
            "Sort the batch by length first": runs[False] is None,
        }
    )
    return Outcome(text, value)


class LSTMWithState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 2, num_layers=2, batch_first=True)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        return self.lstm(x, (h0, c0))[0]


@experiment
def lstm_state_split_on_dim0() -> Outcome:
    """``dp(x, h0, c0)``: the LSTM state has the batch on dim 1, but scatter splits every tensor on dim 0."""
    model = seeded_module(LSTMWithState)
    x, h0 = seeded(4, 5, 3), torch.zeros(2, 4, 2, device=home())
    chunks = [tuple(c.shape) for c in h0.chunk(2)]
    error = error_of(lambda: data_parallel(model, 2)(x, h0, h0.clone()))
    text = (
        f"x: {tuple(x.shape)} (batch first), h0 and c0: {tuple(h0.shape)} (layers, batch, hidden); 2 devices\n"
        f"  model(x, h0, c0) on one device works: {tuple(model(x, h0, h0.clone()).shape)}\n"
        f"  h0's chunks: {chunks} (split along the layers)\n"
        f"  dp(x, h0, c0) -> {headline(error)}\n  ...{str(error).strip().splitlines()[-1]}"
    )
    value = only_true(
        {
            "It works: every replica gets the whole state": error is None,
            "A `RuntimeError` from the LSTM: `h0` was split along its first dim, the layers": isinstance(
                error, RuntimeError
            )
            and "Expected hidden[0] size" in str(error),
        }
    )
    return Outcome(text, value)
