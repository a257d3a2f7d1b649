"""Where the time of a DataParallel training step goes: traced steps of three models, summed per stage.

``TraceExplorer`` runs these; they are plain functions so a benchmark or a test can call them without a widget.
The three models show the two regimes: a large MLP whose matrix products dwarf DataParallel's own work,
and the course MLP or 100 tiny layers, where its fixed costs per step (replicate copies every parameter
again, the replica threads must be woken, outputs gathered) weigh as much as the arithmetic or more.
"""

import contextlib
import dataclasses
import statistics
from collections.abc import Sequence

from dpcourse import examples
from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.examples.model import MLP
from dpcourse.models_to_time import WIDE_MLP, ModelToTime
from dpcourse.timing import StepTimes, one_thread_per_operation, synchronized_clock, timed_step
from dpcourse.trace import STEPS, Span, Trace
from dpcourse.trace import trace as trace_steps

from .explorer import paragraph, table

FORWARD_STEPS = ("scatter", "replicate", "forward", "gather")  # recorded while data_parallel(x) runs
COMPUTE_STEPS = ("forward", "backward")  # the replicas' own work: what one device would do too
FORWARD_GAPS = "parallel_apply hand-offs (forward, between the steps above)"
BACKWARD_GAPS = "loss, autograd engine (backward, between the steps above)"
OPTIMIZER = "optimizer step"
OVERHEAD = ("scatter", "replicate", "gather", "gather-backward", "reduce-add", "scatter-backward", FORWARD_GAPS)


MODELS = {
    "small": ModelToTime("the course MLP (8-16-4)", examples.running_example()),
    "large": WIDE_MLP,
    "many-layers": ModelToTime("100 tiny Linear(8, 8) layers", MLP((8,) * 101, relu=False)),
}
LEARNING_RATE = 0.01
DOMINATES = 1.5  # one share must be this many times the other before the verdict calls it dominant


def busy_seconds(spans: Sequence[Span]) -> float:
    """How long at least one of ``spans`` was running: overlapping replicas count once."""
    busy, reached = 0.0, float("-inf")
    for span in sorted(spans, key=lambda s: s.start):
        busy += max(0.0, span.end - max(span.start, reached))
        reached = max(reached, span.end)
    return busy


@dataclasses.dataclass
class TimedStep:
    """One traced training step and the wall time of its three phases (``timing.StepTimes``)."""

    trace: Trace
    times: StepTimes


class TracedTraining:
    """``DataParallel`` of a fresh model of ``choice`` on ``n_devices``, with its batch: traced SGD steps on demand.

    The first ``trace`` runs one untraced warm-up step, which pays once for allocations and lazy set-up; every
    ``trace(steps)`` then traces ``steps`` steps, training on from where the last call stopped. ``TraceExplorer``
    keeps one per setting, so pressing Run again traces at once. On a GPU each phase ends with a synchronize,
    so its wall time covers the GPU work and not just the launches. On CPU devices the steps run with one
    intra-op thread (``timing.one_thread_per_operation``), as lesson 09 measures: a CPU device is one core.
    """

    def __init__(self, choice: ModelToTime, n_devices: int, batch: int) -> None:
        devices = choose_devices(n_devices)
        self.on_cpu = all(device.type == "cpu" for device in devices)
        self.model = choice.mlp.build().to(devices[0])
        self.data_parallel = DataParallel(self.model, devices)
        self.x, self.y = choice.mlp.batch(batch, device=devices[0])
        self.clock = synchronized_clock(devices)
        self.warmed_up = False

    def step(self) -> StepTimes:
        """One training step, timed but not traced: what the warm-up runs, and each traced step inside its trace."""
        loss = lambda output: examples.loss_fn(output, self.y)  # noqa: E731
        return timed_step(self.data_parallel, self.model, self.x, loss, LEARNING_RATE, self.clock)

    def trace(self, steps: int) -> list[TimedStep]:
        """``steps`` traced training steps (after the warm-up step, the first time)."""
        with one_thread_per_operation() if self.on_cpu else contextlib.nullcontext():
            if not self.warmed_up:
                self.step()
                self.warmed_up = True
            measured = []
            for _ in range(steps):
                with trace_steps() as recorded:
                    times = self.step()
                measured.append(TimedStep(recorded, times))
        return measured


def stage_totals(measured: Sequence[TimedStep]) -> dict[str, float]:
    """Mean seconds per step: of each recorded stage, of the unrecorded time in each phase, and of the step."""
    per_step = []
    for timed in measured:
        stages = {stage: busy_seconds(timed.trace.steps(stage)) for stage in STEPS}
        forward_busy = busy_seconds([s for s in timed.trace.spans if s.step in FORWARD_STEPS])
        backward_busy = busy_seconds([s for s in timed.trace.spans if s.step not in FORWARD_STEPS])
        stages[FORWARD_GAPS] = max(0.0, timed.times.forward - forward_busy)
        stages[BACKWARD_GAPS] = max(0.0, timed.times.backward - backward_busy)
        stages[OPTIMIZER] = timed.times.optimizer
        stages["step"] = timed.times.seconds
        per_step.append(stages)
    return {name: statistics.fmean(s[name] for s in per_step) for name in per_step[0] if any(s[name] for s in per_step)}


def verdict(own: float, compute: float) -> str:
    """Which share outweighs the other, by at least ``DOMINATES`` times; else that they are about even."""
    if own >= DOMINATES * compute:
        return "DataParallel's overhead dominates"
    if compute >= DOMINATES * own:
        return "the model's compute dominates"
    return f"neither dominates (within a factor of {DOMINATES:g} of each other)"


def describe(totals: dict[str, float], steps: int) -> str:
    """The per-stage table (ms and % of the step) and a verdict: does DataParallel's own work dominate?"""
    step = totals["step"]
    rows = [[name, f"{seconds * 1e3:.2f}", f"{100 * seconds / step:.0f}%"] for name, seconds in totals.items()]
    own = sum(totals.get(s, 0.0) for s in OVERHEAD) / step
    compute = sum(totals.get(s, 0.0) for s in COMPUTE_STEPS) / step
    return paragraph(
        f"Mean over {steps} traced steps (the model had one untraced warm-up step first). DataParallel's own "
        f"work (scatter, replicate, thread hand-offs, gather, reduce-add) takes {100 * own:.0f}% of a step, "
        f"the replicas' forward and backward {100 * compute:.0f}%: {verdict(own, compute)}. The figure shows the "
        f"median step."
    ) + table(["stage", "ms per step", "% of step"], rows)
