"""Lesson 22's picture: the collectives each rank called, one lane per rank, the first divergence marked.

``collective_lanes(records, title, notes)`` takes each rank's record as the Flight Recorder logged it (a list of
``(op, shape)``, ``faults.hang_tools.flight_record``) and what became of the rank (``notes``: "timed out at
step 2"). Each call is a box in its rank's colour, named by its op and shape; the first index where the ranks
disagree (``faults.hang_diagnosis.first_divergence``) is hatched for the ranks that differ there, with a dashed
line, and an empty slot of a record that ended early is drawn as a grey "nothing" box.
"""

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dpcourse.faults.hang_diagnosis import first_divergence

from .palette import IDLE_COLOR, cell, device_color, grid_axes, legend_below, new_figure

SHORT = {"all_reduce": "all-reduce", "broadcast": "broadcast", "all_gather": "all-gather",
         "reduce_scatter": "reduce-scatter"}


def collective_lanes(records: Sequence[Sequence[tuple[str, tuple[int, ...]]]], title: str,
                     notes: Sequence[str] = ()) -> Figure:
    """One lane per rank, one box per collective it called, in order; the first divergence hatched."""
    length = max(len(record) for record in records)
    found = first_divergence([list(record) for record in records])
    figure = new_figure(height=0.75 * len(records) + 1.6, width=min(9.0, 2.3 + 1.55 * (length + 1)))
    ax = figure.add_subplot()
    grid_axes(ax, length + 1, len(records))
    for rank, record in enumerate(records):
        odd = found is not None and rank in found[1]
        for index, (op, shape) in enumerate(record):
            hatch = "///" if odd and index == found[0] else None
            cell(ax, index, rank, f"{SHORT.get(op, op)}\n{tuple(shape)}", device_color(rank), inset=0.06,
                 hatch=hatch, edgecolor="black" if hatch else "white")
        if odd and found[0] >= len(record):
            cell(ax, found[0], rank, "nothing", IDLE_COLOR, inset=0.06, hatch="///", edgecolor="black")
        if rank < len(notes) and notes[rank]:
            ax.text(length + 0.08, rank + 0.5,
                    notes[rank], ha="left", va="center", fontsize=8, wrap=True)
    if found is not None:
        ax.axvline(found[0], color="black", linestyle="--", linewidth=1)
    ax.set_xticks([index + 0.5 for index in range(length)], [f"call {index}" for index in range(length)])
    ax.set_yticks([rank + 0.5 for rank in range(len(records))], [f"rank {rank}" for rank in range(len(records))])
    ax.xaxis.tick_top()
    where = "no divergence" if found is None else f"first divergence: call {found[0]}, rank(s) {found[1]}"
    legend_below(figure, [Patch(facecolor="white", edgecolor="black", hatch="///", label=where)])
    figure.suptitle(title, fontsize="medium")
    return figure


__all__ = ["collective_lanes"]
