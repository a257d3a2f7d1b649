"""Lesson 20's picture: one rank's memory over one training step, DDP against ZeRO-3, from the profiler's events.

``zero3_memory(ways)`` takes what ``sharded.zero3_measure.compare`` measured on one rank, per way of training:
``start`` (bytes held when the step began) and ``allocated`` (the total after each allocation or free). One
step line per way, on one axis, each with its peak marked; the phases of the first ZeRO-3 way are shaded.
"""

from matplotlib.figure import Figure

from .memory import PHASE_COLORS
from .palette import new_figure

# Paul Tol's "bright" scheme (colour-blind safe): a way of training is not a device, so not the devices' colours.
WAY_COLORS = ("#000000", "#4477AA", "#EE6677", "#228833", "#CCBB44")
KIB = 1024

def zero3_memory(ways: dict[str, dict], rank: int = 0) -> Figure:
    """Bytes allocated on ``rank`` after each allocation and free of one step, one line per way of training."""
    figure = new_figure(height=3.8, width=8.5)
    ax = figure.add_subplot()
    shaded = next((run for way, run in ways.items() if way.startswith("ZeRO")), None)
    for name, (first, last) in (shaded or {}).get("phases", {}).items():
        if first >= 0:
            ax.axvspan(first + 0.5, last + 1.5, color=PHASE_COLORS[name], alpha=0.3, linewidth=0,
                       label=f"ZeRO-3's {name}")
    highest = 0.0
    for (way, run), colour in zip(ways.items(), WAY_COLORS, strict=False):
        values = [run["start"] / KIB] + [b / KIB for b in run["allocated"]]
        peak_at = values.index(max(values))
        highest = max(highest, values[peak_at])
        ax.step(range(len(values)), values, where="post", color=colour, linewidth=1.3,
                label=f"{way}: peak {values[peak_at]:.0f} KiB")
        ax.plot(peak_at, values[peak_at], "o", color=colour)
    ax.set(xlabel="allocations and frees, in order", ylabel="KiB allocated", xlim=(0, None),
           ylim=(0, highest * 1.45))
    figure.suptitle(f"Rank {rank}'s memory over one training step (Adam)", fontsize="medium")
    ax.legend(loc="upper left", fontsize="small", ncols=2)
    return figure

__all__ = ["zero3_memory"]
