"""dpcourse.widgets: every control driven in plain pytest (no kernel), checked against what the widget shows.

Explorers keep what they show in widget values (HTML text, PNG bytes), so clicking and setting values here
runs the same callbacks a notebook would, synchronously.
"""

import re
import warnings

import ipywidgets as widgets
import pytest
import torch
import torch.nn.functional as F

import dpcourse
import dpcourse.scatter_gather
from dpcourse import by_hand, examples
from dpcourse.timing import StepTimes
from dpcourse.ui import png as png_module
from dpcourse.ui.controls import ERROR_STYLE
from dpcourse.viz import timeline_canvas
from dpcourse.widgets import (
    ChunkExplorer,
    CostModelCalculator,
    GradientSum,
    MemoryCalculator,
    StepThrough,
    TraceExplorer,
)
from dpcourse.widgets import trace_explorer as trace_explorer_module
from dpcourse.widgets.stages import STAGES
from dpcourse.widgets.timing import MODELS, TimedStep, TracedTraining
from dpcourse.widgets.trace_explorer import placeholder_png
from tests.benchmarks.widget_latency import EXPLORERS, measure_all, measure_interactions
from tests.helpers import narrow_spans, scaled
from tests.widget_html import PNG, text

STAGE_NAMES = [
    "inputs", "scatter", "replicate", "parallel_apply", "gather", "loss", "backward (split)", "reduce-add",
    "optimizer step",
]
WITH_FIGURE = {"scatter", "replicate", "gather", "backward (split)", "reduce-add", "optimizer step"}


def png(image: widgets.Image) -> bytes:
    """The image's PNG bytes (ipywidgets hands them back as a memoryview)."""
    return bytes(image.value)



def oracle_step(batch: int, lr: float = 0.1) -> dict[str, torch.Tensor]:
    """The single-device step, written out independently: loss on the whole batch, backward, plain SGD."""
    model = examples.make_model()
    x, y = examples.make_batch(batch)
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        return {name: p - lr * p.grad for name, p in model.named_parameters()}


def test_step_through_walks_forward_through_all_nine_stages_and_back():
    s = StepThrough(devices=4, batch=10)
    x, y = examples.make_batch(10)
    loss = F.cross_entropy(examples.make_model()(x), y).item()
    expected = {
        "inputs": ["x (inputs) [10, 8] on cpu", str(y.tolist()), "212 parameters"],
        "scatter": ["chunk shapes [3, 8], [3, 8], [3, 8], [1, 8].", "x[9:10]", "view of x (no copy)"],
        "replicate": ["4 replicas", "the model's own memory", "a copy", "0 Parameters"],
        "parallel_apply": ["output shapes [3, 4], [3, 4], [3, 4], [1, 4]", "replica-0", "replica-3"],
        "gather": ["gathered shape [10, 4] on cpu"],
        "loss": [f"all 10 rows {loss:.6f}", f"whole batch {loss:.6f}"],
        "backward (split)": ["split back to the replicas: shapes [3, 4], [3, 4], [3, 4], [1, 4]"],
        "reduce-add": ["max |sum of 4 replica gradients - single device| ="],
        "optimizer step": ["SGD, lr 0.1: max |weights - single-device step's| ="],
    }
    assert [stage.name for stage in STAGES] == STAGE_NAMES
    for k, name in enumerate(STAGE_NAMES, start=1):
        if k > 1:
            s.next_button.click()
        assert text(s.stage_label) == f"{name} — stage {k} of 9"
        for snippet in expected[name]:
            assert snippet in text(s.tensors), (name, snippet)
        assert text(s.explanation)
        assert png(s.image).startswith(PNG) == (name in WITH_FIGURE), name
        assert not s.message.value
    assert s.next_button.disabled and not s.back_button.disabled
    shown = float(re.search(r"single-device step's\| = (\S+)", text(s.tensors)).group(1))
    expected = oracle_step(10)
    assert shown < 1e-6 and max((s.record.weights_after[n] - w).abs().max().item() for n, w in expected.items()) < 1e-6
    s.next_button.click()  # a click on a disabled button (possible from code) changes nothing
    assert s.stage == 9
    for k in range(8, 0, -1):
        s.back_button.click()
        assert text(s.stage_label).endswith(f"stage {k} of 9")
    assert s.back_button.disabled and not s.next_button.disabled


def test_step_through_replicate_stage_shows_one_shared_and_three_copied_replicas():
    s = StepThrough(devices=4, batch=10)
    s.next_button.click()
    s.next_button.click()
    shown = text(s.tensors)
    assert shown.count("a copy") == 3 and shown.count("the model's own memory") == 1
    assert shown.count("0 Parameters") == 4


def test_step_through_runs_a_full_step_with_devices_0_standing_in_for_a_gpu(stand_in_gpu):
    """Lesson 00's explorer under the lessons' placement check: every Next and every new setting works, as on
    a GPU machine where the model, the batch and the gathered output are on cuda:0."""
    from tests.placement import is_placed

    s = StepThrough(devices=4, batch=10)
    for k in range(2, len(STAGE_NAMES) + 1):
        s.next_button.click()
        assert s.stage == k and not s.message.value, (STAGE_NAMES[k - 1], text(s.message))
        assert png(s.image).startswith(PNG) == (STAGE_NAMES[k - 1] in WITH_FIGURE)
    record = s.record
    assert all(is_placed(t) for t in [*record.model.parameters(), record.x, record.y, record.gathered])
    s.devices_slider.value, s.batch_slider.value = 3, 7  # a new setting runs the whole step again, at stage 9
    s.reset_button.click()
    assert s.record is not record and not s.message.value, text(s.message)
    assert max(abs(w - v).max().item() for w, v in
               zip(s.record.weights_after.values(), s.record.single_weights_after.values(), strict=True)) < 1e-6


def test_reset_goes_back_to_stage_one_and_keeps_the_settings():
    s = StepThrough(devices=3, batch=7)
    for _ in range(4):
        s.next_button.click()
    s.reset_button.click()
    assert s.stage == 1 and text(s.stage_label) == "inputs — stage 1 of 9"
    assert (s.devices_slider.value, s.batch_slider.value) == (3, 7)
    assert s.image.value == b"" and s.image.layout.display == "none"


def test_changing_batch_or_devices_recomputes_the_step_at_the_same_stage():
    s = StepThrough(devices=4, batch=10)
    s.next_button.click()
    s.batch_slider.value = 6
    assert s.stage == 2
    shown = text(s.tensors)
    assert "chunk shapes [2, 8], [2, 8], [2, 8]." in shown
    assert "6 rows on 4 devices: only 3 replicas run; device 3 sits idle." in shown
    s.next_button.click()
    assert "3 replicas" in text(s.tensors) and s.record.used == dpcourse.devices(3)
    s.devices_slider.value = 2
    assert "2 replicas" in text(s.tensors) and len(s.record.chunks) == 2
    assert repr(s) == "StepThrough(devices=2, batch=6)"


@pytest.mark.parametrize(("devices", "batch"), [(4, 10), (3, 7), (8, 5), (1, 4)])
def test_the_final_weights_equal_a_single_device_sgd_step(devices, batch):
    s = StepThrough(devices=devices, batch=batch)
    expected = oracle_step(batch)
    assert max((s.record.weights_after[n] - w).abs().max().item() for n, w in expected.items()) < 1e-6


def test_navigation_renders_each_figure_once_per_setting(monkeypatch):
    calls = []
    chunk_split = dpcourse.viz.chunk_split
    monkeypatch.setattr(dpcourse.viz, "chunk_split", lambda *a, **k: calls.append(a) or chunk_split(*a, **k))
    s = StepThrough(devices=4, batch=10)
    s.next_button.click()
    first = png(s.image)
    s.next_button.click()
    s.back_button.click()
    assert len(calls) == 1 and png(s.image) == first
    s.batch_slider.value = 9
    assert len(calls) == 2


@pytest.mark.parametrize(("batch", "devices"), [(10, 4), (6, 4), (1, 3), (9, 8), (32, 5), (7, 1)])
def test_chunk_explorer_sizes_follow_torch_chunk(batch, devices):
    c = ChunkExplorer(batch=batch, devices=devices)
    assert c.chunk_sizes == [len(chunk) for chunk in torch.arange(batch).chunk(devices)]
    assert f"{len(c.chunk_sizes)} of {devices} devices work" in text(c.summary)
    assert bool(c.warning.value) == (len(c.chunk_sizes) < devices)
    assert png(c.image).startswith(PNG)


def test_chunk_explorer_sliders_update_sizes_and_the_idle_warning():
    c = ChunkExplorer()
    assert c.chunk_sizes == [3, 3, 3, 1] and c.warning.value == ""
    assert "chunk sizes 3, 3, 3, 1, shapes [3, 3], [3, 3], [3, 3], [1, 3]" in text(c.summary)
    first = png(c.image)
    c.batch_slider.value = 6
    assert c.chunk_sizes == [2, 2, 2]
    assert text(c.warning).startswith("6 rows on 4 devices: only 3 replicas run; device 3 sits idle.")
    assert png(c.image).startswith(PNG) and png(c.image) != first
    c.devices_slider.value = 8
    assert c.chunk_sizes == [1] * 6 and "devices 6 and 7 sit idle" in text(c.warning)
    c.dim_slider.value = 1
    assert "batch of shape [3, 6], split along dim 1: 6 slices on 8 devices" in text(c.summary)
    assert "shapes [3, 1], [3, 1]" in text(c.summary) and "6 slices on 8 devices" in text(c.warning)
    c.batch_slider.value, c.devices_slider.value = 9, 3
    assert c.chunk_sizes == [3, 3, 3] and c.warning.value == ""
    assert repr(c) == "ChunkExplorer(batch=9, devices=3, dim=1)"


def per_replica_mean_difference(batch: int, n_devices: int) -> float:
    """Independently: each chunk's mean loss, the mean of those, its gradient vs one device's, first weight."""
    model = examples.make_model()
    x, y = examples.make_batch(batch)
    means = [F.cross_entropy(model(xc), yc) for xc, yc in zip(x.chunk(n_devices), y.chunk(n_devices), strict=True)]
    (data_parallel,) = torch.autograd.grad(torch.stack(means).mean(), [model[0].weight])
    (single,) = torch.autograd.grad(F.cross_entropy(model(x), y), [model[0].weight])
    return (data_parallel - single).abs().max().item()


def test_gradient_sum_mean_over_the_gathered_output_matches_one_device():
    g = GradientSum(reduction="mean", batch=10, devices=4)
    assert g.difference < 1e-6
    assert text(g.summary).startswith("max |difference| = ")
    assert "every sample weighs 1/10 as on one device" in text(g.summary)
    assert png(g.image).startswith(PNG)


def test_gradient_sum_per_replica_mean_is_biased_when_chunks_are_uneven():
    g = GradientSum()
    g.batch_slider.value, g.devices_slider.value = 7, 2
    g.reduction_toggle.value = "per-replica mean"
    assert g.difference > 1e-4
    assert g.difference == pytest.approx(per_replica_mean_difference(7, 2), abs=1e-6)
    assert text(g.summary) == (
        f"max |difference| = {g.difference:.3f}: per-replica means weigh the 4-row chunk's samples 1/8 "
        "and the 3-row chunk's samples 1/6 instead of 1/7."
    )
    g.batch_slider.value = 8  # even chunks: the mean of means is the batch mean again
    assert g.difference < 1e-6 and "the chunks are even (4, 4)" in text(g.summary)


def test_gradient_sum_sum_reduction_matches_a_single_device_sum():
    """'sum' = cross-entropy summed over the gathered output's rows, compared with one device's summed loss."""
    model = examples.make_model()
    x, y = examples.make_batch(7)
    data_parallel = dpcourse.DataParallel(model, dpcourse.devices(2))
    (dp_grad,) = torch.autograd.grad(F.cross_entropy(data_parallel(x), y, reduction="sum"), [model[0].weight])
    (single,) = torch.autograd.grad(F.cross_entropy(model(x), y, reduction="sum"), [model[0].weight])
    assert (dp_grad - single).abs().max().item() < 1e-5
    g = GradientSum(reduction="sum", batch=7, devices=2)
    assert g.difference < 1e-5
    assert "summed after the gather, so every sample weighs 1" in text(g.summary)
    assert repr(g) == "GradientSum(reduction='sum', batch=7, devices=2)"


def test_gradient_sum_sliders_work_with_devices_0_standing_in_for_a_gpu(stand_in_gpu):
    """Lesson 06's explorer under the lessons' placement check: every reduction and every slider move runs, as on
    a GPU machine where the model, the batch and the gathered output are on cuda:0."""
    from tests.placement import is_placed

    g = GradientSum(reduction="per-replica mean", batch=8, devices=2)  # as lesson 06 opens it
    assert not g.message.value and g.difference < 1e-6, text(g.message)
    for reduction in ("per-replica mean", "mean", "sum"):
        g.reduction_toggle.value = reduction
        for batch, devices in [(7, 2), (9, 3), (3, 8)]:
            g.batch_slider.value, g.devices_slider.value = batch, devices
            assert not g.message.value and png(g.image).startswith(PNG), (reduction, batch, devices, text(g.message))
            uneven = len({len(chunk) for chunk in torch.arange(batch).chunk(devices)}) > 1
            biased = reduction == "per-replica mean" and uneven
            assert (g.difference > 1e-4) == biased, (reduction, batch, devices, g.difference)
    data = dpcourse.viz.gradient_sum(batch=7, n_devices=3).dpcourse_data
    assert all(is_placed(t) for t in [data["inputs"], data["targets"], data["sum"], data["single_device"]])


def test_timeline_does_nothing_until_run():
    t = TraceExplorer()
    assert png(t.image) == placeholder_png()[0] and t.totals.value == ""
    assert "press Run to measure" in text(t.status)
    assert repr(t) == "TraceExplorer(model='small', batch=64, devices=2, steps=3)"


@pytest.mark.parametrize("model", list(MODELS))
def test_timeline_run_draws_the_step_and_per_stage_totals(model):
    t = TraceExplorer(model=model, batch=16, devices=2, steps=1)
    t.run_button.click()
    assert not t.message.value
    assert png(t.image).startswith(PNG) and png(t.image) != placeholder_png()[0]
    shown = text(t.totals)
    for stage in ("scatter", "replicate", "forward", "gather", "backward", "reduce-add", "optimizer step", "step"):
        assert re.search(rf"\b{re.escape(stage)} \d+\.\d\d \d+%", shown), (stage, shown)
    assert re.search(r"step \d+\.\d\d 100%", shown)
    assert "measured" in text(t.status)
    assert repr(t) == f"TraceExplorer(model='{model}', batch=16, devices=2, steps=1)"
    t.steps_slider.value = 2  # a changed setting clears the old result
    assert t.totals.value == "" and png(t.image) == placeholder_png()[0]


def _broken_scatter(*args, **kwargs):
    raise RuntimeError("scatter is broken")


def _break_scatter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name the explorers reach scatter by: dpcourse.scatter, DataParallel's, the step-by-step forward's."""
    for owner in (dpcourse, dpcourse.scatter_gather, by_hand):
        monkeypatch.setattr(owner, "scatter", _broken_scatter)


def interact(explorer, control_name: str, value: int) -> None:
    control = getattr(explorer, control_name)
    if isinstance(control, widgets.Button):
        control.click()
    else:
        control.value = value


@pytest.mark.parametrize(
    ("make", "control_name"),
    [
        (StepThrough, "batch_slider"),
        (ChunkExplorer, "batch_slider"),
        (GradientSum, "batch_slider"),
        (TraceExplorer, "run_button"),
    ],
)
def test_errors_inside_callbacks_show_in_the_message_area(monkeypatch, make, control_name):
    explorer = make()
    _break_scatter(monkeypatch)
    interact(explorer, control_name, 3)
    assert text(explorer.message) == "RuntimeError: scatter is broken"
    assert ERROR_STYLE in explorer.message.value
    if make is TraceExplorer:
        assert "the run failed" in text(explorer.status)
    monkeypatch.undo()
    interact(explorer, control_name, 4)  # the next interaction that works clears the message
    assert explorer.message.value == ""


@pytest.mark.parametrize("name", list(EXPLORERS))
def test_constructing_an_explorer_prints_nothing_and_has_a_stable_repr(capsys, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explorer = EXPLORERS[name]()
    assert capsys.readouterr() == ("", "")
    assert explorer._repr_mimebundle_()["text/plain"] == repr(explorer)
    value = r"('[\w\-, ]+'|[\w\-]+)"  # a quoted option such as '8 GPUs, PCIe', or a number
    assert re.fullmatch(rf"{name}\((\w+={value}, )*\w+={value}\)", repr(explorer))
    assert not explorer.message.value


def test_measure_all_times_every_control_of_every_explorer(monkeypatch):
    monkeypatch.setattr(png_module, "png_bytes", lambda fig: PNG)  # this checks the bookkeeping, not the speed
    results = measure_all(repeats=1, clicks=1)
    assert set(results) == {"StepThrough", "ChunkExplorer", "GradientSum", "TraceExplorer", "CostModelCalculator",
                            "MemoryCalculator"}
    for name, per_control in results.items():
        assert set(per_control) == set(EXPLORERS[name]().controls)
        for stats in per_control.values():
            assert set(stats) == {"median_ms", "worst_ms", "n"} and stats["n"] >= 1
            assert 0 <= stats["median_ms"] <= stats["worst_ms"]


def test_measure_interactions_rejects_nonsense():
    with pytest.raises(ValueError, match="repeats >= 1"):
        measure_interactions(ChunkExplorer, repeats=0)


OUT_OF_RANGE = [
    (ChunkExplorer, {"batch": 33}, "batch=33 is out of range: choose a whole number from 1 to 32."),
    (ChunkExplorer, {"dim": 2}, "dim=2 is out of range: choose a whole number from 0 to 1."),
    (GradientSum, {"devices": 0}, "devices=0 is out of range: choose a whole number from 1 to 8."),
    (GradientSum, {"reduction": "max"}, "reduction='max' is not one of the choices: pick one of ['mean', "),
    (StepThrough, {"batch": 2.5}, "batch=2.5 is out of range: choose a whole number from 1 to 32."),
    (TraceExplorer, {"steps": 11}, "steps=11 is out of range: choose a whole number from 1 to 10."),
    (TraceExplorer, {"batch": 32}, "batch=32 is not one of the choices: pick one of [16, 64, 256]."),
]


@pytest.mark.parametrize(("make", "arguments", "message"), OUT_OF_RANGE)
def test_a_constructor_value_out_of_range_is_an_error_not_a_silent_clamp(make, arguments, message):
    with pytest.raises(ValueError) as info:
        make(**arguments)
    assert str(info.value).startswith(message)


def test_an_error_hides_the_figure_of_the_previous_setting(monkeypatch):
    explorer = GradientSum()
    assert explorer.image.layout.display is None
    _break_scatter(monkeypatch)
    explorer.batch_slider.value = 3
    assert explorer.message.value and explorer.image.layout.display == "none"


@pytest.mark.parametrize("make", [ChunkExplorer, GradientSum, TraceExplorer, CostModelCalculator, MemoryCalculator])
def test_figures_are_drawn_at_twice_the_width_they_are_shown_at(make):
    explorer = make()
    shown = explorer.image.layout.width
    assert re.fullmatch(r"\d+px", shown), "a width of its own: no stretching to the cell's width"
    assert int.from_bytes(png(explorer.image)[16:20], "big") == 2 * int(shown[:-2])  # the PNG header's width


def test_timeline_run_again_trains_the_same_model_on_and_a_new_setting_starts_a_fresh_one(monkeypatch):
    made = []
    real = trace_explorer_module.TracedTraining

    def counted(*args):
        made.append(args[1:])
        return real(*args)

    monkeypatch.setattr(trace_explorer_module, "TracedTraining", counted)
    t = TraceExplorer(model="small", batch=16, devices=2, steps=1)
    t.run_button.click()
    first = [p.clone() for p in t.training.model.parameters()]
    t.steps_slider.value = 2  # not part of the model's setting
    t.run_button.click()
    assert made == [(2, 16)]
    assert any(not torch.equal(a, b) for a, b in zip(first, t.training.model.parameters(), strict=True))
    t.devices_slider.value = 3
    t.run_button.click()
    assert made == [(2, 16), (3, 16)] and not t.message.value


def test_timeline_runs_cpu_devices_on_one_intra_op_thread_and_gives_the_count_back(monkeypatch):
    threads_in_steps = []
    real = TracedTraining.step
    counted = lambda self: threads_in_steps.append(torch.get_num_threads()) or real(self)  # noqa: E731
    monkeypatch.setattr(TracedTraining, "step", counted)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        TracedTraining(MODELS["small"], 2, 8).trace(2)
        assert threads_in_steps == [1, 1, 1] and torch.get_num_threads() == 2  # the warm-up step, then 2 traced
    finally:
        torch.set_num_threads(before)


def test_timeline_draws_run_after_run_of_one_setting_into_one_kept_figure(monkeypatch):
    frames = []
    real = timeline_canvas.draw_frame
    monkeypatch.setattr(timeline_canvas, "draw_frame", lambda frame: frames.append(frame) or real(frame))
    # Fixed traces of one frame whose tick labels fit the first layout: a real step's timing may outgrow it,
    # and then rightly gets a fresh figure (test_timeline_canvas).
    traces = iter(scaled(narrow_spans(), factor) for factor in (1.0, 1.3, 0.02))
    step = lambda trace: TimedStep(trace, StepTimes(0.0, trace.duration / 2, trace.duration / 2, 0.0))  # noqa: E731
    monkeypatch.setattr(TracedTraining, "trace", lambda self, steps: [step(next(traces))])
    t = TraceExplorer(model="many-layers", batch=16, devices=2, steps=1)
    shown = []
    for _ in range(3):
        t.run_button.click()
        shown.append(t.image.value)
    assert len(frames) == 1 and len(set(shown)) == 3 and not t.message.value
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" for png in shown)


def test_step_through_says_what_to_do_when_its_first_step_failed(monkeypatch):
    from dpcourse.widgets import step_through as step_through_module

    def fails(devices, batch):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(step_through_module, "run_step", fails)
    explorer = StepThrough()
    assert "CUDA out of memory" in explorer.message.value
    explorer.next_button.click()
    assert "no step to show" in explorer.message.value and "Move a slider" in explorer.message.value
    assert "AttributeError" not in explorer.message.value


def test_sliders_are_wide_enough_for_one_value_per_few_pixels():
    explorer = GradientSum()
    assert explorer.batch_slider.layout.width == "380px"
