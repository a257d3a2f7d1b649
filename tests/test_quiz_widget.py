"""Every question of the course, driven through its widget in plain pytest: answer wrong, answer right, run the
experiment, and check that the experiment's measurement agrees with the answer and that progress was saved."""

import importlib

import pytest

from dpcourse.quiz import Outcome, Progress, Question, all_questions, ask, ask_lesson
from dpcourse.quiz import reveal as quiz_reveal
from dpcourse.quiz.widget import markup

QUESTIONS = all_questions()
reveal_module = importlib.import_module("dpcourse.quiz.reveal")  # the package's `reveal` is the function
quiz_widget = importlib.import_module("dpcourse.quiz.widget")


def wrong_answer(question: Question) -> str:
    if question.kind == "choice":
        return next(option for option in question.options if option != question.answer)
    if question.kind == "number":
        return str(question.answer + 1)
    return str(list(question.answer) + [1])


def right_answer(question: Question) -> str:
    """The answer spelled as a learner might, not as the file does."""
    if question.kind == "choice":
        return question.answer
    if question.kind == "number":
        return f" {question.answer:g} "
    return f"torch.Size({list(question.answer)})"


def give(widget, answer: str) -> None:
    if widget.question.kind == "choice":
        widget.choice.value = answer
    else:
        widget.answer_box.value = answer
    widget.submit_button.click()


def hidden(widget) -> bool:
    return widget.layout.display == "none"


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.id for q in QUESTIONS])
def test_question_end_to_end(tmp_path, question):
    progress_file = tmp_path / "progress.json"
    quiz = ask(question.id, Progress(progress_file))
    assert quiz.explanation.value == "" and hidden(quiz.explanation) and hidden(quiz.experiment_button)

    quiz.experiment_button.click()  # not before an answer: the experiment gives it away
    assert quiz.result.value == "" and "Commit to an answer first" in quiz.feedback.value

    give(quiz, wrong_answer(question))
    assert "Not quite" in quiz.feedback.value
    assert not hidden(quiz.explanation) and quiz.explanation.value.startswith(markup(question.explanation))
    assert "Sources:" in quiz.explanation.value and not hidden(quiz.experiment_button)

    give(quiz, right_answer(question))
    assert "Right" in quiz.feedback.value and "Not quite" not in quiz.feedback.value

    attempts = Progress(progress_file).read().questions[question.id]["attempts"]
    assert [(a["answer"], a["correct"]) for a in attempts] == [
        (wrong_answer(question), False),
        (right_answer(question).strip(), True),
    ]

    quiz.experiment_button.click()
    assert "Something went wrong" not in quiz.feedback.value
    assert quiz.result.value.startswith("<pre>") and len(quiz.result.value) > 20
    assert question.accepts(quiz.outcome.value), f"{question.experiment} measured {quiz.outcome.value!r}"
    if quiz.outcome.figure is None:
        assert hidden(quiz.figure)
    else:
        assert bytes(quiz.figure.value).startswith(b"\x89PNG") and not hidden(quiz.figure)
        # Crisp: two PNG pixels per CSS pixel of the width it is shown at (the PNG header holds the width).
        assert int.from_bytes(bytes(quiz.figure.value)[16:20], "big") == 2 * int(quiz.figure.layout.width[:-2])


def test_a_choice_question_needs_a_choice_and_a_typed_answer_must_parse(tmp_path):
    progress_file = tmp_path / "progress.json"
    choice = ask("02-ten-rows-four-devices", Progress(progress_file))
    choice.submit_button.click()
    assert "Choose an answer first" in choice.feedback.value and hidden(choice.explanation)

    number = ask("02-six-rows-four-devices", Progress(progress_file))
    number.answer_box.value = "three"
    number.submit_button.click()
    assert "not a number" in number.feedback.value and hidden(number.explanation)

    shape = ask("05-scalar-loss-shape", Progress(progress_file))
    shape.answer_box.value = "a vector"
    shape.submit_button.click()
    assert "is not a shape" in shape.feedback.value
    assert not progress_file.exists(), "an unreadable answer is not an attempt"


def test_an_error_in_the_experiment_is_shown_in_the_feedback(tmp_path, monkeypatch):
    def broken() -> Outcome:
        raise RuntimeError("the experiment broke")

    quiz = ask("03-counter-lost", Progress(tmp_path / "progress.json"))
    monkeypatch.setattr(quiz_widget, "run_experiment", lambda name: broken())  # whatever holds the experiments
    give(quiz, "0")
    quiz.experiment_button.click()
    assert "Right" in quiz.feedback.value
    assert "Something went wrong" in quiz.feedback.value and "RuntimeError: the experiment broke" in quiz.feedback.value


def test_a_progress_file_that_cannot_be_written_is_reported_after_the_verdict(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    quiz = ask("03-counter-lost", Progress(blocker / "progress.json"))
    give(quiz, "0")
    assert "Right" in quiz.feedback.value and "Something went wrong" in quiz.feedback.value
    assert not hidden(quiz.explanation)


def test_ask_accepts_a_question_object_and_ask_lesson_shows_the_lesson_in_order(tmp_path):
    progress = Progress(tmp_path / "progress.json")
    lesson = ask_lesson("02_scatter", progress)
    ids = [quiz.question.id for quiz in lesson.children]
    assert ids == [q.id for q in QUESTIONS if q.lesson == "02_scatter"]
    assert all(quiz.progress is progress for quiz in lesson.children)
    assert ask(QUESTIONS[0], progress).question is QUESTIONS[0]
    with pytest.raises(KeyError, match="No question with id 'nope'"):
        ask("nope")


def test_markup_escapes_html_and_keeps_stars_inside_code():
    assert markup("a < b, *this*\n`f(*args)`\n\nnext") == (
        "<p>a &lt; b, <em>this</em>\n<code>f(*args)</code></p><p>next</p>"
    )


def test_an_overflowing_answer_gets_a_clear_reply_and_is_not_recorded(tmp_path):
    progress_file = tmp_path / "progress.json"
    quiz = ask("02-six-rows-four-devices", Progress(progress_file))
    give(quiz, "1e999")
    assert "is not a finite number" in quiz.feedback.value and "Something went wrong" not in quiz.feedback.value
    assert not progress_file.exists()


# quiz.reveal: a block's output hidden until its quiz is answered (dpcourse/quiz/reveal.py).

PLAIN = [question for question in QUESTIONS if not question.discussion]  # results without a discussion under them


@pytest.fixture
def live(monkeypatch):
    """As in a learner's kernel: no ``$DPCOURSE_REVEAL``, an IPython shell that captures ``display``, no answers."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.delenv(reveal_module.MODE_VARIABLE, raising=False)
    monkeypatch.setattr(reveal_module, "passes_through", lambda: False)
    monkeypatch.setattr(reveal_module, "_waiting", {})
    monkeypatch.setattr(reveal_module, "_answered", set())
    shown = []
    monkeypatch.setattr(reveal_module, "display", shown.append)
    InteractiveShell.instance()
    return shown


def revealed_text(result) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in result.output.outputs)


def test_a_revealed_result_is_hidden_until_its_quiz_is_answered(live, tmp_path):
    from IPython.display import Image, display

    question = PLAIN[0]
    quiz = ask(question, Progress(tmp_path / "progress.json"))
    with quiz_reveal(question.id):
        print("the answer is 42")
        display("a figure")
    result = live[0]
    assert not result.shown and hidden(result.output) and not hidden(result.show_button)
    assert reveal_module.PLACEHOLDER in result.placeholder.value and "42" not in result.placeholder.value
    assert revealed_text(result) == "the answer is 42\n'a figure'"  # prints first, then displays
    with quiz_reveal(question.id):
        display(Image(b"\x89PNG\r\n\x1a\n"))
    assert live[-1].output.outputs[0]["data"]["image/png"] == "iVBORw0KGgo="  # base64, as nbformat stores it
    assert "42" not in repr(result)

    quiz.submit_button.click()  # no answer chosen yet: not an answer
    assert not result.shown
    give(quiz, wrong_answer(question))  # any answer shows it, a wrong one too
    assert all(r.shown for r in live) and hidden(result.placeholder) and hidden(result.show_button)


def test_show_reveals_without_an_answer_and_answered_quizzes_reveal_at_once(live, tmp_path):
    first, second = PLAIN[:2]
    with quiz_reveal(first.id):
        print("result")
    [result] = live
    result.show_button.click()
    assert result.shown and revealed_text(result) == "result\n"

    give(ask(second, Progress(tmp_path / "progress.json")), right_answer(second))
    with quiz_reveal(second.id):  # run after its quiz was answered: nothing to wait for
        print("later")
    assert live[-1].shown


def test_a_block_that_answers_two_quizzes_waits_for_both(live, tmp_path):
    first, second = PLAIN[:2]
    with quiz_reveal(first.id, second.id):
        print("both answers")
    [result] = live
    assert reveal_module.PLACEHOLDER_SEVERAL in result.placeholder.value
    progress = Progress(tmp_path / "progress.json")
    give(ask(second, progress), wrong_answer(second))
    assert not result.shown
    give(ask(first, progress), right_answer(first))
    assert result.shown


def test_an_error_in_the_block_shows_the_result_and_raises(live):
    with pytest.raises(ZeroDivisionError), quiz_reveal(PLAIN[0].id):
        print("before the error")
        1 / 0  # noqa: B018
    assert live[0].shown and revealed_text(live[0]) == "before the error\n"


def test_the_discussion_comes_last_in_the_result_hidden_with_it(live, tmp_path):
    once = next(question for question in QUESTIONS if len(question.discussion) == 1)
    with quiz_reveal(once.id):
        print("measured")
    [result] = live
    assert not result.shown and result.output.outputs[0]["text"] == "measured\n"
    assert result.output.outputs[-1]["data"] == {"text/markdown": once.discussion[0], "text/plain": once.discussion[0]}
    several = next(question for question in QUESTIONS if len(question.discussion) > 1)
    with quiz_reveal(several.id, part=2):
        pass
    assert live[1].output.outputs[-1]["data"]["text/markdown"] == several.discussion[1]
    with pytest.raises(ValueError, match=f"use part=1 to {len(several.discussion)}"):
        with quiz_reveal(several.id, part=len(several.discussion) + 1):
            pass
    with pytest.raises(ZeroDivisionError), quiz_reveal(once.id):  # a failed block has no result to discuss
        1 / 0  # noqa: B018
    assert all("text/markdown" not in output.get("data", {}) for output in live[-1].output.outputs)


def test_print_mode_and_unknown_ids(monkeypatch, capsys):
    monkeypatch.setenv(reveal_module.MODE_VARIABLE, "print")
    assert reveal_module.passes_through()
    with quiz_reveal(PLAIN[0].id):
        print("shown as usual")
    assert capsys.readouterr().out == "shown as usual\n"
    with pytest.raises(KeyError, match="no question has this id"), quiz_reveal("02-no-such-question"):
        pass
    with pytest.raises(TypeError, match="needs the id of the quiz"), quiz_reveal():
        pass


def test_a_quiz_gives_the_saved_file_its_question_for_a_later_visit(tmp_path):
    """Beside the live widget, a quiz's output holds ``later_visit_html``: its question and options, and an empty
    place for the learner's last answer. JupyterLab shows the live widget; once the kernel has gone, the course's
    server saves this HTML under the "Run this cell" sentence, with the answer filled in (tests/test_open.py)."""
    question = next(q for q in QUESTIONS if q.kind == "choice")
    quiz = ask(question, Progress(tmp_path / "progress.json"))
    bundle = quiz._repr_mimebundle_()
    assert bundle["text/html"] == quiz.later_visit_html
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["text/plain"] == repr(quiz)
    assert f"Question {question.id}" in quiz.later_visit_html and markup(question.prompt) in quiz.later_visit_html
    assert all(markup(option)[3:-4] in quiz.later_visit_html for option in question.options)
    assert quiz_widget.answer_slot(question.id) in quiz.later_visit_html
    assert question.explanation not in quiz.later_visit_html  # nothing the answer gives away

    give(quiz, wrong_answer(question))
    assert quiz._repr_mimebundle_()["text/html"] == quiz.later_visit_html  # the answer comes from the progress file

    lesson = ask_lesson(question.lesson, Progress(tmp_path / "progress.json"))
    assert lesson._repr_mimebundle_()["text/html"] == "".join(q.later_visit_html for q in lesson.quizzes)
