"""Time DataParallel steps of the lesson MLP on this machine: what ``calibrate`` and ``fit_gpu`` fit the terms to."""

import contextlib
import dataclasses
import functools
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import ClassVar, Literal

import torch

from ..data_parallel import DataParallel
from ..examples import loss_fn
from ..examples.model import running_example
from ..timing import one_thread_per_operation, synchronized_clock, timed_step
from ..trace import trace
from ..training_setup import Setup as TrainingSetup
from .model import Workload


@dataclasses.dataclass(frozen=True)
class Setup(TrainingSetup):
    """One thing to time: ``model`` under DataParallel on ``devices`` replicas, ``batch`` samples in all.

    ``traced`` also records every span of the step (``dpcourse.trace``). The models timed are the running
    example widened to ``hidden`` and deepened to ``depth`` Linear layers: ``Setup.lesson_mlp(hidden, depth,
    devices)``, and ``as_row`` is what a recording keeps of a setup.
    """

    KINDS: ClassVar[tuple[str, ...]] = ("DataParallel",)

    kind: str = "DataParallel"
    batch: int = 64
    traced: bool = False

    @classmethod
    def lesson_mlp(cls, hidden: int, depth: int, devices: int, batch: int = 64, traced: bool = False) -> "Setup":
        """The running example, ``hidden`` wide and ``depth`` Linear layers deep (``examples.running_example``)."""
        return cls(devices=devices, model=running_example(hidden, depth), batch=batch, traced=traced)

    @property
    def hidden(self) -> int:
        return self.model.widths[1]

    @property
    def depth(self) -> int:
        return len(self.model.widths) - 1

    def as_row(self) -> dict[str, int | bool]:
        """``hidden``, ``depth``, ``devices``, ``batch`` and ``traced``: ``lesson_mlp``'s arguments, for a recording."""
        return {"hidden": self.hidden, "depth": self.depth, "devices": self.devices, "batch": self.batch,
                "traced": self.traced}

    def workload(self) -> Workload:
        return Workload.of(self.model.build(), self.batch)


@contextlib.contextmanager
def _one_core() -> Iterator[None]:
    """Run torch, and this whole process, on one core: one intra-op thread, pinned where the OS allows it."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cores:
        os.sched_setaffinity(0, {min(cores)})
    try:
        with one_thread_per_operation():
            yield
    finally:
        if cores:
            os.sched_setaffinity(0, cores)


def measure(setups: Sequence[Setup], rounds: int = 8, steps: int = 5, clock: Literal["cpu", "wall"] = "cpu",
            device: str = "cpu") -> list[tuple[float, dict[str, float]]]:
    """Time forward + backward of every setup: each one's fastest step, and with ``traced``, its spans.

    Every replica of a setup shares ``device``, where the model and the batch are put before it is wrapped.
    On CPU devices (``device="cpu"``, the real CPU, on a GPU machine too) everything runs on one core. On a
    GPU (``device="cuda:0"``) a step is timed from the moment the GPU is idle to the moment it has finished
    the step's work (``synchronized_clock``), so the launches and the GPU work both count.

    Traced setups also give the fastest time of every span (summed over the replicas). The setups take
    turns, ``steps`` steps each per round, so a busy spell of another program hits them all alike, and the
    fastest step counts: other programs only ever add time. ``clock="cpu"`` counts this process's CPU time:
    on an idle core that is the wall time, and unlike ``clock="wall"`` it does not grow while another program
    holds the core. Span times are wall times, or CUDA event times on a GPU.
    """
    gpu = torch.device(device).type == "cuda"
    now = synchronized_clock([device]) if gpu else time.process_time if clock == "cpu" else time.perf_counter
    runs = []
    for setup in setups:
        module = setup.model.build().to(device)
        dp = DataParallel(module, devices=[device] * setup.devices)
        x, y = setup.model.batch(setup.batch, device=device)
        runs.append((setup, module, dp, x, functools.partial(loss_fn, target=y), [], defaultdict(list)))
    with contextlib.nullcontext() if gpu else _one_core():
        for round_ in range(rounds):
            for setup, module, dp, x, loss, totals, spans in runs:
                for step in range(steps):
                    with trace() if setup.traced else contextlib.nullcontext() as recorded:
                        elapsed = timed_step(dp, module, x, loss, clock=now).seconds
                    if round_ == 0 and step < 2:  # warm-up
                        continue
                    totals.append(elapsed)
                    for name in {s.step for s in recorded.spans} if setup.traced else ():
                        spans[name].append(sum(s.duration for s in recorded.steps(name)))
    return [(min(totals), {name: min(values) for name, values in spans.items()}) for *_, totals, spans in runs]


