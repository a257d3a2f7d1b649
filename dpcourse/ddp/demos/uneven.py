"""Uneven inputs: one rank has more batches than the others, without and with DDP's ``join()``.

Every DDP backward ends in an all-reduce that **every** rank must join. A rank that has run out of batches
leaves the loop, so the all-reduce of another rank's extra batch waits for a partner that never comes: it
hangs until the process group's timeout. ``ddp_model.join()`` fixes it: a rank that has run out keeps
answering the others' all-reduces with zeros ("shadowing" them) until every rank is done
(``torch/nn/parallel/distributed.py``: ``DistributedDataParallel.join``; the generic form is
``torch.distributed.algorithms.Join([ddp_model, ...])``, which also takes a ``ZeroRedundancyOptimizer``).

The zeros still count in the average: with ``divide_by_initial_world_size=True`` (the default) the extra
step's gradient is divided by all the ranks, so it is smaller than the rank's own; with ``False``, DDP divides
by the ranks that still have data.

``uneven()`` runs the three ways on real ranks. Each uses a process group of its own with a short timeout,
so the hang ends in seconds, with gloo's own timeout error, and the next way starts cleanly.
"""

import contextlib
import dataclasses
import datetime
import re
import time

import torch
import torch.distributed as dist
from torch.nn.utils import vector_to_parameters

from ...examples import flat_weights, make_model, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..per_rank import wrap

MODES = ("no join", "join", "join, divide by ranks left")
LR = 0.1


def _rows(batches: list[int], rank: int, step: int, batch: int) -> slice:
    """Rank ``rank``'s ``step``-th batch: each rank has its own consecutive samples of the lesson data."""
    start = (sum(batches[:rank]) + step) * batch
    return slice(start, start + batch)


def _joining(ddp_model: torch.nn.Module, mode: str) -> contextlib.AbstractContextManager:
    if mode == "no join":
        return contextlib.nullcontext()
    return ddp_model.join(divide_by_initial_world_size=mode == "join")


def _uneven(batches: list[int], timeout: float, batch: int) -> dict:
    rank, here = dist.get_rank(), device()
    x, y = regression_batch(sum(batches) * batch)
    # Created up front: creating a group waits for every rank with the group's own, short, timeout.
    groups = [dist.new_group(timeout=datetime.timedelta(seconds=timeout)) for _ in MODES]
    results = {}
    for mode, group in zip(MODES, groups, strict=True):
        ddp_model = wrap(make_model(), here, process_group=group)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR)
        weights, error, started = [flat_weights(ddp_model.module)], None, time.monotonic()
        try:
            with _joining(ddp_model, mode):
                for step in range(batches[rank]):
                    rows = _rows(batches, rank, step, batch)
                    optimizer.zero_grad()
                    regression_loss(ddp_model(x[rows].to(here)), y[rows].to(here)).backward()
                    optimizer.step()
                    weights.append(flat_weights(ddp_model.module))
        except RuntimeError as failure:
            error = re.sub(r"^\[[^\]]*\]\s*", "", str(failure).strip().splitlines()[0])  # drop gloo's file:line
        results[mode] = {"weights": weights, "error": error, "seconds": time.monotonic() - started}
        dist.barrier()  # on the default group, whose timeout is long: the next way starts together
    return results


@dataclasses.dataclass
class Uneven:
    """Per mode and rank: the weights after every step the rank finished, and the error that stopped it."""

    batches: list[int]
    timeout: float
    batch: int
    ranks: list[dict]

    def steps(self, mode: str) -> list[int]:
        """How many steps each rank finished."""
        return [len(r[mode]["weights"]) - 1 for r in self.ranks]

    def errors(self, mode: str) -> list[str | None]:
        return [r[mode]["error"] for r in self.ranks]

    def waited_for_timeout(self, mode: str) -> list[bool]:
        """Per rank: did it fail, and only after the process group's timeout had passed?"""
        return [r[mode]["error"] is not None and r[mode]["seconds"] >= self.timeout for r in self.ranks]

    def last_step_scale(self, mode: str, rank: int = 0) -> float:
        """``rank``'s last step's gradient, as a multiple of its own batch's gradient (1 = its gradient)."""
        weights = self.ranks[rank][mode]["weights"]
        step = len(weights) - 2
        applied = (weights[-2] - weights[-1]) / LR
        here = weights[-2].device  # the rank's weights came back to this process: recompute beside them
        local = make_model().to(here)
        vector_to_parameters(weights[-2].clone(), local.parameters())
        x, y = (t.to(here) for t in regression_batch(sum(self.batches) * self.batch))
        rows = _rows(self.batches, rank, step, self.batch)
        regression_loss(local(x[rows]), y[rows]).backward()
        own = torch.cat([p.grad.flatten() for p in local.parameters()])
        return (applied @ own / (own @ own)).item()

    def __str__(self) -> str:
        lines = [f"batches per rank {self.batches}; every all-reduce must be joined by all {len(self.ranks)} ranks"]
        for mode in MODES:
            lines.append(f"{mode}: steps finished per rank {self.steps(mode)}")
            for rank, error in enumerate(self.errors(mode)):
                if error:
                    lines.append(f"  rank {rank} failed after its process group's timeout "
                                 f"({self.waited_for_timeout(mode)[rank]}): RuntimeError: {error}")
            if mode != "no join":
                lines.append(f"  rank 0's last step used {self.last_step_scale(mode):.3f} x its own gradient")
        return "\n".join(lines)


def uneven(batches: tuple[int, ...] = (3, 2), timeout: float = 1.0, batch: int = 4) -> Uneven:
    """Train with ``batches[r]`` batches on rank ``r``: without ``join()`` (hangs until ``timeout`` seconds,
    then fails), with ``join()``, and with ``join(divide_by_initial_world_size=False)``."""
    if len(batches) < 2 or min(batches) < 1:
        raise ValueError(f"batches gives each rank's number of batches, for 2 or more ranks; got {batches!r}.")
    ranks = launch(_uneven, len(batches), (list(batches), timeout, batch), timeout=60 + 2 * timeout)
    return Uneven(list(batches), timeout, batch, ranks)
