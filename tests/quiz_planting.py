"""Planted worlds for the quiz experiments: a test changes the mechanism an experiment measures (monkeypatch) so
that a wrong answer becomes true, and the experiment must then report that answer, not the keyed one.

    @planted("02-ten-rows-four-devices")
    def test_a_scatter_that_split_evenly_would_be_measured_as_3_3_2_2(monkeypatch):
        monkeypatch.setattr(lesson02, "scatter", even_split)
        reports("02-ten-rows-four-devices", "3, 3, 2, 2")

``planted`` registers the test under its question id; ``tests/test_quiz_planted_every_question.py`` fails for a
question of lessons 00-17 and 22 on that no registered test plants a world for. Part III's (18-21) plant theirs in
their own files (tests/test_zero1.py ... tests/test_fsdp2.py), not registered here.
"""

import copy
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dpcourse.quiz import Outcome, Question, load_lesson, run_experiment
from dpcourse.quiz.lessons import LESSONS

PART_III = range(18, 22)  # lessons 18-21 plant their worlds in their own test files, unregistered


def registered(lesson: str) -> bool:
    """Whether the registry holds lesson ``lesson``'s questions (by name, "05_gather"): all but Part III's."""
    return int(lesson[:2]) not in PART_III


# The questions of the registered lessons, by id. load_lesson per lesson, as all_questions() does.
QUESTIONS: dict[str, Question] = {
    question.id: question for lesson in LESSONS if registered(lesson) for question in load_lesson(lesson)
}

# question id -> the tests that plant a world for it ("module.test_name")
PLANTED: dict[str, set[str]] = defaultdict(set)


def planted(question_id: str) -> Callable[[Callable], Callable]:
    """Register the decorated test as one that plants a world where a distractor of ``question_id`` is true,
    and mark it as its lesson's (``lessonNN``), so that ``notebooks/build.py --check NN`` runs it."""
    if question_id not in QUESTIONS:
        raise KeyError(f"No question {question_id!r} in the registered lessons (all but 18-21).")

    def register(test: Callable) -> Callable:
        PLANTED[question_id].add(f"{test.__module__.rpartition('.')[2]}.{test.__name__}")
        return getattr(pytest.mark, f"lesson{question_id[:2]}")(test)  # pytest -m lesson05: its lesson owns it

    return register


def reports(question_id: str, distractor: Any) -> Outcome:
    """Run ``question_id``'s experiment in the world the test planted; it must measure ``distractor``, a wrong
    answer (for a choice question, one of its options)."""
    question = QUESTIONS[question_id]
    assert distractor != question.answer, f"{distractor!r} is {question_id}'s keyed answer, not a distractor"
    if question.kind == "choice":
        assert distractor in question.options, f"{distractor!r} is not an option of {question_id}"
    outcome = run_experiment(question.experiment)
    assert outcome.value == distractor, f"{question_id} measured {outcome.value!r}:\n{outcome.text}"
    return outcome


# Plants that several lessons' tests use: DataParallel's scatter with another chunk rule, replicas deep-copied.


def scatter_by(split):
    """``DataParallel.scatter`` with another chunk rule: ``split(tensor, n)`` gives a tensor's chunks, and the
    inputs' chunks are zipped as scatter does (the fewest chunks decide)."""

    def scatter(self, inputs, kwargs, devices):
        n = len(devices)
        per_input = [[chunk.to(device) for chunk, device in zip(split(t, n), devices, strict=False)] for t in inputs]
        entries = tuple(zip(*per_input, strict=False))  # the fewest chunks decide, as in scatter
        return entries, tuple(dict(kwargs) for _ in entries)

    return scatter


def even_split(tensor, n):
    """Sizes differ by at most one (``torch.tensor_split``): 10 rows on 4 devices are 3, 3, 2, 2."""
    return torch.tensor_split(tensor, n)


def one_chunk(tensor, n):
    """The whole batch to device 0: a DataParallel that does not split."""
    return [tensor]


def dropping_the_remainder(tensor, n):
    """``len // n`` rows each, the rest dropped: 5 rows on 4 devices are 1, 1, 1, 1."""
    size = len(tensor) // n
    return list(tensor[: size * n].split(size))


def deep_copies(self, module, devices):
    """Replicas made with ``copy.deepcopy``: nothing shared with the model, not even plain attributes."""
    return [copy.deepcopy(module) for _ in devices]
