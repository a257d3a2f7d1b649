"""The learner's answers, kept in one small JSON file outside the repository.

Where: the ``path`` argument, else the ``DPCOURSE_PROGRESS`` environment variable, else
``~/.dpcourse/progress.json``. The file is only ever **written when the learner submits an answer** or runs
the check of an exercise they wrote: importing dpcourse, showing a quiz and running an untouched lesson top to
bottom write nothing.

How it is kept safe:

* each answer is read, added and written back while holding a lock (``filelock``, on the hidden file
  ``.progress.json.lock`` beside it), so two notebooks answering at once both keep their answers: without
  the lock, each would read the old file and the second write would drop the first one's answer;
* every write goes to a temporary file in the same directory, then ``os.replace`` swaps it in, so a
  crash mid-write leaves the old file whole (a rename within one directory is atomic);
* a symlinked progress file (say, into a synced folder) stays a symlink: the write goes to its target;
* a file written by a **newer** dpcourse (a higher ``version``) is never touched: answers are not saved
  and ``Recorded.saved`` is False, so the widget can say so;
* any other file that cannot be read (bad JSON, an unexpected layout or field type, no permission) is never
  overwritten: on the next answer it is renamed to ``progress.json.corrupt-<timestamp>``, a new file is
  started, and ``record`` says so in ``Recorded.set_aside`` so the widget can tell the learner.

The layout::

    {"version": 1, "questions": {"02-...": {"lesson": "02_scatter",
        "attempts": [{"answer": "3, 3, 3, 1", "correct": true, "time": "2025-01-31T12:00:00+00:00"}]}},
     "exercises": {"chunk_sizes": {"lesson": "02_scatter",
        "checks": [{"passed": false, "time": "..."}, {"passed": true, "time": "..."}]}}}

``exercises`` holds each run of a check that the learner had attempted (``dpcourse.exercises.check``; an untouched
stub records nothing). Files without it, written before it existed, read as having no exercise runs.
"""

import dataclasses
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import filelock


class Question(Protocol):
    """What the file keeps of a quiz question (``dpcourse.quiz.Question``): its id and its lesson."""

    id: str
    lesson: str


ENV_VAR = "DPCOURSE_PROGRESS"
VERSION = 1
LOCK_TIMEOUT_S = 30
# Each attempt's fields and the JSON type they must have: a string "false" must not count as right.
ATTEMPT_FIELDS = {"answer": (str, "a string"), "correct": (bool, "true or false"), "time": (str, "a string")}


def default_path() -> Path:
    """``$DPCOURSE_PROGRESS`` if set, else ``~/.dpcourse/progress.json`` (in the home directory, never the repo)."""
    return Path(os.environ.get(ENV_VAR) or Path.home() / ".dpcourse" / "progress.json").expanduser()


@dataclasses.dataclass
class Snapshot:
    """What the progress file holds now: ``questions`` by id, or ``problem`` saying why it could not be read.

    ``newer`` is True when the file was written by a newer dpcourse: it must be kept as it is.
    """

    questions: dict[str, dict[str, Any]]
    problem: str | None = None
    newer: bool = False
    exercises: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Recorded:
    """The result of saving one answer: where, whether it was ``saved``, and where an unreadable file went."""

    path: Path
    set_aside: Path | None = None
    problem: str | None = None
    saved: bool = True


class Progress:
    """The progress file at ``path`` (see the module docstring for the default). Creating one reads nothing."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = default_path() if path is None else Path(path).expanduser()

    @property
    def target(self) -> Path:
        """The file that is written: ``path`` itself, or what it links to when it is a symlink."""
        return Path(os.path.realpath(self.path))

    def read(self) -> Snapshot:
        """The recorded answers; an unreadable file gives an empty snapshot with ``problem`` set (nothing moves)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Snapshot({})
        except (OSError, UnicodeDecodeError) as error:
            return Snapshot({}, f"{self.path} could not be read ({error})")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:  # JSONDecodeError, too many digits, too deeply nested
            return Snapshot({}, f"{self.path} is not valid JSON ({error})")
        version = data.get("version") if isinstance(data, dict) else None
        if type(version) is int and version > VERSION:
            newer = f"{self.path} was written by a newer dpcourse (file version {version}, this one reads {VERSION})"
            return Snapshot({}, newer, newer=True)
        layout_problem = _layout_problem(data)
        if layout_problem:
            return Snapshot({}, f"{self.path} is not a dpcourse progress file ({layout_problem})")
        return Snapshot(data["questions"], exercises=data.get("exercises", {}))

    def record(self, question: Question, answer: str, correct: bool) -> Recorded:
        """Append one attempt at ``question`` and save the file atomically, holding the lock throughout."""
        def add(questions: dict, _exercises: dict) -> None:
            entry = questions.setdefault(question.id, {"lesson": question.lesson, "attempts": []})
            entry["attempts"].append({"answer": answer, "correct": correct, "time": now()})

        return self._change(add)

    def record_exercise(self, name: str, lesson: str, passed: bool) -> Recorded:
        """Append one run of exercise ``name``'s check (of ``lesson``), under the same lock as the answers."""
        def add(_questions: dict, exercises: dict) -> None:
            entry = exercises.setdefault(name, {"lesson": lesson, "checks": []})
            entry["checks"].append({"passed": passed, "time": now()})

        return self._change(add)

    def _change(self, change) -> Recorded:
        """Read the file, ``change(questions, exercises)`` in place, and save it atomically, holding the lock."""
        target = self.target
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(target.with_name(f".{target.name}.lock"), timeout=LOCK_TIMEOUT_S)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise RuntimeError(
                f"Another process has held the lock {lock.lock_file} for {LOCK_TIMEOUT_S} s; "
                "submit the answer again once the other notebook is idle."
            ) from None
        try:
            snapshot = self.read()
            if snapshot.newer:
                return Recorded(self.path, None, snapshot.problem, saved=False)
            set_aside = self._set_aside(target) if snapshot.problem else None
            change(snapshot.questions, snapshot.exercises)
            _write(target, {"version": VERSION, "questions": snapshot.questions, "exercises": snapshot.exercises})
            return Recorded(self.path, set_aside, snapshot.problem)
        finally:
            lock.release()

    @staticmethod
    def _set_aside(target: Path) -> Path:
        """Rename the unreadable file to ``<name>.corrupt-<timestamp>`` (numbered if that exists too)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = target.with_name(f"{target.name}.corrupt-{stamp}")
        number = 1
        while kept.exists():
            number += 1
            kept = target.with_name(f"{target.name}.corrupt-{stamp}-{number}")
        os.replace(target, kept)
        return kept


def _write(target: Path, data: dict[str, Any]) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def now() -> str:
    """The current time in UTC, ISO 8601 to the second: ``2025-01-31T12:00:00+00:00``."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _layout_problem(data: Any) -> str | None:
    """Why ``data`` is not the layout in the module docstring (naming the field), or None."""
    version = data.get("version") if isinstance(data, dict) else None
    if type(version) is not int or version != VERSION or not isinstance(data.get("questions"), dict):
        return f'expected {{"version": {VERSION}, "questions": {{...}}}}'
    exercises = data.get("exercises", {})
    if not isinstance(exercises, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("lesson"), str) and isinstance(e.get("checks"), list)
            and all(isinstance(c, dict) and type(c.get("passed")) is bool for c in e["checks"])
            for e in exercises.values()):
        return "'exercises' must map each name to a 'lesson' and a list of 'checks', each with 'passed': true/false"
    for question_id, entry in data["questions"].items():
        attempts = entry.get("attempts") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("lesson"), str) or not isinstance(attempts, list):
            return f"the entry for {question_id!r} needs a 'lesson' and a list of 'attempts'"
        for number, attempt in enumerate(attempts, start=1):
            if not (isinstance(attempt, dict) and ATTEMPT_FIELDS.keys() <= attempt.keys()):
                return f"attempt {number} at {question_id!r} lacks 'answer', 'correct' or 'time'"
            for field, (kind, described) in ATTEMPT_FIELDS.items():
                if type(attempt[field]) is not kind:
                    return (
                        f"{field!r} in attempt {number} at {question_id!r} must be {described}, "
                        f"not {json.dumps(attempt[field])}"
                    )
    return None
