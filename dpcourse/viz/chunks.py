"""Figure: how ``scatter`` cuts a batch into chunks, which device gets which rows, and who gets nothing."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dpcourse.devices import devices as choose_devices
from dpcourse.scatter_gather import scatter_kwargs

from .palette import (
    IDLE_COLOR,
    cell,
    device_color,
    device_handles,
    grid_axes,
    idle_handle,
    legend_below,
    new_figure,
    plural,
)

MAX_LABELLED_ROWS = 32  # beyond this, row numbers no longer fit in their cells
DROPPED = {"hatch": "///", "edgecolor": IDLE_COLOR}  # on white: rows no replica receives


def _row_numbers(size: int, rank: int, dim: int) -> torch.Tensor:
    """A tensor of ``rank`` dims holding 0 .. size-1 along ``dim``: scattered, its chunks say which rows went where."""
    shape = [1] * rank
    shape[dim] = size
    return torch.arange(size).view(shape)


def _received(entries: Sequence, pick: Callable[[Any], torch.Tensor | None]) -> list[list[int] | None]:
    """Per replica, the row numbers ``pick(entry)`` found in its arguments, or None where it got none (padding)."""
    rows = []
    for entry in entries:
        chunk = pick(entry)
        rows.append(None if chunk is None else chunk.flatten().tolist())
    return rows


def chunk_split(
    batch: torch.Tensor | int, n_devices: int, dim: int = 0, kwargs_batches: Mapping[str, int] | None = None
) -> Figure:
    """Draw which rows of ``batch`` (a tensor, or just its size) ``dpcourse.scatter`` sends to each device.

    Top: one cell per row (per slice along ``dim``), coloured by the device that receives it. Keyword
    tensors in ``kwargs_batches`` (name -> batch size) are split alongside, with ``scatter_kwargs``.
    Bottom: what each device's replica is called with. The surprises it shows, straight from the real call:

    * ``torch.chunk`` makes chunks of ``ceil(B / n)`` rows, so 6 rows on 4 devices give 3 chunks and the
      4th device is **idle** (grey);
    * a keyword batch with fewer chunks is **padded**: that replica is called without the argument;
    * keyword tensors of different sizes are zipped, so rows beyond the shortest one's chunk count are
      **dropped** (hatched): no replica ever sees them.
    """
    devices = choose_devices(n_devices)
    rank = batch.dim() if isinstance(batch, torch.Tensor) else 1
    size = batch.size(dim) if isinstance(batch, torch.Tensor) else batch
    tensors = {"batch": _row_numbers(size, rank, dim)}
    tensors |= {name: _row_numbers(b, rank, dim) for name, b in (kwargs_batches or {}).items()}
    keywords = {name: t for name, t in tensors.items() if name != "batch"}
    inputs, kwargs = scatter_kwargs((tensors["batch"],), keywords or None, devices, dim)
    received = {"batch": _received(inputs, lambda args: args[0] if args else None)}
    received |= {name: _received(kwargs, lambda kw, name=name: kw.get(name)) for name in keywords}
    chunks = [len(rows) for rows in received["batch"] if rows is not None]

    fig = new_figure(height=1.6 + 0.45 * (len(tensors) + n_devices))
    top, bottom = fig.subplots(2, 1, height_ratios=[len(tensors) + 0.6, n_devices])
    dropped = _draw_rows(top, tensors, received, size)
    _draw_devices(bottom, devices, received, dim % rank)
    along = plural(size, "row") if dim == 0 else f"{plural(size, 'slice')} along dim {dim}"
    idle = n_devices - len(inputs)
    note = f" ({idle} idle)" if idle else ""
    title = f"{along} on {plural(n_devices, 'device')}: chunks {', '.join(map(str, chunks))}{note}"
    if any(rows is None for name in keywords for rows in received[name]):
        # torch 2.13's scatter_kwargs pads kwargs only while they are fewer than the positional *arguments*
        # (torch/nn/parallel/scatter_gather.py:103), never with one positional argument, as here.
        title += "\ndpcourse pads the keywords; torch 2.13 does not, and its parallel_apply raises AssertionError"
    fig.suptitle(title)
    top.set_xlabel(f"row index along dim {dim}" if dim == 0 else f"slice index along dim {dim}")
    top.set_ylabel("tensor")
    bottom.set_xlabel("argument the replica is called with")
    bottom.set_ylabel("device")
    handles = device_handles(devices[: len(inputs)]) + ([idle_handle("idle: no chunk")] if idle else [])
    if dropped:
        handles.append(Patch(facecolor="white", label="dropped: no replica", **DROPPED))
    legend_below(fig, handles)
    return fig


def _draw_rows(ax: Axes, tensors: dict[str, torch.Tensor], received: dict[str, list], width: int) -> bool:
    """One line of cells per tensor; a cell per row, in the colour of the device that got it. True if any dropped."""
    dropped = False
    width = max(width, *(t.numel() for t in tensors.values()))
    grid_axes(ax, width, len(tensors))
    for y, (name, rows_per_replica) in enumerate(received.items()):
        owner = {row: i for i, rows in enumerate(rows_per_replica) for row in rows or []}
        for row in range(tensors[name].numel()):
            label = str(row) if width <= MAX_LABELLED_ROWS else ""
            if row in owner:
                cell(ax, row, y, label, device_color(owner[row]), gid="row")
            else:
                cell(ax, row, y, label, "white", gid="row", **DROPPED)
                dropped = True
    ax.set_yticks([y + 0.5 for y in range(len(tensors))], [f"{n} ({t.numel()})" for n, t in tensors.items()])
    ax.set_xticks([])
    return dropped


def _draw_devices(ax: Axes, devices: list[torch.device], received: dict[str, list], dim: int) -> None:
    """One line per device, one column per argument: the rows each replica gets, padding, or idle."""
    unit = "row" if dim == 0 else "slice"
    grid_axes(ax, len(received), len(devices))
    for col, (name, rows_per_replica) in enumerate(received.items()):
        for i in range(len(devices)):
            if i >= len(rows_per_replica):
                cell(ax, col, i, "idle", IDLE_COLOR, gid="idle")
            elif rows_per_replica[i] is None:
                cell(ax, col, i, f"no {name}: padded, called without it", "white", gid="padded", **DROPPED)
            else:
                got = rows_per_replica[i]
                index = ", ".join([":"] * dim + [f"{got[0]}:{got[-1] + 1}"])
                text = f"{name}[{index}]  ({plural(len(got), unit)})"
                cell(ax, col, i, text, device_color(i), gid="chunk")
    ax.set_xticks([c + 0.5 for c in range(len(received))], list(received))
    ax.xaxis.set_ticks_position("top")
    ax.set_yticks([i + 0.5 for i in range(len(devices))], [f"{i}: {d}" for i, d in enumerate(devices)])
