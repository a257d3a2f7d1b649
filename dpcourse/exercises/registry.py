"""Every exercise of the course by name, and ``check(name, function)``, the call a lesson's check cell makes."""

import importlib
from collections.abc import Callable

from ..course import LESSONS
from .check import Exercise, Report, run

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
    """Run the learner's ``function`` through exercise ``name``'s cases; the report shows itself in the notebook."""
    _load()
    if name not in EXERCISES:
        raise KeyError(f"No exercise is called {name!r}. Known exercises: {', '.join(sorted(EXERCISES))}.")
    return run(EXERCISES[name], function)
