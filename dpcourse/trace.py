"""An opt-in recorder of what each DataParallel step did: when, on which thread and device, how much it copied.

    with dpcourse.trace() as t:
        loss = dp(x).pow(2).mean()
        loss.backward()
    t.spans        # scatter, replicate, forward x n, gather, gather-backward, backward x n, reduce-add

The four steps know nothing of this module. While a trace is open it watches them from outside:

* ``scatter``, ``replicate``, ``parallel_apply`` and ``gather`` are swapped, wherever dpcourse refers to
  them, for versions that time the call (see ``observe``), and swapped back when the trace closes. Calls
  through ``dpcourse.X``, ``DataParallel`` and ``data_parallel`` are all seen; a name imported with
  ``from dpcourse import gather`` *before* the trace opened is the untouched function.
* Each replica's forward is timed in its own thread, around the module call.
* Backward steps are timed by autograd hooks on the graph nodes the forward made: ``GatherBackward``
  (gather-backward), ``BroadcastBackward`` (reduce-add), ``ScatterBackward`` (scatter-backward), and
  gradient hooks on each replica's output and parameter copies (that replica's backward).

Why not ``torch.profiler``? Measured on torch 2.13: it records nothing from Python threads started inside
the profiled block (the replicas' forwards), and starting it costs about a second.

Times come from ``time.perf_counter``; on CUDA devices from CUDA events, so they measure the GPU work, not
just the launch. With no trace open nothing is swapped: tracing costs nothing when it is off.
"""

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .observe import bytes_of, observed_steps, tensors_in

__all__ = ["STEPS", "Recorder", "Span", "Trace", "bytes_of", "trace"]

STEPS = ("scatter", "replicate", "forward", "gather", "gather-backward", "backward", "reduce-add", "scatter-backward")


@dataclasses.dataclass
class Span:
    """One step, or one replica's part of a step.

    ``bytes_copied`` counts the data the step moved or duplicated: chunks sent to another device
    (scatter), parameter and buffer copies for replicas 1..n-1 (replicate; replica 0 uses the
    originals), outputs copied into the gathered result (gather), and gradients of replicas 1..n-1
    added into replica 0's (reduce-add). Chunks that stay on their device are views: 0 bytes.
    """

    step: str
    start: float  # seconds since the trace began
    end: float
    thread: str
    replica: int | None = None
    device: str | None = None
    shapes: list[list[int]] = dataclasses.field(default_factory=list)
    bytes_copied: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclasses.dataclass
class Trace:
    """Everything recorded inside one ``with dpcourse.trace()`` block, as plain data."""

    spans: list[Span] = dataclasses.field(default_factory=list)

    @property
    def start(self) -> float:
        return min((s.start for s in self.spans), default=0.0)

    @property
    def end(self) -> float:
        return max((s.end for s in self.spans), default=0.0)

    @property
    def duration(self) -> float:
        """Seconds from the first span's start to the last span's end: the traced step, end to end."""
        return self.end - self.start

    def steps(self, step: str) -> list[Span]:
        return [s for s in self.spans if s.step == step]

    def to_dict(self) -> dict[str, Any]:
        return {"spans": [dataclasses.asdict(s) for s in self.spans]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trace":
        return cls([Span(**s) for s in data["spans"]])


Mark = float | torch.cuda.Event


class Recorder:
    """Collects spans from every thread while a trace is open; ``open`` turns False when the trace closes."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.open = True
        self.lock = threading.Lock()
        self.origin = time.perf_counter()
        self.gpu_origins: dict[int, tuple[float, torch.cuda.Event]] = {}
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)
                event = torch.cuda.Event(enable_timing=True)
                event.record(torch.cuda.current_stream(index))
                self.gpu_origins[index] = (self.seconds(), event)
        self.timed: list[tuple[Span, Mark, Mark]] = []
        # one entry per replica forward: (replica, device, [(thread, mark)]), filled in by gradient hooks
        self.backward: list[tuple[int, str, list[tuple[str, Mark]]]] = []

    def seconds(self) -> float:
        return time.perf_counter() - self.origin

    def mark(self, device: torch.device | None) -> Mark:
        if device is None or device.type != "cuda":
            return self.seconds()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event

    def add(self, span: Span, start: Mark, end: Mark) -> None:
        with self.lock:
            if self.open:
                self.timed.append((span, start, end))

    @contextlib.contextmanager
    def span(self, step: str, device: torch.device | None, replica: int | None, tensors: Any) -> Iterator[Span]:
        """Time the ``with`` block as one ``step`` in this thread; the block may fill in ``bytes_copied``."""
        shapes = [list(t.shape) for t in tensors_in(tensors)]
        span = Span(step, 0.0, 0.0, threading.current_thread().name, replica, _name(device), shapes)
        start = self.mark(device)
        try:
            yield span
        finally:
            self.add(span, start, self.mark(device))

    def time_node(self, node: Any, step: str, device: torch.device | None, measure: Callable) -> None:
        """Time every run of autograd ``node`` as ``step``.

        ``measure(grad_inputs, grad_outputs)`` returns the tensors whose shapes the span shows, and its bytes.
        """
        started: list[Mark] = []
        node.register_prehook(lambda grad_outputs: started.append(self.mark(device)))

        def finished(grad_inputs: tuple, grad_outputs: tuple) -> None:
            shown, copied = measure(grad_inputs, grad_outputs)
            thread = threading.current_thread().name
            span = Span(step, 0.0, 0.0, thread, None, _name(device), [list(t.shape) for t in tensors_in(shown)], copied)
            self.add(span, started.pop(), self.mark(device))

        node.register_hook(finished)

    def watch_backward(self, replica: int, device: torch.device, output: Any, module: torch.nn.Module) -> None:
        """Time one replica's backward: from its output's gradient to its last parameter copy's gradient.

        Hooks on tensors run in the autograd engine's thread, so this also shows *where* backward ran.
        """
        copies = [v for m in module.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        watched = [t for t in tensors_in(output) + copies if t.requires_grad and t.grad_fn is not None]
        marks: list[tuple[str, Mark]] = []
        with self.lock:
            self.backward.append((replica, str(device), marks))

        def reached(_grad: torch.Tensor) -> None:
            if self.open:
                marks.append((threading.current_thread().name, self.mark(device)))

        for tensor in watched:
            tensor.register_hook(reached)

    def close(self) -> None:
        """Turn marks into seconds (after one CUDA synchronize) and sort the spans by start time."""
        with self.lock:
            self.open = False
        if self.gpu_origins:
            torch.cuda.synchronize()
        for span, start, end in self.timed:
            span.start, span.end = self.seconds_of(start), self.seconds_of(end)
            self.trace.spans.append(span)
        for replica, device, marks in self.backward:
            if marks:
                times = [self.seconds_of(mark) for _, mark in marks]
                self.trace.spans.append(Span("backward", min(times), max(times), marks[0][0], replica, device))
        self.trace.spans.sort(key=lambda s: (s.start, -1 if s.replica is None else s.replica))

    def seconds_of(self, mark: Mark) -> float:
        if isinstance(mark, float):
            return mark
        origin_seconds, origin = self.gpu_origins[mark.device.index]
        return origin_seconds + origin.elapsed_time(mark) / 1000


def _name(device: torch.device | None) -> str | None:
    return None if device is None else str(device)


_active: Recorder | None = None


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Record every dpcourse step run inside the block (forward and backward) into the yielded ``Trace``."""
    global _active
    if _active is not None:
        raise RuntimeError("A dpcourse trace is already open; traces do not nest. Close the outer one first.")
    recorded = Trace()
    _active = Recorder(recorded)
    try:
        with observed_steps(_active):
            yield recorded
    finally:
        recorder, _active = _active, None
        recorder.close()
