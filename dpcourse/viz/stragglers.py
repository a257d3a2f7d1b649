"""Figure: a few DDP steps of every rank on one time axis, from ``faults.stragglers.observe``: the planted sleep,
the compute, the wait inside the all-reduce, and a tick where each rank arrived at it.

The fills are the timeline's (``palette.STEP_COLORS``: forward, backward, optimizer); the wait is grey, the
course's "idle"; the sleep is hatched in the slow rank's device colour. A rank's lane label is in its colour.
"""

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dpcourse.faults.straggler_reading import arrivals, last_to_arrive

from .palette import IDLE_COLOR, device_color, legend_below, new_figure, step_color

BAR_HEIGHT = 0.6
MIN_MS = 0.8  # every segment is drawn at least this wide, so that a step of a few ms stays visible


def _segments(record: dict[str, float], sleep: float) -> list[tuple[str, float, float]]:
    """(kind, start, end) for one step: the sleep first (on the slow rank), then forward, backward up to the
    all-reduce, the wait in it, the rest of the backward and the optimizer."""
    start = record["start"] + sleep
    return [("delay", record["start"], start), ("forward", start, record["forward"]),
            ("backward", record["forward"], record["arrived"]), ("waiting", record["arrived"], record["left"]),
            ("optimizer", record["left"], record["end"])]


def straggler_timeline(results: Sequence[dict], part: str = "forward", slow_rank: int = 2, delay: float = 0.15,
                       steps: int = 3) -> Figure:
    """The first ``steps`` steps of ``part`` (a delay in the forward), one lane per rank, milliseconds since the
    first rank started. Returns the figure with ``fig.dpcourse_data = {"last": the rank last at each all-reduce}``.
    """
    if not results or part not in results[0]:
        raise ValueError(f"results must be what faults.stragglers.observe() returned, with the part {part!r}.")
    steps = min(steps, len(results[0][part]))
    origin = min(result[part][0]["start"] for result in results)
    fig = new_figure(height=1.6 + 0.55 * len(results))
    ax = fig.subplots()
    fills = {"delay": "white", "forward": step_color("forward"), "backward": step_color("backward"),
             "waiting": IDLE_COLOR, "optimizer": step_color("optimizer")}
    for rank, result in enumerate(results):
        for record in result[part][:steps]:
            sleep = delay if rank == slow_rank else 0.0
            for kind, start, end in _segments(record, sleep):
                style = {"hatch": "//", "edgecolor": device_color(rank)} if kind == "delay" else {}
                ax.barh(rank, max((end - start) * 1e3, MIN_MS), left=(start - origin) * 1e3, height=BAR_HEIGHT,
                        color=fills[kind], **style)
            ax.plot([(record["arrived"] - origin) * 1e3] * 2, [rank - 0.45, rank + 0.45], color="black",
                    linewidth=1.5)
    ax.set_yticks(range(len(results)), [f"rank {rank}" for rank in range(len(results))])
    for rank, label in enumerate(ax.get_yticklabels()):
        label.set_color(device_color(rank))
    ax.set_ylim(len(results) - 0.4, -0.6)
    ax.set_xlabel("time since the first rank started (ms)")
    last = last_to_arrive(arrivals([{part: result[part][:steps]} for result in results], part))
    ax.set_title(f"{delay * 1e3:.0f} ms of sleep in rank {slow_rank}'s forward; last at each all-reduce: "
                 + ", ".join(f"rank {rank}" for rank in last), fontsize=10)
    handles = [Patch(facecolor="white", edgecolor=device_color(slow_rank), hatch="//", label="planted sleep"),
               *(Patch(color=fills[kind], label=label) for kind, label in (
                   ("forward", "forward"), ("backward", "backward up to the all-reduce"),
                   ("waiting", "waiting in the all-reduce"), ("optimizer", "rest of backward, optimizer"))),
               Line2D([], [], color="black", linewidth=1.5, label="arrival at the all-reduce")]
    legend_below(fig, handles)
    fig.dpcourse_data = {"last": last}
    return fig
