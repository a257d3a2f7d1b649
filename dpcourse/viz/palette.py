"""Colours and small drawing helpers shared by every figure, so a device looks the same everywhere.

Devices take the Okabe–Ito palette (Okabe & Ito, "Color Universal Design", 2008), which stays distinct
under the common forms of colour blindness: replica / device position ``i`` is always ``device_color(i)``.
Steps of a DataParallel iteration (used by the timeline) take Paul Tol's pale "light" scheme instead, so
a step's fill is never mistaken for a device's strong colour. Grey always means "idle / not used".
"""

from collections.abc import Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..ui.png import png_bytes
from ..ui.words import plural as plural  # the figures take it from here, with the colours

# Okabe–Ito, reordered so the first devices get the colours easiest to tell apart on white.
DEVICE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#000000")
IDLE_COLOR = "#BBBBBB"
COMBINED_COLOR = "#555555"  # a result made from every replica's part: a sum, a mean of means
# The single-device oracle every DataParallel result is compared with: a hollow black bar or line.
REFERENCE = {"facecolor": "white", "edgecolor": "black", "hatch": "...", "linewidth": 1}
REFERENCE_COLOR = "black"
STEP_COLORS = {
    "scatter": "#77AADD",
    "replicate": "#99DDFF",
    "forward": "#44BB99",
    "gather": "#EEDD88",
    "gather-backward": "#BBCC33",
    "backward": "#EE8866",
    "reduce-add": "#FFAABB",
    "scatter-backward": "#AAAA00",
    "allreduce": "#DDDDDD",  # DistributedDataParallel's steps, for lesson 10's timelines
    "optimizer": "#CCBB44",
}
MAX_WIDTH = 9.0  # inches: a figure wider than this is shrunk by Jupyter and its text becomes unreadable


def device_color(i: int) -> str:
    """The colour of replica / device position ``i`` (0-based); after 8 devices the colours repeat."""
    return DEVICE_COLORS[i % len(DEVICE_COLORS)]


def step_color(step: str) -> str:
    """The pale fill of one DataParallel step (``"forward"``, ``"reduce-add"``, ...); grey if unknown."""
    return STEP_COLORS.get(step, IDLE_COLOR)


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (by its relative luminance)."""
    r, g, b = to_rgb(fill)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


class CourseFigure(Figure):
    """A ``Figure`` that Jupyter shows as a PNG even when pyplot was never imported.

    Made without pyplot, a figure is not in ``plt``'s list, so it never leaks into later cells or shows
    twice; but then nothing has told IPython how to draw it either (matplotlib-inline registers its PNG
    printer for ``Figure`` only once pyplot is loaded), so it would print as ``<Figure size 900x400 ...>``.
    ``_repr_png_`` is IPython's fallback for exactly that; once pyplot is loaded its printer wins, still once.
    """

    def _repr_png_(self) -> bytes:
        return png_bytes(self, pixel_ratio=1, tight=True)  # IPython cannot be told a display width here


def new_figure(height: float, width: float = MAX_WIDTH) -> Figure:
    """A ``CourseFigure`` not registered with pyplot: nothing leaks into ``plt`` state or shows twice in Jupyter."""
    if width > MAX_WIDTH:
        raise ValueError(f"Figures are at most {MAX_WIDTH} inches wide to stay readable in a notebook; got {width}.")
    return CourseFigure(figsize=(width, height), layout="constrained")


def device_label(i: int, device: torch.device | str | None = None, unit: str = "replica") -> str:
    """``"replica 1 (cpu)"``: how every figure names a replica (or a DDP ``unit="rank"``) and its device."""
    return f"{unit} {i}" if device is None else f"{unit} {i} ({device})"


def device_handles(devices: Sequence[torch.device | str | None]) -> list[Patch]:
    """Legend entries, one per device position, in the device colours."""
    return [Patch(color=device_color(i), label=device_label(i, d)) for i, d in enumerate(devices)]


def idle_handle(label: str = "idle") -> Patch:
    return Patch(facecolor=IDLE_COLOR, edgecolor="white", label=label)


def legend_below(fig: Figure, handles: Sequence[Patch]) -> None:
    """The figure's legend in rows under the plots, where it never covers the title or the data."""
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=8)


def cell(
    ax: Axes, x: float, y: float, text: str = "", fill: str = IDLE_COLOR, inset: float = 0.0, **style
) -> Rectangle:
    """A 1 x 1 box at (x, y), shrunk by ``inset`` per side, with ``text`` centred in a colour that reads on ``fill``.

    ``style`` goes to ``Rectangle`` (``hatch``, ``alpha``, ``edgecolor``, ``linewidth``, ``gid``...).
    """
    style = {"edgecolor": "white", "linewidth": 1.5, **style}
    box = ax.add_patch(Rectangle((x + inset, y + inset), 1 - 2 * inset, 1 - 2 * inset, facecolor=fill, **style))
    if text:
        on = "black" if style.get("alpha", 1) < 0.6 else text_color(fill)
        ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=8, color=on)
    return box


def grid_axes(ax: Axes, n_cols: int, n_rows: int) -> None:
    """Set up ``ax`` as a grid of unit cells, row 0 at the top, with no frame."""
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(length=0)
