"""The capstone's pieces as the lesson defines them, for the tests that check them (test_capstone.py and the
mechanism tests): the lesson's namespace, each exercise's piece, and the solution with some pieces swapped."""

import runpy
from pathlib import Path

import jupytext

from dpcourse import exercises

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
without_solutions = runpy.run_path(str(NOTEBOOKS / "build.py"))["without_solutions"]


def lesson_namespace(student: bool = False) -> dict:
    """Run the capstone's code cells except the checks, as the instructor (or student) edition has them."""
    namespace: dict = {}
    for cell in jupytext.read(NOTEBOOKS / "src" / "12_capstone.py").cells:
        if cell.cell_type == "code" and not cell.source.startswith("exercises.check"):
            exec(without_solutions(cell.source) if student else cell.source, namespace)
    return namespace


SOLUTION = lesson_namespace()
PIECES = {
    "capstone_scatter": "scatter",
    "capstone_broadcast": "Broadcast",
    "capstone_replicate": "replicate",
    "capstone_parallel_apply": "parallel_apply",
    "capstone_gather": "gather",
    "capstone_data_parallel": "data_parallel",
}


def checked(name: str, namespace: dict) -> exercises.Report:
    piece = namespace[PIECES[name]]
    return exercises.check(name, piece.apply if name == "capstone_broadcast" else piece)


def with_piece(**pieces) -> dict:
    """The solution with some pieces swapped for wrong ones; ``data_parallel`` then uses the wrong pieces."""
    namespace = dict(SOLUTION)
    namespace.update(pieces)
    data_parallel = SOLUTION["data_parallel"]
    namespace["data_parallel"] = type(data_parallel)(data_parallel.__code__, namespace)
    return namespace
