"""Figures for DDP in practice: who trains on which sample, uneven inputs with and without ``join()``, and
BatchNorm's running statistics per replica and synchronised.

Each takes the numbers a real multi-rank run returned (``dpcourse.ddp.demos.sampling``, ``.uneven``, ``.batchnorm``),
so it draws what happened, not a schematic. Rank ``r`` has device colour ``r``, as replica ``r`` does everywhere.
"""

from collections.abc import Mapping, Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .palette import (
    COMBINED_COLOR,
    IDLE_COLOR,
    REFERENCE,
    cell,
    device_color,
    device_label,
    grid_axes,
    legend_below,
    new_figure,
)

MISSING = {"fill": "white", "hatch": "//", "edgecolor": device_color(3)}
WAITING = {"fill": "white", "hatch": "//", "edgecolor": device_color(3)}
SHADOW = {"fill": IDLE_COLOR, "hatch": "..", "edgecolor": "white"}


def _handle(style: dict, label: str) -> Patch:
    return Patch(facecolor=style["fill"], hatch=style["hatch"], edgecolor=style["edgecolor"], label=label)


def _hatched(ax: Axes, x: float, y: float, text: str, style: dict, inset: float) -> None:
    """A hatched box whose text sits on a plain patch, so the hatching never crosses the letters."""
    cell(ax, x, y, "", style["fill"], inset=inset, hatch=style["hatch"], edgecolor=style["edgecolor"])
    ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})


def sampler_coverage(samples: int, orders: Mapping[str, Sequence[Sequence[Sequence[int]]]]) -> Figure:
    """One panel per loader set-up: a row per epoch, a box per sample, coloured by the rank that trained on it.

    ``orders[setup][rank][epoch]`` is the list of samples rank ``rank`` trained on in ``epoch``, in order
    (``dpcourse.ddp.demos.sampling.Coverage.orders``). A box holds the sample's position in its rank's epoch, so an
    epoch that repeats the one before shows the same numbers. Dark grey: both ranks trained on the sample
    (``2x``); hatched: no rank did.
    """
    ranks = len(next(iter(orders.values())))
    epochs = len(next(iter(orders.values()))[0])
    fig = new_figure(height=0.9 + len(orders) * (0.45 + 0.36 * epochs))
    for ax, (setup, by_rank) in zip(fig.subplots(len(orders), 1), orders.items(), strict=True):
        grid_axes(ax, samples, epochs)
        for epoch in range(epochs):
            owners = {i: [(r, by_rank[r][epoch].index(i)) for r in range(ranks) if i in by_rank[r][epoch]]
                      for i in range(samples)}
            for i, seen in owners.items():
                if not seen:
                    _hatched(ax, i, epoch, "never", MISSING, inset=0.04)
                elif len(seen) == 1:
                    cell(ax, i, epoch, str(seen[0][1]), device_color(seen[0][0]), inset=0.04)
                else:
                    cell(ax, i, epoch, f"{len(seen)}x", COMBINED_COLOR, inset=0.04)
        ax.set_yticks([e + 0.5 for e in range(epochs)], [f"epoch {e}" for e in range(epochs)], fontsize=8)
        ax.set_xticks([i + 0.5 for i in range(samples)], [str(i) for i in range(samples)] if ax is fig.axes[-1]
                      else [], fontsize=8)
        ax.set_title(setup, fontsize=9, loc="left")
    fig.axes[-1].set_xlabel("sample index (a box holds the sample's position in its rank's epoch)")
    handles = [Patch(color=device_color(r), label=f"trained by {device_label(r, unit='rank')} only")
               for r in range(ranks)]
    handles += [Patch(color=COMBINED_COLOR, label="trained by several ranks"), _handle(MISSING, "trained by none")]
    legend_below(fig, handles)
    fig.suptitle(f"Which rank trains on which sample: {samples} samples, {ranks} ranks, {epochs} epochs")
    return fig


def uneven_steps(batches: Sequence[int], steps: Mapping[str, Sequence[int]], failed: Mapping[str, Sequence[bool]],
                 notes: Mapping[str, str] | None = None) -> Figure:
    """One panel per way of training, a lane per rank, a box per step; rank ``r`` has ``batches[r]`` batches.

    ``steps[mode][r]`` is how many steps rank ``r`` finished and ``failed[mode][r]`` whether it failed
    (``dpcourse.ddp.demos.uneven.Uneven``). A rank that has finished its batches while another still trains either
    shadows the other's all-reduces (dotted grey: under ``join()``) or has left (blank); a rank whose all-reduce
    has no partner waits until the timeout (hatched). ``notes[mode]`` is added to that panel's title.
    """
    longest = max(batches)
    fig = new_figure(height=0.9 + len(steps) * (0.5 + 0.42 * len(batches)))
    for ax, (mode, done) in zip(fig.subplots(len(steps), 1), steps.items(), strict=True):
        grid_axes(ax, longest, len(batches))
        joined = mode != "no join"
        for rank, count in enumerate(done):
            for step in range(longest):
                if step < count:
                    cell(ax, step, rank, f"step {step + 1}", device_color(rank), inset=0.05)
                elif failed[mode][rank] and step == count:
                    _hatched(ax, step, rank, f"step {step + 1}: all-reduce waits, times out", WAITING, inset=0.05)
                elif joined and step >= batches[rank]:
                    cell(ax, step, rank, "joined: all-reduces zeros", SHADOW["fill"], inset=0.05,
                         hatch=SHADOW["hatch"], edgecolor=SHADOW["edgecolor"])
        ax.set_yticks([r + 0.5 for r in range(len(batches))],
                      [f"{device_label(r, unit='rank')}: {b} batches" for r, b in enumerate(batches)], fontsize=8)
        ax.set_xticks([])
        ax.set_title(f"{mode}: {notes[mode]}" if notes and mode in notes else mode, fontsize=9, loc="left")
    fig.axes[-1].set_xlabel("training steps, in order (a step ends with one all-reduce every rank must join)")
    handles = [_handle(WAITING, "waits for a partner that left"), _handle(SHADOW, "joined rank shadows it")]
    legend_below(fig, handles)
    fig.suptitle("Uneven inputs: the rank with an extra batch, without and with join()")
    return fig


def batchnorm_stats(reference: Mapping[str, torch.Tensor], per_replica: Sequence[Mapping[str, torch.Tensor]],
                    synced: Mapping[str, torch.Tensor]) -> Figure:
    """``running_mean`` and ``running_var`` per channel after one step: one device, each rank alone, synchronised.

    ``reference`` is one device with the whole batch, ``per_replica[r]`` rank ``r``'s ``BatchNorm1d`` and
    ``synced`` any rank's ``SyncBatchNorm1d``, each a mapping with ``"running_mean"`` and ``"running_var"``.
    """
    bars = [("one device, whole batch", reference, REFERENCE)]
    bars += [(f"per-replica BatchNorm, {device_label(r, unit='rank')}", stats, {"color": device_color(r)})
             for r, stats in enumerate(per_replica)]
    bars.append(("SyncBatchNorm1d, every rank", synced, {"color": COMBINED_COLOR}))
    width = 0.8 / len(bars)
    fig = new_figure(height=3.6)
    for ax, stat in zip(fig.subplots(1, 2), ("running_mean", "running_var"), strict=True):
        channels = len(reference[stat])
        for k, (_, stats, style) in enumerate(bars):
            ax.bar([c + (k - (len(bars) - 1) / 2) * width for c in range(channels)], stats[stat].tolist(), width,
                   **style)
        ax.set_xticks(range(channels), [f"channel {c}" for c in range(channels)], fontsize=8)
        ax.set_title(stat, fontsize=9)
        ax.axhline(0, color="black", linewidth=0.5)
    fig.axes[0].set_ylabel("value after one training step")
    handles = [Patch(label=label, **({"facecolor": "white", "edgecolor": "black", "hatch": "..."}
                                     if style is REFERENCE else style)) for label, _, style in bars]
    legend_below(fig, handles)
    fig.suptitle("BatchNorm's running statistics after one DDP step, 2 ranks with different shards")
    return fig
