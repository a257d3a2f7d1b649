"""CostModelCalculator: where DataParallel stops paying off, and how far DDP goes, by ``dpcourse.costmodel``."""

import dataclasses
import html
import math

import ipywidgets as widgets

from dpcourse import costmodel
from dpcourse.costmodel import EXAMPLE, PRESETS, Hardware, Speedup, Workload
from dpcourse.ui.controls import reports_errors
from dpcourse.viz import plot_speedup

from .explorer import Explorer, paragraph, selection_slider, table, toggle_buttons

BATCHES = (32, 64, 128, 256, 512, 1024)
PARAMS = (("1M", 1_000_000), ("5M", 5_000_000), ("25.6M", 25_600_000), ("100M", 100_000_000), ("400M", 400_000_000))
BANDWIDTHS = (1, 4, 12, 25, 50, 150, 300, 500)  # GB/s; holds every preset's link bandwidth
MAX_DEVICES = 8
COMPARED = (2, MAX_DEVICES)  # the device counts whose terms the table lists
FLOPS_PER_PARAM = EXAMPLE.flops / EXAMPLE.params  # ResNet-50's, per image, forward + backward
TERMS = ("compute", "python", "replicate", "reduce", "scatter", "allreduce", "overhead")


def workload(params: int, batch: int) -> Workload:
    """ResNet-50's shape (``costmodel.resnet50_modules()`` modules, 224 x 224 images) scaled to ``params``
    parameters; FLOPs scale with them."""
    return dataclasses.replace(EXAMPLE, params=params, batch=batch, flops_per_sample=FLOPS_PER_PARAM * params)


def hardware(preset: str, bandwidth_gbps: float) -> Hardware:
    """The preset with its link bandwidth replaced; the name says so when it differs from the preset's."""
    base = PRESETS[preset]
    if math.isclose(base.bandwidth, bandwidth_gbps * 1e9):
        return base
    return dataclasses.replace(base, bandwidth=bandwidth_gbps * 1e9, name=f"{preset}, link {bandwidth_gbps:g} GB/s")


def preset_bandwidth(preset: str) -> int:
    """The slider position closest to the preset's own link bandwidth."""
    return min(BANDWIDTHS, key=lambda gbps: abs(math.log(gbps * 1e9 / PRESETS[preset].bandwidth)))


def verdict(curve: Speedup) -> str:
    """Where DP stops paying off, and what DDP reaches on all the devices, in one or two sentences."""
    dp, n = curve.dp, curve.devices
    if curve.dp_best == 1:
        text = (
            f"DP never pays off here: on 2 devices it runs at {dp[1]:.3f}x the speed of one device, and "
            f"{dp[-1]:.3f}x on {n[-1]}."
        )
    elif curve.dp_best == n[-1]:
        text = f"DP still gains up to all {n[-1]} devices: {dp[-1]:.2f}x."
    else:
        text = (
            f"DP stops paying off after {curve.dp_best} devices: it peaks at {max(dp):.2f}x there, and every "
            f"device added beyond makes it slower ({dp[-1]:.2f}x on {n[-1]})."
        )
        if curve.dp_slower_than_one_device is not None:
            text += f" From {curve.dp_slower_than_one_device} devices on it is slower than one device."
    units = curve.hardware.compute_units
    ideal = (
        f"ideal {n[-1]}x"
        if units >= n[-1]
        else (f"at best {units}x: only {units} of them {'computes' if units == 1 else 'compute'} at a time")
    )
    return f"{text} DDP on {n[-1]} devices: {curve.ddp[-1]:.2f}x ({ideal})."


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.2f}"


class CostModelCalculator(Explorer):
    """Pick a machine, batch, model size and link bandwidth -> DP's and DDP's predicted speed-up for 1..8 devices.

    Shows ``viz.plot_speedup``, a sentence saying where DataParallel stops paying off (``summary``), every term
    of the step-time formula in ms for one device and for DP and DDP on 2 and 8 devices (``terms_table``, from
    ``costmodel.step_time``), and the formulas themselves (``formula``, folded). The model is ResNet-50's
    shape scaled to the chosen number of parameters (its FLOPs per image scale with them). Choosing a preset
    also moves the bandwidth slider to the preset's link. ``speedup`` and ``terms`` hold the current numbers.
    Controls: ``preset_toggle``, ``batch_slider``, ``params_slider``, ``bandwidth_slider`` (GB/s).
    """

    def __init__(
        self, preset: str = "8 GPUs, PCIe", batch: int = 256, params: int = 25_600_000, bandwidth: int | None = None
    ) -> None:
        self.preset_toggle = toggle_buttons("machine", list(PRESETS), preset, "preset")
        self.batch_slider = selection_slider("batch", BATCHES, batch)
        self.params_slider = selection_slider("parameters", PARAMS, params, "params")
        bandwidths = [(f"{gbps} GB/s", gbps) for gbps in BANDWIDTHS]
        self.bandwidth_slider = selection_slider(  # the preset's own link unless one is given
            "link", bandwidths, preset_bandwidth(preset) if bandwidth is None else bandwidth, "bandwidth"
        )
        self.summary = widgets.HTML()
        self.terms_table = widgets.HTML()
        formulas = "\n\n".join([costmodel.FORMULAS["DataParallel"], costmodel.FORMULAS["DDP"], costmodel.SYMBOLS])
        self.formula = widgets.HTML(
            f"<details><summary>The formulas (<code>costmodel.formula</code>)</summary>"
            f"<pre>{html.escape(formulas, quote=False)}</pre></details>"
        )
        sliders = [self.batch_slider, self.params_slider, self.bandwidth_slider]
        rows = [self.preset_toggle, widgets.HBox(sliders), self.summary, self.terms_table, self.formula]
        super().__init__(["preset_toggle", "batch_slider", "params_slider", "bandwidth_slider"], rows)
        self._loading_preset = False
        self.preset_toggle.observe(self._preset_chosen, names="value")
        for slider in sliders:
            slider.observe(self._value_changed, names="value")
        self._value_changed()

    @reports_errors
    def _preset_chosen(self, _change: object = None) -> None:
        self._loading_preset = True  # one redraw for the preset, not a second one for its bandwidth
        try:
            self.bandwidth_slider.value = preset_bandwidth(self.preset_toggle.value)
        finally:
            self._loading_preset = False
        self._refresh()

    @reports_errors
    def _value_changed(self, _change: object = None) -> None:
        if not self._loading_preset:
            self._refresh()

    def clear_results(self) -> None:
        """After an error: no figure, summary or table of the previous setting stays beside the message."""
        super().clear_results()
        self.summary.value = self.terms_table.value = ""

    def _refresh(self) -> None:
        setting = tuple(self.settings().values())
        machine = hardware(self.preset_toggle.value, self.bandwidth_slider.value)
        model = workload(self.params_slider.value, self.batch_slider.value)
        self.speedup = costmodel.predict_speedup(machine, model, MAX_DEVICES)
        self.terms = {("one device", 1): costmodel.step_time("one device", 1, model, machine)}
        for kind in ("DataParallel", "DDP"):
            self.terms |= {(kind, n): costmodel.step_time(kind, n, model, machine) for n in COMPARED}
        self.show_figure(setting, lambda: plot_speedup(machine, model, MAX_DEVICES))
        self.summary.value = paragraph(
            f"{machine.name}: {self.params_slider.label} parameters, batch {model.batch}. {verdict(self.speedup)}"
        )
        header = ["term (ms per step)"] + [kind if kind == "one device" else f"{kind} n={n}" for kind, n in self.terms]
        rows = [
            [term] + [_ms(terms.get(term)) for terms in self.terms.values()]
            for term in TERMS
            if any(term in terms for terms in self.terms.values())
        ]
        rows.append(["step"] + [_ms(sum(terms.values())) for terms in self.terms.values()])
        self.terms_table.value = table(header, rows)
