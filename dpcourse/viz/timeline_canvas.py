"""TimelineCanvas: ``timeline`` figures of step after step, each drawn in about half the time of a fresh one.

``widgets.TraceExplorer`` shows a new traced step at every Run. Steps of one setting share their ``Frame``
(lanes, legend), so the canvas keeps one figure per frame (``redraw.Redraw``): the frame is drawn once,
and each new step removes the last step's spans, adds its own and draws only those, the x axis (its scale
follows the step's length), the spines (bars start at the left one) and the title.
"""

from matplotlib.artist import Artist

from dpcourse.trace import Trace

from ..ui.redraw import Redraw
from .timeline import Frame, draw_frame, draw_spans

FRAMES_KEPT = 2  # figures kept, the most recently used (up to 28 MB each at 8 devices, with its background)


class KeptFigure:
    """One frame's figure (``redraw``, a ``ui.redraw.Redraw``; its ``ax`` and ``title``) and the ``spans`` drawn
    into it last."""

    def __init__(self, frame: Frame) -> None:
        fig, self.ax, self.title = draw_frame(frame)
        self.redraw = Redraw(fig)
        self.spans: list[Artist] = []

    @property
    def changing(self) -> list[Artist]:
        return [*self.spans, *self.ax.spines.values(), self.ax.xaxis, self.title]


class TimelineCanvas:
    """``png(trace)``: ``png_bytes(timeline(trace))`` and its ``css_width``, drawn into a kept figure.

    The first step of a frame is drawn in full with constrained layout; later ones reuse that layout, so
    their axes are exactly where the first step's were (a fresh figure might move them by a pixel or two
    to fit other tick labels). A step whose labels would leave the canvas gets a fresh figure.
    ``prepare()`` draws what later steps start from; ``TraceExplorer`` calls it while the learner looks.
    ``kept`` lists the figures kept (``KeptFigure``), so a reader can see whether one is prepared.
    """

    def __init__(self) -> None:
        self._drawn: dict[Frame, KeptFigure] = {}

    @property
    def kept(self) -> list[KeptFigure]:
        """The figures kept, one per frame, least recently used first (at most ``FRAMES_KEPT``)."""
        return list(self._drawn.values())

    def png(self, trace: Trace) -> tuple[bytes, str]:
        frame = Frame.of(trace)
        drawn = self._drawn.pop(frame, None)
        png = None if drawn is None else self._draw(drawn, trace, frame)
        if png is None:  # a new frame, or the kept layout no longer fits
            drawn = KeptFigure(frame)
            png = self._draw(drawn, trace, frame)
        self._drawn[frame] = drawn  # now the most recently used
        while len(self._drawn) > FRAMES_KEPT:
            del self._drawn[next(iter(self._drawn))]
        return png, drawn.redraw.width

    def prepare(self) -> None:
        """Draw the background of every kept figure that has none yet (one full draw each)."""
        for drawn in self._drawn.values():
            drawn.redraw.prepare(drawn.changing)

    @staticmethod
    def _draw(drawn: KeptFigure, trace: Trace, frame: Frame) -> bytes | None:
        for artist in drawn.spans:
            artist.remove()
        drawn.spans = draw_spans(drawn.redraw.fig, drawn.ax, drawn.title, trace, frame)
        return drawn.redraw.png(drawn.changing, must_fit=[drawn.ax.xaxis, drawn.title])
