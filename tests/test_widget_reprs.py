"""Every widget class dpcourse exports has a short plain-text fallback: what a notebook shows where widgets cannot
render (a notebook not yet trusted, a static page), instead of ipywidgets' default that lists every child; and
each ends with the line that says its kernel has gone (shown only then: tests/browser/test_answers_hidden.py)."""

import re

import ipywidgets
import pytest
from IPython.utils.capture import CapturedIO

from dpcourse import quiz, widgets
from dpcourse.quiz import Progress
from dpcourse.quiz.reveal import HiddenResult
from dpcourse.ui.controls import KERNEL_GONE

EXPECTED = {
    "QuizWidget": (
        lambda progress: quiz.ask("02-six-rows-four-devices", progress),
        "QuizWidget: 02-six-rows-four-devices (number) — run the cell in JupyterLab to answer",
    ),
    "LessonQuiz": (
        lambda progress: quiz.ask_lesson("03_replicate", progress),
        f"LessonQuiz: {len(quiz.load_lesson('03_replicate'))} questions of 03_replicate — run the cell in "
        "JupyterLab to answer",
    ),
    "ProgressSummary": (
        lambda progress: quiz.ProgressSummary(progress),
        "ProgressSummary: your answers per lesson — run the cell in JupyterLab to see them",
    ),
    "ChunkExplorer": (lambda _: widgets.ChunkExplorer(), "ChunkExplorer(batch=10, devices=4, dim=0)"),
    "GradientSum": (lambda _: widgets.GradientSum(), "GradientSum(reduction='mean', batch=10, devices=4)"),
    "StepThrough": (lambda _: widgets.StepThrough(), "StepThrough(devices=4, batch=10)"),
    "TraceExplorer": (lambda _: widgets.TraceExplorer(), "TraceExplorer(model='small', batch=64, devices=2, steps=3)"),
    "CostModelCalculator": (
        lambda _: widgets.CostModelCalculator(),
        "CostModelCalculator(preset='8 GPUs, PCIe', batch=256, params=25600000, bandwidth=25)",
    ),
    "MemoryCalculator": (
        lambda _: widgets.MemoryCalculator(),
        "MemoryCalculator(width='512', depth=4, classes='1000', batch='256', optimizer='Adam', devices=4)",
    ),
}


def exported_widget_classes() -> set[str]:
    return {
        name
        for module in (quiz, widgets)
        for name in module.__all__
        if isinstance(getattr(module, name), type) and issubclass(getattr(module, name), ipywidgets.Widget)
    }


def test_every_exported_widget_class_is_checked_here():
    assert exported_widget_classes() == set(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_the_plain_text_fallback_is_one_short_line(tmp_path, name):
    make, expected = EXPECTED[name]
    widget = make(Progress(tmp_path / "progress.json"))
    assert type(widget).__name__ == name
    assert repr(widget) == expected
    assert widget._repr_mimebundle_()["text/plain"] == expected  # what a notebook stores beside the widget view
    assert len(expected) <= 100 and "\n" not in expected and not re.search(r"children=|<\w+", expected)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_widget_says_when_its_kernel_has_gone(tmp_path, name):
    """A click after Kernel → Restart reaches no kernel: the widget's last line says to run the cell again."""
    widget = EXPECTED[name][0](Progress(tmp_path / "progress.json"))
    quizzes = widget.children if name == "LessonQuiz" else [widget]  # a lesson's quiz is one quiz per question
    assert all(KERNEL_GONE in q.children[-1].get_state()["_dom_classes"] for q in quizzes)


def test_a_hidden_result_says_when_its_kernel_has_gone():
    result = HiddenResult(("02-six-rows-four-devices",), CapturedIO("", ""))
    assert KERNEL_GONE in result.children[-1].get_state()["_dom_classes"]
