"""Figures for gradient accumulation: which micro-steps communicate, and how much each sample counts."""

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .palette import IDLE_COLOR, device_color, device_handles, legend_below, new_figure, plural, step_color

COMPUTE, OPTIMIZER = "forward + backward", "optimizer"


def accumulation_timeline(panels: Sequence[tuple[str, str, Mapping[str, Sequence[int]]]]) -> Figure:
    """One panel per way of accumulating: a lane per device or rank, one box per micro-step, then the step.

    ``panels`` holds ``(title, what communicates, {lane: communications at each micro-step})``, e.g.
    ``("DDP with no_sync()", "all-reduce", {"rank 0": [0, 0, 1], "rank 1": [0, 0, 1]})``, counted in a real
    run. A micro-step that communicates is followed by a box of that communication; one that does not by a
    grey gap. The figure carries ``fig.dpcourse_data = {"panels": panels}``.
    """
    if not panels:
        raise ValueError("Give at least one panel: (title, what communicates, {lane: counts per micro-step}).")
    lanes_per_panel = [len(lanes) for _, _, lanes in panels]
    fig = new_figure(height=1.0 + sum(0.55 * n + 0.45 for n in lanes_per_panel))
    axes = fig.subplots(len(panels), 1, height_ratios=lanes_per_panel, squeeze=False)[:, 0]
    for ax, (title, comm, lanes) in zip(axes, panels, strict=True):
        steps = max(len(counts) for counts in lanes.values())
        for row, counts in enumerate(lanes.values()):
            for k, count in enumerate(counts):
                ax.barh(row, 2, left=3 * k, height=0.7, color=step_color("backward"), edgecolor="white", gid="compute")
                ax.text(3 * k + 1, row, f"micro-step {k + 1}", ha="center", va="center", fontsize=8)
                fill = step_color("reduce-add" if comm == "reduce-add" else "allreduce") if count else "white"
                ax.barh(row, 1, left=3 * k + 2, height=0.7, color=fill, gid="comm" if count else "gap",
                        edgecolor=IDLE_COLOR, linestyle="-" if count else ":")
                if count:
                    ax.text(3 * k + 2.5, row, comm if count == 1 else f"{comm} x{count}", ha="center", va="center",
                            fontsize=6.5, rotation=90)
            ax.barh(row, 1.6, left=3 * steps + 0.2, height=0.7, color=step_color(OPTIMIZER), gid="optimizer")
            ax.text(3 * steps + 1.0, row, "step", ha="center", va="center", fontsize=8)
        ax.set_yticks(range(len(lanes)), list(lanes))
        for i, label in enumerate(ax.get_yticklabels()):
            label.set_color(device_color(i))
        ax.set_ylim(len(lanes) - 0.5, -0.5)
        ax.set_xlim(0, 3 * steps + 2)
        ax.set_xticks([])
        for side in ax.spines.values():
            side.set_visible(False)
        total = sum(next(iter(lanes.values())))
        ax.set_title(f"{title}: {plural(total, comm)} per optimizer step", fontsize=10, loc="left")
    handles = [Patch(color=step_color("backward"), label=COMPUTE), Patch(color=step_color(OPTIMIZER), label=OPTIMIZER)]
    handles += [Patch(facecolor="white", edgecolor=IDLE_COLOR, linestyle=":", label="no communication")]
    legend_below(fig, handles)
    fig.suptitle("Measured: which micro-steps communicate before one optimizer step")
    fig.dpcourse_data = {"panels": panels}
    return fig


def micro_batch_weights(result: Any) -> Figure:
    """Bars: the measured weight of every sample's loss, coloured by the replica that computed it.

    ``result`` is a ``dpcourse.accumulation.SampleWeights``: ``weights`` (one per sample), ``sizes`` (rows
    per micro-batch), ``chunks`` (rows per replica in each micro-batch), ``rule`` and ``per_replica_mean``.
    Dotted lines separate the micro-batches; the dashed line is one device's weight, ``1/batch``.
    """
    weights, batch = result.weights.tolist(), len(result.weights)
    owners = [j for chunks in result.chunks for j, rows in enumerate(chunks) for _ in range(rows)]
    fig = new_figure(height=3.8)
    ax = fig.subplots()
    ax.bar(range(batch), weights, color=[device_color(j) for j in owners], gid="weight")
    ax.axhline(1 / batch, color="black", linestyle="--", label=f"one device: 1/{batch}")
    top = 1.35 * max(weights)
    start = 0
    for k, size in enumerate(result.sizes, start=1):
        if start:
            ax.axvline(start - 0.5, color="black", linestyle=":", linewidth=1)
        ax.text(start + size / 2 - 0.5, 0.97 * top, f"micro-batch {k}", ha="center", va="top", fontsize=8)
        start += size
    ax.set_ylim(0, top)
    ax.set_xticks(range(batch))
    ax.set_xlabel("sample")
    ax.set_ylabel("weight of the sample's loss")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    replicas = max(len(chunks) for chunks in result.chunks)
    loss = "each replica's mean loss" if result.per_replica_mean else "mean loss of the micro-batch"
    fig.suptitle(f"{batch} samples, micro-batches of {', '.join(map(str, result.sizes))}: {loss} x {result.rule}")
    if replicas > 1:
        legend_below(fig, device_handles([f"device {j}" for j in range(replicas)]))
    fig.dpcourse_data = {"weights": weights, "owners": owners}
    return fig
