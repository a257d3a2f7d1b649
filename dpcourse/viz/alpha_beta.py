"""Lesson 25's pictures: collectives' measured times against the α-β fit, and one DDP backward on a timeline.

``fitted_times(timings, fits)`` draws each collective's measured median times by size (log-log) and its fitted
line ``s * alpha + f * n / beta``: flat where α decides, a slope of 1 where β does. ``overlap_timeline(step)`` draws
one DDP backward (``ddp.overlap``): each rank's planted compute per layer, rank 0's all-reduce per bucket, and the
two moments that say what hid: the slowest rank's last gradient, and ``backward()``'s return.
"""

from collections.abc import Sequence

from matplotlib.figure import Figure

from .palette import COMBINED_COLOR, IDLE_COLOR, device_color, new_figure
from .zero3 import WAY_COLORS

MS = 1e3


def fitted_times(timings: Sequence, fits: dict) -> Figure:
    """Measured points (``ranks.collective_times.Timing``) and one fitted line per collective in ``fits``."""
    figure = new_figure(height=3.6, width=8.0)
    ax = figure.add_subplot()
    for (collective, fitted), colour in zip(fits.items(), WAY_COLORS, strict=False):
        points = sorted((t.n_bytes, t.seconds) for t in timings if t.collective == collective)
        sizes = [n for n, _ in points]
        ax.plot(sizes, [s * MS for _, s in points], "o", color=colour, label=f"{collective}, measured")
        ax.plot(sizes, [fitted.predict(n) * MS for n in sizes], "-", color=colour, linewidth=1.2,
                label=f"{collective}, α-β fit")
    ax.set(xscale="log", yscale="log", xlabel="bytes of the whole tensor", ylabel="ms (median over rounds)")
    ax.legend(loc="upper left", fontsize="small")
    figure.suptitle("Collectives on this machine's ranks, and the α-β fit", fontsize="medium")
    return figure


def overlap_timeline(step: dict, title: str) -> Figure:
    """One DDP backward: a row per rank's compute, a row of rank 0's all-reduces; what did not hide, shaded."""
    figure = new_figure(height=2.8, width=8.5)
    ax = figure.add_subplot()
    rows = [f"rank {rank} compute" for rank in range(len(step["compute"]))] + ["rank 0 all-reduce"]
    for rank, spans in enumerate(step["compute"]):
        for layer, start, end in spans:
            ax.barh(rank, (end - start) * MS, left=start * MS, height=0.6, color=device_color(rank),
                    edgecolor="white")
            ax.text((start + end) / 2 * MS, rank, f"layer {layer}", ha="center", va="center", fontsize=7,
                    color="white")
    for _, _, start, end in step["buckets"]:
        ax.barh(len(rows) - 1, (end - start) * MS, left=start * MS, height=0.6, color=COMBINED_COLOR,
                edgecolor="white")
    shaded = ax.axvspan(step["compute_end"] * MS, step["end"] * MS, color=IDLE_COLOR, alpha=0.5,
                        label="communication that did not hide")
    line = ax.axvline(step["compute_end"] * MS, color="black", linewidth=1, linestyle="--",
                      label="last gradient ready (slowest rank)")
    ax.set_yticks(range(len(rows)), rows)
    ax.set(xlabel="ms since the backward started", ylim=(len(rows) - 0.5, -0.5), xlim=(0, step["end"] * MS * 1.05))
    figure.legend(handles=[shaded, line], loc="outside lower center", ncols=2, fontsize="small")
    figure.suptitle(title, fontsize="medium")
    return figure


__all__ = ["fitted_times", "overlap_timeline"]
