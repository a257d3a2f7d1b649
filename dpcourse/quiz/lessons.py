"""The lessons that have quizzes, in course order (from the course's one index, ``dpcourse.course``):
``quizzes/NN_<name>.toml`` holds the questions, ``experiments/lessonNN.py`` the experiments that answer them.
"""

from ..course import LESSONS as COURSE

# The notebooks load their quiz by these names.
LESSONS: tuple[str, ...] = tuple(lesson.name for lesson in COURSE if lesson.quiz)
