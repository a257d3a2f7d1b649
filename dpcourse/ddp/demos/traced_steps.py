"""What each rank does, and when: DDP training steps recorded as a ``dpcourse.trace.Trace``.

Every rank records its own spans (``thread="rank-r"``, ``replica=r``) and sends them to the parent, which
merges them into one ``Trace`` that ``dpcourse.viz`` draws like a DataParallel trace (``trace_dp_steps``
records the DataParallel one for the same model and batches). The steps:

* ``replicate``: ``DistributedDataParallel(model)``, whose constructor broadcasts rank 0's parameters
  and buffers. Once, before training; DataParallel replicates on every forward.
* ``forward``, ``backward`` (the loss and the whole ``loss.backward()`` call, which also waits for the last
  bucket), ``optimizer`` (the SGD update, run by every rank on its own copy of the weights): the phases of
  ``dpcourse.timing.timed_step``.
* ``allreduce``: one per gradient bucket, from the moment the bucket is full (DDP calls its comm hook)
  until the all-reduce has finished, recorded by a hook that wraps DDP's default one
  (``allreduce_hook`` in ``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``). These
  spans start *inside* ``backward``: communication overlaps computation.

Times are ``time.perf_counter()`` seconds since a start that rank 0 takes after a barrier and
broadcasts. That works because on one machine every process reads the same monotonic clock; across
machines the clocks are unrelated. On a GPU each span synchronizes the device first, so it times the
GPU work, not the launch (which slightly reduces the overlap it shows).
"""

import dataclasses
import functools
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from ...data_parallel import DataParallel
from ...devices import devices
from ...examples import make_model, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ...timing import StepTimes, synchronized_clock, timed_step
from ...trace import Span, Trace, bytes_of, trace
from ..per_rank import shard, wrap

LEARNING_RATE = 0.1


class _Recorder:
    def __init__(self, rank: int, here: torch.device, origin: float) -> None:
        self.rank, self.here, self.origin = rank, here, origin
        self.clock = synchronized_clock([here])
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    def now(self) -> float:
        return self.clock() - self.origin

    def add(self, step: str, start: float, end: float, shapes: list[list[int]] | None = None,
            bytes_copied: int = 0) -> None:
        span = Span(step, start, end, f"rank-{self.rank}", self.rank, str(self.here), shapes or [], bytes_copied)
        with self.lock:  # allreduce spans end on the communication thread
            self.spans.append(span)

    def add_step(self, times: StepTimes, shapes: list[list[int]]) -> None:
        """One training step's ``forward``, ``backward`` (the loss too) and ``optimizer`` spans."""
        forwarded = times.start + times.forward
        backwarded = forwarded + times.backward
        self.add("forward", times.start, forwarded, shapes)
        self.add("backward", forwarded, backwarded)
        self.add("optimizer", backwarded, backwarded + times.optimizer)

    def allreduce_hook(
        self, process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        start, size = self.now(), bytes_of(bucket.buffer())

        def finished(future: torch.futures.Future) -> torch.Tensor:
            self.add("allreduce", start, self.now(), bytes_copied=size)
            return future.value()

        return allreduce_hook(process_group, bucket).then(finished)


def _rank_spans(steps: int, batch: int, hidden: int, depth: int, bucket_cap_mb: float) -> list[dict]:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    module = make_model(hidden=hidden, depth=depth)
    dist.barrier()
    origin = torch.tensor([time.perf_counter()], dtype=torch.float64, device=here)
    dist.broadcast(origin, src=0)
    recorder = _Recorder(rank, here, origin.item())
    start = recorder.now()
    ddp_model = wrap(module, here, bucket_cap_mb=bucket_cap_mb)
    recorder.add("replicate", start, recorder.now(),
                 bytes_copied=bytes_of(list(module.parameters()) + list(module.buffers())))
    ddp_model.register_comm_hook(None, recorder.allreduce_hook)
    x, y = regression_batch(steps * batch)
    for step in range(steps):
        mine = [step * batch + i for i in shard(batch, rank, world)]
        inputs, targets = x[mine].to(here), y[mine].to(here)
        times = timed_step(ddp_model, module, inputs, functools.partial(regression_loss, target=targets), LEARNING_RATE,
                           recorder.now)
        recorder.add_step(times, [list(inputs.shape)])
    return [dataclasses.asdict(span) for span in recorder.spans]


def trace_ddp_steps(world_size: int = 2, steps: int = 3, batch: int = 64, hidden: int = 512, depth: int = 4,
                    bucket_cap_mb: float = 1.0) -> Trace:
    """Train ``steps`` DDP steps on ``world_size`` ranks and return every rank's spans as one ``Trace``.

    The defaults deepen the lesson model to 4 Linear layers of width 512 (2.1 MiB of gradients), so
    that with 1 MiB buckets backward fills three of them. Watch step 1: DDP starts with *one* bucket and
    only after the first backward rebuilds them in the order the gradients really arrived
    (``Reducer::rebuild_buckets`` in ``torch/csrc/distributed/c10d/reducer.cpp``).
    """
    ranks = launch(_rank_spans, world_size, (steps, batch, hidden, depth, bucket_cap_mb))
    spans = [Span(**span) for rank in ranks for span in rank]
    return Trace(sorted(spans, key=lambda s: (s.start, s.replica)))


def trace_dp_steps(n: int = 2, steps: int = 3, batch: int = 64, hidden: int = 512, depth: int = 4) -> Trace:
    """The same training, with ``dpcourse.DataParallel`` on ``dpcourse.devices(n)``, traced in this process.

    The model goes to ``devices[0]`` before it is wrapped, and each step's batch and targets go there too, where
    the outputs are gathered. On a GPU the phases end with a synchronize, as the DDP ranks' spans do.
    """
    dp_devices = devices(n)
    module = make_model(hidden=hidden, depth=depth).to(dp_devices[0])
    dp = DataParallel(module, devices=dp_devices)
    x, y = regression_batch(steps * batch)
    clock = synchronized_clock(dp_devices)
    with trace() as recorded:
        for step in range(steps):
            part = slice(step * batch, (step + 1) * batch)
            loss = functools.partial(regression_loss, target=y[part].to(dp_devices[0]))
            timed_step(dp, module, x[part].to(dp_devices[0]), loss, LEARNING_RATE, clock)
    return recorded
