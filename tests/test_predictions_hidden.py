"""Predict, then run: no output that gives a quiz's answer away is visible before the learner answers.

A lesson asks questions with ``quiz.ask("id")``, or all of a lesson's with ``quiz.ask_lesson("lesson")``, and
shows an answer in a cell tagged ``reveals-answer`` whose code is ``with quiz.reveal("id"):`` (dpcourse/quiz/
reveal.py). For every question asked, ``CLUES`` holds text that an output revealing its answer shows: an exact
shape, a count, an error message. What a person sees:

* the student edition (what a learner opens) stores no output that holds a clue, and no output at all in a
  ``reveals-answer`` cell, which nbval does not compare there (notebooks/build.py); in the learner's kernel
  ``quiz.reveal`` keeps the result hidden until the quiz is answered (tests/browser/test_answers_hidden.py
  checks it in Chromium, fresh and after Run All);
* the instructor edition stores the real outputs, each clue inside a ``reveals-answer`` cell that comes after
  its quiz and names it in ``quiz.reveal``; those outputs start collapsed, and the static site, built from the
  instructor edition, shows each inside a closed ``<details>`` (docs/build_site.py).

A question with no entry fails here: whoever adds a quiz to a lesson names what gives its answer away, writes
the cell that shows it as ``with quiz.reveal("id"):`` tagged ``reveals-answer`` in notebooks/src/, and rebuilds
both editions (docs/instructor.md, "Quizzes that are not given away"). Prose is not checked: the markdown
between a quiz and its revealing cell must not state the answer either.
"""

import ast
import functools
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from dpcourse import course
from dpcourse.quiz import load_lesson
from tests.site_builder import site_builder

REPO = Path(__file__).parents[1]
NOTEBOOKS = REPO / "notebooks"
SOURCES = [NOTEBOOKS / "src" / f"{lesson.name}.py" for lesson in course.LESSONS]
EDITIONS = {"instructor": NOTEBOOKS, "student": NOTEBOOKS / "student"}
ASK = re.compile(r"""quiz\.ask\(\s*["']([\w.-]+)["']""")
ASK_LESSON = re.compile(r"""quiz\.ask_lesson\(\s*["'](\w+)["']""")
REVEAL = re.compile(r"quiz\.reveal\(([^)]*)\)")
REVEALS_ANSWER = "reveals-answer"
NBVAL_IGNORE = "nbval-ignore-output"

# Question id -> text of the outputs that give its answer away. () when no output of the lessons that ask it
# does: its answer shows only in the quiz's own explanation and experiment, which appear after an answer.
CLUES: dict[str, tuple[str, ...]] = {
    "00-four-steps": ("scatter → replicate → forward", "self.scatter(inputs, kwargs"),
    "00-laptop-passthrough": ("torch.nn.DataParallel device_ids: []",),
    "01-one-device-counter": (),
    "01-one-device-scalar": (),
    "02-ten-rows-four-devices": ("chunk shapes: [[3, 8], [3, 8], [3, 8], [1, 8]]",),
    "02-six-rows-four-devices": ("6 rows on 4 devices -> chunks [2, 2, 2]",),
    "02-mismatched-batches": ("3 entries: [[[3, 2], [1, 2]]",),
    "02-lstm-hidden-state": ("h0 chunks on 2 devices: [[1, 4, 2], [1, 4, 2]]",),
    "02-keyword-missing-argument": ("replica 3: args [[2, 2]], kwargs []",),
    "03-parameters-empty": ("replica.parameters(): []",),
    "03-replica-zero-shares": ("replica 0: weight shares memory True",),
    "03-counter-lost": ("with 2 devices: calls = 0",),
    "03-list-shared": ("seen = [4, 4, 8]",),
    "04-threads": ("replica 0 ran [4, 8] in replica-0",),
    "04-hook-count": ("hook calls in one forward: 4",),
    "04-error-message": ("Caught ValueError in replica 1 on device",),
    "05-gather-concatenates": ("equal to torch.cat of the per-chunk outputs: True",),
    "05-packed-lstm": (),  # lesson 07 runs the fix; lesson 05 only asks
    "05-scalar-loss-shape": ("6 rows on 4 devices: chunks [2, 2, 2] -> shape [3]",),
    "06-gradients-summed": ("| the mean would be",),
    "06-mean-loss-matches": ("batch 10, chunks [3, 3, 3, 1]: max |grad difference| vs the oracle",),
    "06-sum-of-replica-losses": ("every grad = 2.0000 x the one-device grad",),
    "07-state-dict-keys": ("dp.state_dict() keys: ['module.",),
    "07-placement": ("forward: module must have its parameters and buffers on device",),
    "07-plain-tensor-stays": ("plain tensor attribute: cpu",),
    "07-lone-sample-weight": ("'1/12', '1/4']",),
    "07-batchnorm-last-chunk": ("Expected more than 1 value per channel when training",),
    "08-not-model-parallel": ("replica-0: weight [16, 8], 4 of the 12 rows",),
    "08-padding-fine": ("2 devices: [4, 40, 10] -> [4, 40, 20], equal to one device: True",),
    "08-batchnorm-running-mean": ("| on 2 devices: 0.0",),
    "08-custom-parameter": ("MyCustomLayer: gradients equal the one-device oracle's: True",),
    "09-replicate-each-forward": ("2 devices: replicate copied 1,051,648 bytes",),
    "09-replicate-bytes": ("4 devices: replicate copied 3,154,944 bytes = 3 x",),
    "09-modules-per-forward": ("204 new module objects",),
    "10-ddp-averages": ("DDP = mean of ranks",),
    "10-unequal-shards": ("shard sizes [5, 3]",),
    "11-review-nine-rows-scalar": (),
    "11-review-buffer-counter": (),
    "11-review-five-rows-output": ("gather:         output [10, 4]",),
    "13-reduce-others": ("(not defined: only dst receives the result)",),
    "13-send-first": ("rank 1 received 0, from rank 0",),
    "13-ring-bytes": ("4 ranks, ring                   7,200 (1.50 S)",),
    "14-divide-by-steps": ("3.0000 x one device's",),
    "14-dp-reduce-adds": ("micro-step 3: {'replicate': 1, 'reduce-add': 1}",),
    "14-no-sync-allreduces": ("[0, 0, 1] on every rank",),
    "14-forward-outside": ("[1, 1, 1] on every rank",),
    "14-last-partial": ("micro-batch 3 (chunks [2]): 1/6",),
    "16-plain-thread": ("('plain-thread', torch.float32)",),
    "16-enabled-only": ("{'cpu': torch.bfloat16, 'cuda': torch.float16}",),
    "16-overflow-skip": ("inf or NaN found True , weights changed False",),
    "15-adam-state": ("x the parameters",),
    "15-dp-most-memory": ("device 0 holds beyond device 1:",),
    "15-ddp-rank-memory": ("measured: DDP on 2, batch 256, Adam",),
    "16-compression-error": ("bf16, dpcourse's copy",),
    "17-no-sampler": ("no sampler       per epoch: [24, 24] samples trained",),
    "17-set-epoch": ("every epoch repeats epoch 0: True",),
    "17-uneven-no-join": ("Timed out waiting",),
    "17-unused-parameter": ("Expected to have finished reduction in the prior iteration",),
    "17-global-variance": ("'variance': 2.0",),
    # Part III (lessons 18-21): one clue each, from the outputs of their reveals as first built.
    "18-ddp-state-copies": ("bytes per rank, 2 copies",),
    "18-unpadded-all-gather": ("invalid tensor size at index 3",),
    "18-sum-not-mean": ("the weights differ from one-device Adam's: True",),
    "19-reduce-scatter-when": ("predicted: [3, 1, 0] | measured the same on every rank",),
    "19-gradient-bytes": ("ZeRO-2    2,300 |",),
    "19-wire-bytes": ("ZeRO-2  2,640, 2,640, 2,640, 2,640",),
    "20-after-forward": ("after the forward: [0, 0, 0, 0, 0]",),
    "20-bytes-vs-ddp": ("1.500 x DDP's",),
    "20-prefetch-peak": ("with prefetch)",),
    "21-empty-shard": ("(2, 15)   (0, 15)",),
    "21-reshard-gathers": ("backward: AG AG RS AG RS RS",),
    "21-mixed-precision": ("weight inside the forward  bfloat16",),
    "21-load-elsewhere": ("every parameter equals the 3-rank run's after its step 4",),
    "21-zero-owners": ("rank 0: Adam over ['2.weight']",),
}


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
    """What a learner reads in one output: printed text, a result's plain text, an error and its traceback."""
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join([output.ename, output.evalue, *output.get("traceback", [])])
    return output.get("data", {}).get("text/plain", "")


def cell_text(cell: nbformat.NotebookNode) -> str:
    """All a code cell shows, joined as the page shows it: a print can arrive as several stream outputs."""
    return "".join(output_text(output) for output in cell.outputs)


def outputs_hidden(cell: nbformat.NotebookNode) -> bool:
    return cell.metadata.get("jupyter", {}).get("outputs_hidden") is True


LESSONS = [source.stem for source in SOURCES]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_question_asked_names_what_gives_it_away(lesson):
    missing = [question for question in questions_of(lesson) if question not in CLUES]
    assert not missing, (
        f"{lesson} asks {missing}, which have no entry in CLUES (tests/test_predictions_hidden.py): add the text of "
        "each output that reveals the answer (and tag those cells reveals-answer), or () if no output does"
    )


def test_every_clue_belongs_to_a_question_a_lesson_asks():
    all_asked = {question for lesson in LESSONS for question in questions_of(lesson)}
    assert not set(CLUES) - all_asked, f"CLUES names questions no lesson asks: {sorted(set(CLUES) - all_asked)}"


@pytest.mark.parametrize("question", sorted(q for q, clues in CLUES.items() if clues))
def test_every_clue_is_in_an_output_of_a_lesson_that_asks(question):
    """A clue no output shows any more (the lesson changed) would make the collapse check pass vacuously."""
    shown = " ".join(
        cell_text(cell)
        for lesson in LESSONS
        if question in questions_of(lesson)
        for cell in nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4).cells
        if cell.cell_type == "code"
    )
    stale = [clue for clue in CLUES[question] if clue not in shown]
    assert not stale, f"{question}: no output of the lessons that ask it shows {stale}; update CLUES"


def revealed(code: str) -> tuple[str, ...]:
    """The question ids a piece of lesson code names in ``quiz.reveal(...)``, in order."""
    return tuple(q for call in REVEAL.findall(code) for q in re.findall(r"""["']([\w.-]+)["']""", call))


def tagged(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and REVEALS_ANSWER in cell.metadata.get("tags", [])


def visible_clues(lesson: str, cells: list[tuple[int, nbformat.NotebookNode]]) -> list[str]:
    return [
        f"cell {index} shows {clue!r} ({question})"
        for index, cell in cells
        for question in questions_of(lesson)
        for clue in CLUES.get(question, ())
        if clue in cell_text(cell)
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
            clues = [clue for clue in CLUES.get(question, ()) if clue in cell_text(cell)]
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
