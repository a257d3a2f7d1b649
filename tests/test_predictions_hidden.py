"""Predict, then run: no output that gives a quiz's answer away is visible before the learner answers.

A lesson asks questions with ``quiz.ask("id")``, or all of a lesson's with ``quiz.ask_lesson("lesson")``, and
shows an answer in a cell tagged ``reveals-answer`` whose code is ``with quiz.reveal("id"):`` (dpcourse/quiz/
reveal.py). For every question asked, its quiz file lists ``clues`` (``CLUES`` in tests/answer_clues.py): text that an
output revealing its answer shows (an exact shape, a count, an error message) and phrases of what the lesson says
about the result (its ``discussion``, displayed by the revealing cell, or its ``explanation``, shown by the quiz
once answered). What a person sees:

* the student edition (what a learner opens) stores no output that holds a clue, and no output at all in a
  ``reveals-answer`` cell, which nbval does not compare there (notebooks/build.py); in the learner's kernel
  ``quiz.reveal`` keeps the result hidden until the quiz is answered (tests/browser/test_answers_hidden.py
  checks it in Chromium, fresh and after Run All);
* the instructor edition stores the real outputs, each clue inside a ``reveals-answer`` cell that comes after
  its quiz and names it in ``quiz.reveal``; those outputs start collapsed, and the static site, built from the
  instructor edition, shows each inside a closed ``<details>`` (docs/build_site.py).

A question with no clue fails here: whoever adds a quiz to a lesson names what gives its answer away, writes
the cell that shows it as ``with quiz.reveal("id"):`` tagged ``reveals-answer`` in notebooks/src/, and rebuilds
both editions (docs/instructor.md, "Quizzes that are not given away"). The prose and code around a quiz are
tests/test_nothing_given_away.py's to read.
"""

import ast
import functools
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from dpcourse import course
from dpcourse.quiz import find_question
from tests.answer_clues import CLUES, asked, cell_text, questions_of, readable, revealed
from tests.site_builder import site_builder

REPO = Path(__file__).parents[1]
NOTEBOOKS = REPO / "notebooks"
SOURCES = [NOTEBOOKS / "src" / f"{lesson.name}.py" for lesson in course.LESSONS]
EDITIONS = {"instructor": NOTEBOOKS, "student": NOTEBOOKS / "student"}
REVEALS_ANSWER = "reveals-answer"
NBVAL_IGNORE = "nbval-ignore-output"

def outputs_hidden(cell: nbformat.NotebookNode) -> bool:
    return cell.metadata.get("jupyter", {}).get("outputs_hidden") is True


LESSONS = [source.stem for source in SOURCES]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_question_asked_names_what_gives_it_away(lesson):
    missing = [question for question in questions_of(lesson) if not CLUES.get(question)]
    assert not missing, (
        f"{lesson} asks {missing}, whose quiz file lists no clues: add the text of each output that reveals the "
        "answer (and tag those cells reveals-answer) and phrases of its discussion that state the result"
    )


def test_every_clue_belongs_to_a_question_a_lesson_asks():
    all_asked = {question for lesson in LESSONS for question in questions_of(lesson)}
    assert not set(CLUES) - all_asked, f"CLUES names questions no lesson asks: {sorted(set(CLUES) - all_asked)}"


@pytest.mark.parametrize("question", sorted(q for q, clues in CLUES.items() if clues))
def test_every_clue_is_in_an_output_of_a_lesson_that_asks(question):
    """A clue no output shows any more (the lesson changed) would make the collapse check pass vacuously. A
    phrase of the question's explanation counts too: the quiz shows it once answered."""
    shown = readable(" ".join([
        find_question(question).explanation,
        *(cell_text(cell)
          for lesson in LESSONS
          if question in questions_of(lesson)
          for cell in nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4).cells
          if cell.cell_type == "code"),
    ]))
    stale = [clue for clue in CLUES[question] if readable(clue) not in shown]
    assert not stale, f"{question}: no output of the lessons that ask it shows {stale}; update its clues"


def tagged(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and REVEALS_ANSWER in cell.metadata.get("tags", [])


def visible_clues(lesson: str, cells: list[tuple[int, nbformat.NotebookNode]]) -> list[str]:
    return [
        f"cell {index} shows {clue!r} ({question})"
        for index, cell in cells
        for question in questions_of(lesson)
        for clue in CLUES.get(question, ())
        if readable(clue) in readable(cell_text(cell))
    ]


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_student_edition_stores_no_output_that_gives_an_answer_away(lesson):
    notebook = nbformat.read(EDITIONS["student"] / f"{lesson}.ipynb", as_version=4)
    code = [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    visible = visible_clues(lesson, code)
    stored = [index for index, cell in code if tagged(cell) and cell.outputs]
    unchecked = [index for index, cell in code if tagged(cell) and NBVAL_IGNORE not in cell.metadata["tags"]]
    assert not visible and not stored and not unchecked, (
        f"student edition of {lesson}: outputs that give a quiz's answer away: {visible}; {REVEALS_ANSWER} cells "
        f"with stored outputs: {stored}; without {NBVAL_IGNORE}: {unchecked}. Show each answer in a "
        f"{REVEALS_ANSWER} cell (`with quiz.reveal(\"id\"):`) in notebooks/src/{lesson}.py and rebuild both editions."
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_instructor_edition_shows_each_answer_after_its_quiz_in_a_revealing_cell(lesson):
    """Real outputs, each clue in a collapsed ``reveals-answer`` cell at or after the reveal that names its quiz."""
    notebook = nbformat.read(EDITIONS["instructor"] / f"{lesson}.ipynb", as_version=4)
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if tagged(cell) and not (cell.outputs and outputs_hidden(cell)):
            problems.append(f"cell {index} is tagged {REVEALS_ANSWER} but stores no output, or not collapsed")
        for question in questions_of(lesson):
            clues = [clue for clue in CLUES.get(question, ()) if readable(clue) in readable(cell_text(cell))]
            named = any(question in revealed(earlier.source) for earlier in notebook.cells[: index + 1])
            if clues and not (tagged(cell) and named):
                problems.append(f"cell {index} shows {clues[0]!r} outside a reveal of {question}")
    assert not problems, f"instructor edition of {lesson}:\n  " + "\n  ".join(problems)


def shows_nothing(statement: ast.stmt) -> bool:
    """A statement of a ``with`` block that a cell would show if it were its last, but the block shows nothing
    of: a bare expression other than a call (a name, an attribute), or a figure made by ``viz`` and dropped."""
    if not isinstance(statement, ast.Expr):
        return False
    value = statement.value
    return not isinstance(value, ast.Call) or ast.unparse(value.func).startswith("viz.")


def test_a_dropped_figure_or_a_bare_expression_in_a_block_is_found():
    block = 'with quiz.reveal("02-x"):\n    viz.chunk_split(10, 4)\n    shapes\n    print(shapes)\n    hook.remove()\n'
    assert [shows_nothing(statement) for statement in ast.parse(block).body[0].body] == [True, True, False, False]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_reveal_follows_its_quiz_and_hides_its_whole_output(lesson):
    """Tagged cells are exactly the ``quiz.reveal`` cells; each names quizzes asked above it; the block is the
    cell's last statement, and it prints or displays what it shows, never a bare expression it would drop."""
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    problems, asked_so_far = [], set()
    for index, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        if tagged(cell) != bool(revealed(cell.source)):
            problems.append(f"cell {index}: tagged {REVEALS_ANSWER} exactly when it calls quiz.reveal")
        if not_asked := [question for question in revealed(cell.source) if question not in asked_so_far]:
            problems.append(f"cell {index} reveals {not_asked}, which no quiz above it asks")
        asked_so_far |= set(asked(cell.source))
        if revealed(cell.source):
            last = ast.parse(cell.source).body[-1]
            if not isinstance(last, ast.With):
                problems.append(f"cell {index}: the `with quiz.reveal(...)` block must be the cell's last statement")
            elif unshown := [ast.unparse(expr.value) for expr in last.body if shows_nothing(expr)]:
                problems.append(f"cell {index}: the block shows nothing of {unshown}; display(...) it")
    assert not problems, f"notebooks/src/{lesson}.py:\n  " + "\n  ".join(problems)


@functools.cache
def site_exporters():
    return site_builder().exporters()


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_site_shows_collapsed_outputs_in_closed_details(lesson):
    """Page and slides: one closed <details> per collapsed output (docs/build_site.py's COLLAPSED)."""
    notebook = nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4)
    expected = sum(1 for cell in notebook.cells if cell.cell_type == "code" and outputs_hidden(cell) and cell.outputs)
    for exporter in site_exporters():
        body, _ = exporter.from_notebook_node(notebook, resources={"metadata": {"name": lesson}})
        found = len(re.findall(r'<details class="dpcourse-hidden-output">', body))
        kind = type(exporter).__name__
        assert found == expected, f"{lesson} ({kind}): {found} closed <details> for {expected} collapsed outputs"
