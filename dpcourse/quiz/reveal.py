"""``quiz.reveal(question)``: the output that gives a quiz's answer away, shown only after an answer.

    quiz.ask("13-reduce-others")
    ...
    with quiz.reveal("13-reduce-others"):
        print(moved["reduce"])
        display(viz.collective(moved["reduce"]))

In a notebook, what the block prints and displays goes into a hidden ``ipywidgets.Output``. In its place the
learner reads one line, ``PLACEHOLDER``, next to a *Show the result without answering* button. The result
appears when the quiz ``question`` is answered in this kernel (any answer, right or wrong: the quiz calls
``answered``), at once if it was answered before the block ran, or when the learner presses the button. A block
that answers several quizzes names them all, ``quiz.reveal("14-no-sync-allreduces", "14-forward-outside")``,
and waits for every one.

What the lesson says about the result, the question's ``discussion`` in its quiz file (Markdown), comes last in
the block's output, so it is part of the result: it appears with it, never before the learner answers. A question
revealed by several blocks has one discussion per block; each block names its ``part``
(``quiz.reveal("04-threads", part=2)``).

Nothing of the result is in the visible output before that: even JupyterLab's collapsed-output bar, which prints
an output's first line, would print the placeholder.

Where nobody answers, the block's output goes through as usual. That happens when ``$DPCOURSE_REVEAL`` is
``print`` (notebooks/conftest.py sets it for the builds and the tests, so that the instructor edition stores the
real outputs and nbval compares them), and outside an IPython kernel (a script, plain pytest).

The block's prints come first in the result, then what it displays (IPython's ``capture_output`` keeps them
apart). Write prints before figures, and ``display(figure)`` rather than a bare last expression, which a
``with`` block would not show (a pyplot figure left open would be drawn after the cell, outside the block: the
course's figures, ``dpcourse.viz``, are not pyplot's). An error in the block shows the result at once, with the
traceback after it.
"""

import base64
import contextlib
import os
from collections.abc import Iterator

import ipywidgets as widgets
from IPython import get_ipython
from IPython.display import display
from IPython.utils.capture import CapturedIO, capture_output

from ..ui.controls import kernel_gone_line
from .bank import find_question, load_lesson
from .lessons import LESSONS

MODE_VARIABLE = "DPCOURSE_REVEAL"  # "print": let the output through (builds and tests)
PLACEHOLDER = "The result appears here once you answer the quiz above (or press Show)."
PLACEHOLDER_SEVERAL = "The result appears here once you answer the quizzes above (or press Show)."
SHOW = "Show the result without answering"

_waiting: dict[str, list["HiddenResult"]] = {}  # question id -> results not shown yet, in this kernel
_answered: set[str] = set()  # the questions answered in this kernel


class HiddenResult(widgets.VBox):
    """A block's output, hidden until its quiz is answered. Public controls: ``placeholder``, ``show_button``
    and ``output`` (an ``ipywidgets.Output`` whose ``outputs`` hold what the block printed and displayed).
    """

    def __init__(self, questions: tuple[str, ...], captured: CapturedIO, discussion: str = "") -> None:
        self.questions = questions
        self.unanswered = set(questions) - _answered
        self.placeholder = widgets.HTML(f"<p><i>{PLACEHOLDER if len(questions) == 1 else PLACEHOLDER_SEVERAL}</i></p>")
        self.show_button = widgets.Button(description=SHOW, icon="eye", layout=widgets.Layout(width="auto"))
        self.show_button.on_click(self.show)
        self.output = widgets.Output(layout=widgets.Layout(display="none"))
        self.output.outputs = outputs_of(captured) + ((markdown_output(discussion),) if discussion else ())
        super().__init__([self.placeholder, self.show_button, self.output, kernel_gone_line()])

    @property
    def shown(self) -> bool:
        return self.output.layout.display != "none"

    def show(self, _button: object = None) -> None:
        """Show the result; the placeholder and the button go."""
        self.output.layout.display = None
        self.placeholder.layout.display = self.show_button.layout.display = "none"

    def __repr__(self) -> str:
        # What a page without a widget renderer shows: the placeholder, never the result.
        return f"Result of quiz {', '.join(self.questions)}, hidden until answered: run the cell in JupyterLab."


def outputs_of(captured: CapturedIO) -> tuple[dict, ...]:
    """The notebook outputs (nbformat dicts) of what a block printed and displayed: prints, then displays.

    A PNG is kept as nbformat keeps it, base64 text: as ``bytes`` it would reach the front end as a binary buffer
    (ipywidgets sends ``bytes`` in a widget's state that way), which the output area cannot show as an image.
    """
    streams = [("stdout", captured.stdout), ("stderr", captured.stderr)]
    return (
        *({"output_type": "stream", "name": name, "text": text} for name, text in streams if text),
        *({"output_type": "display_data", "data": as_text(out.data), "metadata": out.metadata or {}}
          for out in captured.outputs),
    )


def markdown_output(text: str) -> dict:
    """A display of the Markdown ``text`` (a discussion), as nbformat stores it: its plain text is the text too."""
    return {"output_type": "display_data", "data": {"text/markdown": text, "text/plain": text}, "metadata": {}}


def as_text(data: dict) -> dict:
    """A display's data by MIME type, with binary values (a PNG) in base64."""
    return {mime: base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
            for mime, value in data.items()}


def answered(question: str) -> None:
    """The quiz ``question`` was answered in this kernel: show the results that waited for it alone, and those of
    later blocks at once."""
    _answered.add(question)
    for result in _waiting.pop(question, []):
        result.unanswered.discard(question)
        if not result.unanswered:
            result.show()


def check_id(question: str) -> None:
    """Raise ``KeyError`` unless ``question`` is the id of a question of its lesson (ids start with its number)."""
    lessons = [lesson for lesson in LESSONS if lesson.split("_")[0] == question.split("-")[0]]
    if not any(asked.id == question for lesson in lessons for asked in load_lesson(lesson)):
        raise KeyError(f"quiz.reveal({question!r}): no question has this id; use the id of the quiz the block answers, "
                       "as in dpcourse/quizzes/NN_<lesson>.toml.")


def passes_through() -> bool:
    """Whether output goes through as usual: ``$DPCOURSE_REVEAL`` is ``print``, or no kernel runs this code."""
    return os.environ.get(MODE_VARIABLE) == "print" or getattr(get_ipython(), "kernel", None) is None


@contextlib.contextmanager
def reveal(*questions: str, part: int = 1) -> Iterator[None]:
    """Run the block; what it prints and displays answers the quizzes ``questions`` and stays hidden until then,
    followed by the discussion of the result (the first question's ``discussion``, its ``part``-th entry).

    ``questions`` are question ids (``"02-ten-rows-four-devices"``); an unknown id raises ``KeyError``.
    """
    if not questions:
        raise TypeError("quiz.reveal() needs the id of the quiz whose answer the block shows, e.g. "
                        'quiz.reveal("02-ten-rows-four-devices").')
    for question in questions:
        check_id(question)
    discussion = find_question(questions[0]).discussion_of(part)  # a wrong part fails before the block runs
    if passes_through():
        yield
        if discussion and get_ipython() is not None:  # a script has no Markdown to show: its prints are the result
            display(markdown_output(discussion)["data"], raw=True)
        return
    failed = True
    try:
        with capture_output() as captured:
            yield
        failed = False
    finally:  # an error in the block shows the result at once, and its traceback after it (no discussion)
        result = HiddenResult(questions, captured, "" if failed else discussion)
        if failed or not result.unanswered:
            result.show()
        else:
            for question in result.unanswered:
                _waiting.setdefault(question, []).append(result)
        display(result)
