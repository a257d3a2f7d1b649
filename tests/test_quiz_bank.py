"""The question bank as a whole: one file per lesson, enough questions in each, every experiment used, fast and
repeatable, and no import of torch's own parallel package anywhere in the quiz code or data."""

import collections
import inspect
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from dpcourse import course
from dpcourse.quiz import EXPERIMENTS, LESSONS, all_questions, load_lesson

QUESTIONS = all_questions()
QUIZ_CODE = Path(str(resources.files("dpcourse"))) / "quiz"
QUIZ_DATA = Path(str(resources.files("dpcourse"))) / "quizzes"


def test_there_is_one_file_per_lesson_and_no_other():
    assert sorted(p.stem for p in QUIZ_DATA.glob("*.toml")) == sorted(LESSONS)
    with pytest.raises(ValueError, match="Unknown lesson '12_extra'. The lessons are: 00_start_here"):
        load_lesson("12_extra")


def test_every_lesson_has_its_share_of_questions():
    per_lesson = collections.Counter(q.lesson for q in QUESTIONS)
    assert len(QUESTIONS) >= 25
    for lesson in LESSONS:
        low, high = (1, 2) if lesson in ("00_start_here", "01_one_device", "10_ddp_bridge") else (2, 99)
        assert low <= per_lesson[lesson] <= high, f"{lesson} has {per_lesson[lesson]} questions"


def test_every_kind_is_used_and_ids_are_unique_across_the_course():
    assert {q.kind for q in QUESTIONS} == {"choice", "number", "shape"}
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)


def test_every_experiment_is_used_by_a_question_and_documented():
    assert {q.experiment for q in QUESTIONS} == set(EXPERIMENTS)
    for name, function in EXPERIMENTS.items():
        assert inspect.getdoc(function), f"experiment {name} needs a docstring"


def test_each_lesson_file_uses_exactly_the_experiments_of_its_lesson_module():
    assert [lesson.experiments_module for lesson in course.LESSONS if lesson.quiz] == [
        f"dpcourse.quiz.experiments.lesson{lesson[:2]}" for lesson in LESSONS]
    for lesson in LESSONS:
        # The raw file, not the schema, so a name that does not resolve is reported here by name.
        tables = tomllib.loads((QUIZ_DATA / f"{lesson}.toml").read_text(encoding="utf-8"))["question"]
        named = [table["experiment"] for table in tables]
        assert [name for name in named if name not in EXPERIMENTS] == [], f"{lesson} names unknown experiments"
        assert sorted(named) == sorted(EXPERIMENTS.of(lesson)), f"{lesson}.toml and lesson{lesson[:2]}.py differ"


def test_the_quiz_never_names_torchs_parallel_package():
    # Experiments reach torch's wrapper as torch.nn.DataParallel only; the package itself is never imported.
    forbidden = "nn." + "parallel"
    for path in [*QUIZ_CODE.rglob("*.py"), *QUIZ_DATA.glob("*.toml")]:
        assert forbidden not in path.read_text(encoding="utf-8"), f"{path.name} mentions {forbidden}"


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_is_repeatable(name):
    # One test per experiment, so that `build.py --check NN` runs its lesson's (tests/conftest.py marks each with
    # the lesson that owns the experiment). How long each takes is the benchmark's business
    # (`python -m tests.benchmarks --only course`), not a test's.
    experiment = EXPERIMENTS[name]
    first, second = experiment().value, experiment().value
    assert first == second, f"{name} is not deterministic: {first!r} then {second!r}"


def test_choice_questions_have_three_options_and_keyed_answers_spread_over_positions():
    choice = [q for q in all_questions() if q.kind == "choice"]
    assert all(len(q.options) >= 3 for q in choice), [q.id for q in choice if len(q.options) < 3]
    positions = collections.Counter(q.options.index(q.answer) for q in choice)
    assert max(positions.values()) <= 0.4 * len(choice), positions


def test_every_question_is_asked_in_its_lesson_so_progress_totals_can_be_reached():
    lessons = Path(__file__).resolve().parent.parent / "notebooks" / "src"
    missing = []
    for question in all_questions():
        source = next(lessons.glob(f"{question.id[:2]}_*.py")).read_text()
        if f'quiz.ask("{question.id}")' not in source and "quiz.ask_lesson(" not in source:
            missing.append(question.id)
    assert missing == []
