"""Every exercise of the course by name, and ``check(name, function)``, the call a lesson's check cell makes."""

import importlib
from collections.abc import Callable

from ..course import LESSONS
from ..progress import Progress
from .check import NOT_ATTEMPTED, Exercise, Report, run

EXERCISES: dict[str, Exercise] = {}
# Imported on the first check, so that importing dpcourse.exercises stays cheap; the course's index names them.
LESSON_MODULES = [lesson.exercises_module for lesson in LESSONS if lesson.exercises]


def register(exercise: Exercise) -> Exercise:
    """Add ``exercise`` to ``EXERCISES``; a name may be used once."""
    if exercise.name in EXERCISES:
        raise ValueError(f"Two exercises are called {exercise.name!r}: give one of them another name.")
    EXERCISES[exercise.name] = exercise
    return exercise


def _load() -> None:
    for module in LESSON_MODULES:
        importlib.import_module(module)


def check(name: str, function: Callable) -> Report:
    """Run the learner's ``function`` through exercise ``name``'s cases; the report shows itself in the notebook.

    A check of a function the learner wrote (not an untouched stub) is recorded in their progress file
    (``dpcourse.progress``), passed or not, so that ``ProgressSummary`` can count the exercises passed.
    """
    _load()
    if name not in EXERCISES:
        raise KeyError(f"No exercise is called {name!r}. Known exercises: {', '.join(sorted(EXERCISES))}.")
    exercise = EXERCISES[name]
    report = run(exercise, function)
    if report.status != NOT_ATTEMPTED:
        Progress().record_exercise(name, lesson_of(exercise), report.passed)
    return report


def lesson_of(exercise: Exercise) -> str:
    """The lesson whose module registered ``exercise`` (its cases are defined there)."""
    module = exercise.cases.__module__
    return next(lesson.name for lesson in LESSONS if lesson.exercises_module == module)


def exercises_of(lesson: str) -> list[str]:
    """The names of ``lesson``'s exercises, in the order they were registered."""
    _load()
    return [name for name, exercise in EXERCISES.items() if lesson_of(exercise) == lesson]
