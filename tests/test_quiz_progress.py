"""The progress file: where it lives, that only a submitted answer writes it, atomic and locked saves, symlinks
kept, newer files left alone, unreadable files set aside and reported, the per-lesson summary widget and the
instructor's CSV export."""

import csv
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import torch

import dpcourse.progress as progress_module
from dpcourse import course, exercises
from dpcourse.exercises.registry import exercises_of
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
    assert sorted(p.name for p in path.parent.iterdir()) == [".progress.json.lock", "progress.json"], (
        "no temporary file is left behind; the lock file is hidden"
    )
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [".progress.json.lock", "progress.json"]


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


WRONG_TYPES = {
    "correct as a string": ("correct", "false", "'correct' in attempt 1 at '03-counter-lost' must be true or false"),
    "correct as a number": ("correct", 1, "'correct' in attempt 1 at '03-counter-lost' must be true or false"),
    "answer as a number": ("answer", 0, "'answer' in attempt 1 at '03-counter-lost' must be a string"),
    "time as null": ("time", None, "'time' in attempt 1 at '03-counter-lost' must be a string"),
}


@pytest.mark.parametrize("how", WRONG_TYPES)
def test_a_wrongly_typed_field_is_rejected_naming_the_field(tmp_path, how):
    field, value, message = WRONG_TYPES[how]
    attempt = {"answer": "0", "correct": True, "time": "2025-01-31T12:00:00+00:00", field: value}
    path = tmp_path / "progress.json"
    entry = {"lesson": "03_replicate", "attempts": [attempt]}
    path.write_text(json.dumps({"version": 1, "questions": {"03-counter-lost": entry}}))
    snapshot = Progress(path).read()
    assert snapshot.questions == {} and message in snapshot.problem
    assert not ProgressSummary(Progress(path)).counts["03_replicate"].first_time


def test_a_true_version_is_not_version_one(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text('{"version": true, "questions": {}}')
    assert "not a dpcourse progress file" in Progress(path).read().problem


def test_a_file_from_a_newer_dpcourse_is_kept_untouched_and_reported(tmp_path):
    path = tmp_path / "progress.json"
    newer = '{"version": 2, "questions": {"03-counter-lost": {"learner": "from the future"}}}'
    path.write_text(newer)
    snapshot = Progress(path).read()
    assert snapshot.newer and "written by a newer dpcourse (file version 2, this one reads 1)" in snapshot.problem
    assert "update dpcourse" in ProgressSummary(Progress(path)).note.value

    quiz = ask("03-counter-lost", Progress(path))
    quiz.answer_box.value = "0"
    quiz.submit_button.click()
    assert "Right" in quiz.feedback.value
    assert "this answer was not saved" in quiz.feedback.value and "written by a newer dpcourse" in quiz.feedback.value
    assert path.read_text() == newer and not list(tmp_path.glob("*.corrupt-*"))


def test_a_symlinked_progress_file_stays_a_symlink(tmp_path):
    target = tmp_path / "synced" / "answers.json"
    link = tmp_path / "progress.json"
    link.symlink_to(target)  # dangling until the first answer
    question = find_question("03-counter-lost")
    for answer in ("1", "0"):
        assert Progress(link).record(question, answer, answer == "0").path == link
    assert link.is_symlink() and link.resolve() == target
    attempts = json.loads(target.read_text())["questions"]["03-counter-lost"]["attempts"]
    assert [a["answer"] for a in attempts] == ["1", "0"]


def test_an_unreadable_symlinked_file_is_set_aside_beside_its_target_and_the_link_kept(tmp_path):
    target = tmp_path / "synced" / "answers.json"
    target.parent.mkdir()
    target.write_text("{not json")
    link = tmp_path / "progress.json"
    link.symlink_to(target)
    recorded = Progress(link).record(find_question("03-counter-lost"), "0", True)
    assert recorded.set_aside.parent == target.parent and recorded.set_aside.read_text() == "{not json"
    assert link.is_symlink() and list(Progress(link).read().questions) == ["03-counter-lost"]


RECORDER = """
import sys, time
from pathlib import Path
from dpcourse.quiz import Progress, find_question
path, worker, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
question, progress = find_question("03-counter-lost"), Progress(path)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
for number in range(100):
    progress.record(question, f"{worker}-{number}", False)
"""


def test_two_processes_answering_at_once_keep_all_200_answers(tmp_path):
    path, go = tmp_path / "progress.json", tmp_path / "go"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", RECORDER, str(path), name, str(go)],
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for name in "ab"
    ]
    # Both have imported dpcourse before either records, so their 100 answers each interleave.
    assert [worker.stdout.readline() for worker in workers] == ["ready\n", "ready\n"]
    go.touch()
    assert [worker.wait() for worker in workers] == [0, 0]
    answers = [a["answer"] for a in Progress(path).read().questions["03-counter-lost"]["attempts"]]
    assert sorted(answers) == sorted(f"{name}-{number}" for name in "ab" for number in range(100))


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


def test_the_summary_counts_answered_right_the_first_time_and_exercises_passed_per_lesson(tmp_path):
    path = tmp_path / "progress.json"
    progress = Progress(path)
    summary = ProgressSummary(progress)
    totals = {lesson: sum(q.lesson == lesson for q in all_questions()) for lesson in LESSONS}
    exercises_per_lesson = {lesson.name: len(exercises_of(lesson.name)) for lesson in course.LESSONS}
    names = [lesson.name for lesson in course.LESSONS]
    assert summary.counts == {name: LessonCounts(0, 0, totals.get(name, 0), 0, exercises_per_lesson[name])
                              for name in names if totals.get(name) or exercises_per_lesson[name]}

    for question_id, correct in [
        ("02-six-rows-four-devices", True),
        ("02-mismatched-batches", False),
        ("03-counter-lost", False),
        ("03-counter-lost", True),  # right after the wrong answer revealed it: not right the first time
    ]:
        progress.record(find_question(question_id), "x", correct)
    progress.record_exercise("chunk_sizes", "02_scatter", False)
    progress.record_exercise("chunk_sizes", "02_scatter", True)
    progress.record_exercise("scatter_rows", "02_scatter", False)
    summary.refresh_button.click()
    two, three = exercises_per_lesson["02_scatter"], exercises_per_lesson["03_replicate"]
    assert summary.counts["02_scatter"] == LessonCounts(2, 1, totals["02_scatter"], passed=1, exercises=two)
    assert summary.counts["03_replicate"] == LessonCounts(1, 0, totals["03_replicate"], passed=0, exercises=three)
    row = f"<tr><td>02_scatter</td><td>2 of {totals['02_scatter']}</td><td>1</td><td>1 of {two}</td></tr>"
    assert row in summary.table.value
    assert summary.note.value == ""


def test_the_summary_and_the_csv_judge_by_one_rule_first_answer_and_latest_check(tmp_path):
    """A quiz counts as right when its first answer was; an exercise as passed when its latest check passed. A
    check that fails after one that passed (the learner changed their code) shows as failed in both."""
    path = tmp_path / "progress.json"
    path.write_text(json.dumps({"version": 1, "exercises": {
        "chunk_sizes": {"lesson": "02_scatter", "checks": [{"passed": True, "time": "t1"},
                                                           {"passed": False, "time": "t2"}]},
        "scatter_rows": {"lesson": "02_scatter", "checks": [{"passed": False, "time": "t1"},
                                                            {"passed": True, "time": "t2"}]},
    }, "questions": {
        "02-six-rows-four-devices": {"lesson": "02_scatter", "attempts": [
            {"answer": "4", "correct": False, "time": "t1"}, {"answer": "3", "correct": True, "time": "t2"}]},
        "02-mismatched-batches": {"lesson": "02_scatter", "attempts": [
            {"answer": "a", "correct": True, "time": "t1"}, {"answer": "b", "correct": False, "time": "t2"}]},
    }}))
    progress = Progress(path)

    summary = ProgressSummary(progress)
    totals = sum(q.lesson == "02_scatter" for q in all_questions())
    two = len(exercises_of("02_scatter"))
    assert summary.counts["02_scatter"] == LessonCounts(2, 1, totals, passed=1, exercises=two)
    assert "<th>right the first time</th><th>exercises passed at their latest check</th>" in summary.table.value
    assert f"<td>2 of {totals}</td><td>1</td><td>1 of {two}</td>" in summary.table.value

    with export_csv(tmp_path / "class.csv", progress).open(newline="", encoding="utf-8") as file:
        by_id = {row["id"]: row for row in csv.DictReader(file)}
    assert by_id["chunk_sizes"]["last_answer"] == "failed" and by_id["scatter_rows"]["last_answer"] == "passed"
    assert by_id["02-six-rows-four-devices"]["first_correct"] == "false"
    assert by_id["02-mismatched-batches"]["first_correct"] == "true"


def test_a_check_of_written_code_is_recorded_and_an_untouched_stub_is_not(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv("DPCOURSE_PROGRESS", str(path))

    def stub(batch, n):
        raise NotImplementedError("Your code here")

    exercises.check("chunk_sizes", stub)
    assert not path.exists(), "running an untouched lesson writes nothing"
    exercises.check("chunk_sizes", lambda batch, n: [batch // n] * n)
    exercises.check("chunk_sizes", lambda batch, n: [len(c) for c in torch.arange(batch).chunk(n)])
    checks = Progress(path).read().exercises["chunk_sizes"]
    assert checks["lesson"] == "02_scatter" and [c["passed"] for c in checks["checks"]] == [False, True]


def test_the_csv_export_has_one_row_per_question(tmp_path):
    path = tmp_path / "progress.json"
    progress = Progress(path)
    progress.record(find_question("02-six-rows-four-devices"), "4", False)
    progress.record(find_question("02-six-rows-four-devices"), "3", True)
    progress.record(find_question("06-gradients-summed"), "They are summed into `model.weight.grad`", True)
    data = json.loads(path.read_text())
    data["questions"]["99-retired"] = {"lesson": "99_old", "attempts": [{"answer": "a", "correct": True, "time": "t"}]}
    path.write_text(json.dumps(data))

    progress.record_exercise("chunk_sizes", "02_scatter", False)
    progress.record_exercise("chunk_sizes", "02_scatter", True)

    written = export_csv(tmp_path / "class.csv", progress)
    with written.open(newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [row["id"] for row in rows] == [q.id for q in all_questions()] + ["99-retired", "chunk_sizes"]
    by_id = {row["id"]: row for row in rows}
    six = by_id["02-six-rows-four-devices"]
    assert [six[column] for column in CSV_COLUMNS[:6]] == ["quiz", "02_scatter", "02-six-rows-four-devices", "2",
                                                           "false", "3"]
    assert datetime.fromisoformat(six["last_time"]).tzinfo is not None
    assert by_id["06-gradients-summed"]["first_correct"] == "true"
    assert [by_id["00-four-steps"][c] for c in CSV_COLUMNS[3:]] == ["0", "", "", ""]
    exercise = by_id["chunk_sizes"]
    assert [exercise[c] for c in CSV_COLUMNS[:6]] == ["exercise", "02_scatter", "chunk_sizes", "2", "false", "passed"]


def test_the_csv_export_refuses_an_unreadable_progress_file_and_leaves_it_alone(tmp_path):
    path = tmp_path / "progress.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="Cannot export: .* is not valid JSON"):
        export_csv(tmp_path / "class.csv", Progress(path))
    assert path.read_text() == "{not json" and not (tmp_path / "class.csv").exists()
