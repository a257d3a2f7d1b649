"""The quiz widget: predict, commit, then see why and watch it happen.

The explanation and the "Run the experiment" button stay hidden until the learner submits an answer:
committing to a prediction first is what makes the explanation stick. Everything the widget shows is
held in ``HTML`` and ``Image`` values (never an ``Output`` widget, which captures nothing without a
kernel), so tests can click the public controls in plain pytest and read what a learner would see.
"""

import html
import re

import ipywidgets as widgets

from dpcourse.ui.controls import ANSWER_SLOT, NEEDS_KERNEL, kernel_gone_line, reports_errors, show_png
from dpcourse.ui.png import css_width, png_bytes

from ..progress import Progress
from .bank import find_question, load_lesson
from .experiments import run_experiment
from .outcome import Outcome
from .reveal import answered
from .schema import ARTICLE, Question

PLACEHOLDERS = {"number": "a number, e.g. 3 or 0.25", "shape": "a shape, e.g. (4,) or [2, 3]"}
_ISSUE = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")


def markup(text: str) -> str:
    """Question text to HTML: blank lines separate paragraphs, `backticks` mark code, *stars* emphasis."""
    return "".join(f"<p>{_inline(paragraph.strip())}</p>" for paragraph in text.strip().split("\n\n"))


def _inline(text: str) -> str:
    # re.split with a group keeps the code spans, at odd positions: stars inside code stay stars.
    pieces = re.split(r"`([^`]+)`", text)
    return "".join(
        f"<code>{html.escape(piece, quote=False)}</code>"
        if position % 2
        else re.sub(r"\*([^*\s][^*]*)\*", r"<em>\1</em>", html.escape(piece, quote=False))
        for position, piece in enumerate(pieces)
    )


def _source_html(source: str) -> str:
    issue = _ISSUE.match(source)
    if issue:
        return f'<a href="https://github.com/{issue[1]}/issues/{issue[2]}" target="_blank">{source}</a>'
    if source.startswith(ARTICLE):
        return f"the article “{html.escape(source.removeprefix(ARTICLE))}”"
    if source.startswith("https://"):
        return f'<a href="{html.escape(source)}" target="_blank">{html.escape(source)}</a>'
    return f"<code>{html.escape(source)}</code>"


def answer_slot(question_id: str) -> str:
    """The empty paragraph of a quiz's ``later_visit_html`` where the course's server writes the learner's last
    answer to ``question_id`` (``jupyter_config/jupyter_server_config.py``)."""
    return ANSWER_SLOT.format(html.escape(question_id))


def _show(widget: widgets.DOMWidget, visible: bool) -> None:
    widget.layout.display = None if visible else "none"


class QuizWidget(widgets.VBox):
    """One question. Public controls: ``choice`` (choice questions) or ``answer_box`` (number and shape),
    ``submit_button``, ``feedback``, ``explanation``, ``experiment_button``, ``result`` and ``figure``.
    """

    def __init__(self, question: Question, progress: Progress | None = None) -> None:
        self.question = question
        self.progress = progress or Progress()
        self.submitted = False
        self.outcome: Outcome | None = None  # the last experiment's result, data included
        self.prompt = widgets.HTML(markup(question.prompt))
        self.choice = (
            # Labels cannot render markdown: drop the `code` backticks there; the value stays the option's text.
            widgets.RadioButtons(
                options=[(option.replace("`", ""), option) for option in question.options],
                value=None,
                layout=widgets.Layout(width="auto"),
            )
            if question.kind == "choice"
            else None
        )
        self.answer_box = widgets.Text(placeholder=PLACEHOLDERS[question.kind]) if self.choice is None else None
        self.submit_button = widgets.Button(
            description="Check my answer", button_style="primary", layout=widgets.Layout(width="auto")
        )
        self.feedback = widgets.HTML()
        self.feedback.add_class(NEEDS_KERNEL)  # before the cell runs, the saved state says to run it
        self.explanation = widgets.HTML()
        self.experiment_button = widgets.Button(
            description="Run the experiment", icon="flask", layout=widgets.Layout(width="auto")
        )
        self.result = widgets.HTML()
        self.figure = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        for hidden in (self.explanation, self.experiment_button, self.figure):
            _show(hidden, False)
        self.submit_button.on_click(self.check)
        self.experiment_button.on_click(self.experiment)
        header = widgets.HTML(f"<b>Question {question.id}</b>")
        super().__init__(
            [
                header,
                self.prompt,
                self.choice if self.choice is not None else self.answer_box,
                self.submit_button,
                self.feedback,
                self.explanation,
                self.experiment_button,
                self.result,
                self.figure,
                kernel_gone_line(),
            ]
        )

    def __repr__(self) -> str:
        # The text a notebook shows where the widget cannot render (untrusted, a static page): short, not the
        # ipywidgets default that lists every child's HTML.
        return f"QuizWidget: {self.question.id} ({self.question.kind}) — run the cell in JupyterLab to answer"

    @property
    def later_visit_html(self) -> str:
        """What a saved notebook shows of this quiz once its kernel has gone: the question, its options, and the
        ``answer_slot`` where the course's server writes the learner's last answer from their progress file.

        It travels beside the live widget in the cell's output (``_repr_mimebundle_``); JupyterLab shows the live
        widget while the kernel runs. The server's save hook keeps this HTML under the "Run this cell" sentence,
        so a return visit still shows what was asked and answered. It holds nothing that gives the answer away.
        """
        options = "".join(f"<li>{_inline(option)}</li>" for option in self.question.options)
        return (f"<div><p><b>Question {html.escape(self.question.id)}</b></p>{markup(self.question.prompt)}"
                f"{f'<ul>{options}</ul>' if options else ''}{answer_slot(self.question.id)}</div>")

    def _repr_mimebundle_(self, **kwargs: object) -> dict:
        return {**super()._repr_mimebundle_(**kwargs), "text/html": self.later_visit_html}

    @property
    def response(self) -> str:
        """The learner's current answer, as text ('' when none)."""
        value = self.choice.value if self.choice is not None else self.answer_box.value
        return "" if value is None else value.strip()

    def show_error(self, error: Exception) -> None:
        """``reports_errors`` calls this when a button's handler fails: the error joins the feedback."""
        self.feedback.value += (
            f'<p style="color:#b2182b"><b>Something went wrong:</b> '
            f"{html.escape(type(error).__name__)}: {html.escape(str(error))}</p>"
        )

    def clear_error(self) -> None:
        """Nothing to clear: a handler that succeeds has rewritten the feedback itself."""

    @reports_errors
    def check(self, _button: object = None) -> None:
        """Judge the answer, reveal the explanation, the experiment and the lesson's hidden results (``quiz.reveal``),
        and record the attempt."""
        if not self.response:
            verb = "Choose" if self.choice is not None else "Type"
            self.feedback.value = f"<p>{verb} an answer first, then check it.</p>"
            return
        try:
            correct = self.question.accepts(self.response)
        except ValueError as unreadable:
            self.feedback.value = f"<p>{html.escape(str(unreadable))}</p>"
            return
        self.submitted = True
        answer = html.escape(self.question.answer_text)
        verdict = (
            '<b style="color:#1a9850">✔ Right.</b>'
            if correct
            else f'<b style="color:#b2182b">✘ Not quite.</b> The answer is <b>{answer}</b>.'
        )
        self.feedback.value = f"<p>{verdict}</p>"
        sources = " · ".join(map(_source_html, self.question.sources))
        self.explanation.value = markup(self.question.explanation) + f"<p><small>Sources: {sources}</small></p>"
        _show(self.explanation, True)
        _show(self.experiment_button, True)
        answered(self.question.id)
        recorded = self.progress.record(self.question, self.response, correct)
        if not recorded.saved:
            self.feedback.value += (
                f"<p><b>Note:</b> this answer was not saved: {html.escape(recorded.problem)}. The file is left as "
                "it is; update dpcourse (<code>git pull</code>) to keep recording answers in it.</p>"
            )
        elif recorded.set_aside:
            self.feedback.value += (
                f"<p><b>Note:</b> {html.escape(recorded.problem)}. It was kept as "
                f"<code>{html.escape(str(recorded.set_aside))}</code> and a new progress file was started.</p>"
            )

    @reports_errors
    def experiment(self, _button: object = None) -> None:
        """Run the question's experiment and show its text and figure (only after an answer was submitted)."""
        if not self.submitted:
            self.feedback.value = "<p>Commit to an answer first; the experiment gives it away.</p>"
            return
        self.outcome = run_experiment(self.question.experiment)
        self.result.value = f"<pre>{html.escape(self.outcome.text)}</pre>"
        if self.outcome.figure is not None:
            show_png(self.figure, png_bytes(self.outcome.figure), css_width(self.outcome.figure))
        _show(self.figure, self.outcome.figure is not None)


def ask(question: str | Question, progress: Progress | None = None) -> QuizWidget:
    """A quiz widget for ``question`` (a ``Question`` or its id, e.g. ``"02-ten-rows-four-devices"``).

    ``progress`` defaults to ``Progress()``: the file named by ``$DPCOURSE_PROGRESS`` or
    ``~/.dpcourse/progress.json``, written only when an answer is submitted.
    """
    return QuizWidget(find_question(question) if isinstance(question, str) else question, progress)


class LessonQuiz(widgets.VBox):
    """All of one lesson's questions in one column (``quizzes``, one ``QuizWidget`` each), sharing a progress file."""

    def __init__(self, lesson: str, progress: Progress | None = None) -> None:
        self.lesson = lesson
        progress = progress or Progress()
        self.quizzes = [QuizWidget(question, progress) for question in load_lesson(lesson)]
        super().__init__(self.quizzes)

    def __repr__(self) -> str:
        return f"LessonQuiz: {len(self.quizzes)} questions of {self.lesson} — run the cell in JupyterLab to answer"

    def _repr_mimebundle_(self, **kwargs: object) -> dict:
        html_of_each = "".join(quiz.later_visit_html for quiz in self.quizzes)  # see QuizWidget.later_visit_html
        return {**super()._repr_mimebundle_(**kwargs), "text/html": html_of_each}


def ask_lesson(lesson: str, progress: Progress | None = None) -> LessonQuiz:
    """All of ``lesson``'s questions (e.g. ``"02_scatter"``) in one column, sharing one progress file."""
    return LessonQuiz(lesson, progress)
