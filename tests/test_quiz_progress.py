"""The progress file: where it lives, that only a submitted answer writes it, atomic saves, unreadable files set
aside and reported, the per-lesson summary widget and the instructor's CSV export."""

import csv
import json
from datetime import datetime
from pathlib import Path

import pytest

import dpcourse.quiz.progress as progress_module
from dpcourse.quiz import LESSONS, Progress, ProgressSummary, all_questions, ask, ask_lesson, export_csv, find_question
from dpcourse.quiz.report import CSV_COLUMNS, LessonCounts

ROOT = Path(__file__).resolve().parent.parent


def test_the_path_is_the_argument_else_the_environment_else_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DPCOURSE_PROGRESS", raising=False)
    default = Progress().path
    assert default == tmp_path / "home" / ".dpcourse" / "progress.json"
    assert not default.is_relative_to(ROOT)
    monkeypatch.setenv("DPCOURSE_PROGRESS", str(tmp_path / "from-env.json"))
    assert Progress().path == tmp_path / "from-env.json"
    assert Progress(tmp_path / "given.json").path == tmp_path / "given.json"


def test_showing_every_quiz_and_the_summary_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DPCOURSE_PROGRESS", raising=False)
    shown = [ask_lesson(lesson) for lesson in LESSONS] + [ProgressSummary()]
    for widget in shown:
        widget._repr_mimebundle_()
    assert list(tmp_path.iterdir()) == []


def test_an_answer_is_saved_atomically_and_read_back(tmp_path):
    path = tmp_path / "deeper" / "progress.json"
    question = find_question("03-counter-lost")
    recorded = Progress(path).record(question, "0", True)
    assert recorded.path == path and recorded.set_aside is None
    assert [p.name for p in path.parent.iterdir()] == ["progress.json"], "no temporary file is left behind"
    (attempt,) = Progress(path).read().questions["03-counter-lost"]["attempts"]
    assert (attempt["answer"], attempt["correct"]) == ("0", True)
    assert datetime.fromisoformat(attempt["time"]).tzinfo is not None


def test_a_failed_save_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    question = find_question("03-counter-lost")
    Progress(path).record(question, "0", True)
    before = path.read_text()

    def crash(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(progress_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        Progress(path).record(question, "1", False)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]


def test_widgets_sharing_a_file_keep_each_others_answers(tmp_path):
    path = tmp_path / "progress.json"
    first, second = ask("03-counter-lost", Progress(path)), ask("03-list-shared", Progress(path))
    for quiz, answer in ((first, "0"), (second, "6"), (first, "1")):
        quiz.answer_box.value = answer
        quiz.submit_button.click()
    answers = Progress(path).read().questions
    assert [a["answer"] for a in answers["03-counter-lost"]["attempts"]] == ["0", "1"]
    assert [a["answer"] for a in answers["03-list-shared"]["attempts"]] == ["6"]


UNREADABLE = {"bad json": "{not json", "wrong layout": "[1, 2]", "old version": '{"version": 0}', "a directory": None}


@pytest.mark.parametrize("how", UNREADABLE)
def test_an_unreadable_file_is_set_aside_and_the_learner_told(tmp_path, how):
    path = tmp_path / "progress.json"
    if UNREADABLE[how] is None:
        path.mkdir()
    else:
        path.write_text(UNREADABLE[how])
    assert Progress(path).read().problem is not None
    ProgressSummary(Progress(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.json"], "reading never moves the file"

    quiz = ask("03-counter-lost", Progress(path))
    quiz.answer_box.value = "0"
    quiz.submit_button.click()
    (kept,) = tmp_path.glob("progress.json.corrupt-*")
    assert "Right" in quiz.feedback.value
    assert f"It was kept as <code>{kept}</code>" in quiz.feedback.value
    assert kept.is_dir() if UNREADABLE[how] is None else kept.read_text() == UNREADABLE[how]
    assert list(Progress(path).read().questions) == ["03-counter-lost"]


def test_record_returns_the_set_aside_path_and_never_reuses_a_name(tmp_path):
    path = tmp_path / "progress.json"
    question = find_question("03-counter-lost")
    kept = []
    for _ in range(2):
        path.write_text("{not json")
        recorded = Progress(path).record(question, "0", True)
        assert "is not valid JSON" in recorded.problem
        kept.append(recorded.set_aside)
    assert len(set(kept)) == 2 and all(p.read_text() == "{not json" for p in kept)


def test_the_summary_counts_answered_correct_and_total_per_lesson(tmp_path):
    path = tmp_path / "progress.json"
    progress = Progress(path)
    summary = ProgressSummary(progress)
    totals = {lesson: sum(q.lesson == lesson for q in all_questions()) for lesson in LESSONS}
    assert summary.counts == {lesson: LessonCounts(0, 0, total) for lesson, total in totals.items()}

    for question_id, correct in [
        ("02-six-rows-four-devices", True),
        ("02-mismatched-batches", False),
        ("03-counter-lost", False),
        ("03-counter-lost", True),
    ]:
        progress.record(find_question(question_id), "x", correct)
    summary.refresh_button.click()
    assert summary.counts["02_scatter"] == LessonCounts(answered=2, correct=1, total=totals["02_scatter"])
    assert summary.counts["03_replicate"] == LessonCounts(answered=1, correct=1, total=totals["03_replicate"])
    assert f"<tr><td>02_scatter</td><td>2</td><td>1</td><td>{totals['02_scatter']}</td></tr>" in summary.table.value
    assert summary.note.value == ""


def test_the_csv_export_has_one_row_per_question(tmp_path):
    path = tmp_path / "progress.json"
    progress = Progress(path)
    progress.record(find_question("02-six-rows-four-devices"), "4", False)
    progress.record(find_question("02-six-rows-four-devices"), "3", True)
    progress.record(find_question("06-gradients-summed"), "They are summed into `model.weight.grad`", True)
    data = json.loads(path.read_text())
    data["questions"]["99-retired"] = {"lesson": "99_old", "attempts": [{"answer": "a", "correct": True, "time": "t"}]}
    path.write_text(json.dumps(data))

    written = export_csv(tmp_path / "class.csv", progress)
    with written.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [row["id"] for row in rows] == [q.id for q in all_questions()] + ["99-retired"]
    by_id = {row["id"]: row for row in rows}
    six = by_id["02-six-rows-four-devices"]
    assert [six[column] for column in CSV_COLUMNS[:5]] == ["02_scatter", "02-six-rows-four-devices", "2", "false", "3"]
    assert datetime.fromisoformat(six["last_time"]).tzinfo is not None
    assert by_id["06-gradients-summed"]["first_correct"] == "true"
    assert [by_id["00-four-steps"][c] for c in CSV_COLUMNS[2:]] == ["0", "", "", ""]


def test_the_csv_export_refuses_an_unreadable_progress_file_and_leaves_it_alone(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="Cannot export: .* is not valid JSON"):
        export_csv(tmp_path / "class.csv", Progress(path))
    assert path.read_text() == "{not json" and not (tmp_path / "class.csv").exists()
