"""The trace explorer with ``devices[0]`` standing in for a GPU, and its verdict, which follows the numbers."""

import re

import pytest

from dpcourse.widgets import TraceExplorer
from dpcourse.widgets.timing import MODELS, describe, verdict
from dpcourse.widgets.trace_explorer import placeholder_png
from tests.widget_html import PNG, text


@pytest.mark.parametrize("model", list(MODELS))
def test_timeline_run_works_with_devices_0_standing_in_for_a_gpu(model, stand_in_gpu):
    t = TraceExplorer(model=model, batch=16, devices=2, steps=1)
    t.run_button.click()
    assert not t.message.value, text(t.message)
    assert bytes(t.image.value).startswith(PNG) and bytes(t.image.value) != placeholder_png()[0]
    shown = text(t.totals)
    for stage in ("scatter", "replicate", "forward", "gather", "backward", "reduce-add", "optimizer step"):
        assert re.search(rf"\b{re.escape(stage)} \d+\.\d\d \d+%", shown), (stage, shown)
    assert "measured" in text(t.status)


@pytest.mark.parametrize(
    ("own", "compute", "expected"),
    [
        (0.60, 0.30, "DataParallel's overhead dominates"),
        (0.20, 0.70, "the model's compute dominates"),
        (0.44, 0.42, "neither dominates"),  # nearly even: neither may be called dominant
        (0.42, 0.44, "neither dominates"),
    ],
)
def test_the_verdict_follows_the_measured_shares(own, compute, expected):
    assert verdict(own, compute).startswith(expected)


def test_the_summary_names_the_verdict_of_its_own_numbers():
    totals = {"replicate": 0.44, "forward": 0.21, "backward": 0.21, "step": 1.0}
    shown = describe(totals, steps=3)
    assert "takes 44% of a step, the replicas' forward and backward 42%: neither dominates" in shown
