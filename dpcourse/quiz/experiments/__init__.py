"""The quiz experiments, one module per lesson, and the registry through which a question names its experiment.

``lessonNN.py`` holds the experiments of ``dpcourse/quizzes/NN_<name>.toml`` and nothing else: each is a function
with no arguments that runs dpcourse for real and returns an ``Outcome`` (``dpcourse.quiz.outcome``). A module
ends with ``EXPERIMENTS = (...)``, the functions its lesson's questions use, and a question says
``experiment = "<function name>"``. Helpers that several lessons share are in ``dpcourse.quiz.lab``; a helper or
a small ``nn.Module`` that one lesson uses stays in that lesson's module.

Adding a lesson's experiments (say lesson 13, ``quizzes/13_collectives.toml``):

1. write ``lesson13.py`` with the experiment functions, each with a docstring, and end it with
   ``EXPERIMENTS = (first_experiment, second_experiment)``. Code written for the old ``@experiment``
   decorator (``quiz/experiments_lesson13.py``) converts by moving it here, deleting the decorators, importing
   ``Outcome`` and ``only_true`` from ``..outcome`` and the shared helpers from ``..lab`` under their new names,
   and listing the functions in that tuple;
2. give its record in ``dpcourse.course.LESSONS`` ``quiz=True`` (the default): ``LESSON_MODULES`` imports
   ``lessonNN`` for each lesson with a quiz.

``tests/test_quiz_bank.py`` checks that every lesson with a quiz has its module, that every
``experiment = "..."`` in lesson NN's file names a function in ``lessonNN.EXPERIMENTS``, and that every such
function is used there. A name used twice in the course is refused when this package is imported.
"""

import importlib
from collections.abc import Iterable
from types import ModuleType

from ...course import LESSONS
from ..outcome import Experiment, Outcome

# In course order: lesson NN's questions are quizzes/NN_<name>.toml, its experiments lessonNN.py (dpcourse.course).
LESSON_MODULES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(lesson.experiments_module) for lesson in LESSONS if lesson.quiz
)


def registry(modules: Iterable[ModuleType]) -> dict[str, Experiment]:
    """Every experiment of ``modules``, by function name; ``ValueError`` if two share a name."""
    experiments: dict[str, Experiment] = {}
    defined_in: dict[str, str] = {}
    for module in modules:
        for function in module.EXPERIMENTS:
            name = function.__name__
            if name in experiments:
                raise ValueError(
                    f"Two quiz experiments are called {name!r}: one in {defined_in[name]}, one in {module.__name__}. "
                    "A question names its experiment by function name: rename one of them."
                )
            experiments[name], defined_in[name] = function, module.__name__
    return experiments


EXPERIMENTS: dict[str, Experiment] = registry(LESSON_MODULES)


def run_experiment(name: str) -> Outcome:
    """Run the experiment called ``name`` and return its ``Outcome``."""
    if name not in EXPERIMENTS:
        raise KeyError(f"No experiment called {name!r}. Known experiments: {', '.join(sorted(EXPERIMENTS))}.")
    return EXPERIMENTS[name]()
