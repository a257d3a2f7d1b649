"""The solutions written in the lesson sources, as functions: what the exercise tests run against the checks.

Each check cell ``exercises.check("name", target)`` of ``notebooks/src/*.py`` checks the solution cell above it (a
function, or the class of a module the exercise asks for), between ``### BEGIN SOLUTION`` markers. It runs where
the notebook runs it: after the lesson's imports and definitions (its ``FindsItsDevice``, its ``WithLoss``), as
``tests.mutation.exercises`` rebuilds them, kept where ``inspect.getsource`` finds it (as IPython keeps a cell's
code): lesson 13's checks send a solution to other processes as its source.
"""

import functools
from collections.abc import Callable

from tests.mutation import exercises
from tests.mutation.exercises import SOURCES

__all__ = ["SOURCES", "lesson_solutions", "solution"]


@functools.cache
def lesson_solutions() -> tuple[dict[str, Callable], dict[str, str]]:
    """Each checked exercise's solution in the lesson sources, by the exercise's name, and the source file it is in."""
    solutions, lessons = {}, {}
    for exercise in exercises.find():
        if exercise.lesson.startswith("12"):  # the capstone's pieces: see test_capstone.py
            continue
        namespace = exercises.namespace(exercise)
        solutions[exercise.name] = exercises.define(exercise, exercise.solution, namespace, "the lesson's solution")
        lessons[exercise.name] = f"{exercise.lesson}.py"
    return solutions, lessons


def solution(name: str) -> Callable:
    """The lesson's solution of exercise ``name``."""
    return lesson_solutions()[0][name]
