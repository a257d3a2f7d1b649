"""Figure: one DataParallel step as a timeline, one lane per thread, from a real ``dpcourse.trace()``."""

import functools
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
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
    ax.barh(y, width, height=height, left=start, color=step_color(span.step), gid=gid, **replica)
    if _label_width(span.step) + LABEL_ROOM <= width * points_per_ms:  # else it would run into its neighbours
        ax.text(start + width / 2, y, span.step, ha="center", va="center", fontsize=LABEL_SIZE, clip_on=True)


def timeline(trace: Trace) -> Figure:
    """Draw every span of ``trace`` as a bar in its thread's lane; x is milliseconds since the first span.

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
    origin = trace.start
    total = trace.duration * 1e3
    lanes = _lanes(trace.spans)
    critical = critical_path(trace)

    placed = [(thread, [s for s in trace.spans if s.thread == thread]) for thread in lanes]
    placed = [(thread, spans, _rows(spans)) for thread, spans in placed]
    heights = [1.0] + [1.0 + ROW_EXTRA * max(rows) for _, _, rows in placed]  # lane 0: the critical path
    tops = [sum(heights[:i]) for i in range(len(heights))]

    fig = new_figure(height=1.9 + 0.6 * sum(heights))
    ax = fig.subplots()
    # The axes' width before the layout makes room for the labels: less than it ends up, so a label that fits
    # here fits in the drawn figure too.
    points_per_ms = ax.get_position().width * fig.get_figwidth() * 72 / (total * X_MARGIN)
    for span in critical:
        _bar(ax, span, 0.5, BAR_HEIGHT, origin, total, CRITICAL, points_per_ms)
    for top, lane_height, (_, spans, rows) in zip(tops[1:], heights[1:], placed, strict=True):
        row_height = (lane_height - 1 + BAR_HEIGHT) / (max(rows) + 1)
        for span, row in zip(spans, rows, strict=True):
            y = top + (1 - BAR_HEIGHT) / 2 + row_height * (row + 0.5)
            _bar(ax, span, y, row_height * 0.9, origin, total, "span", points_per_ms)
    for top in tops[1:]:
        ax.axhline(top, color="#DDDDDD", linewidth=1)
    ax.axvline(total, color="black", linestyle=":", linewidth=1)
    ax.set_yticks([top + h / 2 for top, h in zip(tops, heights, strict=True)], [CRITICAL] + lanes)
    ax.set_ylim(sum(heights), 0)
    ax.set_xlim(0, total * X_MARGIN)
    ax.set_xlabel("time since the first step began (ms)")
    ax.set_ylabel("thread")
    steps = dict.fromkeys(s.step for s in trace.spans)
    replicas = {s.replica: s.device for s in trace.spans if s.replica is not None}
    handles = [Patch(color=step_color(step), label=step) for step in steps]
    # A DistributedDataParallel trace (lesson 10) has one lane per process, "rank-r", instead of threads.
    ranks = all(thread.startswith("rank-") for thread in lanes)
    kind, unit = ("DDP", "rank") if ranks else ("DataParallel", "replica")
    handles += [Patch(facecolor="white", edgecolor=device_color(i), hatch="//", label=device_label(i, d, unit))
                for i, d in sorted(replicas.items())]
    legend_below(fig, handles)
    devices = sorted(set(replicas.values()))
    fig.suptitle(f"{kind} on {len(replicas)} {unit}s ({', '.join(devices)}): "
                 f"{total:.1f} ms end to end (dotted line)")
    fig.dpcourse_data = {"lanes": lanes, "critical": critical, "duration_ms": total}
    return fig
