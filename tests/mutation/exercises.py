"""Every checked exercise of the lesson sources: its reference solution cell, and how to rebuild its namespace.

In ``notebooks/src/NN_*.py`` a check cell calls ``exercises.check("name", function)`` (``notebooks/build.py``'s
``CHECK_CALL``); the cell tagged ``solution`` nearest above it holds the reference solution, with its body
between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (a few worked solutions have no markers: then every
function body in the cell is the solution). A mutant is that cell with one change, run where the notebook runs
it: after the lesson's imports and definitions. ``namespace()`` rebuilds that state without running the lesson's
demos: of the cells above the solution, the other solution cells run whole, and of the rest only the top-level
imports, ``def`` and ``class`` statements (a lesson's helpers), never its training runs or widgets.
"""

import ast
import dataclasses
import linecache
import re
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "notebooks" / "src"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One check cell and the solution it checks.

    ``solution`` is the solution cell's source; ``solution_lines`` the lines (1-based, in that cell) a mutant may
    change; ``setup`` the code that comes before it (see the module's docstring); ``target`` the expression the
    check cell passes to ``exercises.check`` (``scatter``, ``Broadcast.apply``)."""

    name: str
    lesson: str
    solution: str
    solution_lines: frozenset[int]
    setup: str
    target: str


def _check_call(source: str) -> tuple[str, str] | None:
    """``(name, target)`` of the ``exercises.check("name", target)`` call in a cell, or ``None``."""
    if not re.search(r'exercises\.check\("(\w+)"', source):
        return None
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "check"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)):
            return node.args[0].value, ast.unparse(node.args[1])
    return None


def solution_lines(source: str) -> frozenset[int]:
    """The lines between the markers; with no markers, the lines of every function body but its docstring."""
    lines = source.splitlines()
    marked, inside = set(), False
    for number, line in enumerate(lines, start=1):
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside:
            marked.add(number)
    if marked:
        return frozenset(marked)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            for statement in body:
                marked.update(range(statement.lineno, statement.end_lineno + 1))
    return frozenset(marked)


def _definitions(source: str) -> str:
    """A cell's top-level imports, functions and classes, without its other statements."""
    try:
        body = ast.parse(source).body
    except SyntaxError:  # an IPython magic: not a definition
        return ""
    return "\n".join(ast.unparse(node) for node in body if isinstance(node, DEFINITIONS))


def of_lesson(path: Path) -> list[Exercise]:
    """The checked exercises of one lesson source, in order."""
    found, setup, solution, before = [], [], None, ""
    for cell in jupytext.read(path).cells:
        if cell.cell_type != "code":
            continue
        call = _check_call(cell.source)
        if call and solution is not None:
            name, target = call
            found.append(Exercise(name, path.stem, solution, solution_lines(solution), before, target))
        elif "solution" in cell.metadata.get("tags", []):
            solution, before = cell.source, "\n".join(setup)
            setup.append(cell.source)
        elif not call:
            setup.append(_definitions(cell.source))
    return found


def find(lessons: list[str] | None = None) -> list[Exercise]:
    """The checked exercises of every lesson source, or of those ``lessons`` names: lesson numbers (``"02"``) or
    exercise names (``"capstone_resume"``)."""
    paths = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    return [exercise for path in paths for exercise in of_lesson(path)
            if not lessons or path.name[:2] in lessons or exercise.name in lessons]


def define(exercise: Exercise, solution: str, namespace: dict, label: str) -> object:
    """Run ``solution`` (a version of the exercise's solution cell) in ``namespace``; return what the check gets.

    The code is kept in ``linecache`` under ``label``, as IPython keeps a cell's: checks that send a function to
    other ranks read its source with ``inspect.getsource``."""
    filename = f"<mutation {exercise.name}: {label}>"
    linecache.cache[filename] = (len(solution), None, solution.splitlines(True), filename)
    exec(compile(solution, filename, "exec"), namespace)
    return eval(exercise.target, namespace)


def namespace(exercise: Exercise) -> dict:
    """A fresh ``__main__``-like namespace holding what the lesson defines above the exercise's solution."""
    space: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    filename = f"<mutation {exercise.lesson}: setup of {exercise.name}>"
    linecache.cache[filename] = (len(exercise.setup), None, exercise.setup.splitlines(True), filename)
    exec(compile(exercise.setup, filename, "exec"), space)
    return space
