"""Figure: HSDP's (2, 2) mesh as measured, which rank holds which rows, and the bytes each group moved in one step.

Rows of the mesh are shard groups (all-gathers and reduce-scatters), columns are replicate groups (all-reduces);
each rank's box says which rows of the first weight its shard holds, each group's label what ran on it and how
many bytes one of its ranks sent in one step (``sharded.hsdp_traffic``'s ring rule applied to the sizes recorded
on the ranks). Every number comes from ``sharded.hsdp.tour``'s results.
"""

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from .palette import device_color, new_figure, text_color

BOX = 0.62  # a rank's box, in mesh cells: the gaps between them hold the arrows
SHARD_COLOR, REPLICATE_COLOR = "#555555", "#CC79A7"


def _calls(entry: dict) -> str:
    return " + ".join(f"{count} {kind}" for kind, count in entry["calls"].items()) or "nothing"


def mesh_figure(results: list[dict]) -> Figure:
    """Draw the mesh of ``hsdp.tour``'s results: one box per rank at its mesh coordinate, the shard groups' traffic
    beside each row and the replicate groups' under each column."""
    rows = 1 + max(result["coordinate"][0] for result in results)
    columns = 1 + max(result["coordinate"][1] for result in results)
    fig = new_figure(height=1.3 + 1.5 * rows, width=7.5)
    ax = fig.subplots()
    ax.set_xlim(-0.05, columns + 1.75)
    ax.set_ylim(-0.55, rows + 0.1)
    ax.set_axis_off()
    ax.set_xticks([])
    ax.set_yticks([])
    for rank, result in enumerate(results):
        row, column = result["coordinate"]
        x, y = column + (1 - BOX) / 2, rows - 1 - row + (1 - BOX) / 2
        ax.add_patch(Rectangle((x, y), BOX, BOX, color=device_color(rank)))
        first, end = result["rows"]
        ax.text(x + BOX / 2, y + BOX / 2, f"rank {rank}\n0.weight rows\n{first}-{end - 1}", ha="center", va="center",
                fontsize=9, color=text_color(device_color(rank)))
    for row in range(rows):
        result = next(r for r in results if r["coordinate"] == (row, 0))
        entry, y = result["traffic"]["shard"], rows - 1 - row + 0.5
        ax.add_patch(FancyArrowPatch((0.5 + BOX / 2, y), (columns - 0.5 - BOX / 2, y), arrowstyle="<->",
                                     mutation_scale=12, color=SHARD_COLOR))
        ax.text(columns + 0.05, y, f"shard group {list(result['groups']['shard'])}\n{_calls(entry)}\n"
                f"{entry['sent']:,.0f} bytes sent per rank", va="center", fontsize=8, color=SHARD_COLOR)
    for column in range(columns):
        result = next(r for r in results if r["coordinate"] == (0, column))
        entry = result["traffic"]["replicate"]
        ax.add_patch(FancyArrowPatch((column + 0.5, rows - 0.5 - BOX / 2), (column + 0.5, 0.5 + BOX / 2),
                                     arrowstyle="<->", mutation_scale=12, color=REPLICATE_COLOR))
        ax.text(column + 0.5, -0.05, f"replicate group {list(result['groups']['replicate'])}\n{_calls(entry)}\n"
                f"{entry['sent']:,.0f} bytes sent per rank", ha="center", va="top", fontsize=8,
                color=REPLICATE_COLOR)
    ax.set_title(f"HSDP on a ({rows}, {columns}) mesh: rows shard, columns replicate (first step, measured)",
                 fontsize=10)
    return fig
