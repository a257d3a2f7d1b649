"""The allocator's real peak: torch's profiler on the CPU, ``torch.cuda.max_memory_allocated`` on GPUs.

``accounting`` adds each kind of memory at its largest. The allocator sees something else: the bytes allocated
at each moment. Activations are freed during backward while the gradients appear, so the two never reach their
largest together; short-lived tensors that no category names come on top: a layer's output before ReLU replaces
it, the gradient flowing back through each layer, Adam's ``_foreach_sqrt`` of ``exp_avg_sq`` in its step
(``torch/optim/adam.py: _multi_tensor_adam``).

* ``profile_step(setup)``: one step on one device under ``torch.profiler.profile(profile_memory=True)``, every
  allocation and free in order (``allocations``).
* ``cuda_peaks(setup)``: ``torch.cuda.max_memory_allocated`` of each GPU over one step.
"""

import dataclasses
import itertools
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from dpcourse.data_parallel import DataParallel

from ..examples import loss_fn
from .accounting import state_tensors, storage_bytes
from .setup import Setup, make_optimizer

PHASES = ("forward", "loss", "backward", "optimizer step")


@dataclasses.dataclass
class ProfiledStep:
    """Bytes allocated after each allocation or free of one training step, as the profiler recorded them.

    ``allocated[i]`` is the total after event ``i``, counting what was already allocated when the step began
    (``start``: parameters, optimizer state, the batch). ``phases`` maps each of ``PHASES`` to the events
    ``(first, last)`` that happened inside it.
    """

    setup: Setup
    start: int
    allocated: list[int]
    phases: dict[str, tuple[int, int]]

    @property
    def peak(self) -> int:
        return max([self.start, *self.allocated])

    @property
    def peak_phase(self) -> str:
        """The phase in which the peak happened (``"start"`` if nothing the step allocated went above the start)."""
        if self.peak == self.start:
            return "start"
        return phase_of(self.allocated.index(self.peak), self.phases)


def phased_step(forward: Callable[[torch.Tensor], torch.Tensor], loss_of: Callable, optimizer: torch.optim.Optimizer,
                x: torch.Tensor, y: torch.Tensor, after_backward: Callable[[], None] = lambda: None) -> None:
    """One training step, each of ``PHASES`` inside a ``record_function`` span of its name: what ``allocations``
    splits the allocations by. ``after_backward`` runs inside the backward span (ZeRO-3 frees its shards there)."""
    with record_function("forward"):
        output = forward(x)
    with record_function("loss"):
        loss = loss_of(output, y)
    with record_function("backward"):
        loss.backward()
        after_backward()
    with record_function("optimizer step"):
        optimizer.step()


def phase_of(index: int, phases: dict[str, tuple[int, int]]) -> str:
    """The phase whose span holds allocation event ``index`` (``phases`` as ``allocations`` returns it)."""
    return next((name for name, (first, last) in phases.items() if first <= index <= last), "between phases")


def allocations(run: Callable[[], object]) -> tuple[list[int], dict[str, tuple[int, int]]]:
    """Run ``run()`` under ``torch.profiler.profile(profile_memory=True)``; return the bytes of every allocation
    (positive) and free (negative) in order, and for each ``record_function`` span named in ``PHASES`` the first
    and last of those events inside it (``(-1, -1)`` if none).

    The events are read from the trace the profiler exports (``export_chrome_trace``), its ``"[memory]"`` events.
    """
    # The profiler's Kineto library prints "profiler_start" lines with a time and a pid to stderr, read once per
    # process: level 6, above all its message levels (libkineto's ILoggerObserver.h), keeps a notebook quiet.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    with tempfile.TemporaryDirectory(prefix="dpcourse-profile-") as folder:
        path = Path(folder, "trace.json")
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    phases = {}
    for span in (e for e in events if e.get("name") in PHASES and e.get("ph") == "X"):
        inside = [i for i, e in enumerate(memory) if span["ts"] <= e["ts"] <= span["ts"] + span["dur"]]
        phases[span["name"]] = (inside[0], inside[-1]) if inside else (-1, -1)
    return [e["args"]["Bytes"] for e in memory], phases


def profile_step(setup: Setup) -> ProfiledStep:
    """Profile one step of ``setup`` (one device; after a warm-up step) and return every allocation in order."""
    if setup.kind != "one device":
        raise ValueError(f"profile_step profiles one device: pass a Setup with kind='one device', not {setup.kind!r}.")
    model = setup.model.build()
    parameters = list(model.parameters())
    optimizer = make_optimizer(setup.optimizer, parameters)
    x, y = setup.model.batch(setup.batch)

    def step() -> None:
        phased_step(model, loss_fn, optimizer, x, y)
        optimizer.zero_grad()

    step()  # the optimizer's state exists from its first step on
    start = storage_bytes(parameters) + storage_bytes(state_tensors(optimizer)) + x.nbytes + y.nbytes
    changes, phases = allocations(step)
    return ProfiledStep(setup, start, list(itertools.accumulate(changes, initial=start))[1:], phases)


def cuda_peaks(setup: Setup) -> list[int]:
    """``torch.cuda.max_memory_allocated`` on each GPU over one step of ``setup``, less the memory that is not the
    model's (cuBLAS workspaces), for one device or DataParallel with one GPU per replica.

    Two steps run first: they create the optimizer state, the cuBLAS workspaces and the autograd threads. What
    the allocator then holds beyond the step's own tensors (parameters, optimizer state, batch) is not the
    step's, and is subtracted. DDP's ranks report their own peaks (``dpcourse.ddp.demos.memory``).
    """
    if setup.kind == "DDP":
        raise ValueError("For DDP each rank measures itself: dpcourse.ddp.demos.memory.measure_ranks(setup).")
    if torch.cuda.device_count() < setup.devices:
        raise ValueError(f"cuda_peaks needs {setup.devices} GPUs, one per replica; {torch.cuda.device_count()} found.")
    devices = [torch.device("cuda", i) for i in range(setup.devices)]
    model = setup.model.build().to(devices[0])
    parameters = list(model.parameters())
    optimizer = make_optimizer(setup.optimizer, parameters)
    run = DataParallel(model, devices) if setup.devices > 1 else model
    x, y = setup.model.batch(setup.batch)
    x, y = (x if setup.devices > 1 else x.to(devices[0])), y.to(devices[0])  # DataParallel copies the chunks

    def step() -> None:
        output = run(x)
        loss_fn(output, y).backward()
        optimizer.step()
        optimizer.zero_grad()

    step()
    step()
    torch.cuda.synchronize()
    own = storage_bytes(t for t in [*parameters, *state_tensors(optimizer), x, y] if t.device == devices[0])
    other = [torch.cuda.memory_allocated(d) - (own if i == 0 else 0) for i, d in enumerate(devices)]
    for d in devices:
        torch.cuda.reset_peak_memory_stats(d)
    step()
    torch.cuda.synchronize()
    return [torch.cuda.max_memory_allocated(d) - other[i] for i, d in enumerate(devices)]
