"""The student edition carries no answer to an exercise: not in a cell, not in a stored output, not in an assert.

Three ways an answer has leaked into notebooks/student/ (walkthrough 2026-12-06, D4), each scanned for in every
lesson:

- a worked solution: a code cell tagged ``solution`` that holds no stub (no ``### BEGIN SOLUTION`` markers in its
  source, so the build left it whole), shown collapsed with its first line visible;
- an output stored from the answer: a cell below a stub that uses what the stub defines, run by the build with the
  instructor's answer in mind (it printed "all 4 devices work for batch sizes [4, 7, ...]"); the check cell itself
  may only say "not attempted yet";
- an ``assert`` that spells the expected value: an equality with a literal number or list
  (``assert busy == [4, 7, 8, ...]``). A tolerance (``< 1e-6``) says nothing of the answer.

``PLANTED`` is lesson 02's end-of-lesson exercise as the student edition showed it then: each scan must find it.
"""

import ast
import re

import nbformat
import pytest

from dpcourse import course
from dpcourse.exercises.check import NOT_ATTEMPTED
from tests.lesson_solutions import SOURCES

STUDENT = SOURCES.parent / "student"
STUB = "raise NotImplementedError("
DEFINES = re.compile(r"^(?:def|class) (\w+)", re.MULTILINE)
EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def worked_solutions(notebook: nbformat.NotebookNode) -> list[str]:
    """Each code cell tagged ``solution`` that holds no stub: the answer itself."""
    return [f"cell {index}: a worked solution, no stub: {cell.source.splitlines()[0]!r}"
            for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []) and STUB not in cell.source]


def _spells_a_value(node: ast.expr) -> bool:
    """A literal number (not a bool) or a list, tuple or set display, anywhere in the expression."""
    return any(isinstance(n, (ast.List, ast.Tuple, ast.Set))
               or (isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool))
               for n in ast.walk(node))


def asserts_with_answers(notebook: nbformat.NotebookNode) -> list[str]:
    """Each ``assert`` that compares for equality with a literal number or list: the expected value, spelled."""
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # an IPython magic: no assert to read
            continue
        for statement in (n for n in ast.walk(tree) if isinstance(n, ast.Assert)):
            compares = (n for n in ast.walk(statement.test) if isinstance(n, ast.Compare))
            if any(any(isinstance(op, EQUALITY) for op in compare.ops)
                   and any(map(_spells_a_value, [compare.left, *compare.comparators])) for compare in compares):
                found.append(f"cell {index}: an assert spells the expected value: {ast.unparse(statement)[:100]}")
    return found


def _text(output: nbformat.NotebookNode) -> str:
    if output.output_type == "stream":
        return output.text
    return str(output.get("data", {}).get("text/plain", "")) + output.get("evalue", "")


def outputs_from_the_answer(notebook: nbformat.NotebookNode) -> list[str]:
    """Each stored output of a cell that uses what a stub above it defines, other than a check that says the
    exercise is not attempted yet: with the stub in place, an output with a value in it (a number) came from the
    instructor's answer. One with no number is an instruction ("write adam_state_bytes above and run its check")."""
    found, stubbed = [], set()
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        if "solution" in cell.metadata.get("tags", []) and STUB in cell.source:
            stubbed.update(DEFINES.findall(cell.source))
            continue
        uses = sorted(name for name in stubbed if re.search(rf"\b{name}\b", cell.source))
        if not uses or not cell.get("outputs"):
            continue
        shown = "".join(_text(output) for output in cell.outputs)
        leaks = NOT_ATTEMPTED not in shown if "exercises.check(" in cell.source else re.search(r"\d", shown)
        if leaks:
            found.append(f"cell {index} uses {uses} and stores an output: {shown.strip()[:100]!r}")
    return found


SCANS = (worked_solutions, asserts_with_answers, outputs_from_the_answer)
LESSONS = [lesson.name for lesson in course.LESSONS]


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_student_edition_shows_no_answer(lesson: str) -> None:
    notebook = nbformat.read(STUDENT / f"{lesson}.ipynb", as_version=4)
    leaks = [leak for scan in SCANS for leak in scan(notebook)]
    assert not leaks, (f"notebooks/student/{lesson}.ipynb shows answers (make each a checked exercise, then "
                       f"`python notebooks/build.py {lesson[:2]}`):\n" + "\n".join(leaks))


def _planted() -> nbformat.NotebookNode:
    """Lesson 02's end-of-lesson exercise 1 as its student edition stored it before it became a checked exercise."""
    solution = nbformat.v4.new_code_cell(
        "def all_devices_busy(batch, n=4):\n"
        "    return len(dpcourse.scatter(torch.zeros(batch), dpcourse.devices(n))) == n",
        metadata={"tags": ["solution"], "jupyter": {"source_hidden": True}})
    check = nbformat.v4.new_code_cell(
        "busy = [b for b in range(1, 17) if all_devices_busy(b)]\n"
        "assert busy == [4, 7, 8, 10, 11, 12, 13, 14, 15, 16], busy\n"
        "print(\"exercise 1: all 4 devices work for batch sizes\", busy)",
        outputs=[nbformat.v4.new_output("stream", name="stdout",
                                        text="exercise 1: all 4 devices work for batch sizes [4, 7, 8, 10, 11, 12, "
                                             "13, 14, 15, 16]\n")])
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("## Exercises"), solution, check])


def _stubbed(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The planted notebook with its solution replaced by a stub, as the build makes a marked solution."""
    notebook.cells[1].source = "def all_devices_busy(batch, n=4):\n    " + STUB + ")"
    return notebook


def test_each_scan_finds_what_lesson_02s_student_edition_showed() -> None:
    assert worked_solutions(_planted()) == ["cell 1: a worked solution, no stub: 'def all_devices_busy(batch, n=4):'"]
    assert asserts_with_answers(_planted()) == [
        "cell 2: an assert spells the expected value: assert busy == [4, 7, 8, 10, 11, 12, 13, 14, 15, 16], busy"]
    # with the solution a stub, the output below it can only have come from the answer
    (leak,) = outputs_from_the_answer(_stubbed(_planted()))
    assert leak.startswith("cell 2 uses ['all_devices_busy'] and stores an output: 'exercise 1: all 4 devices")


def test_a_checked_exercise_passes_every_scan() -> None:
    """What lesson 02's exercise is now: a stub, and a check cell whose stored report says "not attempted yet"."""
    notebook = _stubbed(_planted())
    notebook.cells[2] = nbformat.v4.new_code_cell(
        'exercises.check("all_devices_busy", all_devices_busy)',
        outputs=[nbformat.v4.new_output("execute_result", data={
            "text/plain": "all_devices_busy: not attempted yet. Write all_devices_busy(batch, n): ..."})])
    assert [leak for scan in SCANS for leak in scan(notebook)] == []
    assert not asserts_with_answers(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("assert difference < 1e-6, 'a tolerance says nothing of the answer'")]))
