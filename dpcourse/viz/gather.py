"""Figure: per-replica outputs landing in the one gathered tensor, and what happens to scalar outputs."""

import textwrap
import warnings
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure

from dpcourse.devices import DeviceLike
from dpcourse.devices import devices as choose_devices
from dpcourse.scatter_gather import gather

from .palette import cell, device_color, device_handles, legend_below, new_figure, plural

GAP = 0.6  # rows of space between two replicas' blocks on the left
OUTPUT_X, GATHERED_X = 0, 3  # the two columns of the picture


def gather_view(
    output_sizes: Sequence[int], target_device: DeviceLike = "cpu", scalars: bool = False, features: int | None = None
) -> Figure:
    """Draw what ``dpcourse.gather`` does with one output per replica: concatenate them on ``target_device``.

    Replica ``i`` (on ``dpcourse.devices(n)[i]``) returns ``output_sizes[i]`` rows, each holding the number
    ``i``; after the real gather, every row of the result is coloured by the number it holds, so the picture
    shows where each row really landed: in replica order, block after block, with no padding or reordering.

    ``features=4`` gives every row 4 numbers, as a model with 4 outputs per sample returns: the shapes then
    read ``[3, 4]`` and ``[10, 4]``, as printed beside the figure. ``scalars=True`` makes every replica return
    a 0-d tensor instead (a loss, say; ``output_sizes`` then
    only gives the number of replicas). Gather cannot concatenate 0-d tensors, so it turns them into a
    vector of length n and warns; the figure quotes that warning. Averaging that vector is *not* the mean
    over the batch when chunks are uneven (see ``per_replica_mean_bias``).

    The returned figure carries ``fig.dpcourse_data = {"gathered", "owners", "warning"}``.
    """
    devices = choose_devices(len(output_sizes))
    sizes = [1] * len(devices) if scalars else list(output_sizes)
    row = () if features is None else (features,)
    outputs = [torch.tensor(float(i), device=d) if scalars else torch.full((b, *row), float(i), device=d)
               for i, (b, d) in enumerate(zip(sizes, devices, strict=True))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gathered = gather(outputs, target_device)
    warning = str(caught[0].message) if caught else None
    owners = [int(v) for v in gathered.reshape(len(gathered), -1)[:, 0].tolist()]  # a row holds its replica number

    rows_height = max(0.8, 0.32 * (sum(sizes) + GAP * len(sizes)))  # at least the axis label's length
    fig = new_figure(height=2.2 + rows_height + (0.6 if warning else 0), width=7.5)
    ax = fig.subplots()
    top = 0.0
    for i, (output, size) in enumerate(zip(outputs, sizes, strict=True)):
        for r in range(size):
            cell(ax, OUTPUT_X, top + r, "0-d scalar" if scalars else f"row {r}", device_color(i), gid="output")
        shape = list(output.shape)
        ax.text(OUTPUT_X - 0.1, top + size / 2, f"replica {i}\nshape {shape}", ha="right", va="center", fontsize=8)
        start = sum(sizes[:i])
        if size:
            ax.annotate("", xy=(GATHERED_X, start + size / 2 + GAP * (len(sizes) - 1) / 2),
                        xytext=(OUTPUT_X + 1, top + size / 2),
                        arrowprops={"arrowstyle": "->", "color": device_color(i), "lw": 1.5})
        top += size + GAP
    offset = GAP * (len(sizes) - 1) / 2
    for row, owner in enumerate(owners):
        cell(ax, GATHERED_X, offset + row, f"[{row}] = {owner}", device_color(owner), gid="gathered")

    ax.set_xlim(OUTPUT_X - 1.2, GATHERED_X + 1.2)
    ax.set_ylim(top - GAP + 0.2, -0.2)
    columns = ["replica outputs", f"gathered on {gathered.device}\n(a row holds its replica's number)"]
    ax.set_xticks([OUTPUT_X + 0.5, GATHERED_X + 0.5], columns)
    ax.set_yticks([])
    ax.set_xlabel("step: outputs (left) are copied, in replica order, into one new tensor (right)")
    ax.set_ylabel("rows of the gathered tensor")  # its shape is in the title
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    legend_below(fig, device_handles(devices))
    rows = "row" if sizes == [1] else "rows"
    what = plural(len(sizes), "scalar") if scalars else f"outputs of {', '.join(map(str, sizes))} {rows}"
    fig.suptitle(f"gather: {what} → one tensor of shape {list(gathered.shape)} on {gathered.device}")
    if warning:
        ax.set_title("gather warned, UserWarning:\n" + textwrap.fill(warning, 80), fontsize=8,
                     bbox={"facecolor": "#FFF3CC", "edgecolor": device_color(1)})
    fig.dpcourse_data = {"gathered": gathered, "owners": owners, "warning": warning}
    return fig
