"""How fast each explorer answers: every public control exercised, every interaction timed.

An interaction is one ``control.value = ...`` or one ``button.click()``. ipywidgets runs the callbacks
synchronously, so the time of that call is the time until every widget value shows the result (the
browser's own drawing comes on top). Each repeat builds a fresh explorer, so its first look at a setting is
cold (compute and render a PNG) and coming back to a setting is warm (cached): the median and the worst
case of a real session.
"""

import statistics
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from dpcourse.widgets.chunks import ChunkExplorer
from dpcourse.widgets.costmodel import CostModelCalculator
from dpcourse.widgets.explorer import Explorer
from dpcourse.widgets.gradients import GradientSum
from dpcourse.widgets.memory import MemoryCalculator
from dpcourse.widgets.step_through import StepThrough
from dpcourse.widgets.trace_explorer import TraceExplorer

EXPLORERS: dict[str, Callable[[], Explorer]] = {
    "StepThrough": StepThrough,
    "ChunkExplorer": ChunkExplorer,
    "GradientSum": GradientSum,
    "TraceExplorer": TraceExplorer,
    "CostModelCalculator": CostModelCalculator,
    "MemoryCalculator": MemoryCalculator,
}


def values_to_try(control: widgets.ValueWidget) -> list[Any]:
    """Every option of a toggle or selection slider, or a slider's min, middle and max; then the start value."""
    start = control.value
    if hasattr(control, "options"):
        values = [option[1] if isinstance(option, tuple) else option for option in control.options]
    else:
        values = [control.min, (control.min + control.max) // 2, control.max]
    return [v for v in values if v != start] + [start]


def _timed_ms(explorer: Explorer, name: str, interact: Callable[[], None]) -> float:
    start = time.perf_counter()
    interact()
    elapsed = (time.perf_counter() - start) * 1e3
    if explorer.message.value:
        raise RuntimeError(f"{type(explorer).__name__}.{name} showed an error: {explorer.message.value}")
    return elapsed


def measure_interactions(
    explorer_factory: Callable[[], Explorer], repeats: int = 3, clicks: int = 8
) -> dict[str, dict[str, float]]:
    """Exercise every control in ``explorer.controls``, in that order, on ``repeats`` fresh explorers.

    A button is clicked up to ``clicks`` times, stopping once it is disabled (Next at the last stage); a value
    control is set to each of ``values_to_try`` in turn. Returns ``{control: {"median_ms", "worst_ms", "n"}}``.
    Raises ``RuntimeError`` if an interaction puts an error in the explorer's message area.
    """
    if repeats < 1 or clicks < 1:
        raise ValueError(f"measure_interactions needs repeats >= 1 and clicks >= 1, got {repeats} and {clicks}.")
    timings: dict[str, list[float]] = {name: [] for name in explorer_factory().controls}
    for _ in range(repeats):
        explorer = explorer_factory()
        for name, control in explorer.controls.items():
            if isinstance(control, widgets.Button):
                interactions = [control.click] * clicks
            else:
                interactions = [lambda c=control, v=value: setattr(c, "value", v) for value in values_to_try(control)]
            for interact in interactions:
                if not getattr(control, "disabled", False):
                    timings[name].append(_timed_ms(explorer, name, interact))
    return {name: _summary(ms) for name, ms in timings.items()}


def _summary(ms: list[float]) -> dict[str, float]:
    if not ms:  # the control was disabled whenever its turn came
        return {"median_ms": float("nan"), "worst_ms": float("nan"), "n": 0}
    return {"median_ms": statistics.median(ms), "worst_ms": max(ms), "n": len(ms)}


def measure_all(repeats: int = 3, clicks: int = 8) -> dict[str, dict[str, dict[str, float]]]:
    """``measure_interactions`` for every explorer: ``{explorer: {control: {"median_ms", "worst_ms", "n"}}}``."""
    return {name: measure_interactions(factory, repeats, clicks) for name, factory in EXPLORERS.items()}
