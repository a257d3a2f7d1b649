"""Lesson 24's picture: the attempts of a restarted run, and its loss on top of the uninterrupted run's.

``attempts_timeline(story)`` takes ``faults.resume_runs.story``'s run. Top: one row per attempt and rank, a box per
step it finished (rank colours), the kill, the snapshot attempt 1 resumed from, and the steps it trained again
(hatched). Bottom: rank 0's loss at each step, uninterrupted (a black line) and in each attempt (markers); where
they overlap, the resumed run computed the very same numbers.
"""

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .palette import IDLE_COLOR, REFERENCE_COLOR, cell, device_color, new_figure

ATTEMPT_MARKERS = ("o", "x")


def attempts_timeline(story, snapshot_step: int, kill_step: int, killed_rank: int, steps: int) -> Figure:
    """The attempts of ``story`` over ``steps`` steps: finished steps, the kill, the snapshot, the steps redone."""
    figure = new_figure(height=5.4, width=8.8)
    top, bottom = figure.subplots(2, 1, height_ratios=(1.1, 1))
    rows = [(attempt, rank) for attempt in (0, 1) for rank in (0, 1)]
    lanes = {0: "interrupted", 1: "resumed"}
    for row, (attempt, rank) in enumerate(rows):
        done = {s["step"] for s in story.log(lanes[attempt], attempt, rank)}
        for step in range(1, steps + 1):
            if step in done:
                redone = attempt == 1 and step < kill_step
                cell(top, step - 1, row, str(step), device_color(rank), inset=0.06, hatch="///" if redone else None)
    top.plot(kill_step - 0.5, rows.index((0, killed_rank)) + 0.5, marker="X", markersize=14, color="#C00000",
             linestyle="none")
    top.axvline(snapshot_step, color=REFERENCE_COLOR, linestyle="--", linewidth=1.2)
    top.set(xlim=(0, steps), ylim=(len(rows), 0), xticks=[], xlabel="steps finished (1 to 16)",
            yticks=[row + 0.5 for row in range(len(rows))],
            yticklabels=[f"attempt {attempt}, rank {rank}" for attempt, rank in rows])
    for side in top.spines.values():
        side.set_visible(False)
    top.tick_params(length=0)
    top.legend(handles=[
        Line2D([], [], color=REFERENCE_COLOR, linestyle="--", label=f"snapshot after step {snapshot_step}"),
        Line2D([], [], marker="X", color="#C00000", linestyle="none", label=f"rank {killed_rank} killed"),
        Patch(facecolor=IDLE_COLOR, hatch="///", label="trained again")],
               loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=3, fontsize=8, frameon=False)
    reference = story.log("uninterrupted", 0, 0)
    bottom.plot([s["step"] for s in reference], [s["loss"] for s in reference], color=REFERENCE_COLOR, linewidth=1.2,
                label="uninterrupted, rank 0")
    for attempt, marker in zip((0, 1), ATTEMPT_MARKERS, strict=True):
        logged = story.log(lanes[attempt], attempt, 0)
        bottom.plot([s["step"] for s in logged], [s["loss"] for s in logged], marker=marker, linestyle="none",
                    color=device_color(2 + attempt), label=f"attempt {attempt}, rank 0")
    highest = max(s["loss"] for s in reference)
    bottom.set(xlabel="step", ylabel="loss (rank 0's batch)", xlim=(0.5, steps + 0.5), ylim=(0, highest * 1.3))
    bottom.legend(fontsize=8, ncols=3, loc="upper right")
    figure.suptitle("A rank killed: every rank restarted, resumed from the last snapshot", fontsize="medium")
    return figure


__all__ = ["attempts_timeline"]
