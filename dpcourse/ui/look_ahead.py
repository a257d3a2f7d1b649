"""Look-ahead: prepare the settings a learner most likely picks next while they look at the current one.

Drawing a figure takes 100-300 ms, most of what a learner waits for after changing a control. They then spend
longer than that looking at the answer, and meanwhile the kernel sits idle. So after answering a change, an
explorer guesses what comes next and fills its caches for it; when the guess is right, the figure shows at once.
The guesses (``likely_values``), most likely first: one more step the same way (``next_value``; Next after
Next), then, for a slider, its two ends, where learners drag a slider to see the extremes; after a jump to one
end, only the other one: the extremes compared.

Where that work runs matters more than the guess. ``LookAhead.schedule`` hands it to the event loop ipykernel
runs on the kernel's own thread, to be called just after the current answer has gone out, one guess at a time
with a pause between them. Each therefore runs between two messages, never beside a cell or another callback:
no second thread draws with matplotlib or runs DataParallel while a cell traces it. A change that arrives
meanwhile waits for the one guess in progress, then replaces the guesses not yet started with its own.
Without a running event loop (plain Python, the tests) nothing is scheduled.
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

# After the answer to a change, and between two guesses: ipykernel sends the answer from its IOPub thread, and
# takes in a learner's next message in a few turns of its event loop; both need the interpreter briefly.
DELAY_S = 0.05


def _values(control: widgets.ValueWidget) -> list[Any]:
    """What ``control`` can be set to, in order: its options' values, or a slider's numbers."""
    if hasattr(control, "options"):
        return [option[1] if isinstance(option, tuple) else option for option in control.options]
    return list(range(control.min, control.max + 1, control.step))


def next_value(control: widgets.ValueWidget, old: Any, new: Any) -> Any:
    """The value a learner most likely gives ``control`` after moving it from ``old`` to ``new``: one more step
    the same way (a slider at its end: one step back; a toggle's options go round, the shorter way round
    counting as the way it went). ``None`` if there is none."""
    values = _values(control)
    if new not in values:  # a number typed into a box that lists others: no order to follow
        return None
    here = values.index(new)
    step = 1 if old not in values or here >= values.index(old) else -1
    if isinstance(control, widgets.ToggleButtons):  # a circle: from the last option to the first is one step on
        step = 1 if old not in values or (here - values.index(old)) % len(values) <= len(values) / 2 else -1
        guess = (here + step) % len(values)
    else:
        guess = here + step if 0 <= here + step < len(values) else here - step
    return values[guess] if 0 <= guess < len(values) and guess != here else None


def likely_values(control: widgets.ValueWidget, old: Any, new: Any) -> list[Any]:
    """The values a learner most likely gives ``control`` next, most likely first, leaving out ``new``:
    ``next_value``, then a slider's first and last values (a toggle and a box have no ends). After a jump of
    more than one step to one end of a slider, only the other end."""
    guess = next_value(control, old, new)
    if not isinstance(control, widgets.IntSlider | widgets.SelectionSlider):
        return [] if guess is None else [guess]
    values = _values(control)
    ends = [values[0], values[-1]]
    if new in ends and old in values and abs(values.index(new) - values.index(old)) > 1:
        return [end for end in ends if end != new]
    return [value for value in dict.fromkeys([guess, *ends]) if value is not None and value != new]


class LookAhead:
    """One explorer's pending guesses, run one by one; newer ones replace those not yet started."""

    def __init__(self) -> None:
        self._pending: asyncio.TimerHandle | None = None

    def schedule(self, *prepares: Callable[[], object]) -> None:
        """Call each of ``prepares`` on the running event loop, the first ``DELAY_S`` from now and each next one
        ``DELAY_S`` after the last has returned; without a running loop, do nothing.

        A guess that fails is dropped: the learner sees the error if they do pick that setting.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if prepares:
            self._pending = loop.call_later(DELAY_S, self._run, loop, prepares)

    def _run(self, loop: asyncio.AbstractEventLoop, prepares: tuple[Callable[[], object], ...]) -> None:
        self._pending = None
        with contextlib.suppress(Exception):
            prepares[0]()
        if len(prepares) > 1:
            self._pending = loop.call_later(DELAY_S, self._run, loop, prepares[1:])
