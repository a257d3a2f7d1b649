"""ChunkExplorer: how scatter cuts a batch, and when devices sit idle."""

import ipywidgets as widgets
import torch

from dpcourse import viz
from dpcourse.devices import devices as choose_devices
from dpcourse.scatter_gather import scatter
from dpcourse.ui.controls import reports_errors
from dpcourse.viz.palette import plural

from .explorer import Explorer, int_slider, paragraph

WARNING_STYLE = "color: #B35900; font-weight: bold"
OTHER_SIZE = 3  # the size of the dimension that is not split


def batch_shape(batch: int, dim: int) -> list[int]:
    """The batch the explorer splits: ``[batch, 3]`` along dim 0, ``[3, batch]`` along dim 1."""
    shape = [OTHER_SIZE, OTHER_SIZE]
    shape[dim] = batch
    return shape


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def idle_warning(batch: int, n_devices: int, sizes: list[int], along: str = "row") -> str:
    """``"6 rows on 4 devices: only 3 replicas run; device 3 sits idle."`` and why; empty if every device works.

    ``sizes`` are the chunk sizes scatter made; ``along`` names one slice of the batch ("row", "slice").
    """
    idle = [str(i) for i in range(len(sizes), n_devices)]
    if not idle:
        return ""
    devices = f"device {idle[0]} sits" if len(idle) == 1 else f"devices {_and(idle)} sit"
    only = "only 1 replica runs" if len(sizes) == 1 else f"only {len(sizes)} replicas run"
    return (f"{plural(batch, along)} on {plural(n_devices, 'device')}: {only}; {devices} idle. torch.chunk makes "
            f"chunks of ceil({batch} / {n_devices}) = {plural(sizes[0], along)}, and {len(sizes)} of them already "
            f"hold all {batch}.")


class ChunkExplorer(Explorer):
    """Sliders for batch size, number of devices and the split dim -> the real ``dpcourse.scatter`` chunks.

    Shows the chunk sizes and shapes (``summary``), a warning when some devices get no chunk (``warning``),
    and ``viz.chunk_split``'s figure. Along dim 1 the batch is 2-d, ``[3, batch]``, so dim 1 is the one cut.
    Controls: ``batch_slider``, ``devices_slider``, ``dim_slider``. ``chunk_sizes`` holds the current sizes.
    """

    def __init__(self, batch: int = 10, devices: int = 4, dim: int = 0) -> None:
        self.batch_slider = int_slider("batch", batch, 1, 32)
        self.devices_slider = int_slider("devices", devices, 1, 8)
        self.dim_slider = int_slider("dim", dim, 0, 1)
        self.summary = widgets.HTML()
        self.warning = widgets.HTML()
        sliders = [self.batch_slider, self.devices_slider, self.dim_slider]
        rows = [widgets.HBox(sliders), self.summary, self.warning]
        super().__init__(["batch_slider", "devices_slider", "dim_slider"], rows)
        for slider in sliders:
            slider.observe(self._update, names="value")
        self._update()

    @reports_errors
    def _update(self, _change: object = None) -> None:
        batch, n_devices, dim = self.batch_slider.value, self.devices_slider.value, self.dim_slider.value
        shape = batch_shape(batch, dim)
        chunks = scatter(torch.zeros(shape), choose_devices(n_devices), dim)
        self.chunk_sizes = [c.shape[dim] for c in chunks]
        along = "row" if dim == 0 else "slice"
        chunk_shapes = ", ".join(str(list(c.shape)) for c in chunks)
        self.summary.value = paragraph(
            f"batch of shape {shape}, split along dim {dim}: {plural(batch, along)} on {plural(n_devices, 'device')} → "
            f"chunk sizes {', '.join(map(str, self.chunk_sizes))}, shapes {chunk_shapes}; {len(chunks)} of "
            f"{n_devices} devices work."
        )
        self.warning.value = paragraph(idle_warning(batch, n_devices, self.chunk_sizes, along), WARNING_STYLE)
        self.show_figure((batch, n_devices, dim), lambda: viz.chunk_split(torch.zeros(shape), n_devices, dim))
