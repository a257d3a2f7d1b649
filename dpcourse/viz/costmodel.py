"""The cost model's speed-up curves: DP and DDP against the number of devices, and where DP stops paying off."""

from matplotlib.figure import Figure

from dpcourse.costmodel import EXAMPLE, Hardware, Workload, predict_speedup

from .palette import new_figure

# Okabe-Ito colours that the course's device palette uses last; line styles and markers tell them apart too.
DP_COLOR, DDP_COLOR, SLOWER_COLOR = "#CC79A7", "#009E73", "#DDDDDD"


def plot_speedup(preset: str | Hardware, workload: Workload = EXAMPLE, max_devices: int = 8) -> Figure:
    """Predicted speed-up over one device of DP and DDP for n = 1..``max_devices`` devices.

    A vertical line marks where DP is fastest (beyond it every added device slows DP down), and a grey band
    where DP is slower than one device. ``preset`` is a name from ``dpcourse.costmodel.PRESETS`` or a
    ``Hardware``, e.g. ``dpcourse.costmodel.calibrate().hardware``.
    """
    curve = predict_speedup(preset, workload, max_devices)
    figure = new_figure(height=4.2, width=7)
    axes = figure.add_subplot()
    n = curve.devices
    if curve.dp_slower_than_one_device is not None:
        axes.axvspan(curve.dp_slower_than_one_device - 0.5, n[-1] + 0.5, color=SLOWER_COLOR, zorder=0,
                     label="DP slower than one device")
    axes.plot(n, n, ":", color="black", label="ideal: n times faster")
    axes.axhline(1, color="black", linewidth=0.8)
    axes.plot(n, curve.ddp, "s-", color=DDP_COLOR, label="DDP")
    axes.plot(n, curve.dp, "o--", color=DP_COLOR, label="DP")
    best = curve.dp_best
    # Said in the legend, which "best" places clear of the curves: a label at the peak ran over them.
    axes.axvline(best, color=DP_COLOR, linewidth=1,
                 label=f"DP is fastest on {best} device{'s' * (best > 1)}: {max(curve.dp):.2f}x")
    axes.set(xlabel="devices n", ylabel="predicted speed-up over one device  (T_1 / T_n)", xticks=n,
             xlim=(0.5, n[-1] + 0.5), ylim=(0, max(max(curve.ddp), max(curve.dp)) * 1.25))
    w = workload
    axes.set_title(f"Predicted by the cost model, {curve.hardware.name}\n{w.params:,} parameters, {w.modules} "
                   f"modules, batch {w.batch}", fontsize="medium")
    axes.legend(loc="best", fontsize="small")
    return figure
