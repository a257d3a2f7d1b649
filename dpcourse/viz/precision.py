"""Figures for mixed precision: the dtype each thread computed in, GradScaler's scale, compressed all-reduce error.

A dtype has the same colour in every figure (``dtype_color``), so float16 and bfloat16 read the same in all three.
"""

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .palette import cell, grid_axes, legend_below, new_figure

DTYPE_COLORS = {torch.float32: "#EEDD88", torch.bfloat16: "#77AADD", torch.float16: "#EE8866"}


def dtype_color(dtype: torch.dtype) -> str:
    return DTYPE_COLORS.get(dtype, "#BBBBBB")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_handles() -> list[Patch]:
    return [Patch(color=color, label=_dtype_name(dtype)) for dtype, color in DTYPE_COLORS.items()]


def autocast_threads(found: Mapping[str, Mapping[str, Sequence[tuple[str, torch.dtype]]]]) -> Figure:
    """One panel per autocast block (``found``'s keys, e.g. ``"autocast(dtype=float16)"``), one row per way of
    running the model (``dpcourse.precision.thread_dtypes``), one box per thread the first layer ran in, filled
    with the colour of the dtype it computed in."""
    panels = list(found.items())
    ways = list(panels[0][1])
    fig = new_figure(height=0.6 + 0.62 * len(ways))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for column, (ax, (title, by_way)) in enumerate(zip(axes, panels, strict=True)):
        width = max(len(threads) for threads in by_way.values())
        grid_axes(ax, width, len(ways))
        for row, way in enumerate(ways):
            for i, (thread, dtype) in enumerate(by_way[way]):
                cell(ax, i, row, f"{thread}\n{_dtype_name(dtype)}", dtype_color(dtype), inset=0.04)
        ax.set_xticks([])
        ax.set_yticks([row + 0.5 for row in range(len(ways))], ways if column == 0 else [""] * len(ways))
        ax.set_title(title, fontsize=10)
    legend_below(fig, _dtype_handles())
    fig.suptitle("Measured: the thread each forward of the first Linear ran in, and the dtype it computed in")
    return fig


def loss_scale(steps: Sequence[Any]) -> Figure:
    """GradScaler's scale at every step (log2), with each step marked taken or skipped.

    ``steps`` are ``dpcourse.precision.ScalerStep``s: ``scale``, ``found_inf``, ``stepped``, ``next_scale``.
    """
    fig = new_figure(height=3.6)
    ax = fig.subplots()
    numbers = range(1, len(steps) + 1)
    exponents = [math.log2(step.scale) for step in steps]
    ax.step(numbers, exponents, where="mid", color="black", linewidth=1, gid="scale")
    skipped = [(n, e) for n, e, step in zip(numbers, exponents, steps, strict=True) if not step.stepped]
    taken = [(n, e) for n, e, step in zip(numbers, exponents, steps, strict=True) if step.stepped]
    if skipped:
        ax.scatter(*zip(*skipped, strict=True), marker="x", s=60, color="black", label="step skipped: inf or NaN found")
    if taken:
        ax.scatter(*zip(*taken, strict=True), marker="o", s=40, facecolors="white", edgecolors="black",
                   label="step taken")
    low, high = math.floor(min(exponents)), math.ceil(max(exponents))
    ax.set_yticks(range(low, high + 1), [f"2^{e}" for e in range(low, high + 1)])
    ax.set_ylim(low - 0.5, high + 0.5)
    ax.set_xticks(list(numbers))
    ax.set_xlabel("training step")
    ax.set_ylabel("loss scale")
    ax.legend(loc="upper right", fontsize=8)
    fig.suptitle("Measured: GradScaler halves the scale after every overflow, doubles it after a run of good steps")
    return fig


def compression_error(result: Any) -> Figure:
    """Bars: the error of each compressing DDP hook against the uncompressed all-reduce, for each loss multiplier.

    ``result`` is a ``dpcourse.ddp.demos.compression.Compression``; its ``rows`` hold ``multiplier``, ``hook``,
    ``relative_error`` (max |error| / max |g|), ``lost`` (share of entries that became 0) and ``not_finite``.
    A hatched bar reaching the top is an all-reduce that overflowed to inf or NaN.
    """
    rows = result.rows
    multipliers = list(dict.fromkeys(row["multiplier"] for row in rows))
    hooks = list(dict.fromkeys(row["hook"] for row in rows))
    colors = {hook: dtype_color(torch.bfloat16 if "bf16" in hook else torch.float16) for hook in hooks}
    finite = [row["relative_error"] for row in rows if row["not_finite"] == 0]
    top = 10 ** math.ceil(math.log10(max(finite))) * 10
    fig = new_figure(height=4.0)
    ax = fig.subplots()
    width = 0.8 / len(hooks)
    for row in rows:
        x = multipliers.index(row["multiplier"]) + (hooks.index(row["hook"]) - (len(hooks) - 1) / 2) * width
        if row["not_finite"]:
            ax.bar(x, top, width=width, color=colors[row["hook"]], hatch="xx", edgecolor="black", gid="overflow")
            ax.text(x, top * 1.3, "inf/NaN", ha="center", va="bottom", fontsize=7)
            continue
        ax.bar(x, row["relative_error"], width=width, color=colors[row["hook"]], gid="error")
        if row["lost"] >= 0.005:
            ax.text(x, row["relative_error"] * 1.3, f"{row['lost']:.0%}\nbecame 0", ha="center", va="bottom",
                    fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(top=top * 10)
    labels = [f"2^{math.log2(m):.0f}" if m >= 2 and math.log2(m).is_integer() else f"{m:g}" for m in multipliers]
    ax.set_xticks(range(len(multipliers)), labels)
    ax.set_xlabel("loss multiplied by (every gradient scales with it)")
    ax.set_ylabel("max |error| / max |gradient|")
    legend_below(fig, [Patch(color=colors[hook], label=hook) for hook in hooks])
    fig.suptitle("Measured on 2 gloo ranks: compressed all-reduce against the float32 all-reduce")
    return fig
