"""Experiments for lessons 00-03: what DataParallel is, one device, scatter and replicate.

Each function runs dpcourse for real and returns an ``Outcome`` whose ``value`` is the measured answer
(see ``outcome``). More experiments: ``experiments_outputs`` (04, 05, recurrent models),
``experiments_training`` (06, 07, 10) and ``experiments_review`` (08, 09, 11).
"""

import collections
import contextlib
import threading
from unittest import mock

import torch
from torch import nn

import dpcourse
from dpcourse import viz

from .lab import (
    Counter,
    Mean,
    caught_warnings,
    data_parallel,
    error_of,
    headline,
    home,
    seeded,
    seeded_module,
    three_forwards,
)
from .outcome import Outcome, experiment, only_true


@experiment
def laptop_passthrough() -> Outcome:
    """``torch.nn.DataParallel`` where torch finds no accelerator: ``device_ids == []`` and forward is the module's."""
    model = seeded_module(lambda: nn.Linear(4, 2)).cpu()
    x = seeded(8, 4).cpu()
    has_gpu = torch.cuda.is_available()
    # On a GPU machine, hide the GPU while wrapping: __init__ is where torch looks for one.
    hidden = mock.patch.object(torch.cuda, "is_available", return_value=False) if has_gpu else contextlib.nullcontext()
    with hidden:
        wrapped = torch.nn.DataParallel(model)
    passthrough = wrapped.device_ids == [] and wrapped.module is model and torch.equal(wrapped(x), model(x))
    text = (
        ("This machine has a CUDA GPU; it was hidden from DataParallel to show the laptop case.\n" if has_gpu else "")
        + "wrapped = torch.nn.DataParallel(nn.Linear(4, 2)) with no GPU:\n"
        f"  wrapped.device_ids         = {wrapped.device_ids}\n"
        f"  wrapped.module is model    = {wrapped.module is model}\n"
        f"  wrapped(x) equals model(x) = {torch.equal(wrapped(x), model(x))}  (no scatter, no replicas, no threads)\n"
        f"  state_dict keys            = {list(wrapped.state_dict())}  (the `module.` prefix is still added)"
    )
    value = only_true(
        {
            "It calls `model(x)` unchanged: a pass-through with `device_ids == []`": passthrough,
            "It splits `x` over the CPU cores": bool(wrapped.device_ids),
        }
    )
    return Outcome(text, value)


@experiment
def four_steps_in_order() -> Outcome:
    """Trace one forward on 2 devices and list the steps in the order they started."""
    dp = data_parallel(seeded_module(lambda: nn.Linear(4, 2)), 2)
    with dpcourse.trace() as recorded:
        dp(seeded(8, 4))
    names = {"forward": "parallel_apply"}  # the trace calls each replica's part of parallel_apply "forward"
    order = list(dict.fromkeys(names.get(span.step, span.step) for span in recorded.spans))
    lines = [f"  {s.start * 1e3:7.3f} ms  {s.step:<9} replica={s.replica} thread={s.thread}" for s in recorded.spans]
    text = "Spans recorded by dpcourse.trace() during dp(x), 8 rows on 2 devices:\n" + "\n".join(lines)
    return Outcome(text, " → ".join(order), viz.timeline(recorded))


@experiment
def counter_on_one_device() -> Outcome:
    """With a single device DataParallel calls the module itself, so ``self.calls += 1`` counts every forward."""
    model = Counter()
    dp = data_parallel(model, 1)
    with dpcourse.trace() as recorded:
        for _ in range(3):
            dp(seeded(4, 2))
    text = (
        f"3 forwards of DataParallel(model, devices={[str(d) for d in dp.devices]}):\n"
        f"  replicate steps run = {len(recorded.steps('replicate'))} (one device: the module is called directly)\n"
        f"  model.calls         = {model.calls}"
    )
    return Outcome(text, model.calls)


@experiment
def scalar_on_one_device() -> Outcome:
    """A 0-d output stays 0-d with one device (nothing is gathered); with two it becomes a vector."""
    x = seeded(8, 3)
    with caught_warnings():
        one, two = data_parallel(Mean(), 1)(x), data_parallel(Mean(), 2)(x)
    text = (
        f"Module returns x.mean(), a 0-d tensor; x has 8 rows.\n"
        f"  1 device : dp(x).shape = {one.shape}  (the module's own output: no gather)\n"
        f"  2 devices: dp(x).shape = {two.shape}  (gather turned 2 scalars into a vector, with a warning)"
    )
    return Outcome(text, tuple(one.shape))


@experiment
def ten_rows_on_four_devices() -> Outcome:
    """Scatter ``arange(10)`` over 4 devices and print which rows each replica gets."""
    devices = dpcourse.devices(4)
    chunks = dpcourse.scatter(torch.arange(10, device=home()), devices)
    lines = [f"  replica {i} ({c.device}): rows {c.tolist()}" for i, c in enumerate(chunks)]
    text = "dpcourse.scatter(torch.arange(10), dpcourse.devices(4)):\n" + "\n".join(lines)
    return Outcome(text, ", ".join(str(len(c)) for c in chunks), viz.chunk_split(10, 4))


@experiment
def six_rows_on_four_devices() -> Outcome:
    """Count the replicas that run forward when 6 rows meet 4 devices."""
    dp = data_parallel(seeded_module(lambda: nn.Linear(3, 1)), 4)
    with dpcourse.trace() as recorded:
        dp(seeded(6, 3))
    forwards = recorded.steps("forward")
    lines = [f"  replica {s.replica} on {s.device}: input {s.shapes[0]}" for s in forwards]
    text = f"dp(x) with 6 rows on 4 devices; forward ran {len(forwards)} times:\n" + "\n".join(lines)
    return Outcome(text, len(forwards), viz.chunk_split(6, 4))


class FirstArgument(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a


@experiment
def mismatched_batches() -> Outcome:
    """``dp(a, b)`` with 8 rows in ``a`` and 3 in ``b``: the zipped chunks drop rows of ``a`` without a word."""
    a, b = torch.arange(8.0, device=home()).unsqueeze(1), torch.zeros(3, 1, device=home())
    out = data_parallel(FirstArgument(), 4)(a, b)
    text = (
        "forward(a, b) returns a; a holds rows 0..7, b has 3 rows; 4 devices.\n"
        f"  a chunks: {[len(c) for c in a.chunk(4)]}, b chunks: {[len(c) for c in b.chunk(4)]}: zipped, so 3 entries\n"
        f"  rows of a that came back: {out.squeeze(1).int().tolist()}  (no error, no warning)"
    )
    return Outcome(text, out.shape[0])


class Scale(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * scale


@experiment
def keyword_pads_inputs() -> Outcome:
    """``dp(x, scale=2.0)``, 6 rows on 4 devices: the number is copied 4 times, the rows chunk 3 ways."""
    x = seeded(6, 2)
    inputs, kwargs = dpcourse.scatter_kwargs((x,), {"scale": 2.0}, dpcourse.devices(4))
    error = error_of(lambda: data_parallel(Scale(), 4)(x, scale=2.0))
    text = (
        "scatter_kwargs((x,), {'scale': 2.0}, 4 devices):\n"
        f"  positional entries: {[tuple(args[0].shape) if args else 'none' for args in inputs]}\n"
        f"  keyword entries   : {list(kwargs)}\n"
        f"dp(x, scale=2.0) -> {headline(error)}\n  last line: {str(error).strip().splitlines()[-1]}"
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


@experiment
def counter_lost_on_two_devices() -> Outcome:
    """``self.calls += 1`` rebinds the attribute on a throwaway replica: 3 forwards on 2 devices leave it at 0."""
    model = three_forwards(Counter(), 2)
    text = f"3 forwards on 2 devices, forward does self.calls += 1:\n  model.calls = {model.calls}"
    return Outcome(text, model.calls)


class Logger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 1)
        self.log: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append(threading.current_thread().name)
        return self.linear(x)


@experiment
def list_attribute_shared() -> Outcome:
    """A list attribute is the same object in every replica: each replica appends to it, from its own thread."""
    model = three_forwards(Logger(), 2)
    text = (
        "3 forwards on 2 devices, forward does self.log.append(thread name):\n"
        f"  len(model.log) = {len(model.log)}\n  appends per thread: {dict(collections.Counter(model.log))}"
    )
    return Outcome(text, len(model.log))


class Peek(nn.Module):
    """Records how many parameters it sees, then takes the device from them: a common idiom in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(len(list(self.parameters())))
        return self.linear(x.to(next(self.parameters()).device))


@experiment
def parameters_empty_in_replica() -> Outcome:
    """In grad mode a replica's ``self.parameters()`` yields nothing, so ``next(self.parameters())`` fails.

    Under ``torch.no_grad()`` replicate copies without autograd and replica 0 gets the original Parameters.
    """
    model = Peek()
    data_parallel(model, 1)(seeded(4, 2))
    error = error_of(lambda: data_parallel(model, 2)(seeded(4, 2)))
    one_device, replicas = model.seen[0], model.seen[1:]
    model.seen.clear()
    with torch.no_grad():
        no_grad_error = error_of(lambda: data_parallel(model, 2)(seeded(4, 2)))
    text = (
        "len(list(self.parameters())) inside forward:\n"
        f"  1 device  (the module itself)       : {one_device}\n"
        f"  2 devices, grad mode (each replica) : {replicas}\n"
        f"so next(self.parameters()) on 2 devices -> {headline(error)}\n"
        f"  2 devices under torch.no_grad()     : {sorted(model.seen, reverse=True)}  (replica 0 holds the originals)\n"
        f"  and next(self.parameters()) there   -> {headline(no_grad_error)}"
    )
    return Outcome(text, max(replicas))


@experiment
def replica_zero_shares() -> Outcome:
    """Which replicas use the original weight's memory, and which get a copy."""
    devices = dpcourse.devices(3)
    model = seeded_module(lambda: nn.Linear(3, 2))
    replicas = dpcourse.replicate(model, devices)
    original = model.weight.untyped_storage().data_ptr()
    shares = [r.weight.untyped_storage().data_ptr() == original for r in replicas]
    lines = [
        f"  replica {i} ({d}): {'SHARES the original' if s else 'a copy'}"
        for i, (d, s) in enumerate(zip(devices, shares, strict=True))
    ]
    text = "dpcourse.replicate(nn.Linear(3, 2), 3 devices), weight storage:\n" + "\n".join(lines)
    value = only_true(
        {
            "None: every replica is a fresh copy": not any(shares),
            "Only replica 0": shares == [True, False, False],
            "All of them": all(shares),
        }
    )
    return Outcome(text, value, viz.replicate_map(model, devices))
