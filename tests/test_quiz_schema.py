"""The quiz file format: good files load, every kind of malformed file is rejected with a precise message,
and learners' answers are read however they spell a shape or a number."""

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dpcourse.quiz import QuizFormatError, parse_file
from dpcourse.quiz.answers import parse_number, parse_shape

VALID = {
    "id": "02-example",
    "kind": "choice",
    "prompt": "How many rows?",
    "options": ["3, 3, 3, 1", "3, 3, 2, 2"],
    "answer": "3, 3, 3, 1",
    "explanation": "torch.chunk.",
    "experiment": "ten_rows_on_four_devices",
    "sources": [
        "article: DataParallel basics in PyTorch - Deep Dive",
        "torch/nn/parallel/_functions.py: Scatter.forward",
        "pytorch/pytorch#15161",
    ],
}


def toml_question(fields: dict) -> str:
    """One [[question]] table; JSON strings, numbers and arrays of them are valid TOML values."""
    return "[[question]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())


def write(tmp_path: Path, *questions: dict, name: str = "02_scatter.toml") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(map(toml_question, questions)), encoding="utf-8")
    return path


def changed(**changes) -> dict:
    """VALID with ``changes`` applied; a change to ``None`` removes the field."""
    fields = {**VALID, **changes}
    return {key: value for key, value in fields.items() if value is not None}


def test_a_valid_file_loads_with_the_lesson_taken_from_its_name(tmp_path):
    number = changed(id="02-number", kind="number", answer=3, tolerance=0.5, options=None)
    shape = changed(id="02-shape", kind="shape", answer="torch.Size([4])", options=None)
    choice, number, shape = parse_file(write(tmp_path, VALID, number, shape))
    assert (choice.lesson, choice.answer, choice.options) == ("02_scatter", "3, 3, 3, 1", tuple(VALID["options"]))
    assert (number.answer, number.tolerance, shape.answer) == (3.0, 0.5, (4,))


def test_a_discussion_is_one_text_or_one_per_revealing_block_and_clues_a_list(tmp_path):
    once = changed(id="02-once", discussion="\nThe fourth device sits idle.\n", clues=["sits idle"])
    twice = changed(id="02-twice", discussion=["First block.", ""])
    once, twice, plain = parse_file(write(tmp_path, once, twice, changed(id="02-plain")))
    assert (once.discussion, once.clues, once.discussion_of()) == (("The fourth device sits idle.",), ("sits idle",),
                                                                   "The fourth device sits idle.")
    assert (twice.discussion_of(1), twice.discussion_of(2), plain.discussion_of(), plain.clues) == ("First block.", "",
                                                                                                    "", ())
    with pytest.raises(ValueError, match=r"02-twice has 2 discussion part\(s\) .* use part=1 to 2"):
        twice.discussion_of(3)


MALFORMED = {
    "missing field": (changed(explanation=None), "missing field 'explanation'"),
    "unknown field": (changed(hint="think"), "unknown field 'hint'"),
    "answer not an option": (changed(answer="4, 3, 3"), "answer '4, 3, 3' is not among the options"),
    "answer as an index": (changed(answer=1), "must be the text of the correct option, not its index"),
    "one option": (changed(options=["3"], answer="3"), "needs 'options': a list of two or more"),
    "repeated option": (changed(options=["a", "a"], answer="a"), "'options' has the same text twice"),
    "unknown experiment": (changed(experiment="nope"), "unknown experiment 'nope'"),
    "audit claim id": (changed(sources=["001-8"]), "source '001-8' is an audit claim id"),
    "audit seed id": (changed(sources=["S000-1"]), "source 'S000-1' is an audit claim id"),
    "unknown article": (changed(sources=["article: Some blog"]), "unknown article 'Some blog'"),
    "unknown source format": (changed(sources=["the docs"]), "source 'the docs' has an unknown format"),
    "no sources": (changed(sources=[]), "'sources' must be a non-empty list"),
    "unknown kind": (changed(kind="essay"), "kind 'essay' is not one of"),
    "options on a number": (changed(kind="number", answer=3), "'options' is only for kind = 'choice'"),
    "tolerance on a choice": (changed(tolerance=0.1), "'tolerance' is only for kind = 'number'"),
    "negative tolerance": (changed(kind="number", answer=3, options=None, tolerance=-1), "tolerance -1"),
    "text for a number": (changed(kind="number", answer="three", options=None), "must be a number"),
    "not a shape": (changed(kind="shape", answer="(a, b)", options=None), "is not a shape"),
    "id from another lesson": (changed(id="03-example"), "must look like '02-short-name'"),
    "empty prompt": (changed(prompt="  "), "'prompt' must be a non-empty string"),
    "discussion not text": (changed(discussion=3), "'discussion' must be Markdown text, or a list of texts"),
    "discussion all empty": (changed(discussion=["", " "]), "'discussion' must be Markdown text, or a list"),
    "clues not a list": (changed(clues="sits idle"), "'clues' must be a list of non-empty strings"),
    "an empty clue": (changed(clues=["sits idle", ""]), "'clues' must be a list of non-empty strings"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_question_is_rejected_naming_file_question_and_problem(tmp_path, case):
    question, problem = MALFORMED[case]
    path = write(tmp_path, question)
    with pytest.raises(QuizFormatError) as raised:
        parse_file(path)
    message = str(raised.value)
    assert str(path) in message
    assert f"question {question['id']!r} (#1)" in message
    assert problem in message


def test_every_problem_of_every_question_is_reported_at_once(tmp_path):
    path = write(tmp_path, VALID, changed(id="02-second", answer="9"), changed(id=None, experiment="nope"))
    with pytest.raises(QuizFormatError) as raised:
        parse_file(path)
    lines = str(raised.value).splitlines()
    assert len(lines) == 3
    assert "question '02-second' (#2): answer '9' is not among the options" in lines[0]
    assert "question #3 (no id): missing field 'id'" in lines[1]
    assert "question #3 (no id): unknown experiment 'nope'" in lines[2]


def test_a_duplicate_id_is_rejected(tmp_path):
    with pytest.raises(QuizFormatError, match=r"question '02-example' \(#2\): duplicate id '02-example'"):
        parse_file(write(tmp_path, VALID, VALID))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[question]]\nid = ", "not valid TOML"),
        ("title = 'Scatter'\n", "unknown top-level key(s) ['title']"),
        ("# nothing yet\n", "no questions; write each one as a [[question]] table"),
        ("question = [1]\n", "question #1: write each question as a [[question]] table"),
    ],
)
def test_a_malformed_file_is_rejected_naming_the_file(tmp_path, text, problem):
    path = tmp_path / "02_scatter.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(QuizFormatError) as raised:
        parse_file(path)
    assert str(path) in str(raised.value) and problem in str(raised.value)


@pytest.mark.parametrize("spelling", ["(4,)", "[4]", "4", "torch.Size([4])", " ( 4 , ) ", [4], (4,), torch.Size([4])])
def test_every_spelling_of_a_shape_is_accepted(spelling):
    assert parse_shape(spelling) == (4,)


@pytest.mark.parametrize("spelling", ["()", "[]", "torch.Size([])", (), torch.Size([])])
def test_the_shape_of_a_scalar_is_the_empty_tuple(spelling):
    assert parse_shape(spelling) == ()


@pytest.mark.parametrize("spelling", ["", "abc", "(-1,)", "(2.5,)", "4x3", 4, [True], None])
def test_what_is_not_a_shape_is_refused_with_a_hint(spelling):
    with pytest.raises(ValueError, match=r"shape"):
        parse_shape(spelling)


@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=5))
def test_shapes_printed_by_python_or_torch_read_back(sizes):
    shape = tuple(sizes)
    for printed in (str(shape), str(list(shape)), str(torch.Size(shape)), repr(torch.Size(shape))):
        assert parse_shape(printed) == shape
    if shape:
        assert parse_shape(", ".join(map(str, shape))) == shape


@pytest.mark.parametrize(("text", "number"), [("3", 3.0), ("0.25", 0.25), ("1/4", 0.25), ("1e-3", 0.001), (" 2 ", 2.0)])
def test_numbers_are_read_as_decimals_or_fractions(text, number):
    assert parse_number(text) == number


@pytest.mark.parametrize("text", ["", "three", "1/0", True])
def test_what_is_not_a_number_is_refused_with_a_hint(text):
    with pytest.raises(ValueError, match="not a number"):
        parse_number(text)


NOT_FINITE = ["1e999", "-1e999", "1e999999999", "inf", "nan", "1e308/1e-308", 10**400, float("inf")]


@pytest.mark.parametrize("text", NOT_FINITE)
def test_an_overflowing_or_infinite_number_is_refused_with_a_hint(text):
    with pytest.raises(ValueError, match=r"not a (finite )?number.* Type a number such as 3"):
        parse_number(text)


def test_a_number_question_accepts_answers_within_its_tolerance(tmp_path):
    (question,) = parse_file(write(tmp_path, changed(kind="number", answer=0.25, tolerance=0.01, options=None)))
    assert question.accepts("1/4") and question.accepts("0.259") and not question.accepts("0.27")
    assert question.answer_text == "0.25 (± 0.01)"


def test_a_choice_question_refuses_text_that_is_not_an_option(tmp_path):
    (question,) = parse_file(write(tmp_path, VALID))
    assert question.accepts("3, 3, 3, 1") and not question.accepts("3, 3, 2, 2")
    with pytest.raises(ValueError, match="not one of the options"):
        question.accepts("four")
