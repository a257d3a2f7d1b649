"""Every figure function's text is readable: no two texts overlap, and none leaves the canvas.

Measured on the drawn figure with matplotlib's own bounding boxes (``Text.get_window_extent`` with the
canvas's renderer), for the figures the lessons, the explorers and the quizzes draw.
"""

import itertools

import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

import dpcourse
from dpcourse import examples, viz
from dpcourse.costmodel import PRESETS, Workload
from dpcourse.ddp.sampling import SETUPS, rank_orders
from dpcourse.quiz import EXPERIMENTS, run_experiment
from dpcourse.viz.gallery import FIGURES as GALLERY
from dpcourse.viz.gallery import example_trace

TOLERANCE_PX = 1.0  # anti-aliasing: boxes that only touch are not an overlap

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


def drawn_texts(fig: Figure) -> list[Text]:
    """Every non-empty, visible text the canvas draws: titles, labels, tick labels in view, legends, annotations."""
    tick_labels, shown = set(), set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                tick_labels |= {tick.label1, tick.label2}
                if low - 1e-9 * (high - low) <= tick.get_loc() <= high + 1e-9 * (high - low):  # ticks in view only
                    shown |= {tick.label1, tick.label2}
    return [
        text
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text().strip() and (text not in tick_labels or text in shown)
    ]


def problems(fig: Figure) -> list[str]:
    FigureCanvasAgg(fig)  # a figure made without pyplot has a bare canvas, with no renderer to measure text
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = [(text, text.get_window_extent(renderer)) for text in drawn_texts(fig)]
    found = []
    for text, box in boxes:
        if (box.x0 < canvas.x0 - TOLERANCE_PX or box.y0 < canvas.y0 - TOLERANCE_PX
                or box.x1 > canvas.x1 + TOLERANCE_PX or box.y1 > canvas.y1 + TOLERANCE_PX):
            found.append(f"{text.get_text()!r} leaves the canvas")
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        overlap_x = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        overlap_y = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if overlap_x > TOLERANCE_PX and overlap_y > TOLERANCE_PX:
            found.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    return found


@pytest.mark.parametrize("name", CASES)
def test_no_text_overlaps_another_or_leaves_the_canvas(name):
    assert problems(CASES[name]()) == []


def test_no_quiz_experiment_figure_has_overlapping_text():
    # Only running an experiment tells whether it draws a figure, so they are all checked in one test.
    figures = {name: run_experiment(name).figure for name in sorted(EXPERIMENTS)}
    drawn = {name: fig for name, fig in figures.items() if fig is not None}
    assert drawn, "no quiz experiment drew a figure"
    assert {name: found for name, fig in drawn.items() if (found := problems(fig))} == {}
