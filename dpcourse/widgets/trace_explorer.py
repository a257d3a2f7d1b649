"""TraceExplorer: trace a few real training steps and see when DataParallel's own work outweighs the model's."""

import functools

import ipywidgets as widgets
from matplotlib.figure import Figure

from dpcourse.models_to_time import ModelToTime
from dpcourse.ui.controls import reports_errors, show_png
from dpcourse.ui.png import rendered
from dpcourse.viz.palette import new_figure
from dpcourse.viz.timeline_canvas import TimelineCanvas

from .explorer import Explorer, int_slider, paragraph, selection_slider, toggle_buttons
from .timing import MODELS, TracedTraining, describe, stage_totals

BATCHES = (16, 64, 256)


@functools.cache
def placeholder_png() -> tuple[bytes, str]:
    """The empty plot shown until Run is pressed (PNG, css_width): nothing is timed, so a notebook's stored
    output never varies."""

    def make() -> Figure:
        fig = new_figure(height=1.5)
        ax = fig.subplots()
        ax.text(0.5, 0.5, "No steps traced yet: choose the settings, then press Run.", ha="center", va="center")
        ax.set_axis_off()
        return fig

    return rendered(make)


class TraceExplorer(Explorer):
    """Press Run to trace ``steps`` training steps of the chosen model under ``DataParallel`` and draw them.

    Shows ``viz.timeline`` of the median step and, in ``totals``, each stage's mean time per step (scatter,
    replicate, forward, gather, backward, reduce-add, ...) in ms and % of the step, with a verdict on whether
    DataParallel's overhead, the model's compute or neither dominates (``timing.verdict``). Nothing runs until
    ``run_button`` is clicked, and a changed setting clears the result until the next Run, so what is shown
    always matches the controls.
    Run again with the same model, batch and devices goes on training the same model (``training``): no new
    warm-up step; and its figure is drawn into the last one's (``timeline_canvas``, see
    ``viz.timeline_canvas``), in about half the time. CPU devices run with one intra-op thread each, as in
    lesson 09 (``timing.one_thread_per_operation``).
    Controls: ``model_toggle`` (small / large / many-layers, see ``timing.MODELS``), ``batch_slider``,
    ``devices_slider``, ``steps_slider``, ``run_button``.
    """

    def __init__(self, model: str = "small", batch: int = 64, devices: int = 2, steps: int = 3) -> None:
        self.model_toggle = toggle_buttons("model", list(MODELS), model)
        self.batch_slider = selection_slider("batch", BATCHES, batch)
        self.devices_slider = int_slider("devices", devices, 1, 8)
        self.steps_slider = int_slider("steps", steps, 1, 10)
        self.run_button = widgets.Button(description="Run", icon="play", button_style="primary")
        self.status = widgets.HTML()
        self.totals = widgets.HTML()
        self._training: tuple[tuple, TracedTraining] | None = None  # the last Run's setting and its model
        self.timeline_canvas = TimelineCanvas()
        settings = [self.model_toggle, self.batch_slider, self.devices_slider, self.steps_slider]
        rows = [
            self.model_toggle,
            widgets.HBox([self.batch_slider, self.devices_slider, self.steps_slider, self.run_button]),
            self.status,
            self.totals,
        ]
        super().__init__(["model_toggle", "batch_slider", "devices_slider", "steps_slider", "run_button"], rows)
        for control in settings:
            control.observe(self._clear, names="value")
        self.run_button.on_click(self._run)
        self._clear()

    @property
    def training(self) -> TracedTraining | None:
        """The last Run's ``TracedTraining``: its model, trained on by Run again (``None`` before the first Run)."""
        return None if self._training is None else self._training[1]

    def _describe_settings(self) -> str:
        choice = MODELS[self.model_toggle.value]
        return (
            f"{choice.label}, batch {self.batch_slider.value}, {self.devices_slider.value} devices, "
            f"{self.steps_slider.value} steps"
        )

    @reports_errors
    def _clear(self, _change: object = None) -> None:
        self.status.value = paragraph(f"{self._describe_settings()}: press Run to measure.")
        self.totals.value = ""
        show_png(self.image, *placeholder_png())

    def _training_for(self, choice: ModelToTime) -> TracedTraining:
        """The model the last Run trained if the model, batch and devices are unchanged (Run again goes on
        training it, already warmed up), else a fresh one."""
        setting = (self.model_toggle.value, self.batch_slider.value, self.devices_slider.value)
        if self._training is None or self._training[0] != setting:
            self._training = setting, TracedTraining(choice, self.devices_slider.value, self.batch_slider.value)
        return self._training[1]

    @reports_errors
    def _run(self, _button: widgets.Button) -> None:
        choice, steps = MODELS[self.model_toggle.value], self.steps_slider.value
        self.status.value = paragraph(f"{self._describe_settings()}: tracing...")  # reaches the browser at once
        try:
            measured = self._training_for(choice).trace(steps)
        except Exception:
            self.status.value = paragraph(f"{self._describe_settings()}: the run failed, see below.")
            raise  # reports_errors shows it in the message area
        median = sorted(measured, key=lambda timed: timed.times.seconds)[len(measured) // 2]
        show_png(self.image, *self.timeline_canvas.png(median.trace))
        self.totals.value = describe(stage_totals(measured), steps)
        self.status.value = paragraph(f"{self._describe_settings()}: measured.")
        self.look_ahead(self.timeline_canvas.prepare)  # so that the next Run's figure draws only its spans
