"""Every exercise of the course by name, and ``check(name, function)``, the call a lesson's check cell makes."""

import importlib
from collections.abc import Callable

from .check import Exercise, Report, run

EXERCISES: dict[str, Exercise] = {}
# Imported on the first check, so that importing dpcourse.exercises stays cheap.
LESSON_MODULES = [
    "dpcourse.exercises.lesson01", "dpcourse.exercises.lesson02", "dpcourse.exercises.lesson03",
    "dpcourse.exercises.lesson04", "dpcourse.exercises.lesson05", "dpcourse.exercises.lesson06",
    "dpcourse.exercises.lesson07", "dpcourse.exercises.lesson08", "dpcourse.exercises.lesson09",
    "dpcourse.exercises.lesson10", "dpcourse.exercises.lesson11", "dpcourse.exercises.capstone",
    "dpcourse.exercises.lesson13", "dpcourse.exercises.lesson14", "dpcourse.exercises.lesson15",
    "dpcourse.exercises.lesson16", "dpcourse.exercises.lesson17",
]


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
