"""A rank that lags: DDP training on real ranks with a delay planted on one of them, every phase timed.

``observe()`` starts the ranks once and trains the course's model (``ranks.WIDTHS``) with DDP, in four parts of
``STEPS`` steps each, a barrier between them:

* ``even``: no delay, the baseline;
* ``forward``: rank ``slow_rank`` sleeps ``delay`` seconds at the start of its forward (a slow data loader or a
  slower device looks the same to the other ranks);
* ``backward``: it sleeps at the start of its backward instead, before any gradient is ready
  (traceopt-ai/traceml#252 planted 200 ms there);
* ``probed``: the delay in the forward again, and each step gathers every rank's clock with
  ``dist.all_gather_object`` just before ``loss.backward()``: a probe that is a collective itself.

A sleep costs no CPU, so the delay stands out on a busy machine; the model's own step takes a few milliseconds.

Each step of each rank is one record of ``time.perf_counter()`` readings (seconds): ``start``, ``forward`` (the
model's output computed), ``arrived`` and ``left`` (DDP's gradient all-reduce: when this rank's bucket was ready and
DDP's comm hook started it, and when it finished: ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py:
allreduce_hook``), ``backward`` (``loss.backward()`` returned), ``end`` (the optimizer stepped); the probed part
adds ``gathered`` (the probe returned). On one machine every process reads the same monotonic clock, so the
ranks' readings compare directly; across machines they would need their offsets first.

``probe_on_ranks`` runs a learner's training step (``train_step(model, x, y, optimizer)``) the same way, with
the delay on a rank of the caller's choice, and records the same readings next to what the step returned.
"""

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from .. import examples
from ..ddp.per_rank import wrap
from ..ranks import SGD_LR, WIDTHS, SourceFunction, device, launch
from ..ranks.learner import keep_error, launch_keeping_errors
from ..ranks.traffic import counted

DELAY = 0.15  # seconds: far above the model's own step of a few ms, and above a busy machine's jitter
SLOW_RANK = 2
WORLD_SIZE = 3
STEPS = 4
SAMPLES = 8  # per rank and step
PARTS = ("even", "forward", "backward", "probed")
TIMEOUT = 60.0  # seconds for a whole launch: 3 delayed parts of 4 steps take under 2 s


class Watch:
    """The clock readings of one rank's steps, and the delay planted on it (``where``: None, "forward",
    "backward"). Hooks on the model and DDP's comm hook fill in each step's record."""

    def __init__(self, model: nn.Module, ddp: nn.Module, slow: bool, delay: float) -> None:
        self.slow, self.delay, self.where = slow, delay, None
        self.records: list[dict[str, float]] = []
        model.register_forward_pre_hook(self._before_forward)
        model.register_forward_hook(self._after_forward)
        ddp.register_comm_hook(None, self._allreduce)

    def _before_forward(self, module: nn.Module, inputs: tuple) -> None:
        self.records.append({"start": time.perf_counter()})
        if self.slow and self.where == "forward":
            time.sleep(self.delay)

    def _after_forward(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        self.records[-1]["forward"] = time.perf_counter()
        if self.slow and self.where == "backward" and output.requires_grad:
            # The output's gradient is the first one backward computes: the sleep comes before any bucket is ready.
            output.register_hook(lambda grad: time.sleep(self.delay))

    def _allreduce(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        record = self.records[-1]
        record.setdefault("arrived", time.perf_counter())  # DDP calls this hook when the bucket is ready

        def finished(future: torch.futures.Future) -> torch.Tensor:
            record["left"] = time.perf_counter()
            return future.value()

        return allreduce_hook(None, bucket).then(finished)

    def note(self, name: str) -> None:
        """Read the clock into this step's record as ``name``."""
        self.records[-1][name] = time.perf_counter()


def _setup(slow_rank: int, delay: float, seed: int = 0):
    rank = dist.get_rank()
    model = examples.mlp(WIDTHS, seed).to(device())
    ddp = wrap(model, device())
    watch = Watch(model, ddp, rank == slow_rank, delay)
    x, y = examples.regression_batch(SAMPLES * dist.get_world_size(), seed)
    mine = slice(rank * SAMPLES, (rank + 1) * SAMPLES)
    return ddp, watch, (x[mine].to(device()), y[mine].to(device()))


def _step(ddp: nn.Module, watch: Watch, x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer,
          probed: bool = False) -> None:
    optimizer.zero_grad()
    loss = examples.regression_loss(ddp(x), y)
    if probed:
        arrivals = [None] * dist.get_world_size()
        dist.all_gather_object(arrivals, time.perf_counter())
        watch.note("gathered")
    loss.backward()
    watch.note("backward")
    optimizer.step()
    watch.note("end")


def _observe(slow_rank: int, delay: float, steps: int) -> dict[str, list[dict[str, float]]]:
    ddp, watch, (x, y) = _setup(slow_rank, delay)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=SGD_LR)
    _step(ddp, watch, x, y, optimizer)  # warm-up: DDP's first backward finds its buckets
    parts = {}
    for part in PARTS:
        watch.where = {"even": None, "probed": "forward"}.get(part, part)
        dist.barrier()
        watch.records = []
        for _ in range(steps):
            _step(ddp, watch, x, y, optimizer, probed=part == "probed")
        parts[part] = watch.records
    return parts


def observe(world_size: int = WORLD_SIZE, slow_rank: int = SLOW_RANK, delay: float = DELAY, steps: int = STEPS
            ) -> list[dict[str, list[dict[str, float]]]]:
    """Train on ``world_size`` ranks with ``delay`` seconds planted on ``slow_rank``, in the four ``PARTS``; per
    rank, each part's step records (see the module's docstring). ``ValueError`` for a rank that does not exist."""
    _check_plant(world_size, slow_rank, delay)
    return launch(_observe, world_size, (slow_rank, delay, steps), timeout=TIMEOUT)


def _check_plant(world_size: int, slow_rank: int, delay: float) -> None:
    if isinstance(slow_rank, bool) or not isinstance(slow_rank, int) or not 0 <= slow_rank < world_size:
        raise ValueError(f"slow_rank={slow_rank!r} is not one of the {world_size} ranks: choose 0 to "
                         f"{world_size - 1}.")
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 5:
        raise ValueError(f"delay={delay!r} is the seconds the slow rank sleeps per step: a number from 0 to 5 "
                         "(0.15 stands out on a busy machine).")


def _probed(learner: SourceFunction, slow_rank: int, delay: float, steps: int, errors: str) -> dict:
    ddp, watch, (x, y) = _setup(slow_rank, delay)
    watch.where = "forward"
    optimizer = torch.optim.SGD(ddp.parameters(), lr=SGD_LR)
    returned = []
    try:
        train_step = learner.rebuild()
        with counted() as traffic:
            for _ in range(steps):
                returned.append(train_step(ddp, x, y, optimizer))
                watch.note("end")
    except Exception as error:
        keep_error(error, errors)
        raise
    return {"returned": returned, "records": watch.records, "collectives": traffic.collectives,
            "parameters": [p.detach().clone() for p in ddp.parameters()]}


def probe_on_ranks(train_step: Callable, slow_rank: int, world_size: int = WORLD_SIZE, delay: float = DELAY,
                   steps: int = 3) -> list[dict]:
    """Run ``train_step(model, x, y, optimizer)`` ``steps`` times on every rank, ``model`` wrapped in DDP, SGD,
    with ``delay`` seconds planted in ``slow_rank``'s forward. Per rank: what each call ``returned``, the
    ``records`` of its steps (``end`` read after each call), the ``collectives`` it called and the final
    ``parameters``. The learner's own exception is raised as it is (``ranks.learner.launch_keeping_errors``)."""
    _check_plant(world_size, slow_rank, delay)
    shipped = SourceFunction.of(train_step)
    return launch_keeping_errors(_probed, world_size, (shipped, slow_rank, delay, steps), TIMEOUT)
