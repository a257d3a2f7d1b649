"""The learner's answers, kept in one small JSON file outside the repository.

Where: the ``path`` argument, else the ``DPCOURSE_PROGRESS`` environment variable, else
``~/.dpcourse/progress.json``. The file is only ever **written when the learner submits an answer**:
importing dpcourse, showing a quiz and running a notebook top to bottom (as nbval does) write nothing.

How it is kept safe:

* every write goes to a temporary file in the same directory, then ``os.replace`` swaps it in, so a
  crash mid-write leaves the old file whole (a rename within one directory is atomic);
* the file is read again before each write, so several quiz widgets (or notebooks) share it safely;
* a file that cannot be read (bad JSON, an unexpected layout, no permission) is never overwritten: on
  the next answer it is renamed to ``progress.json.corrupt-<timestamp>``, a new file is started, and
  ``record`` says so in ``Recorded.set_aside`` so the widget can tell the learner.

The layout::

    {"version": 1, "questions": {"02-...": {"lesson": "02_scatter",
        "attempts": [{"answer": "3, 3, 3, 1", "correct": true, "time": "2025-01-31T12:00:00+00:00"}]}}}
"""

import dataclasses
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .schema import Question

ENV_VAR = "DPCOURSE_PROGRESS"
VERSION = 1


def default_path() -> Path:
    """``$DPCOURSE_PROGRESS`` if set, else ``~/.dpcourse/progress.json`` (in the home directory, never the repo)."""
    return Path(os.environ.get(ENV_VAR) or Path.home() / ".dpcourse" / "progress.json").expanduser()


@dataclasses.dataclass
class Snapshot:
    """What the progress file holds now: ``questions`` by id, or ``problem`` saying why it could not be read."""

    questions: dict[str, dict[str, Any]]
    problem: str | None = None


@dataclasses.dataclass
class Recorded:
    """The result of saving one answer: where, and the path an unreadable old file was moved to, if any."""

    path: Path
    set_aside: Path | None = None
    problem: str | None = None


class Progress:
    """The progress file at ``path`` (see the module docstring for the default). Creating one reads nothing."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = default_path() if path is None else Path(path).expanduser()

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
        except json.JSONDecodeError as error:
            return Snapshot({}, f"{self.path} is not valid JSON ({error})")
        layout_problem = _layout_problem(data)
        if layout_problem:
            return Snapshot({}, f"{self.path} is not a dpcourse progress file ({layout_problem})")
        return Snapshot(data["questions"])

    def record(self, question: Question, answer: str, correct: bool) -> Recorded:
        """Append one attempt at ``question`` and save the file atomically."""
        snapshot = self.read()
        set_aside = self._set_aside() if snapshot.problem else None
        entry = snapshot.questions.setdefault(question.id, {"lesson": question.lesson, "attempts": []})
        entry["attempts"].append({"answer": answer, "correct": correct, "time": now()})
        self._write({"version": VERSION, "questions": snapshot.questions})
        return Recorded(self.path, set_aside, snapshot.problem)

    def _set_aside(self) -> Path:
        """Rename the unreadable file to ``<name>.corrupt-<timestamp>`` (numbered if that exists too)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        number = 1
        while target.exists():
            number += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{number}")
        os.replace(self.path, target)
        return target

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise


def now() -> str:
    """The current time in UTC, ISO 8601 to the second: ``2025-01-31T12:00:00+00:00``."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _layout_problem(data: Any) -> str | None:
    """Why ``data`` is not the layout in the module docstring, or None."""
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("questions"), dict):
        return f'expected {{"version": {VERSION}, "questions": {{...}}}}'
    for question_id, entry in data["questions"].items():
        attempts = entry.get("attempts") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(entry.get("lesson"), str) or not isinstance(attempts, list):
            return f"the entry for {question_id!r} needs a 'lesson' and a list of 'attempts'"
        for attempt in attempts:
            if not (isinstance(attempt, dict) and {"answer", "correct", "time"} <= attempt.keys()):
                return f"an attempt at {question_id!r} lacks 'answer', 'correct' or 'time'"
    return None
