"""Figure: one DataParallel step as a timeline, one lane per thread, from a real ``dpcourse.trace()``."""

import dataclasses
import functools
from collections.abc import Sequence

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.textpath import TextPath

from dpcourse.trace import Span, Trace

from .palette import device_color, device_label, legend_below, new_figure, step_color

CRITICAL = "critical path"
MIN_FRACTION = 0.003  # every span is drawn at least this share of the step wide, so that none vanishes
LABEL_SIZE = 8  # points
LABEL_ROOM = 4  # points of bar left over around a label: a span whose name does not fit so gets no label
BAR_HEIGHT = 0.8  # of a lane 1 high
X_MARGIN = 1.02  # the x axis runs 2% past the step's end
ROW_EXTRA = 0.5  # how much higher a lane grows for each extra row of overlapping spans


def _lanes(spans: Sequence[Span]) -> list[str]:
    """Thread names in reading order: the main thread, the replica threads by number, then any others."""
    names = list(dict.fromkeys(s.thread for s in spans))

    def order(name: str) -> tuple[int, int, int]:
        if name == "MainThread":
            return (0, 0, 0)
        if name.startswith("replica-") and name[8:].isdigit():
            return (1, int(name[8:]), 0)
        return (2, 0, names.index(name))

    return sorted(names, key=order)


def _rows(spans: Sequence[Span]) -> list[int]:
    """A row within its lane for each span, so that spans overlapping in time (backward of several replicas
    run by one autograd thread) sit one above the other instead of hiding each other."""
    ends: list[float] = []
    rows = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: spans[i].start):
        free = next((r for r, end in enumerate(ends) if end <= spans[i].start), len(ends))
        if free == len(ends):
            ends.append(spans[i].end)
        else:
            ends[free] = spans[i].end
        rows[i] = free
    return rows


def critical_path(trace: Trace) -> list[Span]:
    """The spans that set the length of a one-step trace: every main-thread step, and for each step that runs
    once per replica (forward, backward) the replica that finished last, because the next step waits for it."""
    chain = [s for s in trace.spans if s.replica is None]
    for step in dict.fromkeys(s.step for s in trace.spans if s.replica is not None):
        chain.append(max((s for s in trace.spans if s.step == step and s.replica is not None), key=lambda s: s.end))
    return sorted(chain, key=lambda s: s.start)


@functools.cache  # a handful of step names; outlining one takes milliseconds
def _label_width(text: str) -> float:
    """How wide ``text`` is drawn as a bar's label, in points (from the font's glyph outlines)."""
    return TextPath((0, 0), text, size=LABEL_SIZE).get_extents().width


def _bar(ax: Axes, span: Span, y: float, height: float, origin: float, total: float, gid: str,
         points_per_ms: float) -> None:
    replica = {} if span.replica is None else {"edgecolor": device_color(span.replica), "hatch": "//", "linewidth": 2}
    start, width = (span.start - origin) * 1e3, max(span.duration * 1e3, MIN_FRACTION * total)
    bars = ax.barh(y, width, height=height, left=start, color=step_color(span.step), gid=gid, **replica)
    # barh also lists its bars in ax.containers, where they would outlive their removal by TimelineCanvas.
    ax.containers.remove(bars)
    if _label_width(span.step) + LABEL_ROOM <= width * points_per_ms:  # else it would run into its neighbours
        ax.text(start + width / 2, y, span.step, ha="center", va="center", fontsize=LABEL_SIZE, clip_on=True)


@dataclasses.dataclass(frozen=True)
class Frame:
    """What a timeline figure draws before its spans: lanes, their heights and the legend's entries.

    Every step of one setting (same model, batch and devices) has the same frame, so ``TimelineCanvas``
    draws it once and each further step only adds its spans.
    """

    lanes: tuple[str, ...]  # thread names, in reading order (``_lanes``)
    heights: tuple[float, ...]  # lane 0 (the critical path) first, then each thread's lane
    steps: tuple[str, ...]  # the legend's steps, in order of first appearance
    replicas: tuple[tuple[int, str], ...]  # (replica or rank, its device), for the legend

    @classmethod
    def of(cls, trace: Trace) -> "Frame":
        lanes = _lanes(trace.spans)
        rows = [_rows([s for s in trace.spans if s.thread == thread]) for thread in lanes]
        return cls(
            lanes=tuple(lanes),
            heights=(1.0, *(1.0 + ROW_EXTRA * max(r) for r in rows)),
            steps=tuple(dict.fromkeys(s.step for s in trace.spans)),
            replicas=tuple(sorted({s.replica: s.device for s in trace.spans if s.replica is not None}.items())),
        )

    @property
    def tops(self) -> list[float]:
        return [sum(self.heights[:i]) for i in range(len(self.heights))]

    @property
    def kind(self) -> tuple[str, str]:
        """("DataParallel", "replica"), or ("DDP", "rank") for a DistributedDataParallel trace (lesson 10),
        which has one lane per process, "rank-r", instead of threads."""
        ranks = all(thread.startswith("rank-") for thread in self.lanes)
        return ("DDP", "rank") if ranks else ("DataParallel", "replica")


def draw_frame(frame: Frame) -> tuple[Figure, Axes, Text]:
    """A figure with ``frame``'s lanes, axis labels and legend, and no spans yet; also its axes and its
    (still empty) title, which ``draw_spans`` fills in."""
    fig = new_figure(height=1.9 + 0.6 * sum(frame.heights))
    ax = fig.subplots()
    for top in frame.tops[1:]:
        ax.axhline(top, color="#DDDDDD", linewidth=1)
    ax.set_yticks([top + h / 2 for top, h in zip(frame.tops, frame.heights, strict=True)],
                  [CRITICAL, *frame.lanes])
    ax.set_ylim(sum(frame.heights), 0)
    ax.set_xlabel("time since the first step began (ms)")
    ax.set_ylabel("thread")
    _, unit = frame.kind
    handles = [Patch(color=step_color(step), label=step) for step in frame.steps]
    handles += [Patch(facecolor="white", edgecolor=device_color(i), hatch="//", label=device_label(i, d, unit))
                for i, d in frame.replicas]
    legend_below(fig, handles)
    return fig, ax, fig.suptitle("")


def draw_spans(fig: Figure, ax: Axes, title: Text, trace: Trace, frame: Frame, note: str = "") -> list[Artist]:
    """Draw ``trace``'s spans into a figure from ``draw_frame(frame)``, set its x range and title (with
    ``note`` on a second line), and return the artists added (bars, labels, the end line)."""
    before = set(ax.get_children())
    origin, total = trace.start, trace.duration * 1e3
    # The axes' width before a layout engine makes room for the labels: less than it ends up, so a label
    # that fits here fits in the drawn figure too.
    points_per_ms = (fig.subplotpars.right - fig.subplotpars.left) * fig.get_figwidth() * 72 / (total * X_MARGIN)
    critical = critical_path(trace)
    for span in critical:
        _bar(ax, span, 0.5, BAR_HEIGHT, origin, total, CRITICAL, points_per_ms)
    for thread, top, lane_height in zip(frame.lanes, frame.tops[1:], frame.heights[1:], strict=True):
        spans = [s for s in trace.spans if s.thread == thread]
        rows = _rows(spans)
        row_height = (lane_height - 1 + BAR_HEIGHT) / (max(rows) + 1)
        for span, row in zip(spans, rows, strict=True):
            y = top + (1 - BAR_HEIGHT) / 2 + row_height * (row + 0.5)
            _bar(ax, span, y, row_height * 0.9, origin, total, "span", points_per_ms)
    ax.axvline(total, color="black", linestyle=":", linewidth=1)
    ax.set_xlim(0, total * X_MARGIN)
    kind, unit = frame.kind
    devices = sorted({d for _, d in frame.replicas})
    title.set_text(f"{kind} on {len(frame.replicas)} {unit}s ({', '.join(devices)}): "
                   f"{total:.1f} ms end to end (dotted line)" + (f"\n{note}" if note else ""))
    fig.dpcourse_data = {"lanes": list(frame.lanes), "critical": critical, "duration_ms": total}
    return [artist for artist in ax.get_children() if artist not in before]


def timeline(trace: Trace, note: str = "") -> Figure:
    """Draw every span of ``trace`` as a bar in its thread's lane; x is milliseconds since the first span.

    ``note`` is a second title line, e.g. ``dpcourse.recording.load().label`` for the recorded GPU step.

    Fill = the step (scatter, replicate, forward, gather, gather-backward, backward, reduce-add); replica
    spans are outlined and hatched in their replica's device colour. The top lane repeats the critical path
    (``critical_path``): what the step really waits for. Gaps in it are time spent outside every recorded
    step: Python between the steps, starting threads, the autograd engine.

    Works for any trace: on CPU devices the autograd engine runs every replica's backward on the calling
    thread, so those spans stack up in the MainThread lane; on GPUs each device has its own backward thread.
    The returned figure carries ``fig.dpcourse_data = {"lanes", "critical", "duration_ms"}``.
    """
    if not trace.spans:
        raise ValueError(
            "This trace is empty: record one step first, `with dpcourse.trace() as t: dp(x).sum().backward()`."
        )
    frame = Frame.of(trace)
    fig, ax, title = draw_frame(frame)
    draw_spans(fig, ax, title, trace, frame, note)
    return fig
