"""nbgrader's whole pipeline on the course as it is: generate_assignment, then autograde a correct and a wrong
submission of lessons 02 (exercises) and 12 (the capstone), with no extra flags (docs/instructor.md); and a release
that stubs only what lies between the solution markers (lesson 06 once had a worked answer without them, which
nbgrader replaced whole, so that the cell under it could not pass)."""

import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = ("02_scatter", "12_capstone")
BEGIN, NBGRADER_STUB = "### BEGIN SOLUTION", "raise NotImplementedError()"
WRONG_CHUNK_SIZES = "    return [batch // n] * n  # plausible, wrong: drops the remainder\n"


def _nbgrader(root: Path, *args: str) -> str:
    # As an instructor runs it: nbgrader's alembic on PATH, and no placement check (notebooks/kernel/ipython) in
    # its kernels.
    environment = {name: value for name, value in os.environ.items() if name != "IPYTHONDIR"}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={root}"],
                          cwd=root, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _write_wrong_chunk_sizes(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith("def chunk_sizes")]
    stub = r"(?m)^    # YOUR CODE HERE\n    raise NotImplementedError\(\)\n?"
    cell.source = re.sub(stub, WRONG_CHUNK_SIZES, cell.source)
    assert WRONG_CHUNK_SIZES in cell.source, cell.source
    nbformat.write(notebook, path)


@pytest.mark.slow
def test_nbgrader_releases_and_autogrades_the_lessons_with_no_extra_flags(tmp_path):
    from nbgrader.api import Gradebook

    source = tmp_path / "source" / "dp"
    source.mkdir(parents=True)
    for lesson in LESSONS:
        shutil.copy(NOTEBOOKS / f"{lesson}.ipynb", source)
    _nbgrader(tmp_path, "generate_assignment", "dp")
    released = tmp_path / "release" / "dp"
    assert "raise NotImplementedError()" in (released / "02_scatter.ipynb").read_text()

    for learner, origin in (("right", source), ("wrong", released)):
        shutil.copytree(origin, tmp_path / "submitted" / learner / "dp")
    _write_wrong_chunk_sizes(tmp_path / "submitted" / "wrong" / "dp" / "02_scatter.ipynb")
    log = _nbgrader(tmp_path, "autograde", "dp")
    # A passing check leaves its cell no result, which nbgrader would read as partial credit and warn about.
    assert "partial credit" not in log, log[-3000:]

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        right, wrong = (gradebook.find_submission("dp", learner) for learner in ("right", "wrong"))
        assert right.max_score >= 8 and right.score == right.max_score
        assert wrong.score == 0
        chunk_sizes = gradebook.find_grade("check-chunk_sizes", "02_scatter", "dp", "wrong")
        assert chunk_sizes.max_score == 1 and chunk_sizes.score == 0

    # The wrong submission's feedback says which case failed, how, and the hint: the whole report.
    graded = nbformat.read(tmp_path / "autograded" / "wrong" / "dp" / "02_scatter.ipynb", as_version=4)
    (check,) = [c for c in graded.cells if c.source.startswith('exercises.check("chunk_sizes"')]
    (error,) = [o for o in check.outputs if o.output_type == "error"]
    assert error.ename == "AssertionError" and "chunk_sizes: " in error.evalue
    assert "case 1 (" in error.evalue and ": failed\n" in error.evalue and "hint: " in error.evalue


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ["06_backward"])
def test_a_release_stubs_only_what_lies_between_the_markers(tmp_path, lesson):
    """The release is made from the lesson's source with the build's metadata, as the instructor edition carries it
    (no outputs needed), so that it holds whatever the source holds now."""
    build = runpy.run_path(str(NOTEBOOKS / "build.py"))
    notebook = jupytext.read(NOTEBOOKS / "src" / f"{lesson}.py", fmt="py:percent")
    build["add_classroom_metadata"](notebook)
    source = tmp_path / "source" / "dp"
    source.mkdir(parents=True)
    nbformat.write(notebook, source / f"{lesson}.ipynb")
    _nbgrader(tmp_path, "generate_assignment", "dp")
    released = nbformat.read(tmp_path / "release" / "dp" / f"{lesson}.ipynb", as_version=4)
    pairs = [(mine, theirs) for mine, theirs in zip(notebook.cells, released.cells, strict=True)
             if mine.cell_type == "code"]
    stubbed = [theirs.source for mine, theirs in pairs if BEGIN not in mine.source and theirs.source != mine.source]
    assert not stubbed, f"nbgrader changed cells that have no solution markers:\n{stubbed}"
    marked = [theirs.source for mine, theirs in pairs if BEGIN in mine.source]
    assert marked and all(NBGRADER_STUB in source for source in marked), marked
