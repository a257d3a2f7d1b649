"""Gradient accumulation under DDP, with and without ``no_sync()``, all-reduces counted by a comm hook.

Every backward of a DDP model all-reduces its gradients, bucket by bucket (lesson 10). Accumulating K
micro-batches therefore all-reduces K times, although only the sum matters. ``no_sync()`` switches that
off: inside it ``require_backward_grad_sync`` is ``False``, so the forward does not prepare the reducer
(``DistributedDataParallel._post_forward`` in ``torch/nn/parallel/distributed.py``), and the backward only
adds into ``.grad``. The first backward after the block all-reduces the accumulated sum, once.

The count comes from a communication hook, ``counting_allreduce``: DDP calls a registered hook once per
bucket instead of its built-in all-reduce, and this one counts the call and then does what the built-in
does (``allreduce_hook`` in ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``: divide by
the number of ranks, then all-reduce).
"""

import dataclasses
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ...accumulation import RULES, weight
from ...examples import flat_grad, gap, make_model, max_difference, regression_batch, regression_loss, single_device
from ...ranks.launcher import device, launch
from ..per_rank import wrap

SCHEDULES = {
    "every micro-step": "forward and backward as usual: every backward all-reduces",
    "no_sync": "micro-steps 1..K-1 (forward and backward) inside no_sync(), the last one outside",
    "no_sync, forward outside": "micro-steps 1..K-1 run forward outside no_sync() and only backward inside",
}
# (schedule, each rank's micro-batch sizes, loss weight): what ``compare_schedules()`` runs by default.
RUNS = (
    ("every micro-step", (4, 4, 4), "1/K"),
    ("no_sync", (4, 4, 4), "1/K"),
    ("no_sync, forward outside", (4, 4, 4), "1/K"),
    ("no_sync", (4, 4, 4), "none"),
    ("no_sync", (4, 4, 2), "1/K"),
    ("no_sync", (4, 4, 2), "b_k/B"),
)


class AllReduceCounter:
    """The state ``counting_allreduce`` keeps on one rank: how many buckets it has all-reduced so far."""

    def __init__(self) -> None:
        self.count = 0


def counting_allreduce(state: AllReduceCounter, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: count the bucket, then average it across the ranks as DDP's default does."""
    state.count += 1
    return default_hooks.allreduce_hook(None, bucket)


def _rows(rank: int, world: int, sizes: Sequence[int], step: int) -> list[int]:
    """Rank ``rank``'s rows of micro-step ``step``: micro-step k takes the next ``world * sizes[k]`` rows."""
    start = world * sum(sizes[:step]) + rank * sizes[step]
    return list(range(start, start + sizes[step]))


def _one_run(schedule: str, sizes: Sequence[int], rule: str) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    ddp_model = wrap(make_model(), here)
    counter = AllReduceCounter()
    ddp_model.register_comm_hook(counter, counting_allreduce)
    x, y = regression_batch(world * sum(sizes))
    allreduces = []
    for step in range(len(sizes)):
        rows = _rows(rank, world, sizes, step)
        inputs, targets, scale = x[rows].to(here), y[rows].to(here), weight(rule, len(rows), list(sizes))
        before, last = counter.count, step == len(sizes) - 1
        if last or schedule == "every micro-step":
            (regression_loss(ddp_model(inputs), targets) * scale).backward()
        elif schedule == "no_sync":
            with ddp_model.no_sync():
                (regression_loss(ddp_model(inputs), targets) * scale).backward()
        else:  # forward outside: the forward already prepared the reducer for an all-reduce
            outputs = ddp_model(inputs)
            with ddp_model.no_sync():
                (regression_loss(outputs, targets) * scale).backward()
        allreduces.append(counter.count - before)
    return {"allreduces": allreduces, "grad": flat_grad(ddp_model.module)}


def _runs(runs: list[tuple[str, list[int], str]]) -> list[dict]:
    return [_one_run(schedule, sizes, rule) for schedule, sizes, rule in runs]


@dataclasses.dataclass
class Run:
    """One accumulation on every rank: all-reduces per micro-step and final gradient, by rank."""

    schedule: str
    sizes: tuple[int, ...]
    rule: str
    allreduces: list[list[int]]
    grads: list[torch.Tensor]
    full_batch: torch.Tensor  # single device, one backward on all world * sum(sizes) rows

    @property
    def global_batch(self) -> int:
        return len(self.grads) * sum(self.sizes)

    @property
    def max_diff_to_full_batch(self) -> float:
        # Compared on the rank's device: a rank's gradient came back from its process, the reference was computed here.
        return max(max_difference(g, self.full_batch.to(g.device)) for g in self.grads)

    def __str__(self) -> str:
        rows = f"({' + '.join(map(str, self.sizes))}) x {len(self.grads)} ranks = {self.global_batch} rows"
        same = all(counts == self.allreduces[0] for counts in self.allreduces)
        counts = f"{self.allreduces[0]} on every rank" if same else f"{self.allreduces} by rank"
        return (f"{self.schedule:<25} {rows}, loss x {self.rule:<5}: all-reduces per micro-step {counts}; "
                f"max |g - g_one_device| {gap(self.max_diff_to_full_batch)}")


@dataclasses.dataclass
class Accumulation:
    """The runs of one ``compare_schedules()`` call, in order; ``str()`` is one line per run."""

    runs: list[Run]

    def __str__(self) -> str:
        return "\n".join(map(str, self.runs))


def _check(runs: Sequence[tuple[str, Sequence[int], str]]) -> None:
    for schedule, sizes, rule in runs:
        if schedule not in SCHEDULES or rule not in RULES or not sizes or min(sizes) < 1:
            raise ValueError(
                f"Run {(schedule, sizes, rule)!r}: the schedule must be one of {list(SCHEDULES)}, the sizes a list "
                f"of micro-batch sizes >= 1, and the rule one of {list(RULES)}."
            )


def compare_schedules(world_size: int = 2, runs: Sequence[tuple[str, Sequence[int], str]] = RUNS) -> Accumulation:
    """Run each ``(schedule, sizes, rule)`` of ``runs`` on ``world_size`` DDP ranks, all in one launch.

    Each rank accumulates ``len(sizes)`` micro-batches, of ``sizes[k]`` rows at micro-step k, each loss (a
    mean over its rows) multiplied by ``rule``'s weight, under ``schedule`` (one of ``SCHEDULES``). Every
    run starts from the same fresh model; its gradient is compared with one backward on one device over all
    ``world_size * sum(sizes)`` rows.
    """
    _check(runs)
    plain = [(schedule, list(sizes), rule) for schedule, sizes, rule in runs]
    results = launch(_runs, world_size, (plain,))
    return Accumulation([
        Run(schedule, tuple(sizes), rule, [r[i]["allreduces"] for r in results], [r[i]["grad"] for r in results],
            single_device(steps=1, batch=world_size * sum(sizes), lr=0.0)["grads"][0])
        for i, (schedule, sizes, rule) in enumerate(plain)
    ])
