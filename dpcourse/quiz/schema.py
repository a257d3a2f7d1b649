"""The question format: one ``dpcourse/quizzes/<lesson>.toml`` per lesson, checked before any question is shown.

Each question is a ``[[question]]`` table::

    [[question]]
    id = "02-ten-rows-four-devices"   # unique in the course; starts with the lesson's number and "-"
    kind = "choice"                   # "choice" | "number" | "shape"
    prompt = "A batch of 10 rows is scattered over 4 devices. How many rows does each replica get?"
    options = ["3, 3, 2, 2", "3, 3, 3, 1"]   # kind = "choice" only: two or more distinct texts
    answer = "3, 3, 3, 1"             # see below
    explanation = "`torch.chunk` makes chunks of ceil(10 / 4) = 3 rows ..."
    experiment = "ten_rows_on_four_devices"  # a function registered in dpcourse.quiz.experiments*
    sources = ["article: DataParallel basics in PyTorch - Deep Dive", "torch/nn/parallel/scatter_gather.py: scatter"]

``prompt`` and ``explanation`` are plain text: a blank line starts a paragraph, `backticks` mark code and
*stars* emphasis (``widget.markup``). The three kinds, and what ``answer`` holds:

* ``"choice"``: ``answer`` is the **text** of the correct option, copied exactly (not its index: texts
  survive reordering the options, and a reviewer reads the answer without counting).
* ``"number"``: ``answer`` is a TOML number; optional ``tolerance`` (default 0) is the largest accepted
  absolute difference. The learner may type ``3``, ``0.25`` or ``1/4``.
* ``"shape"``: ``answer`` is a shape in any spelling (``"(4,)"``, ``"[4]"``, ``"4"``, ``"torch.Size([4])"`` or
  the array ``[4]``); the learner's answer is normalised the same way (``dpcourse.quiz.answers``).

``sources`` cites where the fact comes from, each entry in one of these forms:

* one of the four articles the course audits, by its title: ``"article: Why is training not starting with
  nn.DataParallel?"`` (``SEED_ARTICLES``). The audit's claim ids (``"001-7"``) are refused: they are
  bookkeeping for ``docs/seed_coverage.md`` and mean nothing to a learner;
* torch source: ``"torch/nn/parallel/_functions.py: Broadcast.backward"`` (path, optionally ``": name"``);
* a GitHub issue or pull request: ``"pytorch/pytorch#1051"``;
* a documentation page: ``"https://docs.pytorch.org/..."``.

``parse_file`` rejects a malformed file with one ``QuizFormatError`` naming the file, each bad question
and what is wrong with it.
"""

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from . import answers
from .outcome import EXPERIMENTS

KINDS = ("choice", "number", "shape")
REQUIRED = ("id", "kind", "prompt", "answer", "explanation", "experiment", "sources")
OPTIONAL = {"options": "choice", "tolerance": "number"}  # field -> the only kind that may use it

# The four articles about DataParallel that the course audits, by title (docs/seed_coverage.md maps their claims).
SEED_ARTICLES = (
    "How can PyTorch DataParallel be used with a custom model?",
    "Why is training not starting with nn.DataParallel?",
    "Pytorch Advanced Part-1 DataParallel",
    "DataParallel basics in PyTorch - Deep Dive",
)
ARTICLE = "article: "
_SEED_CLAIM = re.compile(r"^S?\d{3}-\d+$")
_TORCH_SOURCE = re.compile(r"^torch/[\w/]+\.(py|cpp|h)(: \S.*)?$")
_GITHUB_ISSUE = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")
_DOCS_PAGE = re.compile(r"^https://\S+$")
_ID = re.compile(r"^\d\d-[a-z0-9]+(-[a-z0-9]+)*$")


class QuizFormatError(ValueError):
    """A quiz TOML file does not follow the format in ``dpcourse.quiz.schema``."""


@dataclasses.dataclass(frozen=True)
class Question:
    """One checked question. ``answer`` is the option text, a float, or a shape tuple, by ``kind``."""

    lesson: str
    id: str
    kind: str
    prompt: str
    answer: str | float | tuple[int, ...]
    explanation: str
    experiment: str
    sources: tuple[str, ...]
    options: tuple[str, ...] = ()
    tolerance: float = 0.0

    def accepts(self, response: Any) -> bool:
        """Whether ``response`` (the learner's text, or an experiment's measured value) is the answer.

        Raises ``ValueError`` with a hint when ``response`` cannot be read as this kind of answer.
        """
        if self.kind == "choice":
            if response not in self.options:
                raise ValueError(f"{response!r} is not one of the options: pick one of {list(self.options)}.")
            return response == self.answer
        if self.kind == "number":
            return math.isclose(answers.parse_number(response), self.answer, rel_tol=1e-9, abs_tol=self.tolerance)
        return answers.parse_shape(response) == self.answer

    @property
    def answer_text(self) -> str:
        """The answer as the learner would write it."""
        if self.kind == "shape":
            return answers.format_shape(self.answer)
        if self.kind == "number":
            return f"{self.answer:g}" + (f" (± {self.tolerance:g})" if self.tolerance else "")
        return self.answer


def parse_file(path: str | Path) -> list[Question]:
    """Read and check one lesson file; the lesson is the file name without ``.toml`` (``02_scatter``)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise QuizFormatError(f"{path}: not valid TOML: {error}") from None
    unknown = sorted(set(data) - {"question"})
    if unknown:
        raise QuizFormatError(f"{path}: unknown top-level key(s) {unknown}; a lesson file holds only [[question]].")
    tables = data.get("question")
    if not isinstance(tables, list) or not tables:
        raise QuizFormatError(f"{path}: no questions; write each one as a [[question]] table.")
    problems, questions, seen = [], [], set()
    for number, table in enumerate(tables, start=1):
        if not isinstance(table, dict):
            problems.append(f"{path}: question #{number}: write each question as a [[question]] table")
            continue
        name = f"question {table.get('id')!r} (#{number})" if "id" in table else f"question #{number} (no id)"
        errors = _check(table, path.stem)
        if table.get("id") in seen:
            errors.append(f"duplicate id {table['id']!r}: ids must be unique")
        seen.add(table.get("id"))
        problems += [f"{path}: {name}: {error}" for error in errors]
        if not errors:
            questions.append(_build(table, path.stem))
    if problems:
        raise QuizFormatError("\n".join(problems))
    return questions


def _check(table: dict[str, Any], lesson: str) -> list[str]:
    """Every problem with one question table, as sentences (empty when it is well formed)."""
    errors = [f"missing field {field!r}" for field in REQUIRED if field not in table]
    allowed = set(REQUIRED) | set(OPTIONAL)
    errors += [f"unknown field {field!r} (allowed: {sorted(allowed)})" for field in table if field not in allowed]
    for field in ("id", "prompt", "explanation", "experiment"):
        if field in table and not (isinstance(table[field], str) and table[field].strip()):
            errors.append(f"{field!r} must be a non-empty string")
    if isinstance(table.get("id"), str) and not (_ID.match(table["id"]) and table["id"][:2] == lesson[:2]):
        errors.append(f"id {table['id']!r} must look like '{lesson[:2]}-short-name' (lesson number, lowercase words)")
    if isinstance(table.get("experiment"), str) and table["experiment"] not in EXPERIMENTS:
        errors.append(f"unknown experiment {table['experiment']!r}; define it in dpcourse/quiz/experiments*.py")
    errors += _check_sources(table.get("sources"))
    kind = table.get("kind")
    if "kind" in table and kind not in KINDS:
        errors.append(f"kind {kind!r} is not one of {list(KINDS)}")
    for field, only_kind in OPTIONAL.items():
        if field in table and kind in KINDS and kind != only_kind:
            errors.append(f"{field!r} is only for kind = {only_kind!r}, not {kind!r}")
    if kind in KINDS and "answer" in table:
        errors += {"choice": _check_choice, "number": _check_number, "shape": _check_shape}[kind](table)
    return errors


def _check_sources(sources: Any) -> list[str]:
    if sources is None:
        return []
    if not isinstance(sources, list) or not sources:
        return ["'sources' must be a non-empty list of strings"]
    return [_source_problem(source) for source in sources if _source_problem(source)]


def _source_problem(source: Any) -> str | None:
    if not isinstance(source, str):
        return f"source {source!r} must be a string"
    if _SEED_CLAIM.match(source):
        return (f"source {source!r} is an audit claim id, which learners cannot look up; cite the article by its "
                f"title instead, e.g. '{ARTICLE}{SEED_ARTICLES[1]}'")
    if source.startswith(ARTICLE):
        title = source.removeprefix(ARTICLE)
        known = title in SEED_ARTICLES
        return None if known else f"unknown article {title!r}; the audited ones are {list(SEED_ARTICLES)}"
    if any(pattern.match(source) for pattern in (_TORCH_SOURCE, _GITHUB_ISSUE, _DOCS_PAGE)):
        return None
    return (
        f"source {source!r} has an unknown format; use an article ('{ARTICLE}<title>'), a torch source "
        f"('torch/nn/parallel/_functions.py: Broadcast.backward'), an issue ('pytorch/pytorch#1051') or an https:// URL"
    )


def _check_choice(table: dict[str, Any]) -> list[str]:
    options, answer = table.get("options"), table["answer"]
    if not (isinstance(options, list) and len(options) >= 2 and all(isinstance(o, str) and o for o in options)):
        return ["kind = 'choice' needs 'options': a list of two or more non-empty strings"]
    if len(set(options)) != len(options):
        return ["'options' has the same text twice"]
    if isinstance(answer, int):
        return [f"answer {answer!r} must be the text of the correct option, not its index"]
    if answer not in options:
        return [f"answer {answer!r} is not among the options {options}"]
    return []


def _check_number(table: dict[str, Any]) -> list[str]:
    errors = []
    if isinstance(table["answer"], bool) or not isinstance(table["answer"], (int, float)):
        errors.append(f"answer {table['answer']!r} must be a number for kind = 'number'")
    tolerance = table.get("tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0:
        errors.append(f"tolerance {tolerance!r} must be a number >= 0")
    return errors


def _check_shape(table: dict[str, Any]) -> list[str]:
    try:
        answers.parse_shape(table["answer"])
    except ValueError:
        return [f'answer {table["answer"]!r} is not a shape; write it like "(4,)", "[2, 3]" or "()"']
    return []


def _build(table: dict[str, Any], lesson: str) -> Question:
    kind = table["kind"]
    answer = table["answer"]
    if kind == "number":
        answer = float(answer)
    elif kind == "shape":
        answer = answers.parse_shape(answer)
    return Question(
        lesson=lesson,
        id=table["id"],
        kind=kind,
        prompt=table["prompt"],
        answer=answer,
        explanation=table["explanation"],
        experiment=table["experiment"],
        sources=tuple(table["sources"]),
        options=tuple(table.get("options", ())),
        tolerance=float(table.get("tolerance", 0.0)),
    )
