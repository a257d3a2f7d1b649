"""Nothing given away before the learner answers, in what a saved lesson shows and in how its sources are written.

A quiz's result and what the lesson says about it are one reveal: the cell tagged ``reveals-answer`` runs
``with quiz.reveal("id"):``, and the Markdown that discusses the result is the question's ``discussion`` in its
quiz file, which ``quiz.reveal`` displays last in the block (dpcourse/quiz/reveal.py). So nothing between a quiz
and the next quiz or heading states the result: not the prose, not a stored output.

What is looked for are the quiz's clues (``clues_of`` in tests/answer_clues.py): the keyed option's text, a number
answer, and the phrases its quiz file lists. Here the saved notebooks of both editions are read, as the static
site and a first open show them (collapsed outputs left out); tests/browser/test_answers_hidden.py reads the same
text in Chromium, in JupyterLab and on the site's pages.
"""

import copy

import jupytext
import nbformat
import pytest

from dpcourse import course
from dpcourse.quiz import find_question
from tests.answer_clues import NOTEBOOKS, giveaways, is_heading, revealed

LESSONS = [lesson.name for lesson in course.LESSONS]
EDITIONS = {"instructor": NOTEBOOKS, "student": NOTEBOOKS / "student"}
PART = "part="


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_nothing_between_a_quiz_and_the_next_states_its_answer(lesson, edition):
    notebook = nbformat.read(EDITIONS[edition] / f"{lesson}.ipynb", as_version=4)
    found = giveaways(notebook)
    assert not found, (
        f"{edition} edition of {lesson} shows answers before the quiz is answered:\n  " + "\n  ".join(found) +
        f"\nMove what states the result into the quiz's reveal (its `discussion` in dpcourse/quizzes/{lesson}.toml, "
        "or the `with quiz.reveal(...)` block) and rebuild."
    )


def test_a_planted_giveaway_is_found():
    """Lesson 02's student edition, with one sentence of the discussion put back under its quiz, fails."""
    notebook = nbformat.read(EDITIONS["student"] / "02_scatter.ipynb", as_version=4)
    assert not giveaways(notebook)
    planted = copy.deepcopy(notebook)
    quiz = next(index for index, cell in enumerate(planted.cells) if '"02-ten-rows-four-devices"' in cell.source)
    planted.cells.insert(quiz + 1, nbformat.v4.new_markdown_cell("So the replicas get **3, 3, 3, 1** rows."))
    assert giveaways(planted) == [f"cell {quiz}, after quiz 02-ten-rows-four-devices: '3, 3, 3, 1'"]


def reveal_blocks(lesson: str) -> list[tuple[int, str, int, jupytext.jupytext.NotebookNode]]:
    """(cell index, the first question it names, its part, the cell after it) for each revealing cell."""
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    blocks = []
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and (questions := revealed(cell.source)):
            call = cell.source[cell.source.index("quiz.reveal("):].split(")")[0]
            part = int(call.split(PART)[1].split(",")[0]) if PART in call else 1
            blocks.append((index, questions[0], part, cells[index + 1] if index + 1 < len(cells) else None))
    return blocks


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_revealing_block_shows_its_own_discussion(lesson):
    """A question revealed by k blocks has k discussion parts or none, and its blocks are parts 1 to k in order;
    a question revealed once has one discussion or none, and names no part."""
    problems, parts = [], {}
    for index, question, part, _ in reveal_blocks(lesson):
        parts.setdefault(question, []).append((index, part))
    for question, blocks in parts.items():
        discussion = find_question(question).discussion
        if [part for _, part in blocks] != list(range(1, len(blocks) + 1)):
            problems.append(f"{question}'s revealing cells {[index for index, _ in blocks]} must name part=1 to "
                            f"{len(blocks)} in order (a question revealed once names none)")
        if len(discussion) not in (0, len(blocks)):
            problems.append(f"{question} has {len(discussion)} discussion parts for {len(blocks)} revealing cells")
    assert not problems, f"notebooks/src/{lesson}.py:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_prose_follows_a_result_but_the_lead_in_to_the_next_cell(lesson):
    """The Markdown right after a revealing cell is at most one paragraph that leads into the code cell after it
    (it ends with ':'); what interprets the result is the quiz's discussion, shown with the result."""
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    problems = []
    for index, question, _, after in reveal_blocks(lesson):
        if after is None or after.cell_type != "markdown" or is_heading(after):
            continue
        follows = cells[index + 2] if index + 2 < len(cells) else None
        leads_in = after.source.rstrip().endswith(":") and "\n\n" not in after.source.strip()
        if not (leads_in and follows is not None and follows.cell_type == "code"):
            problems.append(f"cell {index + 1}, after the result of {question}: {after.source[:80]!r}...")
    assert not problems, (
        f"notebooks/src/{lesson}.py: prose right after a quiz's result, shown before the learner answers:\n  " +
        "\n  ".join(problems) + f"\nMove it into the question's `discussion` (dpcourse/quizzes/{lesson}.toml).")
