"""Every figure function's text is readable: no two texts overlap, and none leaves the canvas.

Measured on the drawn figure with matplotlib's own bounding boxes (``Text.get_window_extent`` with the
canvas's renderer), for the figures the lessons, the explorers and the quizzes draw.
"""

import functools
import itertools

import ipywidgets
import pytest
import torch
from matplotlib.figure import Figure

import dpcourse
from dpcourse import accumulation, examples, memory, precision, ranks, viz, widgets
from dpcourse.costmodel import PRESETS, Workload
from dpcourse.ddp.demos import collectives, compare
from dpcourse.ddp.demos.compression import Compression
from dpcourse.ddp.demos.sampling import SETUPS, rank_orders
from dpcourse.memory import Setup, sized_mlp
from dpcourse.quiz import EXPERIMENTS, run_experiment
from dpcourse.sharded import zero3_measure
from dpcourse.ui import png, redraw
from dpcourse.viz.gallery import FIGURES as GALLERY
from dpcourse.viz.gallery import example_trace
from dpcourse.viz.timeline_canvas import TimelineCanvas
from dpcourse.widgets import trace_explorer
from tests.figure_checks import problems
from tests.helpers import narrow_spans, scaled

on_ranks = functools.cache(collectives.collectives)  # one launch of real ranks for lesson 13's five figures

CASES = {
    **{f"gallery-{name}": make for name, make in GALLERY.items()},
    **{f"plot_speedup-{preset}": (lambda preset=preset: viz.plot_speedup(preset)) for preset in PRESETS},
    "plot_speedup-tiny": lambda: viz.plot_speedup("laptop CPU", Workload(params=212, modules=4, batch=16)),
    "chunk_split-kwargs": lambda: viz.chunk_split(8, 4, kwargs_batches={"mask": 2}),
    "chunk_split-dim1": lambda: viz.chunk_split(dpcourse.examples.make_batch(6)[0].T.contiguous(), 4, 1),
    "replicate_map-lesson03": lambda: viz.replicate_map(examples.CountingNet(), dpcourse.devices(2)),
    "gather_view-lesson05": lambda: viz.gather_view([3, 3, 3, 1]),
    "gradient_sum-lesson06": lambda: viz.gradient_sum(reduction="sum", batch=8, n_devices=2),
    "per_replica_mean_bias-even": lambda: viz.per_replica_mean_bias(8, 2),
    "timeline-2-devices": lambda: viz.timeline(example_trace(2)),
    "timeline-narrow-spans": lambda: viz.timeline(narrow_spans()),
    "accumulation_timeline-lesson14": lambda: viz.accumulation_timeline([
        ("DataParallel, 2 devices", "reduce-add", {"device 0": [1, 1, 1]}),
        ("DDP, 2 ranks", "all-reduce", {"rank 0": [1, 1, 1], "rank 1": [1, 1, 1]}),
        ("DDP, no_sync() around micro-steps 1-2", "all-reduce", {"rank 0": [0, 0, 1], "rank 1": [0, 0, 1]}),
        ("DDP, only the backward inside no_sync()", "all-reduce", {"rank 0": [1, 1, 1], "rank 1": [1, 1, 1]}),
    ]),
    "accumulation_timeline-several-buckets": lambda: viz.accumulation_timeline([
        ("DDP, 4 ranks", "all-reduce", {f"rank {r}": [0, 0, 0, 0, 3] for r in range(4)}),
    ]),
    "autocast_threads-lesson16": lambda: viz.autocast_threads(
        {f"autocast(dtype={d})": precision.thread_dtypes(d) for d in (torch.bfloat16, torch.float16)}),
    "loss_scale-lesson16": lambda: viz.loss_scale(precision.scaler_steps()),
    "compression_error-synthetic": lambda: viz.compression_error(_synthetic_compression()),
    "micro_batch_weights-one-device": lambda: viz.micro_batch_weights(accumulation.sample_weights(10, 4, "1/K")),
    "micro_batch_weights-mean-of-means": lambda: viz.micro_batch_weights(
        accumulation.sample_weights(10, 3, "1/K", n_devices=2, per_replica_mean=True)),
    **{f"collective-{name}": (lambda name=name: viz.collective(on_ranks(4)[name])) for name in collectives.CALLS},
    "collective-reduce-lesson13": lambda: viz.collective(on_ranks(3)["reduce"]),
    "bytes_per_rank-lesson13": lambda: viz.bytes_per_rank(
        compare.compare(numels=(1_200,), repeats=1), 4_800, {2: 1.0, 3: 2.0, 4: 3.0}),
    "memory_bars-8-devices-GiB": lambda: viz.memory_bars([
        memory.predict(Setup(model=sized_mlp(width=4096, classes=128000))),
        memory.predict(Setup(kind="DataParallel", devices=8, model=sized_mlp(width=4096, classes=128000))),
        memory.predict(Setup(kind="DDP", devices=8, model=sized_mlp(width=4096, classes=128000)))]),
    "shard_layout-lesson18": lambda: viz.shard_layout(
        [(name, p.numel()) for name, p in examples.mlp((8, 15, 15, 4)).named_parameters()], 4),
    "gradient_bytes-lesson19": lambda: viz.gradient_bytes({
        "DDP": {"held_at_hooks": [16, 256, 316, 1216, 1276, 1756], "after_backward": 1756},
        "ZeRO-2": {"held_at_hooks": [336, 560, 380, 1940, 1100, 1280], "after_backward": 440}},
        "Rank 0's gradients during backward"),
    "zero3_memory-lesson20": lambda: viz.zero3_memory(zero3_measure.measure(2, widths=ranks.WIDTHS)[0]["ways"]),
    "sampler_coverage-lesson17": lambda: viz.sampler_coverage(12, {
        setup: [rank_orders(setup, 12, 2, rank=r, world=2) for r in range(2)] for setup in SETUPS}),
    "uneven_steps-lesson17": lambda: viz.uneven_steps(
        [3, 2], {"no join": [2, 2], "join": [3, 2], "join, divide by ranks left": [3, 2]},
        {"no join": [True, False], "join": [False, False], "join, divide by ranks left": [False, False]},
        {"join": "rank 0's step 3 used 0.50 x its own gradient"}),
    "batchnorm_stats-lesson17": lambda: viz.batchnorm_stats(
        {"running_mean": torch.tensor([-0.04, -0.06, -0.01, -0.04]), "running_var": torch.ones(4)},
        [{"running_mean": torch.tensor([-0.06, -0.05, -0.05, -0.07]), "running_var": torch.full((4,), 0.92)},
         {"running_mean": torch.tensor([-0.02, -0.08, 0.03, -0.02]), "running_var": torch.full((4,), 1.06)}],
        {"running_mean": torch.tensor([-0.04, -0.06, -0.01, -0.04]), "running_var": torch.ones(4)}),
}


def _synthetic_compression() -> Compression:
    """Gradients rounded as the hooks round them, without starting ranks: ordinary, tiny and overflowing."""
    exact = torch.linspace(-0.2, 0.2, 212)
    grads = {}
    for multiplier in (1.0, 1e-6, 2.0**16, 2.0**24):
        grads[(multiplier, "none")] = exact * multiplier
        grads[(multiplier, "fp16_compress_hook")] = (exact * multiplier).half().float()
        grads[(multiplier, "bf16, dpcourse's copy")] = (exact * multiplier).bfloat16().float()
    return Compression(grads, ranks_agree=True, bf16_compress_hook="refused")


@pytest.mark.parametrize("name", CASES)
def test_no_text_overlaps_another_or_leaves_the_canvas(name):
    assert problems(CASES[name]()) == []


def test_a_kept_timeline_figure_stays_readable_for_steps_of_any_length(monkeypatch):
    # TimelineCanvas lays out a frame for its first step; later steps' tick labels ("0.05", "1500") differ.
    checked = []
    monkeypatch.setattr(redraw, "encode", lambda agg: checked.append(problems(agg.figure)) or b"")
    canvas, trace = TimelineCanvas(), narrow_spans()
    for factor in (1.0, 1e-4, 0.013, 7.7, 1.5e3, 1e-3, 99.0):
        canvas.png(scaled(trace, factor))
    assert checked == [[]] * 7


def test_no_quiz_experiment_figure_has_overlapping_text():
    # Only running an experiment tells whether it draws a figure, so they are all checked in one test.
    figures = {name: run_experiment(name).figure for name in sorted(EXPERIMENTS)}
    drawn = {name: fig for name, fig in figures.items() if fig is not None}
    assert drawn, "no quiz experiment drew a figure"
    assert {name: found for name, fig in drawn.items() if (found := problems(fig))} == {}


def _settings(control) -> list:
    """The settings a figure is checked at: every option of a toggle, the two ends of a slider."""
    if not hasattr(control, "options"):
        return [control.min, control.max]
    values = [option[1] if isinstance(option, tuple) else option for option in control.options]
    return values if isinstance(control, ipywidgets.ToggleButtons) else [values[0], values[-1]]


def _corners(explorer) -> list[dict]:
    """Every toggle option with every slider at its start, and again with every slider at its end."""
    settable = {name: control for name, control in explorer.controls.items()
                if not isinstance(control, ipywidgets.Button)}
    toggles = [name for name, control in settable.items() if isinstance(control, ipywidgets.ToggleButtons)]
    sliders = [name for name in settable if name not in toggles]
    corners = []
    for options in itertools.product(*(_settings(settable[name]) for name in toggles)):
        for end in (0, -1):
            corners.append(dict(zip(toggles, options, strict=True)) | {n: _settings(settable[n])[end] for n in sliders})
    return corners


@pytest.mark.parametrize("name", widgets.__all__)
def test_no_explorer_figure_has_overlapping_text_at_its_controls_ends(name, monkeypatch, request):
    # At each corner, every button is pressed as a learner would: Next until the last stage, Run once.
    drawn = []

    def checked_png(fig: Figure, *args, **kwargs) -> bytes:
        drawn.append((repr(explorer), problems(fig)))
        return b""

    monkeypatch.setattr(png, "png_bytes", checked_png)  # every explorer's figure_png and TraceExplorer's placeholder
    monkeypatch.setattr(redraw, "encode", lambda agg: checked_png(agg.figure))  # TraceExplorer's kept figures
    # TraceExplorer's placeholder is drawn once per process: drawn here too, and not left cached as b"".
    trace_explorer.placeholder_png.cache_clear()
    request.addfinalizer(trace_explorer.placeholder_png.cache_clear)
    explorer = getattr(widgets, name)()
    buttons = [c for c in explorer.controls.values() if isinstance(c, ipywidgets.Button)]
    for corner in _corners(explorer):
        for control_name, value in corner.items():
            explorer.controls[control_name].value = value
        for button in buttons:
            for _ in range(1 if button is getattr(explorer, "run_button", None) else 8):
                if not button.disabled:
                    button.click()
        assert explorer.message.value == "", explorer.message.value
    assert drawn, f"{name} drew no figure"
    assert [(setting, found) for setting, found in drawn if found] == []
