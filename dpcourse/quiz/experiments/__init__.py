"""The quiz experiments, one module per lesson, and the registry through which a question names its experiment.

``lessonNN.py`` holds the experiments of ``dpcourse/quizzes/NN_<name>.toml`` and nothing else: each is a function
with no arguments that runs dpcourse for real and returns an ``Outcome`` (``dpcourse.quiz.outcome``). A module
ends with ``EXPERIMENTS = (...)``, the functions its lesson's questions use, and a question says
``experiment = "<function name>"``. Helpers that several lessons share are in ``dpcourse.quiz.lab``; a helper or
a small ``nn.Module`` that one lesson uses stays in that lesson's module.

Adding a lesson's experiments (say lesson 13, ``quizzes/13_collectives.toml``):

1. write ``lesson13.py`` with the experiment functions, each with a docstring, and end it with
   ``EXPERIMENTS = (first_experiment, second_experiment)`` (the same pattern as the exercises' ``EXERCISES``);
2. give its record in ``dpcourse.course.LESSONS`` ``quiz=True`` (the default): ``EXPERIMENTS`` imports
   ``lessonNN`` for each lesson with a quiz, the first time an experiment is looked up.

``tests/test_quiz_bank.py`` checks that every lesson with a quiz has its module, that every
``experiment = "..."`` in lesson NN's file names a function in ``lessonNN.EXPERIMENTS``, and that every such
function is used there. A name used twice in the course is refused when the experiments are loaded.
"""

from ...course import LessonRegistry
from ..outcome import Experiment, Outcome

# Lesson NN's questions are quizzes/NN_<name>.toml, its experiments lessonNN.py (dpcourse.course), loaded on first use.
EXPERIMENTS: LessonRegistry[Experiment] = LessonRegistry(
    "EXPERIMENTS", lambda lesson: lesson.experiments_module, lambda function: function.__name__, "quiz experiment")


def run_experiment(name: str) -> Outcome:
    """Run the experiment called ``name`` and return its ``Outcome``."""
    return EXPERIMENTS[name]()
