"""Lesson 19's picture: the gradient bytes one rank holds after each gradient of a backward, DDP against ZeRO-2.

``gradient_bytes(runs)`` takes what ``sharded.zero2_measure.compare`` measured on one rank, per program: the
``held_at_hooks`` counts (every ``.grad``, ZeRO-2's bucket buffers and shards, after each gradient arrived) and
``after_backward``. DDP's line climbs to the whole gradient; ZeRO-2's saw-tooth rises while a bucket fills and
drops when it is reduce-scattered.
"""

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .palette import new_figure
from .zero3 import WAY_COLORS

KIB = 1024


def gradient_bytes(runs: dict[str, dict], title: str) -> Figure:
    """One step line per program: KiB of gradients held after each gradient of backward, its highest marked."""
    figure = new_figure(height=3.6, width=8.5)
    ax = figure.add_subplot()
    highest = 0.0
    for (program, run), colour in zip(runs.items(), WAY_COLORS, strict=False):
        values = [b / KIB for b in run["held_at_hooks"]]
        most = values.index(max(values))
        highest = max(highest, values[most])
        steps = range(1, len(values) + 1)
        ax.step(steps, values, where="mid", color=colour, linewidth=1.4,
                label=f"{program}: {run['after_backward'] / KIB:.1f} KiB when backward ends")
        ax.plot(most + 1, values[most], "o", color=colour)
    ax.set(xlabel="gradients produced so far in backward (last layer first)", ylabel="KiB of gradients held",
           xlim=(0.5, len(values) + 0.5), ylim=(0, highest * 1.35))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(title, fontsize="medium")
    ax.legend(loc="upper left", fontsize="small")
    return figure


__all__ = ["gradient_bytes"]
