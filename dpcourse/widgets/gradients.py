"""GradientSum: which loss reductions keep DataParallel's gradient equal to one device's, and which do not."""

import ipywidgets as widgets
from matplotlib.figure import Figure

from dpcourse import viz
from dpcourse.ui.controls import reports_errors

from .explorer import Explorer, int_slider, paragraph, toggle_buttons

# The three ways to reduce the per-sample losses; each is compared with one device reducing the same way.
REDUCTIONS = (
    ("mean over the gathered output", "mean"),  # cross_entropy(gathered, y): mean over all B rows
    ("per-replica mean, then mean", "per-replica mean"),  # each replica: mean of its chunk; then mean of n
    ("sum over the gathered output", "sum"),  # cross_entropy(gathered, y, reduction="sum")
)


def _number(value: float) -> str:
    return f"{value:.3f}" if value >= 1e-3 else f"{value:.1e}"


def _fraction(weight: float) -> str:
    return f"1/{round(1 / weight)}"


def explain(reduction: str, batch: int, data: dict) -> str:
    """Say in words why the gradient differs from one device's (or why it does not), from a figure's data."""
    difference = f"max |difference| = {_number(data['max_abs_diff'])}"
    if reduction == "mean":
        return (
            f"{difference}: the loss is averaged after the gather, over all {batch} rows at once, so every "
            f"sample weighs 1/{batch} as on one device; only float rounding differs."
        )
    if reduction == "sum":
        return (
            f"{difference}: the per-sample losses are summed after the gather, so every sample weighs 1 as on "
            f"one device (a sum-loss, so gradients are {batch}x larger than the mean's); only rounding differs."
        )
    chunks, weights = data["chunks"], data["weights"].tolist()
    starts = [sum(chunks[:j]) for j in range(len(chunks))]
    by_size = {size: _fraction(weights[start]) for size, start in zip(chunks, starts, strict=True)}
    if len(by_size) == 1:
        return (
            f"{difference}: the chunks are even ({', '.join(map(str, chunks))}), so a mean of chunk means "
            f"weighs every sample {by_size[chunks[0]]} as one device does; only rounding differs."
        )
    owner = {True: "chunks'", False: "chunk's"}  # keyed by: more than one chunk of this size?
    parts = [f"the {size}-row {owner[chunks.count(size) > 1]} samples {w}" for size, w in by_size.items()]
    return f"{difference}: per-replica means weigh {' and '.join(parts)} instead of 1/{batch}."


def gradient_figure(reduction: str, batch: int, n_devices: int) -> Figure:
    """The figure for a reduction: the replicas' gradients summed, or the per-sample weights of a mean of means."""
    if reduction == "per-replica mean":
        return viz.per_replica_mean_bias(batch=batch, n_devices=n_devices)
    return viz.gradient_sum(batch=batch, n_devices=n_devices, reduction=reduction)


def _run_as(reduction: str, batch: int, devices: int) -> tuple[str, int, int]:
    """The setting that runs exactly as this one: scatter cuts ``batch`` rows into at most ``batch`` chunks, so
    devices beyond that sit idle, and the run and its figure are those of ``batch`` devices. Both share one
    cached result: moving the devices slider past the batch size shows it at once."""
    return reduction, batch, min(devices, batch)


class GradientSum(Explorer):
    """Choose the loss reduction, batch size and devices -> the first weight's gradient under DataParallel,
    its difference from single-device training (``difference``, in words in ``summary``) and the figure.

    Every number comes from a real run of the four primitives (``viz.gradient_sum`` or, for per-replica means,
    ``viz.per_replica_mean_bias``). "sum" means the cross-entropy summed over the gathered output's rows,
    compared with one device's summed loss; "per-replica mean" means each replica returns its chunk's mean
    loss and the gathered vector of n means is averaged.
    Controls: ``reduction_toggle``, ``batch_slider``, ``devices_slider``.
    """

    def __init__(self, reduction: str = "mean", batch: int = 10, devices: int = 4) -> None:
        self.reduction_toggle = toggle_buttons("loss", REDUCTIONS, reduction, "reduction")
        self.batch_slider = int_slider("batch", batch, 1, 32)
        self.devices_slider = int_slider("devices", devices, 1, 8)
        self.summary = widgets.HTML()
        rows = [self.reduction_toggle, widgets.HBox([self.batch_slider, self.devices_slider]), self.summary]
        super().__init__(["reduction_toggle", "batch_slider", "devices_slider"], rows)
        self._results: dict[tuple[str, int, int], tuple[float, str]] = {}
        for control in self.controls.values():
            control.observe(self._update, names="value")
        self._update()

    @reports_errors
    def _update(self, change: dict | None = None) -> None:
        setting = _run_as(self.reduction_toggle.value, self.batch_slider.value, self.devices_slider.value)
        self.difference, text = self._prepare(setting)
        self.show_figure(setting, lambda: gradient_figure(*setting))  # rendered by _prepare
        self.summary.value = paragraph(text)
        self.prepare_next(change, lambda guess: self._prepare(_run_as(**guess)))  # guess: settings() by name

    def _prepare(self, setting: tuple[str, int, int]) -> tuple[float, str]:
        """The difference and its explanation for ``setting``, its figure rendered: computed once, then cached."""
        if setting not in self._results:
            data: dict = {}

            def make() -> Figure:
                fig = gradient_figure(*setting)
                data.update(fig.dpcourse_data)
                return fig

            self.figure_png(setting, make)
            self._results[setting] = (data["max_abs_diff"], explain(setting[0], setting[1], data))
        return self._results[setting]
