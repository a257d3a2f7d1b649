"""The question format: one ``dpcourse/quizzes/<lesson>.toml`` per lesson, checked before any question is shown.

Each question is a ``[[question]]`` table::

    [[question]]
    id = "02-ten-rows-four-devices"   # unique in the course; starts with the lesson's number and "-"
    kind = "choice"                   # "choice" | "number" | "shape"
    prompt = "A batch of 10 rows is scattered over 4 devices. How many rows does each replica get?"
    options = ["3, 3, 2, 2", "3, 3, 3, 1"]   # kind = "choice" only: two or more distinct texts
    answer = "3, 3, 3, 1"             # see below
    explanation = "`torch.chunk` makes chunks of ceil(10 / 4) = 3 rows ..."
    experiment = "ten_rows_on_four_devices"  # a function in dpcourse/quiz/experiments/lesson02.py
    sources = ["article: DataParallel basics in PyTorch - Deep Dive", "torch/nn/parallel/scatter_gather.py: scatter"]
    discussion = '''
    Markdown that interprets the result: shown under it, once the quiz is answered (``quiz.reveal``).
    '''
    clues = ["chunk shapes: [[3, 8], [3, 8], [3, 8], [1, 8]]"]  # texts that give the answer away

``prompt`` and ``explanation`` are plain text: a blank line starts a paragraph, `backticks` mark code and
*stars* emphasis (``widget.markup``). The three kinds, and what ``answer`` holds:

* ``"choice"``: ``answer`` is the **text** of the correct option, copied exactly (not its index: texts
  survive reordering the options, and a reviewer reads the answer without counting).
* ``"number"``: ``answer`` is a TOML number; optional ``tolerance`` (default 0) is the largest accepted
  absolute difference. The learner may type ``3``, ``0.25`` or ``1/4``.
* ``"shape"``: ``answer`` is a shape in any spelling (``"(4,)"``, ``"[4]"``, ``"4"``, ``"torch.Size([4])"`` or
  the array ``[4]``); the learner's answer is normalised the same way (``dpcourse.quiz.answers``).

``discussion`` (optional) is what the lesson says about the result, as Markdown: ``quiz.reveal`` shows it under
the block's output, so it appears together with the result and never before the learner answers. It belongs to
the block whose first id is this question's; a question revealed by several blocks has a list, one entry per
block in lesson order (``""`` for a block with nothing to discuss), and each block names its ``part``
(``quiz.reveal("04-threads", part=2)``).

``clues`` (optional) lists texts that would give the answer away if a learner could read them before answering,
besides the keyed option's text and a number answer, which count anyway: the giveaway tests look for all of
them in what a person sees between the quiz and the next quiz or heading (tests/answer_clues.py).

``sources`` cites where the fact comes from, each entry in one of these forms:

* one of the four articles the course audits, by its title: ``"article: Why is training not starting with
  nn.DataParallel?"`` (``SEED_ARTICLES``). The audit's claim ids (``"001-7"``) are refused: they are
  bookkeeping for ``docs/seed_coverage.md`` and mean nothing to a learner;
* torch source: ``"torch/nn/parallel/_functions.py: Broadcast.backward"`` (path, optionally ``": name"``);
* a GitHub issue or pull request: ``"pytorch/pytorch#1051"``;
* a documentation page: ``"https://docs.pytorch.org/..."``.

``Question`` below is the format: its fields are the table's (all but ``lesson``, the file's name); those
with a default are optional, and each optional one belongs to one kind. ``parse_file`` rejects a malformed
file with one ``QuizFormatError`` naming the file, each bad question and everything wrong with it.
"""

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from . import answers
from .experiments import EXPERIMENTS

KINDS = ("choice", "number", "shape")
TEXTS = ("id", "prompt", "explanation", "experiment")  # fields that must be non-empty strings

# The four articles about DataParallel that the course audits, by title (docs/seed_coverage.md maps their claims).
SEED_ARTICLES = (
    "How can PyTorch DataParallel be used with a custom model?",
    "Why is training not starting with nn.DataParallel?",
    "Pytorch Advanced Part-1 DataParallel",
    "DataParallel basics in PyTorch - Deep Dive",
)
ARTICLE = "article: "
_SEED_CLAIM = re.compile(r"^S?\d{3}-\d+$")
_CITATIONS = (
    re.compile(r"^torch/[\w/]+\.(py|cpp|h)(: \S.*)?$"),  # torch source
    re.compile(r"^[\w.-]+/[\w.-]+#\d+$"),  # a GitHub issue or pull request
    re.compile(r"^https://\S+$"),  # a documentation page
)
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
    options: tuple[str, ...] = dataclasses.field(default=(), metadata={"kind": "choice"})
    tolerance: float = dataclasses.field(default=0.0, metadata={"kind": "number"})
    discussion: tuple[str, ...] = ()  # Markdown under each revealing block's result, one entry per block
    clues: tuple[str, ...] = ()  # texts that give the answer away

    def discussion_of(self, part: int = 1) -> str:
        """The Markdown that discusses the result of this question's ``part``-th revealing block ("" for none)."""
        if not 1 <= part <= max(len(self.discussion), 1):
            raise ValueError(f"quiz.reveal({self.id!r}, part={part}): question {self.id} has "
                             f"{len(self.discussion)} discussion part(s) in {self.lesson}.toml; use part=1 to "
                             f"{max(len(self.discussion), 1)}.")
        return self.discussion[part - 1] if self.discussion else ""

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


# The table's fields are Question's but ``lesson``; those with a default are optional, each for one kind only.
FIELDS = {field.name: field for field in dataclasses.fields(Question) if field.name != "lesson"}
REQUIRED = [name for name, field in FIELDS.items() if field.default is dataclasses.MISSING]
ONLY_FOR_KIND = {name: field.metadata["kind"] for name, field in FIELDS.items() if "kind" in field.metadata}


def parse_file(path: str | Path) -> list[Question]:
    """Read and check one lesson file; the lesson is the file name without ``.toml`` (``02_scatter``)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise QuizFormatError(f"{path}: not valid TOML: {error}") from None
    if unknown := sorted(set(data) - {"question"}):
        raise QuizFormatError(f"{path}: unknown top-level key(s) {unknown}; a lesson file holds only [[question]].")
    tables = data.get("question")
    if not isinstance(tables, list) or not tables:
        raise QuizFormatError(f"{path}: no questions; write each one as a [[question]] table.")
    questions, problems, ids = [], [], set()
    for number, table in enumerate(tables, start=1):
        if not isinstance(table, dict):
            problems.append(f"{path}: question #{number}: write each question as a [[question]] table")
            continue
        errors = _problems(table, path.stem)
        if isinstance(table.get("id"), str):
            if table["id"] in ids:
                errors.append(f"duplicate id {table['id']!r}: ids must be unique")
            ids.add(table["id"])
        name = f"question {table['id']!r} (#{number})" if "id" in table else f"question #{number} (no id)"
        problems += [f"{path}: {name}: {error}" for error in errors]
        if not errors:
            questions.append(_question(table, path.stem))
    if problems:
        raise QuizFormatError("\n".join(problems))
    return questions


def _problems(table: dict[str, Any], lesson: str) -> list[str]:
    """Every problem with one question table, as sentences (empty when it is well formed)."""
    question_id, kind, experiment = table.get("id"), table.get("kind"), table.get("experiment")
    errors = [f"missing field {name!r}" for name in REQUIRED if name not in table]
    errors += [f"unknown field {name!r} (allowed: {sorted(FIELDS)})" for name in table if name not in FIELDS]
    errors += [f"{name!r} must be a non-empty string" for name in TEXTS
               if name in table and not (isinstance(table[name], str) and table[name].strip())]
    if isinstance(question_id, str) and not (_ID.match(question_id) and question_id[:2] == lesson[:2]):
        errors.append(f"id {question_id!r} must look like '{lesson[:2]}-short-name' (lesson number, lowercase words)")
    if isinstance(experiment, str) and experiment not in EXPERIMENTS:
        errors.append(f"unknown experiment {experiment!r}; add it to dpcourse/quiz/experiments/lesson{lesson[:2]}.py")
    errors += _source_problems(table.get("sources"))
    errors += _text_list_problems(table, "discussion", blanks_allowed=True)
    errors += _text_list_problems(table, "clues", blanks_allowed=False)
    if "kind" in table and kind not in KINDS:
        errors.append(f"kind {kind!r} is not one of {list(KINDS)}")
    if kind in KINDS:
        errors += [f"{name!r} is only for kind = {only!r}, not {kind!r}"
                   for name, only in ONLY_FOR_KIND.items() if name in table and kind != only]
        if "answer" in table:
            errors += {"choice": _choice_problems, "number": _number_problems, "shape": _shape_problems}[kind](table)
    return errors


def _text_list_problems(table: dict[str, Any], name: str, blanks_allowed: bool) -> list[str]:
    """``discussion`` is a text or a list of texts (some may be empty, one per revealing block); ``clues`` a list of
    non-empty texts."""
    value = table.get(name)
    if value is None or (name == "discussion" and isinstance(value, str) and value.strip()):
        return []
    texts = value if isinstance(value, list) else None
    if texts and all(isinstance(text, str) for text in texts) and any(text.strip() for text in texts) and (
            blanks_allowed or all(text.strip() for text in texts)):
        return []
    if name == "discussion":
        return ["'discussion' must be Markdown text, or a list of texts (one per revealing block, \"\" for none)"]
    return ["'clues' must be a list of non-empty strings"]


def _as_texts(value: str | list[str] | None) -> tuple[str, ...]:
    """A text or a list of texts, as a tuple, each stripped of the blank lines around it."""
    return tuple(text.strip("\n") for text in ([value] if isinstance(value, str) else value or []))


def _source_problems(sources: Any) -> list[str]:
    if sources is None:  # reported as a missing field
        return []
    if not isinstance(sources, list) or not sources:
        return ["'sources' must be a non-empty list of strings"]
    return [problem for source in sources if (problem := _source_problem(source))]


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
    if any(citation.match(source) for citation in _CITATIONS):
        return None
    return (f"source {source!r} has an unknown format; use an article ('{ARTICLE}<title>'), a torch source "
            "('torch/nn/parallel/_functions.py: Broadcast.backward'), an issue ('pytorch/pytorch#1051') "
            "or an https:// URL")


def _choice_problems(table: dict[str, Any]) -> list[str]:
    options, answer = table.get("options"), table["answer"]
    if not (isinstance(options, list) and len(options) >= 2 and all(isinstance(o, str) and o for o in options)):
        return ["kind = 'choice' needs 'options': a list of two or more non-empty strings"]
    if len(set(options)) != len(options):
        return ["'options' has the same text twice"]
    if isinstance(answer, int):
        return [f"answer {answer!r} must be the text of the correct option, not its index"]
    return [] if answer in options else [f"answer {answer!r} is not among the options {options}"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_problems(table: dict[str, Any]) -> list[str]:
    answer, tolerance = table["answer"], table.get("tolerance", 0.0)
    errors = [] if _is_number(answer) else [f"answer {answer!r} must be a number for kind = 'number'"]
    if not (_is_number(tolerance) and tolerance >= 0):
        errors.append(f"tolerance {tolerance!r} must be a number >= 0")
    return errors


def _shape_problems(table: dict[str, Any]) -> list[str]:
    try:
        answers.parse_shape(table["answer"])
    except ValueError:
        return [f'answer {table["answer"]!r} is not a shape; write it like "(4,)", "[2, 3]" or "()"']
    return []


def _question(table: dict[str, Any], lesson: str) -> Question:
    """The ``Question`` of a well-formed table: the answer read as its kind's type, the lists made tuples."""
    answer = {"choice": str, "number": float, "shape": answers.parse_shape}[table["kind"]](table["answer"])
    return Question(**{**table, "lesson": lesson, "answer": answer, "sources": tuple(table["sources"]),
                       "options": tuple(table.get("options", ())), "tolerance": float(table.get("tolerance", 0.0)),
                       "discussion": _as_texts(table.get("discussion")), "clues": _as_texts(table.get("clues"))})
