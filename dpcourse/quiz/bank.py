"""The question bank: the lesson files in ``dpcourse/quizzes/``, loaded and checked with ``schema.parse_file``."""

from importlib import resources
from pathlib import Path

from .lessons import LESSONS
from .schema import Question, parse_file


def lesson_file(lesson: str) -> Path:
    """The TOML file of ``lesson`` (one of ``LESSONS``), shipped inside the package."""
    if lesson not in LESSONS:
        raise ValueError(f"Unknown lesson {lesson!r}. The lessons are: {', '.join(LESSONS)}.")
    return Path(str(resources.files("dpcourse") / "quizzes" / f"{lesson}.toml"))


def load_lesson(lesson: str) -> list[Question]:
    """The questions of ``lesson`` (e.g. ``"02_scatter"``), in file order, checked against the schema."""
    return parse_file(lesson_file(lesson))


def all_questions() -> list[Question]:
    """Every question of every lesson, in course order.

    Ids are unique across the course: each file's ids are unique and start with its lesson number.
    """
    return [question for lesson in LESSONS for question in load_lesson(lesson)]


def find_question(question_id: str) -> Question:
    """The question with id ``question_id``: only its lesson's file (the id's number) is read."""
    lessons = [lesson for lesson in LESSONS if question_id[:3] == f"{lesson[:2]}-"]
    for question in (question for lesson in lessons for question in load_lesson(lesson)):
        if question.id == question_id:
            return question
    raise KeyError(f"No question with id {question_id!r}. Ids start with their lesson number, e.g. '02-...'.")
