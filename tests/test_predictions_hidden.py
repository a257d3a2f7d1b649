"""Predict, then run: no output that gives a quiz's answer away is visible before the learner answers.

A lesson asks questions with ``quiz.ask("id")``, or all of a lesson's with ``quiz.ask_lesson("lesson")``. For
every question asked, ``CLUES`` holds text that an output revealing its answer shows: an exact shape, a count,
an error message. Every output that holds a clue, in both committed editions, must sit in a cell whose outputs
start collapsed (``jupyter.outputs_hidden``, which notebooks/build.py sets for a cell tagged
``reveals-answer``), and the static site must show each such output inside a closed ``<details>``
(docs/build_site.py; tests/browser/test_static_site.py checks it in Chromium).

A question with no entry fails here: whoever adds a quiz to a lesson names what gives its answer away, tags
that cell ``reveals-answer`` in notebooks/src/, and rebuilds both editions (docs/instructor.md, "Quizzes that
are not given away"). Prose is not checked: the markdown between a quiz and its revealing cell must not state
the answer either.
"""

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
REVEALS_ANSWER = "reveals-answer"

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
PAIRS = [(edition, lesson) for edition in EDITIONS for lesson in LESSONS]


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


@pytest.mark.parametrize(("edition", "lesson"), PAIRS, ids=[f"{e}-{n}" for e, n in PAIRS])
def test_outputs_that_reveal_an_answer_start_collapsed(edition, lesson):
    notebook = nbformat.read(EDITIONS[edition] / f"{lesson}.ipynb", as_version=4)
    visible = [
        f"cell {index} shows {clue!r} ({question})"
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and not outputs_hidden(cell)
        for question in questions_of(lesson)
        for clue in CLUES.get(question, ())
        if clue in cell_text(cell)
    ]
    assert not visible, (
        f"{edition} edition of {lesson}: outputs that give a quiz's answer away are visible:\n  "
        + "\n  ".join(visible)
        + f"\nTag those cells reveals-answer in notebooks/src/{lesson}.py and rebuild both editions."
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_collapsed_output_follows_a_quiz(lesson):
    """The site's note says "answer the quiz above first": a tagged cell with no quiz above it is a mistake."""
    cells = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent").cells
    first_quiz = next((i for i, cell in enumerate(cells) if cell.cell_type == "code" and asked(cell.source)), None)
    tagged = [i for i, cell in enumerate(cells) if REVEALS_ANSWER in cell.metadata.get("tags", [])]
    early = [i for i in tagged if first_quiz is None or i < first_quiz]
    assert not early, f"{lesson}: cells {early} are tagged {REVEALS_ANSWER} but no quiz comes before them"


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
