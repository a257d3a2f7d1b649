"""Checked exercises: the learner writes a function in a stub cell, and ``check`` runs it against an oracle.

    def chunk_sizes(batch: int, n: int) -> list[int]:
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    exercises.check("chunk_sizes", chunk_sizes)

The instructor edition keeps the solutions; the student edition (``notebooks/build.py`` makes it) replaces each
``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block with a ``raise NotImplementedError(...)`` stub, the markers
nbgrader uses, so an instructor can also release the lessons through nbgrader.
"""

from .check import Case, Exercise, Report, first_difference, run
from .registry import EXERCISES, check

__all__ = ["EXERCISES", "Case", "Exercise", "Report", "check", "first_difference", "run"]
