"""An opt-in recorder of what each DataParallel step did: when, on which thread and device, how much it copied.

    with dpcourse.trace() as t:
        loss = dp(x).pow(2).mean()
        loss.backward()
    t.spans        # scatter, replicate, forward x n, gather, gather-backward, backward x n, reduce-add

The primitives call ``span(...)`` at each step. With no trace open that is one global read and returns a
shared do-nothing context, so tracing costs nothing when it is off. Times come from
``time.perf_counter``; on CUDA devices from CUDA events, so they measure the GPU work, not just the launch.
"""

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch

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


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for item in items for t in _tensors(item)]


class _Recorder:
    """Collects spans from every thread while a trace is open."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.lock = threading.Lock()
        self.origin = time.perf_counter()
        self.gpu_origins: dict[int, tuple[float, torch.cuda.Event]] = {}
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)
                event = torch.cuda.Event(enable_timing=True)
                event.record(torch.cuda.current_stream(index))
                self.gpu_origins[index] = (self.seconds(), event)
        self.gpu_spans: list[tuple[Span, torch.cuda.Event, torch.cuda.Event]] = []
        # per replica forward: (replica, device, [(thread, mark)]) filled in by gradient hooks
        self.backward: dict[int, tuple[int, str, list[tuple[str, float | torch.cuda.Event]]]] = {}

    def seconds(self) -> float:
        return time.perf_counter() - self.origin

    def mark(self, device: torch.device | None) -> float | torch.cuda.Event:
        if device is None or device.type != "cuda":
            return self.seconds()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event

    @contextlib.contextmanager
    def span(self, step: str, device: torch.device | None, replica: int | None, tensors: Any) -> Iterator[Span]:
        thread = threading.current_thread().name
        shapes = [list(t.shape) for t in _tensors(tensors)]
        span = Span(step, 0.0, 0.0, thread, replica, None if device is None else str(device), shapes)
        start = self.mark(device)
        try:
            yield span
        finally:
            end = self.mark(device)
            with self.lock:
                self.trace.spans.append(span)
                if isinstance(start, float):
                    span.start, span.end = start, end
                else:
                    self.gpu_spans.append((span, start, end))

    def watch_backward(self, replica: int, device: torch.device, output: Any, module: torch.nn.Module) -> None:
        """Time one replica's backward: from its output's gradient to its last parameter copy's gradient.

        Hooks on tensors run in the autograd engine's thread, so this also shows *where* backward ran.
        """
        copies = [v for m in module.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        watched = [t for t in _tensors(output) + copies if t.requires_grad and t.grad_fn is not None]

        with self.lock:
            call = len(self.backward)  # one backward span per forward call, also over several steps
            self.backward[call] = (replica, str(device), [])

        def reached(_grad: torch.Tensor) -> None:
            mark = self.mark(device)
            with self.lock:
                self.backward[call][2].append((threading.current_thread().name, mark))

        for tensor in watched:
            tensor.register_hook(reached)

    def close(self) -> None:
        """Turn CUDA events into seconds (after one synchronize) and sort the spans by start time."""
        if self.gpu_origins:
            torch.cuda.synchronize()
        for span, start, end in self.gpu_spans:
            span.start, span.end = self.seconds_of(start), self.seconds_of(end)
        for replica, device, marks in self.backward.values():
            if marks:
                times = [self.seconds_of(mark) for _, mark in marks]
                self.trace.spans.append(Span("backward", min(times), max(times), marks[0][0], replica, device))
        self.trace.spans.sort(key=lambda s: (s.start, -1 if s.replica is None else s.replica))

    def seconds_of(self, mark: float | torch.cuda.Event) -> float:
        if isinstance(mark, float):
            return mark
        origin_seconds, origin = self.gpu_origins[mark.device.index]
        return origin_seconds + origin.elapsed_time(mark) / 1000


_active: _Recorder | None = None
_NOTHING = contextlib.nullcontext()


def span(
    step: str, device: torch.device | None = None, replica: int | None = None, tensors: Any = ()
) -> contextlib.AbstractContextManager[Span | None]:
    """Record the ``with`` block as one ``step`` if a trace is open; otherwise do nothing, at no cost.

    The block receives the ``Span`` (or ``None`` when not tracing) to fill in ``bytes_copied``.
    """
    if _active is None:
        return _NOTHING
    return _active.span(step, device, replica, tensors)


def watch_backward(replica: int, device: torch.device, output: Any, module: torch.nn.Module) -> None:
    if _active is not None:
        _active.watch_backward(replica, device, output, module)


def bytes_of(obj: Any) -> int:
    """Bytes held by the dense tensors in ``obj`` (a tensor or a nested tuple/list/dict of them)."""
    return sum(0 if t.is_sparse else t.numel() * t.element_size() for t in _tensors(obj))


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Record every dpcourse step run inside the block (forward and backward) into the yielded ``Trace``."""
    global _active
    if _active is not None:
        raise RuntimeError("A dpcourse trace is already open; traces do not nest. Close the outer one first.")
    recorded = Trace()
    _active = _Recorder(recorded)
    try:
        yield recorded
    finally:
        recorder, _active = _active, None
        recorder.close()
