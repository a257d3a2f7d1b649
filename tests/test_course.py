"""The course's one lesson index (dpcourse.course): it names every lesson's files and modules, and nothing else
lists the lessons."""

import importlib
import sys
import tomllib
import types
from importlib import resources
from pathlib import Path

import pytest

from dpcourse import course

ROOT = Path(__file__).resolve().parent.parent


def test_every_lesson_source_is_in_the_index_and_every_index_entry_has_its_files():
    sources = sorted(p.stem for p in (ROOT / "notebooks" / "src").glob("*.py"))
    assert sources == [lesson.name for lesson in course.LESSONS]
    for lesson in course.LESSONS:
        assert (ROOT / "notebooks" / f"{lesson.name}.ipynb").is_file()
        assert (ROOT / "notebooks" / "student" / f"{lesson.name}.ipynb").is_file()


def test_quizzes_experiments_and_exercises_are_where_the_index_says():
    quizzes = sorted(p.name for p in Path(str(resources.files("dpcourse") / "quizzes")).glob("*.toml"))
    assert quizzes == [lesson.quiz_file for lesson in course.LESSONS if lesson.quiz]
    for lesson in course.LESSONS:
        if lesson.quiz:
            assert importlib.import_module(lesson.experiments_module).EXPERIMENTS
        if lesson.exercises:
            source = (ROOT / "notebooks" / "src" / f"{lesson.name}.py").read_text()
            assert "exercises.check(" in source or "capstone" in lesson.name
            importlib.import_module(lesson.exercises_module)
        else:
            assert "exercises.check(" not in (ROOT / "notebooks" / "src" / f"{lesson.name}.py").read_text()


def test_a_lesson_is_found_by_name_or_number_and_an_unknown_one_is_named():
    assert course.lesson("14") is course.lesson("14_accumulation")
    assert course.lesson("14").marker == "lesson14"
    with pytest.raises(KeyError, match="No lesson '99'. Lessons: 00_start_here, "):
        course.lesson("99")


def test_an_installed_copy_ships_the_student_edition_for_dpcourse_open():
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = [path for pattern in data_files["share/dpcourse/lessons"] for path in ROOT.glob(pattern)]
    assert sorted(p.stem for p in shipped) == [lesson.name for lesson in course.LESSONS]


def test_pytest_marks_what_each_lesson_owns(pytestconfig):
    markers = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert {lesson.marker for lesson in course.LESSONS} <= markers


def test_a_registry_loads_each_lessons_tuple_on_first_use_and_refuses_a_name_used_twice(monkeypatch):
    def twin():
        """Runs nothing."""

    first, second = types.ModuleType("fake_lesson_01"), types.ModuleType("fake_lesson_02")
    first.THINGS, second.THINGS = (twin,), ()
    modules = {"01_one_device": "fake_lesson_01", "02_scatter": "fake_lesson_02"}
    monkeypatch.setitem(sys.modules, "fake_lesson_01", first)
    monkeypatch.setitem(sys.modules, "fake_lesson_02", second)
    things = course.LessonRegistry("THINGS", lambda lesson: modules.get(lesson.name), lambda f: f.__name__, "thing")
    assert list(things) == ["twin"] and things.lesson_of("twin").name == "01_one_device"
    assert things.of("01") == ["twin"] and things.of("02") == []
    with pytest.raises(KeyError, match="No thing is called 'other'. Known: twin"):
        things["other"]
    second.THINGS = (twin,)
    twice = course.LessonRegistry("THINGS", lambda lesson: modules.get(lesson.name), lambda f: f.__name__, "thing")
    with pytest.raises(ValueError, match="Two things are called 'twin': one in lesson 01_one_device, one in 02"):
        twice["twin"]
