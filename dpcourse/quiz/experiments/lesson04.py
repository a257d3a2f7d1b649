"""Lesson 04's quiz experiments (``quizzes/04_parallel_apply.toml``): one thread per replica, errors named
by replica, hooks that fire in every replica.
"""

import os
import threading

import torch
from torch import nn

from dpcourse import viz
from dpcourse.trace import trace

from ..lab import data_parallel_over, error_summary, first_device, raised_by, seeded_module, seeded_randn
from ..outcome import Outcome, only_true


class FailsOnNegative(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x < 0).any():
            raise ValueError("this chunk holds a negative value")
        return x


def replica_error_message() -> Outcome:
    """Row 2 of 4 makes the module raise; on 2 devices that row is in replica 1's chunk."""
    x = torch.ones(4, 1, device=first_device())
    x[2] = -1.0
    error = raised_by(lambda: data_parallel_over(FailsOnNegative(), 2)(x))
    text = (
        f"dp(x) on 2 devices, the module raises on a negative value (row 2):\n  {error_summary(error)}\n"
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
    """Records which thread and process runs each replica's forward, then does a little real work.

    The work is a 512×512 matrix product, which releases the GIL as torch's kernels do, so the replicas'
    forwards overlap in the timeline as they would on real devices.
    """

    def __init__(self) -> None:
        super().__init__()
        self.places: list[tuple[str, int]] = []
        self.register_buffer("work", torch.randn(512, 512, generator=torch.Generator().manual_seed(0)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.places.append((threading.current_thread().name, os.getpid()))
        self.work @ self.work
        return x


def one_thread_per_replica() -> Outcome:
    """Record the thread and process of every replica's forward on 4 devices."""
    model = WhereAmI()
    with trace() as recorded:
        data_parallel_over(model, 4)(seeded_randn(8, 2))
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


def hooks_per_replica() -> Outcome:
    """A forward hook on the wrapped module fires once per replica: the hook dict is shared, not copied."""
    model = seeded_module(lambda: nn.Linear(2, 2))
    calls: list[str] = []
    model.register_forward_hook(lambda module, args, output: calls.append(threading.current_thread().name))
    data_parallel_over(model, 4)(seeded_randn(8, 2))
    text = f"One dp(x), 8 rows on 4 devices: the forward hook ran {len(calls)} times, in threads {sorted(calls)}"
    return Outcome(text, len(calls))


EXPERIMENTS = (
    replica_error_message,
    one_thread_per_replica,
    hooks_per_replica,
)
