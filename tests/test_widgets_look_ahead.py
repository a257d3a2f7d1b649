"""Look-ahead (dpcourse/ui/look_ahead.py): after a change, an explorer prepares the likely next settings.

In a kernel the guess runs on ipykernel's event loop; here ``asyncio.run`` gives the same: a running loop on
its thread, where a control's callback schedules the guess and ``await asyncio.sleep`` lets it run. Each test
runs in a thread of its own, because Playwright's sync API (tests/browser, same session) keeps an event loop
running in the main thread, where ``asyncio.run`` refuses to start a second one.
"""

import asyncio
import concurrent.futures
import functools
import time

import ipywidgets as widgets
import pytest

from dpcourse.ui import look_ahead
from dpcourse.ui.look_ahead import LookAhead, likely_values, next_value
from dpcourse.ui.png import png_bytes
from dpcourse.widgets import GradientSum, MemoryCalculator, StepThrough, TraceExplorer, gradients
from dpcourse.widgets import memory as memory_widget
from dpcourse.widgets.stages import STAGES

AFTER_THE_GUESS_S = look_ahead.DELAY_S + 0.05


def in_a_fresh_thread(function, *args):
    """``function(*args)`` in a new thread, with no event loop of the caller's around it."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.mark.parametrize(
    ("control", "old", "new", "expected"),
    [
        (widgets.IntSlider(min=1, max=8), 3, 4, 5),
        (widgets.IntSlider(min=1, max=8), 4, 3, 2),
        (widgets.IntSlider(min=1, max=8), 2, 8, 7),  # a jump to the end: one step back
        (widgets.IntSlider(min=1, max=8), 8, 1, 2),
        (widgets.SelectionSlider(options=[("a", 16), ("b", 64), ("c", 256)]), 16, 64, 256),
        (widgets.ToggleButtons(options=["x", "y", "z"]), "y", "x", "z"),  # a toggle's options go round
        (widgets.ToggleButtons(options=["x", "y", "z"]), "z", "x", "y"),  # from the last to the first: onwards
        (widgets.IntSlider(min=0, max=0), 0, 0, None),
    ],
)
def test_the_next_value_is_one_more_step_the_same_way(control, old, new, expected) -> None:
    assert next_value(control, old, new) == expected


@pytest.mark.parametrize(
    ("control", "old", "new", "expected"),
    [
        (widgets.IntSlider(min=1, max=8), 3, 4, [5, 1, 8]),
        (widgets.IntSlider(min=1, max=8), 2, 8, [1]),  # a jump to one end: the other end
        (widgets.IntSlider(min=1, max=8), 7, 8, [7, 1]),  # a step to an end: one step back, then the other end
        (widgets.IntSlider(min=1, max=8), 3, 2, [1, 8]),  # one step on is an end already
        (widgets.SelectionSlider(options=[("a", 16), ("b", 64), ("c", 256)]), 256, 64, [16, 256]),
        (widgets.SelectionSlider(options=[("a", 16), ("b", 64), ("c", 256)]), 256, 16, [256]),
        (widgets.ToggleButtons(options=["x", "y", "z"]), "y", "x", ["z"]),  # a toggle has no ends
        (widgets.Combobox(options=["128", "256", "512"], ensure_option=False), "128", "256", ["512"]),
    ],
)
def test_likely_values_next_step_and_a_sliders_ends_or_after_a_jump_the_other(control, old, new, expected) -> None:
    assert likely_values(control, old, new) == expected


def test_guesses_run_one_by_one_and_a_newer_change_replaces_those_not_started() -> None:
    ran = []

    async def scenario() -> None:
        ahead = LookAhead()
        def slow_guess(name: str) -> None:  # like drawing a figure: it holds the event loop
            time.sleep(look_ahead.DELAY_S)
            ran.append(name)

        ahead.schedule(*[functools.partial(slow_guess, name) for name in ("next", "first", "last")])
        await asyncio.sleep(AFTER_THE_GUESS_S)  # wakes once "next" has returned, before "first" is due
        assert ran == ["next"], "one guess per turn of the event loop, with a pause between them"
        ahead.schedule(lambda: ran.append("newer"))
        await asyncio.sleep(3 * AFTER_THE_GUESS_S)

    in_a_fresh_thread(asyncio.run, scenario())
    assert ran == ["next", "newer"]


def test_gradient_sum_prepares_the_other_end_of_a_slider_after_a_jump_to_one_end(monkeypatch) -> None:
    made = counting_figures(monkeypatch)

    async def learner() -> None:
        explorer = GradientSum(reduction="mean", batch=8, devices=2)
        explorer.devices_slider.value = 8  # the End key
        for _ in range(100):  # each guess holds the loop while it is drawn: wait for the last one
            await asyncio.sleep(look_ahead.DELAY_S)
            if len(made) == 3:
                break
        assert made == [("mean", 8, 2), ("mean", 8, 8), ("mean", 8, 1)]
        prepared = explorer.cached_figures()[("mean", 8, 1)][0]
        explorer.devices_slider.value = 1  # the Home key: shown from the cache
        assert made.count(("mean", 8, 1)) == 1 and explorer.image.value == prepared

    in_a_fresh_thread(asyncio.run, learner())


def test_without_a_running_loop_nothing_is_prepared() -> None:
    def learner() -> set:
        explorer = GradientSum(reduction="mean", batch=8, devices=2)
        explorer.batch_slider.value = 9
        return set(explorer.cached_figures())

    assert in_a_fresh_thread(learner) == {("mean", 8, 2), ("mean", 9, 2)}


def counting_figures(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    made = []

    def counted(*setting):
        made.append(setting)
        return real(*setting)

    real = gradients.gradient_figure
    monkeypatch.setattr(gradients, "gradient_figure", counted)
    return made


def test_gradient_sum_prepares_the_next_batch_and_then_shows_it_without_recomputing(monkeypatch) -> None:
    made = counting_figures(monkeypatch)

    async def learner() -> None:
        explorer = GradientSum(reduction="mean", batch=8, devices=2)
        explorer.batch_slider.value = 9
        assert made == [("mean", 8, 2), ("mean", 9, 2)], "the guess waits until the answer has gone out"
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert made[-1] == ("mean", 10, 2)
        guessed_png = explorer.cached_figures()[("mean", 10, 2)][0]
        explorer.batch_slider.value = 10
        assert made.count(("mean", 10, 2)) == 1
        assert explorer.image.value == guessed_png and "10 rows" in explorer.summary.value

    in_a_fresh_thread(asyncio.run, learner())


def test_step_through_draws_the_next_stage_after_next() -> None:
    async def learner() -> None:
        explorer = StepThrough(devices=2, batch=6)
        explorer.next_button.click()  # to scatter; the guess is replicate's figure
        replicate = STAGES[2].figure
        assert ((2, 6), replicate) not in explorer.cached_figures()
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert ((2, 6), replicate) in explorer.cached_figures()
        explorer.devices_slider.value = 3  # at scatter; the guess is 4 devices, with scatter's figure
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert ((4, 6), STAGES[1].figure) in explorer.cached_figures()  # so the step of (4, 6) has run

    in_a_fresh_thread(asyncio.run, learner())


def test_a_newer_guess_replaces_a_pending_one_and_a_failing_guess_is_dropped() -> None:
    ran, errors = [], []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        ahead = LookAhead()
        ahead.schedule(lambda: ran.append("first"))
        ahead.schedule(lambda: ran.append("second"))
        await asyncio.sleep(AFTER_THE_GUESS_S)
        ahead.schedule(lambda: 1 / 0)
        await asyncio.sleep(AFTER_THE_GUESS_S)

    in_a_fresh_thread(asyncio.run, scenario())
    assert ran == ["second"] and errors == []


def test_devices_beyond_the_batch_size_reuse_the_figure_of_as_many_devices_as_rows(monkeypatch) -> None:
    made = counting_figures(monkeypatch)
    explorer = GradientSum(reduction="per-replica mean", batch=2, devices=2)
    shown, summary = explorer.image.value, explorer.summary.value
    for devices in (8, 3):  # still 2 chunks, 2 devices working: the same run
        explorer.devices_slider.value = devices
        assert (explorer.image.value, explorer.summary.value) == (shown, summary)
    assert made == [("per-replica mean", 2, 2)]
    assert png_bytes(gradients.gradient_figure("per-replica mean", 2, 8)) == shown  # what a fresh run draws


def test_memory_calculator_prepares_the_next_listed_width_and_then_shows_it_without_recomputing(monkeypatch) -> None:
    made = []
    real = memory_widget.viz.memory_bars
    monkeypatch.setattr(memory_widget.viz, "memory_bars", lambda b: made.append(b[0].setup.model.widths[1]) or real(b))

    async def learner() -> None:
        explorer = MemoryCalculator(width=512)
        explorer.width_box.value = "3000"  # typed, not listed: nothing to guess
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert made == [512, 3000]
        explorer.width_box.value = "1024"
        assert made == [512, 3000, 1024], "the guess waits until the answer has gone out"
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert made == [512, 3000, 1024, 2048]
        explorer.width_box.value = "2048"
        assert made == [512, 3000, 1024, 2048]
        assert explorer.predictions["one device"].setup.model.widths[1] == 2048 and "2048" in repr(explorer)

    in_a_fresh_thread(asyncio.run, learner())


def test_a_typed_value_that_is_not_listed_has_no_next_value() -> None:
    box = widgets.Combobox(options=["128", "256"], ensure_option=False)
    assert next_value(box, "128", "300") is None
    assert next_value(box, "300", "128") == "256"


def test_timeline_draws_what_the_next_run_starts_from_while_the_learner_looks() -> None:
    async def learner() -> None:
        explorer = TraceExplorer(model="small", batch=16, devices=2, steps=1)
        explorer.run_button.click()
        (kept,) = explorer.timeline_canvas.kept
        assert not kept.redraw.prepared, "the look-ahead waits until the answer has gone out"
        await asyncio.sleep(AFTER_THE_GUESS_S)
        assert kept.redraw.prepared
        explorer.run_button.click()  # into the kept figure, or a fresh one if its tick labels no longer fit
        assert not explorer.message.value

    in_a_fresh_thread(asyncio.run, learner())
