"""Figure: step time and speed-up against the number of devices, from measured steps."""

import statistics
from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure
from torch import nn

from dpcourse.data_parallel import DataParallel
from dpcourse.devices import devices as choose_devices
from dpcourse.timing import synchronized_clock, timed_step
from dpcourse.trace import Trace

from .palette import REFERENCE_COLOR, device_color, new_figure, plural

MEASURED_COLOR = device_color(0)  # the measurements are timed on the main thread, device 0's


def step_seconds(measurement: float | Trace) -> float:
    """A step time in seconds; for a ``Trace``, its end-to-end length: last end minus first start."""
    if isinstance(measurement, Trace):
        if not measurement.spans:
            raise ValueError("Cannot time an empty trace: record a step inside `with dpcourse.trace() as t:` first.")
        return measurement.duration
    return float(measurement)


def measure_scaling(
    model: nn.Module, batch: torch.Tensor, device_counts: Sequence[int], steps: int = 5
) -> dict[int, list[float]]:
    """Time ``steps`` training steps of ``DataParallel(model, dpcourse.devices(n))`` for each ``n``.

    A step (``dpcourse.timing.timed_step``) is forward, ``.pow(2).mean()`` as the loss, and backward (no
    optimizer, so the weights stay put; the gradients are cleared again at the end). One warm-up step per
    ``n`` is run and not counted: the first call pays for thread pools and allocations. Times come from
    ``time.perf_counter``, after a ``torch.cuda.synchronize()`` on GPUs, since a GPU runs asynchronously
    (``timing.synchronized_clock``). ``model`` is moved to ``devices[0]``. Returns ``{n: [seconds per
    step]}``, the input ``scaling`` draws.
    """
    measured = {}
    for n in device_counts:
        devices = choose_devices(n)
        data_parallel = DataParallel(model.to(devices[0]), devices)
        x, clock = batch.to(devices[0]), synchronized_clock(devices)
        times = [timed_step(data_parallel, model, x, lambda output: output.pow(2).mean(), clock=clock).seconds
                 for _ in range(steps + 1)]
        measured[n] = times[1:]
    model.zero_grad(set_to_none=True)
    return measured


def scaling(measurements: Mapping[int, Sequence[float | Trace]]) -> Figure:
    """Draw median step time and speed-up against the number of devices, with min-to-max spread.

    ``measurements`` maps a device count to its step times in seconds, or to ``Trace`` objects (each
    timed end to end); ``measure_scaling`` makes one. Speed-up is ``t(n0) / t(n)`` against the smallest
    count ``n0`` (usually 1); the dashed line is the ideal, ``n / n0``. DataParallel stays well below it:
    scatter, replicate and gather run on one thread, and every step copies the parameters again.
    The returned figure carries ``fig.dpcourse_data = {"counts", "median", "speedup"}``.
    """
    if not measurements or any(not values for values in measurements.values()):
        raise ValueError("scaling needs at least one step time for every device count, e.g. {1: [0.02], 2: [0.012]}.")
    counts = sorted(measurements)
    seconds = {n: [step_seconds(m) for m in measurements[n]] for n in counts}
    median = [statistics.median(seconds[n]) * 1e3 for n in counts]
    low = [m - min(seconds[n]) * 1e3 for m, n in zip(median, counts, strict=True)]
    high = [max(seconds[n]) * 1e3 - m for m, n in zip(median, counts, strict=True)]
    base = counts[0]
    speedup = [median[0] / m for m in median]

    fig = new_figure(height=3.8)
    time_ax, speed_ax = fig.subplots(1, 2)
    time_ax.errorbar(counts, median, yerr=[low, high], marker="o", color=MEASURED_COLOR, capsize=4,
                     label="median (bars: min to max)")
    time_ax.set_ylim(bottom=0)
    time_ax.set_ylabel("step time (ms)")
    time_ax.legend(fontsize=8)
    ideal = "ideal: n×" if base == 1 else f"ideal: n/{base}"
    speed_ax.plot(counts, [n / base for n in counts], "--", color=REFERENCE_COLOR, label=ideal, gid="ideal")
    speed_ax.plot(counts, speedup, marker="o", color=MEASURED_COLOR, label="measured", gid="measured")
    speed_ax.set_ylim(bottom=0)
    speed_ax.set_ylabel(f"speed-up over {plural(base, 'device')}")
    speed_ax.legend(fontsize=8)
    for ax in (time_ax, speed_ax):
        ax.set_xticks(counts)
        ax.set_xlabel("number of devices (replicas)")
        ax.grid(alpha=0.3)
    steps = sum(len(seconds[n]) for n in counts)
    best = max(speedup)
    if best <= 1:
        verdict = f"no speed-up over {plural(base, 'device')}"
    else:
        verdict = f"best speed-up {best:.2f}× on {counts[speedup.index(best)]} devices"
    fig.suptitle(f"DataParallel scaling, {steps} measured steps: {verdict}")
    fig.dpcourse_data = {"counts": counts, "median": median, "speedup": speedup}
    return fig
