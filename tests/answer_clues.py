"""For every quiz question a lesson asks, the text of the outputs that would give its answer away.

``tests/test_predictions_hidden.py`` checks that no stored output shows a clue before its quiz is answered, and
``tests/browser/test_answers_hidden.py`` that none is visible in JupyterLab; both read ``CLUES`` and the helpers
here that find a lesson's questions and a cell's text. The clues themselves live in the quiz files (``clues``).
"""

import functools
import re
from pathlib import Path

import jupytext
import nbformat

from dpcourse.quiz import find_question, load_lesson
from dpcourse.quiz.lessons import LESSONS

NOTEBOOKS = Path(__file__).parents[1] / "notebooks"
ASK = re.compile(r"""quiz\.ask\(\s*["']([\w.-]+)["']""")
ASK_LESSON = re.compile(r"""quiz\.ask_lesson\(\s*["'](\w+)["']""")
REVEAL = re.compile(r"quiz\.reveal\(([^)]*)\)")


def _clues_by_question() -> dict[str, tuple[str, ...]]:
    return {question.id: question.clues for lesson in LESSONS for question in load_lesson(lesson)}


# Question id -> the texts its quiz file lists as giving its answer away (``clues``): what an output revealing it
# shows, and phrases of its discussion. Each appears in an output of a lesson that asks the question (its
# revealing cell, whose output ends with the discussion), never before the quiz is answered.
CLUES: dict[str, tuple[str, ...]] = _clues_by_question()


def asked(code: str) -> list[str]:
    """The ids of the questions a piece of lesson code shows, in order."""
    ids = ASK.findall(code)
    for lesson in ASK_LESSON.findall(code):
        ids += [question.id for question in load_lesson(lesson)]
    return ids


@functools.cache
def questions_of(lesson: str) -> tuple[str, ...]:
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    return tuple(dict.fromkeys(q for cell in cells if cell.cell_type == "code" for q in asked(cell.source)))


def output_text(output: nbformat.NotebookNode) -> str:
    """What a learner reads in one output: printed text, a result's Markdown or plain text, an error and its
    traceback."""
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join([output.ename, output.evalue, *output.get("traceback", [])])
    data = output.get("data", {})
    return data.get("text/markdown", data.get("text/plain", ""))


def cell_text(cell: nbformat.NotebookNode) -> str:
    """All a code cell shows, joined as the page shows it: a print can arrive as several stream outputs."""
    return "".join(output_text(output) for output in cell.outputs)


def revealed(code: str) -> tuple[str, ...]:
    """The question ids a piece of lesson code names in ``quiz.reveal(...)``, in order."""
    return tuple(q for call in REVEAL.findall(code) for q in re.findall(r"""["']([\w.-]+)["']""", call))


# What a person reads: Markdown's marks and the line breaks of its source are not on the page.
_MARKS = re.compile(r"[`*]")
_SPACE = re.compile(r"\s+")
_SPELLED_OUT = 3  # a number answer is a clue in every spelling from this many digits on ("204", not "3")


def readable(text: str) -> str:
    """``text`` as a page shows it, for finding a clue in it: without Markdown's `code` and *emphasis* marks,
    each run of white space one space, lower case."""
    return _SPACE.sub(" ", _MARKS.sub("", text)).strip().casefold()


def number_spellings(value: float) -> tuple[str, ...]:
    """How a page might print the number answer ``value``: ``789504`` and ``789,504``; ``0.25`` and ``1/4``.
    A number with fewer than three digits is no clue by itself ("3" is in every other sentence): its quiz lists
    the phrases that would give it away instead (``clues``)."""
    spellings = {f"{value:g}", f"{value:,.0f}"} if value == int(value) else {f"{value:g}"}
    if value and value != int(value) and (1 / value) == int(1 / value):
        spellings.add(f"1/{int(1 / value)}")
    return tuple(sorted(s for s in spellings if sum(c.isdigit() for c in s) >= _SPELLED_OUT))


@functools.cache
def clues_of(question_id: str) -> tuple[str, ...]:
    """Everything that gives ``question_id``'s answer away, as ``readable`` text: the keyed option's text, a
    number answer (``number_spellings``), and the phrases its quiz file lists (``clues``)."""
    question = find_question(question_id)
    clues = list(question.clues)
    if question.kind == "choice":
        clues.append(question.answer)
    elif question.kind == "number":
        clues += number_spellings(question.answer)
    return tuple(dict.fromkeys(readable(clue) for clue in clues))


def clue_pattern(clue: str) -> re.Pattern:
    """``clue`` found in readable text, but not inside a longer number (the clue "204" is not in "1,2048")."""
    return re.compile(r"(?<![\d.,])" + re.escape(clue) + r"(?![\d])" if clue[-1:].isdigit() and clue[:1].isdigit()
                      else re.escape(clue))


def clues_in(question_id: str, text: str) -> list[str]:
    """The clues of ``question_id`` that ``text`` (as a page shows it) holds."""
    page = readable(text)
    return [clue for clue in clues_of(question_id) if clue_pattern(clue).search(page)]


def is_quiz(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(asked(cell.source))


def is_heading(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "markdown" and cell.source.lstrip().startswith("#")


def visible_text(cell: nbformat.NotebookNode) -> str:
    """What a saved notebook shows of one cell before anything runs: a Markdown cell's text; a code cell's code
    and its outputs, unless they are collapsed (``jupyter.outputs_hidden``, the instructor edition's revealing
    cells, which the site shows in a closed ``<details>``). Widgets' text is the browser tests' to read."""
    if cell.cell_type != "code":
        return cell.source
    hidden = cell.metadata.get("jupyter", {}).get("outputs_hidden") is True
    return cell.source + ("" if hidden else "\n" + cell_text(cell))


def after_each_quiz(notebook: nbformat.NotebookNode,
                    shown: list[dict[str, str]] | None = None) -> list[tuple[str, int, str]]:
    """(question id, cell index of its quiz, the text shown from the quiz's cell to the next quiz or heading) for
    every quiz of ``notebook``; the quiz's own output (its options name the answer among others) is left out.

    ``shown`` is what a browser shows of each cell, ``{"input": ..., "output": ...}`` in the notebook's order
    (``CELL_TEXTS``); without it, what the saved notebook shows (``visible_text``).
    """
    def text(index: int) -> str:
        if shown is None:
            return visible_text(notebook.cells[index])
        return shown[index]["input"] + "\n" + shown[index]["output"]

    found = []
    for index, cell in enumerate(notebook.cells):
        if not is_quiz(cell):
            continue
        parts = [cell.source if shown is None else shown[index]["input"]]
        for later in range(index + 1, len(notebook.cells)):
            if is_quiz(notebook.cells[later]) or is_heading(notebook.cells[later]):
                break
            parts.append(text(later))
        found += [(question, index, "\n".join(parts)) for question in asked(cell.source)]
    return found


def giveaways(notebook: nbformat.NotebookNode, shown: list[dict[str, str]] | None = None) -> list[str]:
    """Each clue shown between a quiz and the next quiz or heading, with where (``after_each_quiz``)."""
    return [f"cell {index}, after quiz {question}: {clue!r}"
            for question, index, text in after_each_quiz(notebook, shown) for clue in clues_in(question, text)]


# What a browser shows of each cell of a page, in order: the text of its input (code, or rendered Markdown) and of
# its outputs. innerText leaves out what is not rendered: display: none (a hidden result), a closed <details>.
# Define CELLS first, the cells' elements in the notebook's order.
CELL_TEXTS = """
const part = (cell, selector) => { const node = cell.querySelector(selector); return node ? node.innerText : ''; };
return CELLS.map(cell => ({input: part(cell, '.jp-Cell-inputWrapper'), output: part(cell, '.jp-Cell-outputWrapper')}));
"""
