"""MemoryCalculator: the bytes one training step needs on each device, for one device, DataParallel and DDP."""

import ipywidgets as widgets

from dpcourse import memory, viz
from dpcourse.memory import CATEGORIES, MIB, OPTIMIZERS, Breakdown, Setup, sized_mlp
from dpcourse.ui.controls import reports_errors

from .explorer import Explorer, int_slider, paragraph, table, toggle_buttons

WIDTHS = ("128", "256", "512", "1024", "2048", "4096")
CLASSES = ("10", "1000", "32000", "128000")
BATCHES = ("16", "64", "256", "1024")
MAX_DEVICES = 8


def number_box(description: str, options: tuple[str, ...], value: int) -> widgets.Combobox:
    """A text box offering ``options`` that also takes any number typed into it, read on Enter or on leaving."""
    return widgets.Combobox(value=str(value), options=list(options), description=description, ensure_option=False,
                            continuous_update=False, layout=widgets.Layout(width="220px"))


def typed_number(name: str, text: str) -> int | float:
    """The number typed for ``name``: a whole one as an ``int``; anything else is checked by ``Setup``/``sized_mlp``,
    which say what is wrong with it (NaN, a fraction, zero, a negative number)."""
    try:
        number = float(text.strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number: type a whole number, such as 256.") from None
    return int(number) if number.is_integer() else number


def _mib(value: int) -> str:
    return f"{value / MIB:,.2f}"


def summary(one: Breakdown, dp: Breakdown, ddp: Breakdown) -> str:
    """The model's size, DataParallel's device 0 against device 1 and against one device, and a DDP rank."""
    model, n = one.setup.model, dp.setup.devices
    text = f"{model.parameters:,} parameters ({_mib(model.parameters * 4)} MiB of float32). "
    if n == 1:
        return text + (f"One device needs {_mib(one.totals[0])} MiB. DataParallel on one device runs the module "
                       f"itself; one DDP rank adds its all-reduce buckets: {_mib(ddp.totals[0])} MiB.")
    first, second = dp.totals[0], dp.totals[1]
    ratio = f", {first / second:.1f} times device 1's {_mib(second)} MiB" if second else ""
    text += (f"DataParallel on {n} devices: device 0 needs {_mib(first)} MiB{ratio}: it alone keeps the summed "
             f"gradients, the optimizer state and the outputs and loss of the whole batch. ")
    if first > one.totals[0]:
        text += f"That is more than one device training alone ({_mib(one.totals[0])} MiB). "
    return text + f"Each of {n} DDP ranks needs {_mib(ddp.totals[0])} MiB."


class MemoryCalculator(Explorer):
    """Model shape, batch, optimizer and devices -> predicted bytes per device for one device, DP and DDP.

    The model is an MLP (``dpcourse.memory.sized_mlp``): 64 inputs, ``depth`` Linear layers of ``width`` units,
    ``classes`` outputs, cross-entropy loss. Shows a sentence (``summary``), every category in MiB (``bytes_table``,
    with a DDP column for ``gradient_as_bucket_view=True``) and ``viz.memory_bars`` of one device, DataParallel and
    DDP; ``predictions`` holds their ``Breakdown``s. Width, classes and batch are text boxes with suggestions: type
    any number; one that makes no sense (NaN, 0, -3, 2.5) shows its error in ``message``. In a kernel it looks ahead
    (``look_ahead.py``): after a change it prepares the next listed value the same way. Controls: ``width_box``,
    ``depth_slider``, ``classes_box``, ``batch_box``, ``optimizer_toggle``, ``devices_slider``.
    """

    def __init__(self, width: int = 512, depth: int = 4, classes: int = 1000, batch: int = 256,
                 optimizer: str = "Adam", devices: int = 4) -> None:
        Setup(kind="DataParallel", devices=devices, batch=batch, optimizer=optimizer,
              model=sized_mlp(width=width, depth=depth, classes=classes))  # a bad argument raises here, naming itself
        self.width_box = number_box("width", WIDTHS, width)
        self.depth_slider = int_slider("depth", depth, 1, 16)
        self.classes_box = number_box("classes", CLASSES, classes)
        self.batch_box = number_box("batch", BATCHES, batch)
        self.optimizer_toggle = toggle_buttons("optimizer", OPTIMIZERS, optimizer)
        self.devices_slider = int_slider("devices", devices, 1, MAX_DEVICES)
        self.summary = widgets.HTML()
        self.bytes_table = widgets.HTML()
        controls = ["width_box", "depth_slider", "classes_box", "batch_box", "optimizer_toggle", "devices_slider"]
        rows = [widgets.HBox([self.width_box, self.depth_slider, self.classes_box]),
                widgets.HBox([self.batch_box, self.devices_slider]), self.optimizer_toggle, self.summary,
                self.bytes_table]
        super().__init__(controls, rows)
        self._prepared: dict[tuple, tuple[dict[str, Breakdown], str, str]] = {}  # per setting, see _prepare
        for name in controls:
            self.controls[name].observe(self._changed, names="value")
        self._changed()

    def clear_results(self) -> None:
        """After an error: no figure, summary or table of the previous setting stays beside the message."""
        super().clear_results()
        self.summary.value = self.bytes_table.value = ""

    @reports_errors
    def _changed(self, change: dict | None = None) -> None:
        self.predictions, summary_html, table_html = self._prepare(self.settings())
        self.summary.value, self.bytes_table.value = summary_html, table_html
        shown = [self.predictions[kind] for kind in ("one device", "DataParallel", "DDP")]
        self.show_figure(self._key(self.settings()), lambda: viz.memory_bars(shown))  # rendered by _prepare
        self.prepare_next(change, self._prepare)

    @staticmethod
    def _key(settings: dict) -> tuple:
        return tuple(settings.values())

    def _prepare(self, settings: dict) -> tuple[dict[str, Breakdown], str, str]:
        """The predictions, summary and table for ``settings``, its figure rendered: computed once, then cached.

        A typed value that makes no sense raises here, naming itself (``typed_number``, ``sized_mlp``, ``Setup``).
        """
        key = self._key(settings)
        if key not in self._prepared:
            model = sized_mlp(width=typed_number("width", settings["width"]), depth=settings["depth"],
                              classes=typed_number("classes", settings["classes"]))
            common = {"batch": typed_number("batch", settings["batch"]), "optimizer": settings["optimizer"],
                      "model": model}
            n = settings["devices"]
            one = memory.predict(Setup(**common))
            dp = memory.predict(Setup(kind="DataParallel", devices=n, **common))
            ddp = memory.predict(Setup(kind="DDP", devices=n, **common))
            viewed = memory.predict(Setup(kind="DDP", devices=n, bucket_view=True, **common))
            columns = [("one device", one.devices[0]), ("DP device 0", dp.devices[0])]
            columns += [("DP device 1", dp.devices[1])] if n > 1 else []
            columns += [("DDP each rank", ddp.devices[0]), ("DDP, bucket view", viewed.devices[0])]
            rows = [[name] + [_mib(device[name]) for _, device in columns] for name in CATEGORIES
                    if any(device[name] for _, device in columns)]
            rows.append(["total"] + [_mib(sum(device.values())) for _, device in columns])
            self.figure_png(key, lambda: viz.memory_bars([one, dp, ddp]))
            self._prepared[key] = (
                {"one device": one, "DataParallel": dp, "DDP": ddp, "DDP, bucket view": viewed},
                paragraph(summary(one, dp, ddp)),
                table(["MiB"] + [label for label, _ in columns], rows),
            )
        return self._prepared[key]
