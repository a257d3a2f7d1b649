"""StepThrough: one real DataParallel training step, stage by stage, with Back and Next."""

import html

import ipywidgets as widgets

from dpcourse.ui.controls import reports_errors

from .explorer import Explorer, int_slider, paragraph
from .stages import STAGES
from .step_run import StepRecord, run_step


class StepThrough(Explorer):
    """Walk through inputs -> scatter -> replicate -> parallel_apply -> gather -> loss -> backward (split) ->
    reduce-add -> optimizer step of the course model on ``dpcourse.devices(devices)``.

    The whole step runs once per (devices, batch) setting (``step_run.run_step``) and every intermediate is
    kept, so Back and Next only change what is shown; a stage's figure is rendered the first time it is needed.
    In a kernel, the explorer looks ahead (``Explorer.look_ahead``): after Next it draws the following stage's
    figure, after a slider moves it runs the step one setting further, before the learner asks for either.

    Controls: ``next_button``, ``back_button``, ``reset_button`` (back to stage 1, settings kept),
    ``devices_slider``, ``batch_slider``. Shown: ``stage_label`` ("<name> — stage k of 9"), ``tensors`` (the live
    tensors of the stage), ``explanation``, ``image`` (the stage's figure, if it has one), ``message``.
    ``record`` is the current ``StepRecord``; ``stage`` the current stage, 1 to 9.
    """

    def __init__(self, devices: int = 4, batch: int = 10) -> None:
        self.back_button = widgets.Button(description="Back", icon="arrow-left")
        self.next_button = widgets.Button(description="Next", icon="arrow-right")
        self.reset_button = widgets.Button(description="Reset", icon="undo")
        self.devices_slider = int_slider("devices", devices, 1, 8)
        self.batch_slider = int_slider("batch", batch, 1, 32)
        self.stage_label = widgets.HTML()
        self.tensors = widgets.HTML()
        self.explanation = widgets.HTML()
        # Forward through the stages, change the setting at the last one, back through them all, reset.
        controls = ["next_button", "devices_slider", "batch_slider", "back_button", "reset_button"]
        rows = [
            widgets.HBox([self.back_button, self.next_button, self.reset_button, self.stage_label]),
            widgets.HBox([self.devices_slider, self.batch_slider]),
            self.explanation,
            self.tensors,
        ]
        super().__init__(controls, rows)
        self.stage = 1
        self.record: StepRecord | None = None  # stays None while running the step fails
        self._records: dict[tuple[int, int], StepRecord] = {}
        self.back_button.on_click(lambda _: self._go(self.stage - 1))
        self.next_button.on_click(lambda _: self._go(self.stage + 1))
        self.reset_button.on_click(lambda _: self._go(1))
        self.devices_slider.observe(self._recompute, names="value")
        self.batch_slider.observe(self._recompute, names="value")
        self._recompute()

    @reports_errors
    def _recompute(self, change: dict | None = None) -> None:
        setting = self.devices_slider.value, self.batch_slider.value
        # Kept together: after a failed recompute, Next still shows (and caches) the old record's figures as such.
        self._setting, self.record = setting, self._prepare(setting, self.stage)
        self._show()
        stage = self.stage
        self.prepare_next(change, lambda guess: self._prepare((guess["devices"], guess["batch"]), stage))

    @reports_errors
    def _go(self, stage: int) -> None:
        if self.record is None:
            raise RuntimeError("There is no step to show: running it failed (the message above says why). "
                               "Move a slider to run it again.")
        self.stage = min(max(stage, 1), len(STAGES))  # code can click a disabled button
        self._show()
        if self.stage < len(STAGES):
            self.look_ahead(lambda setting=self._setting, stage=self.stage + 1: self._prepare(setting, stage))

    def _prepare(self, setting: tuple[int, int], stage: int) -> StepRecord:
        """The step's record for ``setting`` (devices, batch), and stage ``stage``'s figure of it rendered."""
        if setting not in self._records:
            self._records[setting] = run_step(*setting)
        record, figure = self._records[setting], STAGES[stage - 1].figure
        if figure is not None:
            self.figure_png((setting, figure), lambda: figure(record))
        return record

    def _show(self) -> None:
        stage = STAGES[self.stage - 1]
        self.stage_label.value = f"<b>{html.escape(stage.name)}</b> — stage {self.stage} of {len(STAGES)}"
        self.explanation.value = paragraph(stage.explanation)
        self.tensors.value = stage.tensors(self.record)
        record = self.record
        make = None if stage.figure is None else lambda: stage.figure(record)
        self.show_figure((self._setting, stage.figure), make)
        self.back_button.disabled = self.stage == 1
        self.next_button.disabled = self.stage == len(STAGES)
