"""Is a figure readable? Every drawn text inside the canvas, and no two texts overlapping.

Measured on the drawn figure with matplotlib's own bounding boxes (``Text.get_window_extent`` with the canvas's
renderer). ``tests/test_figure_layout.py`` runs it on every figure function; Part III's tests on their figures.
"""

import itertools

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

TOLERANCE_PX = 1.0  # anti-aliasing: boxes that only touch are not an overlap


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
    """What makes ``fig`` hard to read, one sentence per problem; ``[]`` when none."""
    if not isinstance(fig.canvas, FigureCanvasAgg):  # a figure made without pyplot has a bare canvas,
        FigureCanvasAgg(fig)  # with no renderer to measure text; a kept one (viz.redraw) is drawn in place
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
