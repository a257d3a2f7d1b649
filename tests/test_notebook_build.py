"""notebooks/build.py: jupytext reads each source, and a notebook edited in JupyterLab goes back to the same text."""

import re
import runpy
import uuid
from pathlib import Path

import jupytext
import nbformat
import pytest

from dpcourse import course

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
build = runpy.run_path(str(NOTEBOOKS / "build.py"))
SOURCES = [NOTEBOOKS / "src" / f"{lesson.name}.py" for lesson in course.LESSONS]
EDITIONS_OF_EVERY_LESSON = [folder / f"{lesson.name}.ipynb" for folder in (NOTEBOOKS, NOTEBOOKS / "student")
                            for lesson in course.LESSONS]


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_source_to_notebook_and_back_gives_the_same_text(source):
    notebook = jupytext.read(source, fmt="py:percent")
    build["add_classroom_metadata"](notebook)
    build["remove_classroom_metadata"](notebook)
    notebook.metadata = {"jupytext": {"notebook_metadata_filter": "-all"}}
    assert jupytext.writes(notebook, fmt="py:percent") == source.read_text()


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_the_committed_notebook_has_the_sources_cells(source):
    built = nbformat.read(NOTEBOOKS / f"{source.stem}.ipynb", as_version=4)
    cells = jupytext.read(source, fmt="py:percent").cells
    assert [(c.cell_type, c.source) for c in built.cells] == [(c.cell_type, c.source) for c in cells], (
        f"notebooks/{source.stem}.ipynb is out of date: run `python notebooks/build.py {source.stem}`"
    )


def test_slides_and_collapsed_solutions():
    notebook = jupytext.reads('# %% [markdown]\n# ## A slide\n\n# %% tags=["solution"]\nx = 1\n', fmt="py:percent")
    build["add_classroom_metadata"](notebook)
    heading, solution = notebook.cells
    assert heading.metadata["slideshow"] == {"slide_type": "slide"}
    assert solution.metadata["jupyter"] == {"source_hidden": True} and solution.id == "cell-1"


@pytest.mark.parametrize("edition", ["instructor", "student"])
def test_outputs_that_reveal_an_answer_are_collapsed_or_dropped(edition):
    """The instructor edition keeps a reveal's output, collapsed (the static site's closed <details>); the
    student edition stores none (the build drops it) and nbval does not compare the cell there."""
    stub = "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
    source = (f'# %% tags=["reveals-answer"]\nprint(3)\n\n# %% tags=["solution"]\nx = 1\n\n# %%\nx\n\n'
              f'# %% tags=["solution"]\n{stub}')
    notebook = jupytext.reads(source, fmt="py:percent")
    build["add_classroom_metadata"](notebook, edition)
    reveals, worked, plain, to_write = notebook.cells
    if edition == "instructor":
        assert reveals.metadata["jupyter"] == {"outputs_hidden": True} and reveals.metadata["collapsed"] is True
    else:
        assert "jupyter" not in reveals.metadata and "nbval-ignore-output" in reveals.metadata["tags"]
    # A worked answer without markers stays hidden in both editions; a stub is the student's to edit.
    assert worked.metadata.get("jupyter") == {"source_hidden": True}
    assert to_write.metadata.get("jupyter") == ({"source_hidden": True} if edition == "instructor" else None)
    assert "jupyter" not in plain.metadata and "collapsed" not in plain.metadata
    build["remove_classroom_metadata"](notebook)
    kept = [{k: v for k, v in c.metadata.items() if k != "lines_to_next_cell"} for c in notebook.cells]  # jupytext's
    reveal_tags = ["reveals-answer"] + (["nbval-ignore-output"] if edition == "student" else [])
    assert kept == [{"tags": reveal_tags}, {"tags": ["solution"]}, {}, {"tags": ["solution"]}]


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_the_student_edition_has_the_sources_cells_without_solutions(source):
    student = nbformat.read(NOTEBOOKS / "student" / f"{source.stem}.ipynb", as_version=4)
    cells = jupytext.read(source, fmt="py:percent").cells
    expected = [build["without_solutions"](c.source) if c.cell_type == "code" else c.source for c in cells]
    assert [c.source for c in student.cells] == expected, (
        f"notebooks/student/{source.stem}.ipynb is out of date: run "
        f"`python notebooks/build.py --edition student {source.stem}`"
    )
    assert "### BEGIN SOLUTION" not in "".join(expected)


def test_stubs_keep_the_indentation_and_the_code_around_them():
    code = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n\n\nf"
    stub = '    raise NotImplementedError("Your code here: write this, then run the check below.")\n'
    assert build["without_solutions"](code) == "def f(x):\n    y = 1\n" + stub + "\n\nf"


@pytest.mark.parametrize("notebook", EDITIONS_OF_EVERY_LESSON,
                         ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_no_stored_output_shows_a_memory_address(notebook):
    # nbval compares outputs with addresses masked, so only this catches a learner-visible "<... at 0x7f...>".
    shown = [output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
             for cell in nbformat.read(notebook, as_version=4).cells for output in cell.get("outputs", [])]
    assert [text for text in shown if re.search(r" at 0x[0-9a-f]+", text)] == []


@pytest.mark.parametrize("notebook", EDITIONS_OF_EVERY_LESSON, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_widget_ids_are_numbered_whatever_random_ids_ipywidgets_drew(notebook):
    text = notebook.read_text()
    numbered = set(re.findall(r"[0-9a-f]{32}", text))
    fresh = {model: uuid.uuid4().hex for model in numbered}  # as a new run of the lesson would name them
    redrawn = re.sub(r"[0-9a-f]{32}", lambda match: fresh[match[0]], text)
    assert build["with_numbered_widget_ids"](redrawn) + "\n" == text


@pytest.mark.slow
@pytest.mark.parametrize(("lesson", "edition"), [("02_scatter", "student"), ("12_capstone", "instructor")])
def test_a_rebuild_of_an_unchanged_lesson_writes_the_same_bytes(lesson, edition, tmp_path):
    # Lessons that print measured times (09, 10, 13-17) differ in those lines from build to build, by design.
    rebuilt = build["build"](lesson, edition, into=tmp_path)
    committed = (NOTEBOOKS / lesson if edition == "instructor" else NOTEBOOKS / "student" / lesson).with_suffix(
        ".ipynb")
    assert rebuilt.read_bytes() == committed.read_bytes(), f"rebuild {lesson} ({edition}): git would show a change"


def test_a_saved_quiz_or_explorer_asks_to_run_its_cell_until_it_runs():
    notebook = nbformat.v4.new_notebook()
    state = {
        "1": {"state": {"_dom_classes": ["dpcourse-run-this-cell"], "value": ""}},  # a quiz's feedback, unanswered
        "2": {"state": {"_dom_classes": ["dpcourse-run-this-cell"], "value": "<p>Right!</p>"}},  # already says more
        "3": {"state": {"_dom_classes": [], "value": ""}},
        "4": {"state": {"_dom_classes": ["dpcourse-kernel-gone"], "value": "<p>Run this cell again</p>"}},
    }
    notebook.metadata["widgets"] = {build["WIDGET_STATE"]: {"state": state}}
    build["say_what_needs_a_kernel"](notebook)
    state = notebook.metadata["widgets"][build["WIDGET_STATE"]]["state"]  # nbformat stored copies of the dicts
    assert state["1"]["state"]["value"] == build["RUN_THIS_CELL"]
    assert state["2"]["state"]["value"] == "<p>Right!</p>" and state["3"]["state"]["value"] == ""
    assert state["4"]["state"]["value"] == ""  # the saved state's own sentence speaks: one sentence, not two


def widget_output(model: str) -> nbformat.NotebookNode:
    view = {"model_id": model, "version_major": 2, "version_minor": 0}
    return nbformat.v4.new_output("execute_result", {build["WIDGET_VIEW"]: view, "text/plain": "a widget"},
                                  execution_count=1)


def test_the_student_edition_stores_no_progress_but_asks_to_run_the_cell():
    """What the build's own progress file held (a table of "exercises passed 2 of 2", an export's rows) is not the
    learner's: the student edition keeps, under each cell that reads the progress file, one line asking to run it,
    and none of the widget models its output showed. Other cells and the models they show are kept."""
    summary, explorer = "a" * 32, "c" * 32
    table, layout, shared = "d" * 32, "e" * 32, "f" * 32
    cells = [nbformat.v4.new_code_cell(source, execution_count=1) for source in
             ("quiz.ProgressSummary()", "rows = quiz.export_csv(path)\nprint(rows)", "widgets.ChunkExplorer()")]
    cells[0].outputs = [widget_output(summary)]
    cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="['quiz', '02_scatter', 'x', '2']\n")]
    cells[2].outputs = [widget_output(explorer)]
    notebook = nbformat.v4.new_notebook(cells=cells)
    state = {
        summary: {"state": {"children": [f"IPY_MODEL_{table}"], "layout": f"IPY_MODEL_{shared}"}},
        table: {"state": {"value": "<td>exercises passed</td><td>2 of 2</td>", "layout": f"IPY_MODEL_{layout}"}},
        layout: {"state": {}},
        explorer: {"state": {"layout": f"IPY_MODEL_{shared}"}},
        shared: {"state": {}},
    }
    notebook.metadata["widgets"] = {build["WIDGET_STATE"]: {"state": state, "version_major": 2}}

    build["without_the_builds_progress"](notebook)
    for cell in notebook.cells[:2]:
        (output,) = cell.outputs
        assert output.output_type == "display_data" and output.data == build["YOUR_PROGRESS"]
    assert notebook.cells[2].outputs == [widget_output(explorer)]
    kept = notebook.metadata["widgets"][build["WIDGET_STATE"]]["state"]
    assert set(kept) == {explorer, shared}
    assert "2 of 2" not in nbformat.writes(notebook) and "02_scatter" not in nbformat.writes(notebook)
    assert "Run this cell" in build["YOUR_PROGRESS"]["text/html"]
