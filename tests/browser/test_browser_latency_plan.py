"""The browser latency benchmark (tests/benchmarks/browser_latency.py) still runs: its plan on one control.

Nothing here is timed against a target: the numbers live in docs/benchmarks.md. This only keeps the benchmark's
notebook, its CSS hooks, the plans for a slider and a typed-in box, and the in-page timers working as the widgets
change.
"""

from pathlib import Path

import pytest
from browser_setup import ARTIFACTS

from dpcourse.widgets import MemoryCalculator
from tests.benchmarks import browser_latency
from tests.benchmarks import widget_latency as latency

pytestmark = pytest.mark.browser

# devices starts at 2 of 1..8: End, Home, then one step right back to 2. A box: each value it lists, then its start.
PLANS = {
    ("GradientSum", "devices_slider"): 3,
    ("MemoryCalculator", "width_box"): len(latency.values_to_try(MemoryCalculator().controls["width_box"])),
}


def test_every_explorer_is_built_as_its_lesson_builds_it() -> None:
    built = browser_latency.explorers_as_in_the_lessons()
    assert built["GradientSum"] == "widgets.GradientSum(reduction='per-replica mean', batch=8, devices=2)"
    assert set(built) == set(browser_latency.widgets.__all__)


@pytest.mark.parametrize(("explorer", "control"), list(PLANS))
def test_the_plan_runs_on_one_control(lab, lab_root: Path, lab_context, explorer: str, control: str) -> None:
    page = lab_context.new_page()
    page.set_default_timeout(60_000)
    explorers = {explorer: browser_latency.explorers_as_in_the_lessons()[explorer]}
    try:
        results = browser_latency.measure_in_lab(
            page, lab.url, lab.token, lab_root, explorers, repeats=1, clicks=1, only={f"{explorer}.{control}"}
        )
    finally:
        page.screenshot(path=ARTIFACTS / f"browser_latency_plan_{control}.png")
        lab.shutdown_kernels(browser_latency.NOTEBOOK)
        page.close()
    measured = results[explorer][control]
    assert measured["n"] == PLANS[explorer, control]
    for sample in measured["samples"]:
        assert 0 < sample["kernel_ms"] <= sample["shown_ms"]
        assert sample["figure_ms"] is not None, "each of these settings shows a new figure"
