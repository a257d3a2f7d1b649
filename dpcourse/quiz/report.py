"""Summaries of the progress file: per-lesson counts (and a widget showing them), and a CSV for instructors.

Both judge by one rule. A quiz counts as right when the learner's **first** answer was: a wrong answer reveals
the right one, so a second try shows what the learner read, not what they knew. An exercise counts as passed when
its **latest** check passed: the function in the notebook now is the one that passes or fails, so code changed
after a pass and failing since is shown as failing.
"""

import csv
import dataclasses
import html
from pathlib import Path

import ipywidgets as widgets

from ..course import LESSONS as COURSE
from ..progress import Progress, Snapshot
from ..ui.controls import NEEDS_KERNEL, kernel_gone_line
from .bank import all_questions
from .schema import Question

CSV_COLUMNS = ("kind", "lesson", "id", "attempts", "first_correct", "last_answer", "last_time")


@dataclasses.dataclass(frozen=True)
class LessonCounts:
    """One lesson: questions ``answered`` at least once, ``first_time`` (``right_first_time``), ``total``;
    exercises ``passed`` (``passing``: their latest check passed) of ``exercises``."""

    answered: int
    first_time: int
    total: int
    passed: int = 0
    exercises: int = 0


def right_first_time(attempts: list[dict]) -> bool:
    """Whether a quiz's first answer (of ``attempts``, in the order given) was right: what the summary counts."""
    return bool(attempts) and attempts[0]["correct"]


def passing(checks: list[dict]) -> bool:
    """Whether an exercise's latest check (of ``checks``, in the order run) passed: what the summary counts."""
    return bool(checks) and checks[-1]["passed"]


def lesson_counts(snapshot: Snapshot, questions: list[Question],
                  exercises: dict[str, list[str]] | None = None) -> dict[str, LessonCounts]:
    """Counts per lesson, in course order, for the lessons that have questions or ``exercises`` (names by lesson)."""
    exercises = exercises or {}
    counts = {}
    for lesson in COURSE:
        attempts = [snapshot.questions.get(q.id, {}).get("attempts", []) for q in questions if q.lesson == lesson.name]
        names = exercises.get(lesson.name, [])
        if attempts or names:
            checks = [snapshot.exercises.get(name, {}).get("checks", []) for name in names]
            counts[lesson.name] = LessonCounts(
                answered=sum(1 for a in attempts if a),
                first_time=sum(map(right_first_time, attempts)),
                total=len(attempts),
                passed=sum(map(passing, checks)),
                exercises=len(names),
            )
    return counts


def export_csv(path: str | Path, progress: Progress | None = None) -> Path:
    """Write one CSV row per question, then one per exercise: ``kind, lesson, id, attempts, first_correct,
    last_answer, last_time``.

    Every question of the course is listed (unanswered ones with 0 attempts and empty cells), then any answered
    question the bank no longer has, then every exercise the learner checked (``kind`` "exercise": its checks
    are the attempts, ``last_answer`` is "passed" or "failed"). ``first_correct`` is ``true``/``false``:
    whether the first attempt was right. The summary's rule is in the columns: a quiz's ``first_correct``, an
    exercise's ``last_answer``. Raises ``ValueError`` if the progress file cannot be read (the file is left as
    it is).
    """
    snapshot = (progress or Progress()).read()
    if snapshot.problem:
        raise ValueError(f"Cannot export: {snapshot.problem}.")
    rows = [(q.lesson, q.id) for q in all_questions()]
    known = {question_id for _, question_id in rows}
    rows += sorted((entry["lesson"], qid) for qid, entry in snapshot.questions.items() if qid not in known)
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(CSV_COLUMNS)
        for lesson, question_id in rows:
            attempts = snapshot.questions.get(question_id, {}).get("attempts", [])
            last = attempts[-1] if attempts else {}
            first_correct = str(right_first_time(attempts)).lower() if attempts else ""
            writer.writerow(["quiz", lesson, question_id, len(attempts), first_correct, last.get("answer", ""),
                             last.get("time", "")])
        for name, entry in sorted(snapshot.exercises.items(), key=lambda item: (item[1]["lesson"], item[0])):
            checks = entry["checks"]
            writer.writerow(["exercise", entry["lesson"], name, len(checks), str(checks[0]["passed"]).lower(),
                             "passed" if passing(checks) else "failed", checks[-1].get("time", "")])
    return path


class ProgressSummary(widgets.VBox):
    """Per lesson: quizzes answered, right the first time, exercises passed at their latest check; a Refresh
    button. Never writes."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress or Progress()
        self.table = widgets.HTML()
        self.note = widgets.HTML()
        self.note.add_class(NEEDS_KERNEL)  # before the cell runs, the saved state says to run it (notebooks/build.py)
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(lambda _: self.refresh())
        self.counts: dict[str, LessonCounts] = {}
        super().__init__([self.table, self.note, self.refresh_button, kernel_gone_line()])
        self.refresh()

    def __repr__(self) -> str:
        # No counts: they are the learner's, so a notebook's stored output would differ on every machine.
        return "ProgressSummary: your answers per lesson — run the cell in JupyterLab to see them"

    def refresh(self) -> None:
        """Read the progress file again and redraw the table."""
        from ..exercises.registry import exercises_of  # here: the exercises import the quiz's progress file

        snapshot = self.progress.read()
        by_lesson = {lesson.name: exercises_of(lesson.name) for lesson in COURSE if lesson.exercises}
        self.counts = lesson_counts(snapshot, all_questions(), by_lesson)
        rows = "".join(
            f"<tr><td>{lesson}</td><td>{c.answered} of {c.total}</td><td>{c.first_time}</td>"
            f"<td>{c.passed} of {c.exercises}</td></tr>"
            for lesson, c in self.counts.items()
        )
        self.table.value = (
            '<table style="border-spacing: 16px 2px; margin-left: -16px">'
            "<tr><th>lesson</th><th>quizzes answered</th><th>right the first time</th>"
            "<th>exercises passed at their latest check</th></tr>" + rows + "</table>"
        )
        if snapshot.newer:
            self.note.value = (
                f"<b>Your progress file could not be read:</b> {html.escape(snapshot.problem)}. It is left as it "
                "is; update dpcourse (<code>git pull</code>) to see and add to it."
            )
        elif snapshot.problem:
            self.note.value = (
                f"<b>Your progress file could not be read:</b> {html.escape(snapshot.problem)}. It will be kept "
                "as a <code>.corrupt-…</code> copy beside it when you next submit an answer."
            )
        else:
            self.note.value = ""
