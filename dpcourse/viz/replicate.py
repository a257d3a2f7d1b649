"""Figure: what each replica shares with the original module, and what it copies."""

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from torch import nn

from dpcourse.devices import DeviceLike
from dpcourse.replicate import replicate

from .palette import IDLE_COLOR, cell, device_color, device_label, grid_axes, legend_below, new_figure, plural

SHARED = "shared storage"
COPY = "copy"
BY_REFERENCE = "same object"
OWN = "own object"
LEGEND_GREY = "#555555"  # the legend's swatches stand for any device's colour
INSET = 0.05  # a gap between cells, so that each outline stays visible


def _entries(module: nn.Module) -> Iterator[tuple[str, str, nn.Module, str]]:
    """``(kind, dotted name, submodule, attribute name)`` for every parameter, buffer and plain attribute.

    Plain attributes only of modules defined outside torch: the settings of torch's own layers
    (``in_features``, ``eps``, ``momentum``...) are shared the same way and would make the map a screen tall.
    """
    for prefix, sub in module.named_modules():
        dotted = f"{prefix}." if prefix else ""
        for name, _ in sub.named_parameters(recurse=False):
            yield "parameter", dotted + name, sub, name
        for name, _ in sub.named_buffers(recurse=False):
            yield "buffer", dotted + name, sub, name
        if type(sub).__module__.split(".")[0] == "torch":
            continue
        for name in vars(sub):
            if not name.startswith("_") and name != "training":
                yield "attribute", dotted + name, sub, name


def _relation(kind: str, original: Any, copy: Any) -> str:
    """Tensors are compared by storage (a view shares it); plain attributes by identity, as Python sees them."""
    if kind == "attribute":
        return BY_REFERENCE if copy is original else OWN
    same = copy.untyped_storage().data_ptr() == original.untyped_storage().data_ptr()
    return SHARED if same else COPY


def _style(relation: str, color: str) -> dict[str, Any]:
    """A replica cell in its device ``color``: solid = shared storage, pale + hatched = copy, outline = same object."""
    if relation == SHARED:
        return {"fill": color}
    if relation == COPY:
        return {"fill": color, "alpha": 0.4, "hatch": "//", "edgecolor": color}
    if relation == BY_REFERENCE:
        return {"fill": "white", "edgecolor": color, "linewidth": 2}
    return {"fill": "white", "edgecolor": IDLE_COLOR}


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {list(value.shape)}"
    text = repr(value)
    return text if len(text) <= 18 else text[:15] + "..."


def replicate_map(module: nn.Module, devices: Sequence[DeviceLike]) -> Figure:
    """Draw, for every parameter, buffer and plain attribute of ``module``, how each replica holds it.

    Runs the real ``dpcourse.replicate(module, devices)``, so ``module`` must be on ``devices[0]`` as for
    DataParallel, and looks at the replicas:

    * a parameter copy is a plain attribute of the replica's submodule (``replica.parameters()`` is
      empty), found with ``getattr``; it is **shared storage** if it uses the original's memory
      (``untyped_storage().data_ptr()``), else a **copy**. Replica 0's are shared: ``broadcast_coalesced``
      returns the inputs themselves for ``devices[0]`` (``torch/csrc/cuda/comm.cpp``);
    * buffers likewise: replica 0 updates the original's BatchNorm statistics, the others update copies
      that are thrown away after the forward;
    * plain attributes are the **same object** in every replica (``__dict__.copy()`` in
      ``Module._replicate_for_data_parallel``), so a list appended to in forward is shared by all threads.

    The returned figure carries ``fig.dpcourse_data = {"relations": {name: [one per replica]}}``.
    """
    devices = list(devices)
    replicas = replicate(module, devices)
    entries = list(_entries(module))
    paths = {id(sub): prefix for prefix, sub in module.named_modules()}

    fig = new_figure(height=1.7 + 0.3 * max(len(entries), 4), width=min(9.0, 4.0 + 1.3 * len(devices)))
    ax = fig.subplots()
    grid_axes(ax, 1 + len(devices), len(entries))
    relations: dict[str, list[str]] = {}
    for y, (kind, dotted, sub, name) in enumerate(entries):
        original = getattr(sub, name)
        cell(ax, 0, y, _describe(original), "white", INSET, edgecolor=IDLE_COLOR, gid="original")
        relations[dotted] = []
        for j, replica in enumerate(replicas):
            relation = _relation(kind, original, getattr(replica.get_submodule(paths[id(sub)]), name))
            relations[dotted].append(relation)
            cell(ax, 1 + j, y, relation, inset=INSET, gid=relation, **_style(relation, device_color(j)))

    columns = ["original"] + [device_label(j, d) for j, d in enumerate(devices)]
    ax.set_xticks([c + 0.5 for c in range(len(columns))], [c.replace(" (", "\n(") for c in columns], fontsize=9)
    ax.xaxis.set_ticks_position("top")
    ax.set_yticks([y + 0.5 for y in range(len(entries))], [f"{d}  ({k})" for k, d, _, _ in entries], fontsize=8)
    # The x-label sits with the column headings at the top, clear of the legend below. The y-label is short,
    # and a map is at least 4 rows tall, so that it fits beside a module with only 2 entries.
    ax.set_ylabel("the module's entries")
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("what each replica holds, from dpcourse.replicate")
    styles = {relation: _style(relation, LEGEND_GREY) for relation in (SHARED, COPY, BY_REFERENCE)}
    handles = [Patch(label=relation, facecolor=style.pop("fill"), **style) for relation, style in styles.items()]
    legend_below(fig, handles)
    fig.suptitle(f"{type(module).__name__} replicated on {plural(len(devices), 'device')}: shared or copied?")
    fig.dpcourse_data = {"relations": relations}
    return fig
