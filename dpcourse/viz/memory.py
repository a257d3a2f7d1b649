"""Memory per device: stacked bars, kind by kind, and the allocator's timeline of one step.

``memory_bars`` draws one panel per ``dpcourse.memory.Breakdown`` (one device, DataParallel, DDP), one bar per
device. What DataParallel's device 0 holds beyond device 1 is hatched: its surplus. ``memory_timeline`` draws
the bytes allocated during one profiled step (``dpcourse.memory.profile_step``) against the kinds added up.
"""

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dpcourse.memory import CATEGORIES, MIB, Breakdown, ProfiledStep

from .palette import IDLE_COLOR, device_color, new_figure

# Paul Tol's "muted" scheme (colour-blind safe), apart from the devices' Okabe-Ito colours: a kind is not a device.
CATEGORY_COLORS = dict(zip(CATEGORIES, ("#332288", "#88CCEE", "#DDCC77", "#117733", "#CC6677", "#AA4499"),
                           strict=True))
SURPLUS_HATCH = "///"
PHASE_COLORS = {"forward": "#44BB99", "loss": "#EEDD88", "backward": "#EE8866", "optimizer step": "#CCBB44"}


def _title(breakdown: Breakdown) -> str:
    s = breakdown.setup
    if s.kind == "one device":
        return f"one device\nbatch {s.batch}\n{s.optimizer}"
    units = "ranks" if s.kind == "DDP" else "devices"
    return f"{s.kind}, {s.devices} {units}\nbatch {s.batch} in all\n{s.optimizer}"


NARROWEST = 2.6  # a panel's width in bars: room for its title above a single bar


TITLE = "What each device holds over one training step"


def memory_bars(breakdowns: Sequence[Breakdown], title: str = TITLE) -> Figure:
    """One panel per breakdown, one stacked bar per device (MiB, or GiB from 1 GiB), device 0's surplus hatched."""
    if not breakdowns:
        raise ValueError("memory_bars needs at least one Breakdown, e.g. dpcourse.memory.measure(Setup()).")
    widths = [max(NARROWEST, len(b.devices) + 0.6) for b in breakdowns]
    figure = new_figure(height=4.6, width=min(9.0, max(7.5, 1.6 + 0.75 * sum(widths))))  # 7.5: room for the legend
    axes = figure.subplots(1, len(breakdowns), sharey=True, width_ratios=widths, squeeze=False)[0]
    unit, scale = ("GiB", 2**30) if max(max(b.totals) for b in breakdowns) >= 2**30 else ("MiB", MIB)
    top = max(max(b.totals) for b in breakdowns) / scale
    for ax, breakdown, width in zip(axes, breakdowns, widths, strict=True):
        surplus = breakdown.surplus() if breakdown.setup.kind == "DataParallel" else {}
        positions = range(len(breakdown.devices))
        bottoms = [0.0 for _ in positions]
        for name in CATEGORIES:  # one call per kind for every device's bar: a call per bar is slow
            values = [device[name] / scale for device in breakdown.devices]
            shared = [value - (surplus.get(name, 0) / scale if i == 0 else 0) for i, value in enumerate(values)]
            ax.bar(positions, shared, bottom=bottoms, color=CATEGORY_COLORS[name], edgecolor="white", linewidth=0.5)
            bottoms = [b + v for b, v in zip(bottoms, shared, strict=True)]
            if surplus.get(name):
                extra = values[0] - shared[0]
                ax.bar(0, extra, bottom=bottoms[0], color=CATEGORY_COLORS[name], edgecolor="black",
                       hatch=SURPLUS_HATCH, linewidth=0.5)
                bottoms[0] += extra
        for i, total in enumerate(bottoms):
            ax.text(i, total + top * 0.02, f"{total:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(breakdown.devices)), [str(i) for i in range(len(breakdown.devices))])
        for i, label in enumerate(ax.get_xticklabels()):
            label.set_color(device_color(i) if breakdown.totals[i] else IDLE_COLOR)
        ax.set_xlabel(breakdown.unit)
        ax.set_ylabel(unit)
        middle, half = (len(breakdown.devices) - 1) / 2, (width - 0.2) / 2  # every panel: bars of one width
        ax.set_xlim(middle - half, middle + half)
        ax.set_title(_title(breakdown), fontsize="small")
    axes[0].set_ylim(0, top * 1.12)
    handles = [Patch(color=CATEGORY_COLORS[name], label=name) for name in CATEGORIES
               if any(d[name] for b in breakdowns for d in b.devices)]
    if any(b.setup.kind == "DataParallel" and any(b.surplus().values()) for b in breakdowns):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch=SURPLUS_HATCH,
                             label="hatched: on device 0 only (DataParallel's surplus)"))
    figure.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    figure.suptitle(title, fontsize="medium")
    return figure


def memory_timeline(profiled: ProfiledStep, kinds_added_up: int) -> Figure:
    """The bytes allocated after each allocation or free of one step, its phases shaded, and the kinds' sum."""
    figure = new_figure(height=3.8, width=8)
    ax = figure.add_subplot()
    values = [profiled.start / MIB] + [b / MIB for b in profiled.allocated]
    ax.step(range(len(values)), values, where="post", color="black", linewidth=1.2, label="allocated (profiler)")
    for name, (first, last) in profiled.phases.items():
        if first >= 0:
            ax.axvspan(first + 0.5, last + 1.5, color=PHASE_COLORS[name], alpha=0.35, linewidth=0, label=name)
    ax.axhline(kinds_added_up / MIB, color="#CC6677", linestyle="--", linewidth=1.2,
               label=f"kinds added up: {kinds_added_up / MIB:.1f} MiB")
    peak_at = values.index(max(values))
    ax.plot(peak_at, values[peak_at], "o", color="black", label=f"peak: {values[peak_at]:.1f} MiB")
    ax.set(xlabel="allocations and frees, in order", ylabel="MiB allocated", xlim=(0, len(values) - 1),
           ylim=(0, max(max(values), kinds_added_up / MIB) * 1.15))
    s = profiled.setup
    figure.suptitle(f"One training step on one device: batch {s.batch}, {s.optimizer}", fontsize="medium")
    ax.legend(loc="lower right", fontsize="small", ncols=2)
    return figure
