"""Figure: how ZeRO cuts the flat parameter vector into one shard per rank, across the parameters' boundaries."""

import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .palette import IDLE_COLOR, device_color, legend_below, new_figure, plural, text_color

PARAMETER_FILLS = ("#E8E8E8", "#C8C8C8")  # two greys, alternating, so neighbouring parameters stay apart
PADDING = {"facecolor": "white", "edgecolor": IDLE_COLOR, "hatch": "///"}
INCH_PER_CHARACTER = 0.075  # a label is drawn only in a box wide enough for it, at font size 8


def _label(ax: Axes, fig: Figure, start: float, width: float, y: float, text: str, fill: str) -> None:
    data_width = ax.get_xlim()[1] - ax.get_xlim()[0]
    inches = width / data_width * ax.get_position().width * fig.get_figwidth()
    if inches > INCH_PER_CHARACTER * len(text):
        ax.text(start + width / 2, y, text, ha="center", va="center", fontsize=8, color=text_color(fill))


def shard_layout(parameters: Sequence[tuple[str, int]], world_size: int) -> Figure:
    """Draw the flat vector of ``parameters`` (``(name, numel)`` in ``model.parameters()`` order) and, under it,
    the shard each of ``world_size`` ranks owns: ``ceil(numel / world_size)`` numbers each, the last shorter,
    and the padding (hatched) that makes every rank's piece of an all-gather the same size.
    """
    numel = sum(size for _, size in parameters)
    if world_size < 1 or numel < 1:
        raise ValueError(f"need at least one rank and one number; got world_size={world_size}, {numel} numbers.")
    size = math.ceil(numel / world_size)
    fig = new_figure(height=2.6)
    ax = fig.subplots()
    ax.set_xlim(0, size * world_size)
    ax.set_ylim(-0.6, 1.6)
    start = 0
    for i, (name, count) in enumerate(parameters):
        fill = PARAMETER_FILLS[i % 2]
        ax.barh(1, count, left=start, height=0.8, color=fill, edgecolor="white")
        _label(ax, fig, start, count, 1, name, fill)
        start += count
    for rank in range(world_size):
        begin, end = min(rank * size, numel), min((rank + 1) * size, numel)
        if end > begin:
            ax.barh(0, end - begin, left=begin, height=0.8, color=device_color(rank), edgecolor="white")
            _label(ax, fig, begin, end - begin, 0, f"rank {rank}: {end - begin}", device_color(rank))
    if size * world_size > numel:
        ax.barh(0, size * world_size - numel, left=numel, height=0.8, **PADDING)
    ax.set_yticks([0, 1], ["shards", "parameters"])
    ticks = sorted({min(rank * size, numel) for rank in range(world_size)} | {numel})
    ax.set_xticks(ticks)
    ax.set_xlabel("position in the flat parameter vector")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    padding = size * world_size - numel
    ax.set_title(f"{plural(numel, 'number')} on {plural(world_size, 'rank')}: shards of "
                 f"ceil({numel} / {world_size}) = {size}, padding {padding}", fontsize=10)
    handles = [Patch(color=device_color(rank), label=f"rank {rank}") for rank in range(world_size)]
    legend_below(fig, [*handles, Patch(**PADDING, label="padding for the all-gather")])
    return fig
