"""Quizzes: predict what DataParallel does, commit to an answer, then run the experiment that shows it.

    from dpcourse.quiz import ask, ask_lesson
    ask("02-ten-rows-four-devices")      # one question
    ask_lesson("02_scatter")             # all of a lesson's questions

The questions are data, ``dpcourse/quizzes/<lesson>.toml`` (format: ``dpcourse.quiz.schema``). Each
names an experiment (``experiments/lessonNN.py``) that runs dpcourse and measures the answer. Answers are saved
to a progress file only when the learner submits one (``dpcourse.progress``);
``ProgressSummary()`` shows the counts per lesson and ``export_csv(path)`` writes them for an instructor.
"""

from ..progress import Progress
from .bank import LESSONS, all_questions, find_question, load_lesson
from .experiments import EXPERIMENTS, run_experiment
from .outcome import Outcome, only_true
from .report import ProgressSummary, export_csv
from .reveal import reveal
from .schema import Question, QuizFormatError, parse_file
from .widget import LessonQuiz, QuizWidget, ask, ask_lesson

__all__ = [
    "EXPERIMENTS",
    "LESSONS",
    "LessonQuiz",
    "Outcome",
    "Progress",
    "ProgressSummary",
    "Question",
    "QuizFormatError",
    "QuizWidget",
    "all_questions",
    "ask",
    "ask_lesson",
    "export_csv",
    "find_question",
    "load_lesson",
    "only_true",
    "parse_file",
    "reveal",
    "run_experiment",
]
