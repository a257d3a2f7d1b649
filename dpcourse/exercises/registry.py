"""Every exercise of the course by name, and ``check(name, function)``, the call a lesson's check cell makes.

Each lesson's exercises module (``dpcourse.course``: ``lesson.exercises_module``) ends with
``EXERCISES = (...)``, as its quiz experiments module ends with ``EXPERIMENTS = (...)``; both are collected
by a ``course.LessonRegistry`` the first time one is looked up.
"""

from collections.abc import Callable

from ..course import LessonRegistry
from ..progress import Progress
from .check import NOT_ATTEMPTED, Exercise, Report, run

EXERCISES: LessonRegistry[Exercise] = LessonRegistry(
    "EXERCISES", lambda lesson: lesson.exercises_module, lambda exercise: exercise.name, "exercise")


def check(name: str, function: Callable) -> Report:
    """Run the learner's ``function`` through exercise ``name``'s cases; the report shows itself in the notebook.

    A check of a function the learner wrote (not an untouched stub) is recorded in their progress file
    (``dpcourse.progress``), passed or not, so that ``ProgressSummary`` can count the exercises passed.
    """
    exercise = EXERCISES[name]
    report = run(exercise, function)
    if report.status != NOT_ATTEMPTED:
        Progress().record_exercise(name, EXERCISES.lesson_of(name).name, report.passed)
    return report


def exercises_of(lesson: str) -> list[str]:
    """The names of ``lesson``'s exercises, in their module's order."""
    return EXERCISES.of(lesson)
