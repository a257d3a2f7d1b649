"""Predict, then run, as a learner sees it: in JupyterLab, no quiz's answer is visible before it is answered.

Each lesson of the student edition, copied and trusted by ``python -m dpcourse.open`` as a learner's are, is
opened fresh in Chromium and then run top to bottom (Run All), in a kernel as a learner's: without
``$DPCOURSE_REVEAL``, so that ``quiz.reveal`` hides its results. Both times, no output of the page shows the
giveaway text of a quiz the lesson asks (``CLUES`` in tests/answer_clues.py), and after Run All every
``reveals-answer`` cell shows its placeholder. Then one quiz is answered, and its result appears under its
cell; where the lesson has another reveal, its *Show the result without answering* button shows that one.
"""

import re
import time
from collections.abc import Iterator
from pathlib import Path

import jupytext
import nbformat
import pytest
from browser_setup import ARTIFACTS, TIMINGS
from lab_notebook import PANEL, LabNotebook, stored_widget_views
from lab_server import CourseLab
from playwright.sync_api import Page, expect

from dpcourse import course
from dpcourse.quiz import find_question
from dpcourse.quiz.reveal import MODE_VARIABLE, PLACEHOLDER, SHOW
from tests.answer_clues import CLUES, cell_text, questions_of, revealed

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 120
WAIT_MS = 30_000
# What the cells' outputs show, as a person reads them: innerText leaves out what is hidden (display: none), but
# only when asked of a shown element, so of each cell's own output area, not of one nested in an Output widget.
# A quiz's own output (after its prompt, "[12]:") is left out: its options name the right answer among the others.
OUTPUT_TEXT = PANEL + """
return Array.from(panel.content.node.querySelectorAll('.jp-Cell .jp-OutputArea'))
  .filter(area => area.parentElement.closest('.jp-OutputArea') === null).map(area => area.innerText)
  .filter(text => !/^(\\[[ \\d]*\\]:)?\\s*Question \\d\\d-[\\w.-]+\\s/.test(text.trim())).join('\\n');
"""
WAITING = PLACEHOLDER.split(" quiz")[0]  # "The result appears here once you answer the": one or several quizzes
ANSWERS = {"number": "1", "shape": "(1,)"}  # any answer reveals: these are read as answers, right or wrong


class LearnersLab(CourseLab):
    """JupyterLab as ``dpcourse.open`` starts it for a learner: ``quiz.reveal`` hides, as it does for them."""

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env.pop(MODE_VARIABLE, None)  # the tests' environment sets it (notebooks/conftest.py); a learner has none
        return env


@pytest.fixture(scope="module")
def learners_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LearnersLab]:
    state = tmp_path_factory.mktemp("answers-hidden")
    env = {"JUPYTER_DATA_DIR": str(state / "data"), "DPCOURSE_PROGRESS": str(state / "progress.json")}
    server = LearnersLab(state / "my-course", state, env)
    with server.running(TIMINGS, "dpcourse.open for the answers-hidden tests"):
        yield server


def reveals(lesson: str) -> dict[int, tuple[str, ...]]:
    """Cell index -> the question ids its ``quiz.reveal`` names, for each revealing cell of the lesson."""
    cells = jupytext.read(ROOT / "notebooks" / "src" / f"{lesson}.py", fmt="py:percent").cells
    code = [(index, cell.source) for index, cell in enumerate(cells) if cell.cell_type == "code"]
    return {index: ids for index, source in code if (ids := revealed(source))}


def clues_in(lesson: str, index: int) -> list[str]:
    """The clues the instructor edition's output of cell ``index`` shows: what must appear once it is revealed."""
    cell = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4).cells[index]
    return [clue for clues in CLUES.values() for clue in clues if clue in cell_text(cell)]


def shown_clues(lesson: LabNotebook, name: str) -> list[str]:
    text = lesson.evaluate(OUTPUT_TEXT)
    clues = [(question, clue) for question in questions_of(name) for clue in CLUES.get(question, ())]
    return [f"{clue!r} ({question})" for question, clue in clues if clue in text]


def answer(page: Page, question: str) -> None:
    """Give the quiz ``question`` an answer, any answer, and check it."""
    quiz = page.locator(".jp-OutputArea .widget-vbox", has=page.get_by_text(f"Question {question}", exact=True)).last
    kind = find_question(question).kind
    if kind == "choice":
        quiz.locator("input[type=radio]").first.check()
    else:
        quiz.locator("input[type=text]").fill(ANSWERS[kind])
    quiz.get_by_role("button", name=re.compile(r"Check my answer$")).click()


def expect_revealed(lesson: LabNotebook, name: str, index: int) -> None:
    """Cell ``index`` shows its result now: no placeholder, and the clues its stored result holds, visible."""
    cell = lesson.cell(index)
    expect(cell.get_by_text(WAITING)).to_be_hidden()
    for clue in clues_in(name, index):
        expect(cell.locator(".jp-OutputArea").first).to_contain_text(clue, use_inner_text=True)


@pytest.mark.parametrize("name", [lesson.name for lesson in course.LESSONS])
def test_no_answer_is_visible_before_the_quiz_is_answered(name: str, learners_lab: LearnersLab, browser) -> None:
    path = f"{name}.ipynb"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    lesson = LabNotebook(page, learners_lab.url, learners_lab.token, path)
    try:
        start = time.monotonic()
        lesson.open()
        unrendered = lesson.wait_for_widget_views(stored_widget_views(learners_lab.root_dir / path))
        assert not unrendered, f"{path}, first open: saved widgets did not render:\n" + "\n".join(unrendered)
        assert not shown_clues(lesson, name), f"{path}, first open: answers visible: {shown_clues(lesson, name)}"
        TIMINGS[f"{name} (Run All, answers hidden)"] = lesson.run_all(RUN_TIMEOUT_S)
        problems = lesson.problems()
        assert not problems, f"{path} in JupyterLab:\n" + "\n\n".join(problems)
        blocks = reveals(name)
        expect(page.locator(".jp-OutputArea").get_by_text(WAITING)).to_have_count(len(blocks))
        assert not shown_clues(lesson, name), f"{path}, after Run All: answers visible: {shown_clues(lesson, name)}"
        if blocks:
            first, *later = blocks
            for question in blocks[first]:  # a block that answers several quizzes waits for all of them
                answer(page, question)
            expect_revealed(lesson, name, first)
            other = next((index for index in later if not set(blocks[index]) & set(blocks[first])), None)
            if other is not None:
                show = lesson.cell(other).get_by_role("button", name=re.compile(rf"^\W*{re.escape(SHOW)}$"))
                show.click()
                expect_revealed(lesson, name, other)
        TIMINGS[f"{name} (answers hidden, whole test)"] = time.monotonic() - start
    except BaseException:  # a picture of what the learner would see; only then (a tall page takes seconds)
        lesson.screenshot(ARTIFACTS / f"answers_hidden_{name}.png")
        raise
    finally:
        learners_lab.shutdown_kernels(path)
        context.close()

