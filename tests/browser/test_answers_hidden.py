"""Predict, then run, as a learner sees it: in JupyterLab, no quiz's answer is visible before it is answered.

Each lesson of the student edition, copied and trusted by ``python -m dpcourse.open`` as a learner's are, is
opened fresh in Chromium and then run top to bottom (Run All), in a kernel as a learner's: without
``$DPCOURSE_REVEAL``, so that ``quiz.reveal`` hides its results. Run All must end without an error cell, with every
widget rendered (the views the saved notebook holds, and one per revealing cell). Both times, the page shows no
clue of a quiz between it and the next quiz or heading: not the prose, not an output (``giveaways`` in
tests/answer_clues.py: the keyed option, a number answer, the phrases its quiz file lists), and after Run All every
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
from lab_notebook import KERNEL_IDLE, PANEL, LabNotebook, in_a_new_context, stored_widget_views
from lab_server import CourseLab
from playwright.sync_api import Locator, Page, expect

from dpcourse import course
from dpcourse.quiz import find_question
from dpcourse.quiz.reveal import MODE_VARIABLE, PLACEHOLDER, SHOW
from dpcourse.ui.controls import KERNEL_GONE
from notebooks.build import READS_PROGRESS
from tests.answer_clues import CELL_TEXTS, CLUES, cell_text, giveaways, questions_of, readable, revealed

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 120
WAIT_MS = 30_000
# What each cell shows, as a person reads it (tests/answer_clues.py).
# The file loaded (until then the model holds one empty cell), every cell rendered (JupyterLab renders a long
# notebook's cells a few at a time), each Markdown cell as HTML.
ALL_CELLS_RENDERED = PANEL + """
const cells = panel.content.node.querySelectorAll('.jp-Cell');
return panel.context.isReady && cells.length === panel.content.model.cells.length && Array.from(cells).every(cell =>
  !cell.classList.contains('jp-MarkdownCell') || cell.querySelector('.jp-RenderedMarkdown') !== null);
"""
LESSON_CELL_TEXTS = PANEL + "const CELLS = Array.from(panel.content.node.querySelectorAll('.jp-Cell'));" + CELL_TEXTS
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
    shown = readable(cell_text(cell))
    return [clue for clues in CLUES.values() for clue in clues if readable(clue) in shown]


def shown_clues(lesson: LabNotebook, saved: Path) -> list[str]:
    """The clues a person can read between each quiz and the next quiz or heading (``giveaways``) of the lesson
    saved at ``saved``, open in ``lesson``."""
    notebook = nbformat.read(saved, as_version=4)
    lesson.wait_for(ALL_CELLS_RENDERED, WAIT_MS / 1000)
    return giveaways(notebook, lesson.evaluate(LESSON_CELL_TEXTS))


def views_after_run_all(saved: Path, blocks: dict[int, tuple[str, ...]]) -> dict[int, int]:
    """Cell index -> the widget views the learner's Run All must render: those the saved student edition holds;
    in each revealing cell (saved empty) the one view that hides its result until answered; and in each cell that
    reads the progress file (saved as a line asking to run it, notebooks/build.py) the views the instructor
    edition saved."""
    instructor = stored_widget_views(ROOT / "notebooks" / saved.name)
    progress = {index: instructor[index] for index, cell in enumerate(nbformat.read(saved, as_version=4).cells)
                if cell.cell_type == "code" and READS_PROGRESS.search(cell.source) and index in instructor}
    return {**stored_widget_views(saved), **dict.fromkeys(blocks, 1), **progress}


def quiz_of(page: Page, question: str) -> Locator:
    """The quiz widget of ``question`` on the page."""
    return page.locator(".jp-OutputArea .widget-vbox", has=page.get_by_text(f"Question {question}", exact=True)).last


def answer(page: Page, question: str) -> None:
    """Give the quiz ``question`` an answer, any answer, and check it."""
    quiz = quiz_of(page, question)
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
    result = cell.locator(".jp-OutputArea").first
    expect(result).to_be_visible()
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:  # the Output widget renders the discussion's Markdown a moment after the rest
        shown = readable(result.inner_text())
        missing = [clue for clue in clues_in(name, index) if readable(clue) not in shown]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert not missing, f"{name}: cell {index} revealed, but without {missing}"


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
        shown = shown_clues(lesson, learners_lab.root_dir / path)
        assert not shown, f"{path}, first open: answers visible: {shown}"
        TIMINGS[f"{name} (Run All, answers hidden)"] = lesson.run_all(RUN_TIMEOUT_S)
        problems = lesson.problems()
        assert not problems, f"{path} in JupyterLab:\n" + "\n\n".join(problems)
        blocks = reveals(name)
        mismatches = lesson.wait_for_widget_views(views_after_run_all(learners_lab.root_dir / path, blocks))
        assert not mismatches, f"{path}, after Run All: widgets did not render:\n" + "\n".join(mismatches)
        expect(page.locator(".jp-OutputArea").get_by_text(WAITING)).to_have_count(len(blocks))
        shown = shown_clues(lesson, learners_lab.root_dir / path)
        assert not shown, f"{path}, after Run All: answers visible: {shown}"
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



RESTART_KERNEL = PANEL + "return panel.sessionContext.session.kernel.restart().then(() => true);"
RUN_AGAIN = "Run this cell again"


def test_a_click_after_a_kernel_restart_says_to_run_the_cell_again(learners_lab: LearnersLab, browser) -> None:
    """First open, Run All, answer a quiz, restart the kernel, answer another: its widget says to run the cell
    again (``dpcourse.ui.controls.kernel_gone_line``), where the click used to do nothing."""
    name = "02_scatter"
    context, lesson = in_a_new_context(browser, learners_lab, f"{name}.ipynb")
    first, second = questions_of(name)[:2]
    try:
        lesson.open()
        lesson.run_all(RUN_TIMEOUT_S)
        answer(lesson.page, first)
        expect(quiz_of(lesson.page, first).locator(f".{KERNEL_GONE}")).to_be_hidden()  # the kernel runs
        assert lesson.evaluate(RESTART_KERNEL)
        lesson.wait_for(KERNEL_IDLE, 60)
        answer(lesson.page, second)
        line = quiz_of(lesson.page, second).locator(f".{KERNEL_GONE}")
        expect(line).to_be_visible()
        expect(line).to_contain_text(RUN_AGAIN)
    except BaseException:
        lesson.screenshot(ARTIFACTS / "kernel_restart_click.png")
        raise
    finally:
        learners_lab.shutdown_kernels(f"{name}.ipynb")
        context.close()
