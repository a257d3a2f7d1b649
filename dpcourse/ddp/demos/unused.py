"""Parameters that get no gradient: DDP's error, ``find_unused_parameters=True``, and what that costs.

DDP's reducer waits, in every backward, for a gradient from **every** parameter before it finishes the
all-reduce of its bucket. A parameter that the forward did not use (a head for another task, a branch that
``if`` skipped) never gets one, so the reduction never finishes; the next forward notices and raises
"Expected to have finished reduction in the prior iteration ..." (``torch/csrc/distributed/c10d/reducer.cpp``:
``Reducer::ensure_prior_reduction_finished``). ``find_unused_parameters=True`` makes DDP walk the autograd
graph from the outputs after every forward and mark the parameters it does not reach as ready; the walk is
the cost, and DDP warns when it finds nothing (``Reducer::prepare_for_backward``). ``static_graph=True``
finds them once, in the first iteration, and skips the walk afterwards.

``unused()`` runs all of this on real ranks, with ``TwoHeads``, whose second head the forward never uses.
"""

import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ...examples import make_model, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..per_rank import wrap


class TwoHeads(nn.Module):
    """``body -> head``; ``spare`` (another task's head, say) is a parameter the forward never uses."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(8, hidden)
        self.head = nn.Linear(hidden, 4)
        self.spare = nn.Linear(hidden, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


@contextlib.contextmanager
def stderr_to(path: str) -> Iterator[None]:
    """Send this process's file descriptor 2 to ``path``: torch's C++ warnings are written there, not to Python."""
    saved = os.dup(2)
    with open(path, "w") as target:
        os.dup2(target.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _steps(ddp_model: nn.Module, steps: int) -> str | None:
    """``steps`` forward/backward passes on this rank's 4 samples; the error message that stopped them, if any."""
    rank, here = dist.get_rank(), device()
    x, y = regression_batch(8)
    rows = slice(4 * rank, 4 * rank + 4)
    for _ in range(steps):
        try:
            regression_loss(ddp_model(x[rows].to(here)), y[rows].to(here)).backward()
        except RuntimeError as error:
            return str(error)
    return None


def _seconds_per_step(steps: int, rounds: int = 5) -> dict[bool, float]:
    """Time per step without and with ``find_unused_parameters=True``, a median over alternating rounds.

    The two models take turns, ``rounds`` times, so that a burst of other work on the machine slows both; one block
    of steps each, one after the other, once measured the walk as a 23% *saving*.
    """
    models = {find: wrap(make_model(hidden=64, depth=10), device(), find_unused_parameters=find)
              for find in (False, True)}
    for ddp_model in models.values():
        _steps(ddp_model, 2)  # warm-up: the first iterations build and rebuild the buckets
    seconds: dict[bool, list[float]] = {find: [] for find in models}
    for _ in range(rounds):
        for find, ddp_model in models.items():
            dist.barrier()
            started = time.perf_counter()
            _steps(ddp_model, max(1, steps // rounds))
            seconds[find].append((time.perf_counter() - started) / max(1, steps // rounds))
    return {find: statistics.median(times) for find, times in seconds.items()}


def _unused(timing_steps: int) -> dict:
    here = device()
    error = _steps(wrap(TwoHeads(), here), 3)
    found = wrap(TwoHeads(), here, find_unused_parameters=True)
    found_error = _steps(found, 3)
    static_error = _steps(wrap(TwoHeads(), here, static_graph=True), 3)
    nothing_unused = wrap(make_model(), here, find_unused_parameters=True)
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        with stderr_to(log.name):
            _steps(nothing_unused, 2)
        warning = Path(log.name).read_text()
    timing = _seconds_per_step(timing_steps)
    return {"error": error, "found_error": found_error, "static_error": static_error,
            "spare_grad": found.module.spare.weight.grad, "head_grad": found.module.head.weight.grad,
            "warning": warning, "seconds_per_step": timing}


@dataclasses.dataclass
class Unused:
    """Per rank: the default DDP's error, whether the fixes ran, the spare head's gradient, the warning, timings."""

    ranks: list[dict]

    @property
    def error(self) -> str:
        """Rank 0's error message from the default DDP, as torch wrote it."""
        return self.ranks[0]["error"]

    @property
    def warning(self) -> str:
        """The warning torch printed on rank 0 for ``find_unused_parameters=True`` with nothing unused."""
        line = next((line for line in self.ranks[0]["warning"].splitlines() if "find_unused_parameters" in line), "")
        return line.split("Warning: ", 1)[-1].removesuffix(" (function operator())").strip()

    def overhead(self) -> float:
        """Rank 0's time per step with ``find_unused_parameters=True`` over without, on a 10-layer model."""
        timing = self.ranks[0]["seconds_per_step"]
        return timing[True] / timing[False]

    def __str__(self) -> str:
        r0 = self.ranks[0]
        spare = [r["spare_grad"] for r in self.ranks]
        return "\n".join([
            f"default DDP: {'RuntimeError' if r0['error'] else 'no error'}, "
            f"on every rank: {all(r['error'] for r in self.ranks)}",
            f"find_unused_parameters=True: error {r0['found_error']}; spare.weight.grad on each rank "
            f"{spare}; head.weight.grad equal on all ranks "
            f"{all(torch.equal(r['head_grad'], r0['head_grad']) for r in self.ranks)}",
            f"static_graph=True: error {r0['static_error']}",
        ])


def unused(world_size: int = 2, timing_steps: int = 20) -> Unused:
    """Train ``TwoHeads`` under DDP by default, with ``find_unused_parameters=True`` and ``static_graph=True``."""
    return Unused(launch(_unused, world_size, (timing_steps,)))
