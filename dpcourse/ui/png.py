"""A figure as PNG bytes: the one renderer behind the lessons' figures, the explorers' and the quizzes' images.

A figure is shown at the size of the lessons' own figures: 100 CSS px per inch, matplotlib's figure.dpi, which
the notebook's inline backend uses. An explorer or a quiz draws it with 2 PNG pixels per CSS px, so it stays
sharp on high-density screens and when zoomed, and gives its ``ipywidgets.Image`` that width explicitly
(``css_width``): with none, a VBox stretches the image to the cell's width and a browser scales it up, blurred.
Agg's time is mostly layout, not pixels: 2x costs about 40% more.
"""

import contextlib
import gc
import io
import struct
import zlib
from collections.abc import Callable, Iterator

import numpy
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

CSS_PX_PER_INCH = 100
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PIXEL_RATIO = 2


def png_bytes(fig: Figure, pixel_ratio: int = PIXEL_RATIO, tight: bool = False) -> bytes:
    """``fig`` as PNG bytes with ``pixel_ratio`` pixels per CSS px, shown ``css_width(fig)`` wide.

    ``tight=True`` crops the canvas to what is drawn (matplotlib's ``bbox_inches="tight"``), as Jupyter's own
    figure printer does; the image is then no longer exactly ``css_width`` wide.

    Without cropping, the figure is drawn once on an Agg canvas and encoded by ``encode``: ``savefig`` draws a
    figure with a layout engine twice (a layout pass, then the real one) and encodes with Pillow. Same pixels,
    about a fifth less time, which a learner waits for at every change of an explorer's control
    (tests/benchmarks/browser_latency.py). The figure's dpi and canvas are put back afterwards.
    """
    if tight:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=CSS_PX_PER_INCH * pixel_ratio, bbox_inches="tight")
        return buffer.getvalue()
    dpi, canvas = fig.dpi, fig.canvas
    try:
        fig.dpi = CSS_PX_PER_INCH * pixel_ratio
        agg = FigureCanvasAgg(fig)
        agg.draw()
        return encode(agg)
    finally:
        fig.dpi = dpi
        fig.set_canvas(canvas)


def encode(agg: FigureCanvasAgg) -> bytes:
    """What ``agg`` last drew, as PNG bytes: the one PNG encoder of the course's figures, shared by
    ``png_bytes`` and ``redraw.Redraw``.

    A PNG is a header, the pixels' rows compressed with zlib (each row starting with a byte that names its
    *filter*), and an end marker. Pillow tries every filter on every row and keeps the best, which took 25 of its
    35 ms for a 1800 x 920 timeline; with no filter (0) and zlib level 3 the same image takes 10 ms and comes out
    4% smaller, since a figure's flat colours compress well as they are. Pillow decodes it to the same pixels
    (tests/test_viz.py).
    """
    rgba = numpy.asarray(agg.buffer_rgba())
    height, width, _ = rgba.shape
    rows = numpy.empty((height, 1 + 4 * width), numpy.uint8)
    rows[:, 0] = 0  # filter: none
    rows[:, 1:] = rgba.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8 bits per channel, RGBA, no interlace
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 3)) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: its length, its four-letter kind, the data and their checksum."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the life of a figure: made, drawn, encoded, dropped.

    A matplotlib figure is a web of reference cycles (artists and their figure, axes and their axis), so only
    the collector frees it. If young collections run while it is alive, and drawing one allocates enough to
    trigger several, they promote it to the oldest generation; dropped there, it waits for a full collection,
    and a few such figures make Python run one, in the middle of whatever comes next. In a notebook kernel
    holding 300,000 objects that is a 110-365 ms pause: 27 of them in one browser latency benchmark run. With
    the collector paused, the dropped figure is still young, and the next young collection frees it.
    Nothing of the learner's state changes: the collector's previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def rendered(make: Callable[[], Figure]) -> tuple[bytes, str]:
    """``png_bytes`` and ``css_width`` of the figure ``make()`` draws, made and dropped with the collector
    paused (``collector_paused``)."""
    with collector_paused():
        fig = make()
        png, width = png_bytes(fig), css_width(fig)
        del fig
    return png, width


def css_width(fig: Figure) -> str:
    """The width ``fig`` is shown at (``"700px"`` for a 7-inch figure), for ``png_bytes(fig)`` in an ``Image``."""
    return f"{round(fig.get_figwidth() * CSS_PX_PER_INCH)}px"
