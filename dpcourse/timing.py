"""Timing training steps: one step timed phase by phase, and variants compared in turns on a shared machine.

``timed_step`` runs one training step (forward, loss and backward, SGD update) and reads a clock between
the phases; the cost model, the benchmarks, the trace explorer, the scaling figure and the DDP timelines
all time their steps with it. On a GPU the clock must wait for the device (``synchronized_clock``): it runs
asynchronously, so a host clock alone would time the launches only (PyTorch docs, ``notes/cuda.rst``,
"Asynchronous execution").

Timing variant A fifty times and then variant B fifty times lets machine drift (another job starting, the
CPU clocking down) land on one of them only. Running A, B, A, B, ... spreads it over both (``interleaved``),
and the ratio of the two samples taken in the same round (a *paired* ratio) cancels most of it. The first
``warmup`` rounds are run and dropped: they pay for thread start-up, allocator growth and first-call dispatch.

Drift does not cancel when the variants use the cores differently: a 2-thread step loses half its speed
when another process takes one core, a 1-thread step much less. The benchmarks therefore also watch how many
cores other processes kept busy in each round (``tests/benchmarks/rounds.py``).
"""

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from .examples import sgd_step

Sample = Callable[[], float]  # runs the variant once and returns its time in seconds
Clock = Callable[[], float]  # seconds since some fixed moment


def synchronized_clock(devices: Iterable[torch.device]) -> Clock:
    """``time.perf_counter``, read once every CUDA device among ``devices`` has finished its queued work."""
    gpus = list(dict.fromkeys(d for d in map(torch.device, devices) if d.type == "cuda"))
    if not gpus:
        return time.perf_counter

    def now() -> float:
        for gpu in gpus:
            torch.cuda.synchronize(gpu)
        return time.perf_counter()

    return now


def cuda_seconds(step: Callable[[], object], devices: Iterable[torch.device | int]) -> float:
    """Seconds of one call of ``step`` on GPUs: from the moment every one of ``devices`` has finished its earlier
    work to the end of what ``step`` queued on the first one's current stream, by CUDA events (the GPU's own
    clock, so the GPU work counts and not only its launches)."""
    devices = list(devices)
    for device in devices:
        torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(torch.cuda.current_stream(devices[0]))
    step()
    end.record(torch.cuda.current_stream(devices[0]))
    end.synchronize()
    return start.elapsed_time(end) / 1e3


@contextlib.contextmanager
def one_thread_per_operation() -> Iterator[None]:
    """Run torch's CPU operations on one intra-op thread (``torch.set_num_threads(1)``), then give the count back.

    A CPU device of the course is then one core: N replicas keep N cores busy, and the backward, which the
    autograd engine runs on the calling thread for CPU tensors, one. With the default (a thread per core),
    the caller's operations on small tensors wake the other threads for nothing: 2 CPU devices on 2 cores
    spent 32 ms of a second thread's time per TraceExplorer run of 3 steps of 100 tiny layers (117 ms a run,
    against 101-110 ms on one thread). ``parallel_apply`` shares the caller's threads among the CPU replicas.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclasses.dataclass(frozen=True)
class StepTimes:
    """When one training step started (a clock reading), and how long each of its phases took, in seconds."""

    start: float
    forward: float  # forward(x): for DataParallel, scatter, replicate, parallel_apply, gather
    backward: float  # the loss and loss.backward()
    optimizer: float  # the SGD update (0.0 for a step without one)

    @property
    def seconds(self) -> float:
        return self.forward + self.backward + self.optimizer


def timed_step(
    forward: Callable[[torch.Tensor], torch.Tensor],
    model: nn.Module,
    x: torch.Tensor,
    loss: Callable[[torch.Tensor], torch.Tensor],
    lr: float | None = None,
    clock: Clock = time.perf_counter,
) -> StepTimes:
    """One training step of ``model``, run through ``forward`` (the model itself, or a DataParallel of it).

    The gradients are cleared (not timed), then: ``forward(x)``; ``loss(output).backward()``; and with an
    ``lr``, the SGD update ``examples.sgd_step(model, lr)``. ``clock`` is read between the phases: pass
    ``synchronized_clock(devices)`` on GPUs, or ``time.process_time`` for this process's CPU time.
    """
    model.zero_grad(set_to_none=True)
    start = clock()
    output = forward(x)
    forwarded = clock()
    loss(output).backward()
    backwarded = clock()
    if lr is not None:
        sgd_step(model, lr)
    end = clock() if lr is not None else backwarded
    return StepTimes(start, forwarded - start, backwarded - forwarded, end - backwarded)


def wall_time(step: Callable[[], object], clock: Clock = time.perf_counter) -> Sample:
    """A ``Sample`` that times one call of ``step`` with ``clock``: ``time.perf_counter`` is right for CPU work,
    ``synchronized_clock(devices)`` for work queued on GPUs."""

    def sample() -> float:
        start = clock()
        step()
        return clock() - start

    return sample


def within(context: Callable[[], contextlib.AbstractContextManager], sample: Sample) -> Sample:
    """Take ``sample`` inside a fresh ``context()``; entering and leaving it are not timed."""

    def sample_within() -> float:
        with context():
            return sample()

    return sample_within


@dataclasses.dataclass
class Rounds:
    """Every variant's seconds, one per round."""

    samples: dict[str, list[float]]

    def ratio(self, name: str, baseline: str) -> dict[str, float]:
        """Median and quartiles of ``name / baseline`` over the rounds (a paired ratio)."""
        ratios = [a / b for a, b in zip(self.samples[name], self.samples[baseline], strict=True)]
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
        return {"median": median, "q1": q1, "q3": q3}


def interleaved(variants: Mapping[str, Sample], rounds: int, warmup: int,
                around_round: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> Rounds:
    """Run every variant once per round, rotating who goes first; keep the rounds after ``warmup``.

    Rotation keeps a variant from always following the same neighbour (whose left-over cache state or
    busy threads it would otherwise inherit every time). ``around_round()`` is entered around each kept round
    (the benchmarks watch what other processes do meanwhile).
    """
    names = list(variants)
    measured = Rounds({name: [] for name in names})
    for r in range(warmup + rounds):
        shift = r % len(names)
        with around_round() if r >= warmup else contextlib.nullcontext():
            seconds = {name: variants[name]() for name in names[shift:] + names[:shift]}
        if r >= warmup:
            for name in names:
                measured.samples[name].append(seconds[name])
    return measured
