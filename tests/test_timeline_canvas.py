"""TimelineCanvas and Redraw: a kept timeline figure gives the pixels a full draw of the same figure gives."""

import dataclasses
import io

import numpy
import PIL.Image
import pytest

from dpcourse.trace import Trace
from dpcourse.ui.png import css_width, png_bytes
from dpcourse.viz import timeline, timeline_canvas
from dpcourse.viz.gallery import example_trace
from dpcourse.viz.timeline_canvas import FRAMES_KEPT, TimelineCanvas
from tests.helpers import narrow_spans, scaled


def pixels(png: bytes) -> numpy.ndarray:
    return numpy.asarray(PIL.Image.open(io.BytesIO(png)))


def renamed(trace: Trace, thread: str) -> Trace:
    """The same spans with the replica-1 lane renamed: another frame."""
    return Trace([dataclasses.replace(s, thread=thread) if s.thread == "replica-1" else s for s in trace.spans])


@pytest.fixture
def frames_drawn(monkeypatch) -> list:
    drawn = []
    real = timeline_canvas.draw_frame

    def counted(frame):
        drawn.append(frame)
        return real(frame)

    monkeypatch.setattr(timeline_canvas, "draw_frame", counted)
    return drawn


def test_the_first_step_of_a_frame_is_exactly_a_fresh_timeline():
    trace = example_trace(2)
    png, width = TimelineCanvas().png(trace)
    fresh = timeline(trace)
    assert (png, width) == (png_bytes(fresh), css_width(fresh))


@pytest.mark.parametrize("prepared", [True, False])
def test_a_later_step_draws_only_its_spans_into_the_kept_figure_with_a_full_draws_pixels(frames_drawn, prepared):
    canvas, first = TimelineCanvas(), narrow_spans()
    canvas.png(first)
    if prepared:  # TraceExplorer's look-ahead; without it, the next png prepares first
        canvas.prepare()
    for factor in (1.3, 0.02, 1.0):  # other tick labels, other bar widths (some lose their labels)
        png, _ = canvas.png(scaled(first, factor))
        (kept,) = canvas.kept
        kept.redraw.canvas.draw()  # everything, in matplotlib's own order, with the kept layout
        assert (pixels(png) == numpy.asarray(kept.redraw.canvas.buffer_rgba())).all(), factor
    assert len(frames_drawn) == 1


def test_a_kept_figure_holds_only_the_last_steps_bars(frames_drawn):
    canvas, first = TimelineCanvas(), narrow_spans()
    canvas.png(first)
    (kept,) = canvas.kept
    bars = len(kept.ax.patches)
    for factor in (1.3, 0.5, 1.0):
        canvas.png(scaled(first, factor))
    assert len(kept.ax.patches) == bars and kept.ax.containers == []  # the removed bars can be freed


def test_a_step_whose_labels_would_leave_the_canvas_gets_a_fresh_figure(frames_drawn):
    canvas, first = TimelineCanvas(), narrow_spans()
    canvas.png(first)
    longer = scaled(first, 99.0)  # its last tick label, "100000", is wider than the margin laid out for "1000"
    png, _ = canvas.png(longer)
    assert len(frames_drawn) == 2
    assert png == png_bytes(timeline(longer))


def test_the_canvas_keeps_the_most_recently_used_frames(frames_drawn):
    canvas, trace = TimelineCanvas(), narrow_spans()
    others = [renamed(trace, f"worker-{i}") for i in range(FRAMES_KEPT)]
    for shown in [trace, *others, others[-1], trace]:  # the first frame was dropped for the last of the others
        canvas.png(shown)
    assert len(frames_drawn) == FRAMES_KEPT + 2
    assert len(canvas.kept) == FRAMES_KEPT


def test_prepare_on_a_new_canvas_does_nothing():
    TimelineCanvas().prepare()
