"""dpcourse.viz.memory: the bars draw the bytes of the breakdowns they are given, device 0's surplus hatched, and
the timeline draws the profiler's allocations; checked by content, not pixels."""

import pytest
from matplotlib.colors import same_color

from dpcourse import memory
from dpcourse.memory import CATEGORIES, MIB, Setup, sized_mlp
from dpcourse.viz import memory_bars, memory_timeline
from dpcourse.viz.memory import CATEGORY_COLORS, SURPLUS_HATCH

SMALL = sized_mlp(width=128, depth=3, classes=100)


def bars(ax) -> list:
    return [p for p in ax.patches if p.get_height() > 0]


def test_each_device_is_a_stack_of_its_kinds_and_only_dataparallels_device0_surplus_is_hatched():
    one = memory.predict(Setup(model=SMALL))
    dp = memory.predict(Setup(kind="DataParallel", devices=3, batch=12, model=SMALL))
    figure = memory_bars([one, dp])
    single, parallel = figure.axes
    for ax, breakdown in ((single, one), (parallel, dp)):
        for i, total in enumerate(breakdown.totals):
            stack = [p for p in bars(ax) if abs(p.get_x() + p.get_width() / 2 - i) < 1e-9]
            assert sum(p.get_height() for p in stack) == pytest.approx(total / MIB)
            assert f"{total / MIB:.1f}" in [t.get_text() for t in ax.texts]
    hatched = [p for ax in figure.axes for p in bars(ax) if p.get_hatch() == SURPLUS_HATCH]
    assert sum(p.get_height() for p in hatched) == pytest.approx(sum(dp.surplus().values()) / MIB)
    assert all(abs(p.get_x() + p.get_width() / 2) < 1e-9 for p in hatched)  # on device 0 only
    surplus_kinds = [kind for kind, value in dp.surplus().items() if value]
    assert len(hatched) == len(surplus_kinds)
    for patch, kind in zip(hatched, surplus_kinds, strict=True):  # drawn kind by kind, in CATEGORIES order
        assert same_color(patch.get_facecolor(), CATEGORY_COLORS[kind])
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert "hatched: on device 0 only (DataParallel's surplus)" in labels
    assert {kind for kind in CATEGORIES if kind in labels} == {k for k in CATEGORIES if any(
        d[k] for b in (one, dp) for d in b.devices)}


def test_ddp_ranks_have_no_hatching_and_large_models_are_drawn_in_gib():
    big = sized_mlp(width=4096, classes=128000)
    figure = memory_bars([memory.predict(Setup(kind="DDP", devices=2, model=big))])
    assert not [p for p in bars(figure.axes[0]) if p.get_hatch()]
    assert figure.axes[0].get_ylabel() == "GiB"
    assert "hatched" not in " ".join(t.get_text() for legend in figure.legends for t in legend.get_texts())


def test_memory_bars_needs_a_breakdown():
    with pytest.raises(ValueError, match="at least one Breakdown"):
        memory_bars([])


def test_the_timeline_draws_every_allocation_the_peak_and_the_kinds_added_up():
    setup = Setup(batch=64, optimizer="SGD", model=SMALL)
    steps = memory.profile_step(setup)
    added_up = memory.predict(setup).totals[0]
    figure = memory_timeline(steps, added_up)
    ax = figure.axes[0]
    line, peak = ax.lines[0], ax.lines[-1]
    assert list(line.get_ydata()) == pytest.approx([steps.start / MIB] + [b / MIB for b in steps.allocated])
    assert peak.get_ydata()[0] == pytest.approx(steps.peak / MIB)
    dashed = [h for h in ax.lines if h.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_ydata()[0] == pytest.approx(added_up / MIB)
    assert same_color(dashed[0].get_color(), "#CC6677")
