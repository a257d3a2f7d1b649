"""Figures for collectives: which rank holds what before and after one, and the bytes each rank sends.

``collective(moved)`` draws a grid per side, rank by piece. A cell is striped in the colours of the ranks
whose inputs make up its value (``device_color(rank)``, as a device everywhere in the course): one stripe is
a copy of one rank's piece, four stripes are a sum over four ranks. ``bytes_per_rank(comparison)`` draws the
bytes each rank sent in each all-reduce, counted, in multiples of the tensor's size.
"""

from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from .palette import COMBINED_COLOR, IDLE_COLOR, device_color, grid_axes, legend_below, new_figure, plural

if TYPE_CHECKING:  # only for the annotations: importing dpcourse.ddp loads torch.distributed, which most lessons skip
    from dpcourse.ddp.demos.collectives import Moved
    from dpcourse.ddp.demos.compare import Comparison

UNDEFINED_HATCH = "////"


def _cell(ax: Axes, column: int, row: int, value: int | None, sources: tuple[int, ...], defined: bool) -> None:
    if value is None:
        ax.add_patch(Rectangle((column + 0.06, row + 0.06), 0.88, 0.88, facecolor="white", edgecolor=IDLE_COLOR,
                               linestyle="--"))
        return
    width = 0.88 / len(sources)
    for i, rank in enumerate(sources):
        ax.add_patch(Rectangle((column + 0.06 + i * width, row + 0.06), width, 0.88, facecolor=device_color(rank),
                               edgecolor="none", alpha=1.0 if defined else 0.35))
    if not defined:
        ax.add_patch(Rectangle((column + 0.06, row + 0.06), 0.88, 0.88, facecolor="none", edgecolor=COMBINED_COLOR,
                               hatch=UNDEFINED_HATCH, linewidth=0.5))
    ax.text(column + 0.5, row + 0.5, str(value), ha="center", va="center", fontsize=8,
            color="black" if defined else COMBINED_COLOR,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})


def _grid(ax: Axes, values: list[list[int | None]], sources: list[list[tuple[int, ...]]], defined: list[bool],
          title: str) -> None:
    n_ranks, n_pieces = len(values), len(values[0])
    for rank in range(n_ranks):
        for piece in range(n_pieces):
            _cell(ax, piece, rank, values[rank][piece], sources[rank][piece], defined[rank])
    grid_axes(ax, n_pieces, n_ranks)
    ax.set_xticks([p + 0.5 for p in range(n_pieces)], [f"piece {p}" for p in range(n_pieces)], fontsize=8)
    ax.set_yticks([r + 0.5 for r in range(n_ranks)], [f"rank {r}" for r in range(n_ranks)], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_title(title, fontsize=9)


def collective(moved: "Moved") -> Figure:
    """Rank by piece, before and after ``moved.call``; cells striped by the ranks that contributed to them.

    A dashed empty cell is a piece the rank does not hold (all-gather's inputs, reduce-scatter's outputs).
    A hatched, faded cell holds a value torch does not define: a non-destination rank after ``reduce``.
    """
    n = len(moved.before)
    fig = new_figure(height=0.9 + 0.42 * n, width=8.0)
    left, right = fig.subplots(1, 2)
    _grid(left, moved.before, moved.before_from, [True] * n, "before")
    _grid(right, moved.after, moved.after_from, moved.defined, "after")
    fig.suptitle(moved.call, fontsize=10, family="monospace")
    handles = [Patch(color=device_color(r), label=f"from rank {r}") for r in range(n)]
    if any(v is None for row in moved.before + moved.after for v in row):
        handles.append(Patch(facecolor="white", edgecolor=IDLE_COLOR, linestyle="--", label="no piece there"))
    if not all(moved.defined):
        handles.append(Patch(facecolor="white", edgecolor=COMBINED_COLOR, hatch=UNDEFINED_HATCH,
                             label="left over: not defined"))
    legend_below(fig, handles)
    return fig


BARS = (  # (label, algorithm, which ranks): the bars drawn for every rank count
    ("reduce-then-broadcast, rank 0", "reduce-then-broadcast", "first"),
    ("reduce-then-broadcast, other ranks", "reduce-then-broadcast", "others"),
    ("ring, every rank (the most one sent)", "ring", "all"),
)


def bytes_per_rank(comparison: "Comparison", nbytes: int, dataparallel: dict[int, float] | None = None) -> Figure:
    """Bytes each rank sent in one all-reduce of ``nbytes``, counted, as a multiple of ``nbytes``, per rank count.

    ``dataparallel`` maps a device count to what DataParallel sent out of device 0 in one step (replicate,
    measured by ``dpcourse.trace``) as a multiple of the parameters' bytes: drawn as a hatched bar.
    """
    ns = comparison.world_sizes
    bars = [(label, [_sent(comparison.find(algorithm, n, nbytes).sent, ranks) / nbytes for n in ns])
            for label, algorithm, ranks in BARS]
    if dataparallel:
        bars.append(("DataParallel, device 0 (replicate; S = its model)", [dataparallel[n] for n in ns]))
    fig = new_figure(height=3.6, width=8.0)
    ax = fig.subplots()
    width = 0.8 / len(bars)
    styles = [{"color": COMBINED_COLOR}, {"color": IDLE_COLOR}, {"color": "black"},
              {"facecolor": "white", "edgecolor": COMBINED_COLOR, "hatch": "xx"}]
    for i, ((label, heights), style) in enumerate(zip(bars, styles, strict=False)):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(ns))]
        drawn = ax.bar(xs, heights, width * 0.9, label=label, **style)
        ax.bar_label(drawn, [f"{h:.2f}" for h in heights], fontsize=7, padding=2)
    ax.axhline(2, color="black", linestyle=":", linewidth=1)
    ax.text(len(ns) - 0.5, 2.05, "2 S: the ring's bound", ha="right", va="bottom", fontsize=8)
    ax.set_xticks(range(len(ns)), [plural(n, "rank") for n in ns])
    ax.set_ylabel(f"bytes sent by one rank / S\n(S = {nbytes:,} bytes)")
    ax.set_ylim(0, max(3.4, max(max(h) for _, h in bars) + 0.6))
    ax.set_title("bytes one rank sends per all-reduce, counted", fontsize=10)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    return fig


def _sent(sent: list[int], ranks: str) -> int:
    if ranks == "first":
        return sent[0]
    others = sent[1:] if ranks == "others" else sent
    return max(others)
