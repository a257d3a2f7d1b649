"""Lesson 02's quiz experiments (``quizzes/02_scatter.toml``): how scatter chunks the batch, the positional
and keyword inputs, and a recurrent state whose batch is not on dim 0.
"""

import torch
from torch import nn

from dpcourse import viz
from dpcourse.devices import devices as choose_devices
from dpcourse.scatter_gather import scatter, scatter_kwargs
from dpcourse.trace import trace

from ..lab import data_parallel_over, error_summary, first_device, raised_by, seeded_module, seeded_randn
from ..outcome import Outcome, only_true


def ten_rows_on_four_devices() -> Outcome:
    """Scatter ``arange(10)`` over 4 devices and print which rows each replica gets."""
    devices = choose_devices(4)
    chunks = scatter(torch.arange(10, device=first_device()), devices)
    lines = [f"  replica {i} ({c.device}): rows {c.tolist()}" for i, c in enumerate(chunks)]
    text = "dpcourse.scatter(torch.arange(10), dpcourse.devices(4)):\n" + "\n".join(lines)
    return Outcome(text, ", ".join(str(len(c)) for c in chunks), viz.chunk_split(10, 4))


def six_rows_on_four_devices() -> Outcome:
    """Count the replicas that run forward when 6 rows meet 4 devices."""
    dp = data_parallel_over(seeded_module(lambda: nn.Linear(3, 1)), 4)
    with trace() as recorded:
        dp(seeded_randn(6, 3))
    forwards = recorded.steps("forward")
    lines = [f"  replica {s.replica} on {s.device}: input {s.shapes[0]}" for s in forwards]
    text = f"dp(x) with 6 rows on 4 devices; forward ran {len(forwards)} times:\n" + "\n".join(lines)
    return Outcome(text, len(forwards), viz.chunk_split(6, 4))


class FirstArgument(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a


def mismatched_batches() -> Outcome:
    """``dp(a, b)`` with 8 rows in ``a`` and 3 in ``b``: the zipped chunks drop rows of ``a`` without a word."""
    a, b = torch.arange(8.0, device=first_device()).unsqueeze(1), torch.zeros(3, 1, device=first_device())
    out = data_parallel_over(FirstArgument(), 4)(a, b)
    text = (
        "forward(a, b) returns a; a holds rows 0..7, b has 3 rows; 4 devices.\n"
        f"  a chunks: {[len(c) for c in a.chunk(4)]}, b chunks: {[len(c) for c in b.chunk(4)]}: zipped, so 3 entries\n"
        f"  rows of a that came back: {out.squeeze(1).int().tolist()}  (no error, no warning)"
    )
    return Outcome(text, out.shape[0])


class Scale(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale


def keyword_pads_inputs() -> Outcome:
    """``dp(x, scale=2.0)``, 6 rows on 4 devices: the number is copied 4 times, the rows chunk 3 ways."""
    x = seeded_randn(6, 2)
    inputs, kwargs = scatter_kwargs((x,), {"scale": 2.0}, choose_devices(4))
    error = raised_by(lambda: data_parallel_over(Scale(), 4)(x, scale=2.0))
    text = (
        "scatter_kwargs((x,), {'scale': 2.0}, 4 devices):\n"
        f"  positional entries: {[tuple(args[0].shape) if args else 'none' for args in inputs]}\n"
        f"  keyword entries   : {list(kwargs)}\n"
        f"dp(x, scale=2.0) -> {error_summary(error)}\n  last line: {str(error).strip().splitlines()[-1]}"
    )
    value = only_true(
        {
            "It works: 3 replicas run and the 4th device idles": error is None,
            "A `TypeError` from replica 3, whose `forward()` is called without `x`": isinstance(error, TypeError)
            and "in replica 3" in str(error)
            and "missing 1 required positional argument" in str(error),
        }
    )
    return Outcome(text, value)


class LSTMWithState(nn.Module):
    """An LSTM given its initial state; each call notes the shape of the ``h0`` it received."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 2, num_layers=2, batch_first=True)
        self.states: list[tuple[int, ...]] = []  # a plain list: every replica appends to this one

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        self.states.append(tuple(h0.shape))
        return self.lstm(x, (h0, c0))[0]


def lstm_state_split_on_dim0() -> Outcome:
    """``dp(x, h0, c0)``: the LSTM state has the batch on dim 1, but scatter splits every tensor on dim 0.

    Each replica notes the shape of the ``h0`` it got, so the outcome says how the state was split, not only
    whether the LSTM accepted it.
    """
    model = seeded_module(LSTMWithState)
    x, h0 = seeded_randn(4, 5, 3), torch.zeros(2, 4, 2, device=first_device())
    one_device = tuple(model(x, h0, h0.clone()).shape)
    model.states.clear()
    error = raised_by(lambda: data_parallel_over(model, 2)(x, h0, h0.clone()))
    got = sorted(model.states)
    text = (
        f"x: {tuple(x.shape)} (batch first), h0 and c0: {tuple(h0.shape)} (layers, batch, hidden); 2 devices\n"
        f"  model(x, h0, c0) on one device works: {one_device}\n"
        f"  the h0 each replica got: {got}\n"
        f"  dp(x, h0, c0) -> {error_summary(error)}"
        + (f"\n  ...{str(error).strip().splitlines()[-1]}" if error else "")
    )
    layers, batch, hidden = h0.shape
    value = only_true(
        {
            "It works: every replica gets the whole state": error is None and got == [tuple(h0.shape)] * 2,
            "A `RuntimeError` from the LSTM: `h0` was split along its first dim, the layers": (
                got == [(layers // 2, batch, hidden)] * 2
                and isinstance(error, RuntimeError)
                and "Expected hidden[0] size" in str(error)
            ),
            "It works: DataParallel splits each tensor along its own batch dim, so `h0` is split on dim 1": (
                error is None and got == [(layers, batch // 2, hidden)] * 2
            ),
        }
    )
    return Outcome(text, value)


EXPERIMENTS = (
    ten_rows_on_four_devices,
    six_rows_on_four_devices,
    mismatched_batches,
    keyword_pads_inputs,
    lstm_state_split_on_dim0,
)
