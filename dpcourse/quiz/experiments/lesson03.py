"""Lesson 03's quiz experiments (``quizzes/03_replicate.toml``): what a replica shares with the original
module and what it only copies.
"""

import collections
import threading

import torch
from torch import nn

from dpcourse import viz
from dpcourse.devices import devices as choose_devices
from dpcourse.replicate import replicate

from ...examples import CountingNet
from ..lab import (
    data_parallel_over,
    error_summary,
    raised_by,
    run_three_forwards,
    seeded_module,
    seeded_randn,
)
from ..outcome import Outcome, only_true


def counter_lost_on_two_devices() -> Outcome:
    """``self.calls += 1`` rebinds the attribute on a throwaway replica: 3 forwards on 2 devices leave it at 0."""
    model = run_three_forwards(CountingNet(features=2), 2)
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


def list_attribute_shared() -> Outcome:
    """A list attribute is the same object in every replica: each replica appends to it, from its own thread."""
    model = run_three_forwards(Logger(), 2)
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


def parameters_empty_in_replica() -> Outcome:
    """In grad mode a replica's ``self.parameters()`` yields nothing, so ``next(self.parameters())`` fails.

    Under ``torch.no_grad()`` replicate copies without autograd and replica 0 gets the original Parameters.
    """
    model = Peek()
    data_parallel_over(model, 1)(seeded_randn(4, 2))
    error = raised_by(lambda: data_parallel_over(model, 2)(seeded_randn(4, 2)))
    one_device, replicas = model.seen[0], model.seen[1:]
    model.seen.clear()
    with torch.no_grad():
        no_grad_error = raised_by(lambda: data_parallel_over(model, 2)(seeded_randn(4, 2)))
    text = (
        "len(list(self.parameters())) inside forward:\n"
        f"  1 device  (the module itself)       : {one_device}\n"
        f"  2 devices, grad mode (each replica) : {replicas}\n"
        f"so next(self.parameters()) on 2 devices -> {error_summary(error)}\n"
        f"  2 devices under torch.no_grad()     : {sorted(model.seen, reverse=True)}  (replica 0 holds the originals)\n"
        f"  and next(self.parameters()) there   -> {error_summary(no_grad_error)}"
    )
    return Outcome(text, max(replicas))


def replica_zero_shares() -> Outcome:
    """Which replicas use the original weight's memory, and which get a copy."""
    devices = choose_devices(3)
    model = seeded_module(lambda: nn.Linear(3, 2))
    replicas = replicate(model, devices)
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


EXPERIMENTS = (
    counter_lost_on_two_devices,
    list_attribute_shared,
    parameters_empty_in_replica,
    replica_zero_shares,
)
