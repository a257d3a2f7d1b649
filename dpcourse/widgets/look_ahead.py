"""Look-ahead: prepare the setting a learner most likely picks next while they look at the current one.

Drawing a figure takes 100-300 ms, most of what a learner waits for after changing a control. They then spend
longer than that looking at the answer, and meanwhile the kernel sits idle. So after answering a change, an
explorer guesses the next one (``next_value``: one more step the same way; Next after Next) and fills its
caches for it; when the guess is right, the figure shows at once.

Where that work runs matters more than the guess. ``LookAhead.schedule`` hands it to the event loop ipykernel
runs on the kernel's own thread, to be called just after the current answer has gone out. It therefore runs
between two messages, never beside a cell or another callback: no second thread draws with matplotlib or runs
DataParallel while a cell traces it. A change that arrives meanwhile waits for the one guess in progress.
Without a running event loop (plain Python, the tests) nothing is scheduled.
"""

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

# After the answer to a change: ipykernel sends it from its IOPub thread, which needs the interpreter briefly.
DELAY_S = 0.05


def next_value(control: widgets.ValueWidget, old: Any, new: Any) -> Any:
    """The value a learner most likely gives ``control`` after moving it from ``old`` to ``new``: one more step
    the same way (a slider at its end: one step back; a toggle's options go round, the shorter way round
    counting as the way it went). ``None`` if there is none."""
    if hasattr(control, "options"):
        values = [option[1] if isinstance(option, tuple) else option for option in control.options]
    else:
        values = list(range(control.min, control.max + 1, control.step))
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


class LookAhead:
    """One explorer's pending guess: at most one, a newer one replacing it until it has started."""

    def __init__(self) -> None:
        self._pending: asyncio.TimerHandle | None = None

    def schedule(self, prepare: Callable[[], object]) -> None:
        """Call ``prepare()`` on the running event loop ``DELAY_S`` from now; without one, do nothing.

        A guess that fails is dropped: the learner sees the error if they do pick that setting.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._pending is not None:
            self._pending.cancel()
        self._pending = loop.call_later(DELAY_S, self._run, prepare)

    def _run(self, prepare: Callable[[], object]) -> None:
        self._pending = None
        with contextlib.suppress(Exception):
            prepare()
