"""Redraw: a figure shown again and again with a few artists changed, drawn in full once and then in part.

An explorer figure takes 100-200 ms to draw with matplotlib's Agg backend, and most of that goes to what
stays the same from one state to the next: the constrained layout, the legend, the axis that names the
lanes. ``Redraw`` follows matplotlib's blitting recipe ("Faster rendering by using blitting" in its docs):
draw the figure once with the changing artists hidden, keep those pixels (``copy_from_bbox``), and for each
new state put them back (``restore_region``) and draw only the changing artists on top.

* **Layout.** The first ``png`` draws everything with the figure's layout engine, then freezes the layout it
  found, so every later state is drawn into the same axes. ``png`` reports whether the changing artists
  still fit inside the canvas; when they do not, the caller starts over with a fresh figure.
* **Same pixels.** Changing artists are drawn in the order a full draw would draw them (by axes, then by
  ``zorder``, ties in ``get_children`` order). So the result is the full draw's, pixel for pixel, as long as
  no unchanging artist that a full draw paints *later* overlaps a changing one; the timeline's test checks it.
"""

from collections.abc import Sequence

from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from .png import CSS_PX_PER_INCH, PIXEL_RATIO, css_width, encode


class Redraw:
    """One figure, drawn with ``PIXEL_RATIO`` pixels per CSS px; ``png(changing)`` after each change."""

    def __init__(self, fig: Figure) -> None:
        self.fig = fig
        self.width = css_width(fig)
        fig.dpi = CSS_PX_PER_INCH * PIXEL_RATIO  # this figure is only ever drawn here
        self.canvas = FigureCanvasAgg(fig)
        self._laid_out = False
        self._background = None  # the pixels of everything that does not change

    def png(self, changing: Sequence[Artist], must_fit: Sequence[Artist] = ()) -> bytes | None:
        """The figure as PNG bytes, after drawing only ``changing`` (every artist that differs from the
        figure's state at the last call, or that a full draw paints on top of one that does).

        ``None`` if one of ``must_fit`` (the changing artists that could: an axis with its tick labels, a
        title; not bars or lines clipped to their axes) now reaches outside the canvas the first call laid out.
        """
        if not self._laid_out:
            self.canvas.draw()
            self.fig.set_layout_engine("none")
            self._laid_out = True
            return encode(self.canvas)
        if self._background is None:
            self.prepare(changing)
        renderer = self.canvas.get_renderer()
        self.canvas.restore_region(self._background)
        for artist in _drawing_order(self.fig, changing):
            artist.draw(renderer)
        if not all(_inside(artist.get_tightbbox(renderer), self.fig.bbox) for artist in must_fit):
            return None
        return encode(self.canvas)

    @property
    def prepared(self) -> bool:
        """Whether the background that each later ``png`` starts from is drawn (by ``prepare``)."""
        return self._background is not None

    def prepare(self, changing: Sequence[Artist]) -> None:
        """Draw and keep everything but ``changing``: what each later ``png`` starts from. Call it when
        nothing waits (an explorer's look-ahead); otherwise the next ``png`` calls it."""
        if not self._laid_out or self._background is not None:
            return
        shown = [artist.get_visible() for artist in changing]
        for artist in changing:
            artist.set_visible(False)
        try:
            self.canvas.draw()
            self._background = self.canvas.copy_from_bbox(self.fig.bbox)
        finally:
            for artist, visible in zip(changing, shown, strict=True):
                artist.set_visible(visible)


def _drawing_order(fig: Figure, artists: Sequence[Artist]) -> list[Artist]:
    """``artists`` in the order ``Figure.draw`` paints them: each axes' own (by zorder, ties as listed by
    ``get_children``), axes by axes, then the figure's own (by zorder: axes come first, at zorder 0)."""
    position = {id(child): i for ax in fig.axes for i, child in enumerate(ax.get_children())}
    position.update({id(child): i for i, child in enumerate(fig.get_children())})
    group = {id(ax): i for i, ax in enumerate(fig.axes)}

    def key(artist: Artist) -> tuple[int, float, int]:
        return group.get(id(artist.axes), len(group)), artist.get_zorder(), position[id(artist)]

    return sorted(artists, key=key)


def _inside(box: Bbox | None, canvas: Bbox) -> bool:
    return box is None or (box.x0 >= canvas.x0 and box.y0 >= canvas.y0 and box.x1 <= canvas.x1
                           and box.y1 <= canvas.y1)
