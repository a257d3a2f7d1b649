"""Build the lesson notebooks from their sources in notebooks/src/, executed, with widget state saved.

    python notebooks/build.py                       # every lesson, both editions
    python notebooks/build.py 02                    # one lesson, both editions (02 or 02_scatter)
    python notebooks/build.py --check 02            # nbval on both editions, and every test lesson 02 owns
    python notebooks/build.py --edition student 02  # one edition only (notebooks/student/)
    python notebooks/build.py --to-source 02        # bring edits made in JupyterLab back to the source

The lessons are those of the course's index, ``dpcourse.course``.

Each source is a Python file in jupytext's "percent" format (what jupytext, VS Code and PyCharm read):

    # %% [markdown]
    # # Title
    # Text...

    # %% tags=["nbval-ignore-output"]
    timings()

jupytext turns it into cells, with the tags in each cell's metadata (nbval reads "nbval-ignore-output").
This script then adds what a classroom needs: a code cell tagged "solution" is shown collapsed (an exercise's
answer, one click away); a code cell tagged "reveals-answer" (``with quiz.reveal("id"):``, its output gives away
the answer of a quiz above it) keeps no output in the student edition, where a learner's kernel shows it once
the quiz is answered (``dpcourse.quiz.reveal``), and keeps its output collapsed in the instructor edition, which
the static site shows in a closed ``<details>``; a cell that shows the learner's progress (``READS_PROGRESS``)
keeps, in the student edition, one line asking to run it instead of the build's own progress; and cells that open
with a level-1 or level-2 heading start a new slide. The
notebook is run top to bottom in a fresh kernel and saved with its outputs and widget state, which is what
nbval compares against (notebooks/nbval_sanitize.cfg masks what legitimately changes between runs). Its
``kernelspec`` and ``language_info`` are those JupyterLab writes when this environment's kernel starts
(``dpcourse.open.kernel_metadata``, Python's version included), so a lesson does not open marked modified.

Two editions come from one source. The instructor edition (notebooks/*.ipynb, what nbval checks) keeps every
solution. The student edition (notebooks/student/*.ipynb) replaces what lies between nbgrader's markers,
``### BEGIN SOLUTION`` and ``### END SOLUTION``, with a stub that raises ``NotImplementedError``; run, its
exercise checks then say "not attempted yet". The same markers let an instructor release through nbgrader.

``--to-source`` goes the other way: the notebook's cells, without outputs and without the metadata this
script adds, are written back to notebooks/src/ as percent text. Then rebuild, so the outputs match.
"""

import argparse
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

from dpcourse import course
from dpcourse.open import kernel_metadata
from dpcourse.ui.controls import KERNEL_GONE, NEEDS_KERNEL, RUN_THIS_CELL

HERE = Path(__file__).parent
LESSON_ENVIRONMENT = runpy.run_path(str(HERE / "conftest.py"))["LESSON_ENVIRONMENT"]  # CPU devices
SOURCES = HERE / "src"
EDITIONS = {"instructor": HERE, "student": HERE / "student"}
SOLUTION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION\n?", re.MULTILINE | re.DOTALL)
STUB = '{indent}raise NotImplementedError("Your code here: write this, then run the check below.")\n'
SOLUTION_TAG = "solution"  # a code cell holding an exercise's answer
REVEALS_ANSWER_TAG = "reveals-answer"  # a code cell whose output gives away a quiz above it
NBVAL_IGNORE_OUTPUT = "nbval-ignore-output"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
READS_PROGRESS = re.compile(r"\bquiz\.(?:ProgressSummary|export_csv)\(")  # a cell that shows the learner's progress
YOUR_PROGRESS = {  # what such a cell shows in the student edition until the learner runs it
    "text/html": "<p><b>▶ Run this cell</b> to see your progress: your answers and checks, from your progress file.</p>",
    "text/plain": "Run this cell to see your progress: your answers and checks, from your progress file.",
}
CHECK_CALL = re.compile(r'exercises\.check\("(\w+)"')  # a check cell: nbgrader grades it
DEFINES = re.compile(r"^(?:def|class) (\w+)", re.MULTILINE)


def without_solutions(code: str) -> str:
    """``code`` with every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block replaced by a stub."""
    return SOLUTION.sub(lambda match: STUB.format(indent=match["indent"]), code)


def add_classroom_metadata(notebook: nbformat.NotebookNode, edition: str = "instructor") -> None:
    """Slides start at level-1 and level-2 headings; solutions and answer-revealing outputs are collapsed.

    JupyterLab reads ``jupyter.source_hidden`` and ``jupyter.outputs_hidden``; ``collapsed`` is the older
    name for hidden outputs, which the classic notebook and nbconvert's templates read. The student edition
    shows its solution cells open where they hold a stub, the learner's to edit. An answer-revealing cell is
    collapsed in the instructor edition only (the site's closed ``<details>``); the student edition stores no
    output for it (``drop_revealing_outputs``), so nbval compares none there. Cell ids follow the order.
    """
    grade_ids: dict[str, int] = {}
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"  # not random, so that a rebuild changes only what changed
        starts_slide = cell.cell_type == "markdown" and cell.source.startswith(("# ", "## "))
        cell.metadata["slideshow"] = {"slide_type": "slide" if starts_slide else "-"}
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        grading = nbgrader_metadata(cell)
        if grading:
            uses = grade_ids[grading["grade_id"]] = grade_ids.get(grading["grade_id"], 0) + 1
            if uses > 1:  # two cells define or check the same names: number the later ones
                grading["grade_id"] += f"-{uses}"
            cell.metadata["nbgrader"] = grading
        hidden = {}
        # A solution is hidden in the instructor edition; in the student edition it is a stub to edit, and only
        # a solution with no stub in it (a worked example without markers) stays hidden there too.
        if SOLUTION_TAG in tags and (edition == "instructor" or not SOLUTION.search(cell.source)):
            hidden["source_hidden"] = True
        if REVEALS_ANSWER_TAG in tags and edition == "instructor":
            hidden["outputs_hidden"] = True
            cell.metadata["collapsed"] = True
        elif REVEALS_ANSWER_TAG in tags and NBVAL_IGNORE_OUTPUT not in tags:
            cell.metadata["tags"] = [*tags, NBVAL_IGNORE_OUTPUT]
        if hidden:
            cell.metadata["jupyter"] = hidden


def nbgrader_metadata(cell: nbformat.NotebookNode) -> dict | None:
    """nbgrader's metadata for a code cell (schema 3), so that its whole pipeline runs on the course as it is.

    A ``solution`` cell with ``### BEGIN SOLUTION`` markers is the learner's to write; one without (a worked example)
    is not nbgrader's: nbgrader would replace the whole of it with a stub, and the cells after it could not run
    (tests/test_student_edition_no_answers.py holds that no lesson has one). A cell that calls
    ``exercises.check("name", ...)`` is an autograded test worth one point, locked (under nbgrader a check that did
    not pass raises, see ``dpcourse.exercises.check``). Grade ids come from what the cell defines or checks, so they stay the same when
    cells are added around it.
    """
    checked = CHECK_CALL.findall(cell.source)
    if checked:
        return {"grade": True, "grade_id": f"check-{'-'.join(checked)}", "locked": True, "points": len(checked),
                "schema_version": 3, "solution": False, "task": False}
    if SOLUTION_TAG in cell.metadata.get("tags", []) and SOLUTION.search(cell.source):
        defined = DEFINES.findall(cell.source) or ["answer"]
        return {"grade": False, "grade_id": f"solution-{'-'.join(defined)}", "locked": False,
                "schema_version": 3, "solution": True, "task": False}
    return None


def remove_classroom_metadata(notebook: nbformat.NotebookNode) -> None:
    """Undo ``add_classroom_metadata`` and drop what running left behind, leaving what the source holds."""
    for cell in notebook.cells:
        cell.metadata.pop("slideshow", None)
        cell.metadata.pop("jupyter", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


def build(name: str, edition: str = "instructor", timeout: int = 300, into: Path | None = None) -> Path:
    """Convert notebooks/src/<name>.py into the edition's <name>.ipynb and execute it in place (or in ``into``)."""
    notebook = jupytext.read(SOURCES / f"{name}.py", fmt="py:percent")
    notebook.metadata = kernel_metadata()  # what JupyterLab writes on open: a lesson opens unmodified
    add_classroom_metadata(notebook, edition)
    if edition == "student":
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.source = without_solutions(cell.source)
    for variable, value in LESSON_ENVIRONMENT.items():
        os.environ.setdefault(variable, value)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", store_widget_state=True, record_timing=False
    )
    client.execute(cwd=str(HERE))
    coalesce_streams(notebook)
    if edition == "student":
        drop_revealing_outputs(notebook)
        without_the_builds_progress(notebook)
    say_what_needs_a_kernel(notebook)
    target = (into or EDITIONS[edition]) / f"{name}.ipynb"
    target.parent.mkdir(exist_ok=True)
    target.write_text(with_numbered_widget_ids(nbformat.writes(notebook)) + "\n")
    return target


def coalesce_streams(notebook: nbformat.NotebookNode) -> None:
    """Join each cell's consecutive outputs to the same stream (stdout, stderr) into one: how the kernel's prints
    were split into messages varies from run to run, the text does not (nbval compares them joined too)."""
    for cell in notebook.cells:
        joined: list = []
        for output in cell.get("outputs", []):
            previous = joined[-1] if joined else None
            if output.output_type == "stream" and previous and previous.output_type == "stream" and (
                    previous.name == output.name):
                previous.text += output.text
            else:
                joined.append(output)
        if cell.cell_type == "code":
            cell.outputs = joined


def drop_revealing_outputs(notebook: nbformat.NotebookNode) -> None:
    """Empty the outputs of the cells tagged ``reveals-answer``: a learner's copy holds no result of a quiz before
    it is answered. Run in the learner's kernel, ``quiz.reveal`` hides the result until then."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and REVEALS_ANSWER_TAG in cell.metadata.get("tags", []):
            cell.outputs = []


def without_the_builds_progress(notebook: nbformat.NotebookNode) -> None:
    """Replace the outputs of each cell that reads the progress file (``READS_PROGRESS``: the summary table, the
    export) with one line asking to run it (``YOUR_PROGRESS``), and drop the widget models they showed from the
    saved state. What they showed came from the build's progress file (the exercise checks a build runs count as
    passed): a learner's copy must show no counts until their own. The instructor edition keeps them."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    dropped, shown = [], []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        models = [output.get("data", {}).get(WIDGET_VIEW, {}).get("model_id") for output in cell.outputs]
        if READS_PROGRESS.search(cell.source):
            dropped += models
            cell.outputs = [nbformat.v4.new_output("display_data", dict(YOUR_PROGRESS))]
        else:
            shown += models
    gone = _with_the_models_they_refer_to(state, dropped)
    kept = _with_the_models_they_refer_to(state, [*shown, *(model for model in state if model not in gone)])
    for model in gone - kept:
        del state[model]


def _with_the_models_they_refer_to(state: dict, models: list) -> set[str]:
    """``models`` and every model of ``state`` their states refer to (``IPY_MODEL_<id>``), at any depth."""
    found: set[str] = set()
    todo = [model for model in models if model in state]
    while todo:
        model = todo.pop()
        if model not in found:
            found.add(model)
            todo += [m for m in re.findall(r"IPY_MODEL_([0-9a-f]{32})", json.dumps(state[model])) if m in state]
    return found


def say_what_needs_a_kernel(notebook: nbformat.NotebookNode) -> None:
    """In the saved widget state, which JupyterLab shows before a cell runs, every quiz's feedback line and every
    explorer's message line (class ``NEEDS_KERNEL``) asks the learner to run the cell: its buttons and sliders do
    nothing without the kernel. Once the cell runs, the live widget's own (empty) value replaces it. The line that
    says a running widget's kernel has gone (class ``KERNEL_GONE``) is blank there: that sentence already says it."""
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for model in state.values():
        values = model.get("state", {})
        if NEEDS_KERNEL in values.get("_dom_classes", []) and not values.get("value"):
            values["value"] = RUN_THIS_CELL
        if KERNEL_GONE in values.get("_dom_classes", []):
            values["value"] = ""


def with_numbered_widget_ids(text: str) -> str:
    """``text`` (a notebook's JSON) with each widget model's random id replaced by its number, as cell ids are: a
    rebuild of an unchanged lesson then writes the same bytes.

    ipywidgets names every model with a fresh ``uuid4().hex``; the ids appear in the outputs that show a widget,
    in the saved widget state (its keys) and in references between models (``"IPY_MODEL_<id>"``). Models are
    numbered in the order the outputs show them, each followed by the models its state refers to, depth first
    (a state's keys in name order); then the models that nothing shows or refers to, in the order of what they
    hold, each with the models it refers to.
    """
    notebook = json.loads(text)
    state = notebook["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    order: dict[str, None] = {}

    def visit(model: str) -> None:
        if model in order or model not in state:
            return
        order[model] = None
        for referred in re.findall(r"IPY_MODEL_([0-9a-f]{32})", json.dumps(state[model], sort_keys=True)):
            visit(referred)

    def content(model: str) -> str:  # what a model holds, without the random ids it refers to
        return re.sub(r"[0-9a-f]{32}", "", json.dumps(state[model], sort_keys=True))

    shown = re.findall(r'"model_id": "([0-9a-f]{32})"', json.dumps(notebook["cells"]))
    referred = set(re.findall(r"IPY_MODEL_([0-9a-f]{32})", json.dumps(state)))
    unreferred = sorted((model for model in state if model not in referred), key=content)
    for model in [*shown, *unreferred, *sorted(state, key=content)]:
        visit(model)
    numbered = {old: f"{number:032x}" for number, old in enumerate(order, start=1)}
    renamed = re.sub(r"[0-9a-f]{32}", lambda match: numbered.get(match[0], match[0]), text)
    return nbformat.writes(nbformat.reads(renamed, as_version=4))  # written again: the state in the new ids' order


def to_source(name: str) -> Path:
    """Write notebooks/<name>.ipynb back to notebooks/src/<name>.py (cells only: no outputs, no build metadata)."""
    notebook = nbformat.read(HERE / f"{name}.ipynb", as_version=4)
    remove_classroom_metadata(notebook)
    notebook.metadata = {"jupytext": {"notebook_metadata_filter": "-all"}}  # no YAML header in the source
    target = SOURCES / f"{name}.py"
    target.write_text(jupytext.writes(notebook, fmt="py:percent"))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="lessons, by name or number: 02_scatter or 02 (default: all)")
    parser.add_argument("--edition", choices=[*EDITIONS, "both"], default="both", help="which edition to build")
    parser.add_argument("--to-source", action="store_true", help="notebook -> source instead of source -> notebook")
    parser.add_argument("--check", action="store_true",
                        help="build nothing: run nbval on both editions and every test the lessons own (pytest -m)")
    args = parser.parse_args()
    lessons = [course.lesson(name) for name in args.names] if args.names else list(course.LESSONS)
    if args.check:
        sys.exit(check(lessons))
    editions = list(EDITIONS) if args.edition == "both" else [args.edition]
    for lesson in lessons:
        written = [to_source(lesson.name)] if args.to_source else [build(lesson.name, e) for e in editions]
        for path in written:
            print(f"wrote {path.relative_to(HERE.parent)}")


def check(lessons: list[course.Lesson]) -> int:
    """pytest on the lessons' notebooks (both editions, nbval) and on every test marked with their markers."""
    notebooks = [str(folder / f"{lesson.name}.ipynb") for lesson in lessons for folder in EDITIONS.values()]
    markers = " or ".join(lesson.marker for lesson in lessons)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", markers, *notebooks, "tests"]
    print(" ".join(command[1:]), flush=True)
    return subprocess.run(command, cwd=HERE.parent).returncode


if __name__ == "__main__":
    main()
