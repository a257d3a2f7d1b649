"""The course's one list of lessons: for each, its name, title, quiz, experiments and exercises.

    from dpcourse import course
    course.lesson("14")              # the record of lesson 14, also course.lesson("14_accumulation")
    course.lesson("14").exercises    # "dpcourse.exercises.lesson14": the module its check cells use

Everything that walks the course reads this list: ``notebooks/build.py`` (which sources to build), the quiz
(``quizzes/<name>.toml`` and its experiments), the exercise registry (which modules to load on the first check),
``dpcourse.open`` (which lessons to copy), and the tests, which also mark each lesson's tests with ``lessonNN``
(``pytest -m lesson14`` runs everything lesson 14 owns).
"""

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Lesson:
    """One lesson. ``name`` is its files' name: ``notebooks/src/<name>.py``, ``notebooks/<name>.ipynb``,
    ``notebooks/student/<name>.ipynb`` and, when it has a quiz, ``dpcourse/quizzes/<name>.toml``."""

    name: str
    title: str
    quiz: bool = True
    exercises: bool = True

    @property
    def number(self) -> str:
        """The two digits: ``"02"``."""
        return self.name[:2]

    @property
    def marker(self) -> str:
        """The pytest marker of everything this lesson owns: ``"lesson02"``."""
        return f"lesson{self.number}"

    @property
    def quiz_file(self) -> str | None:
        """The quiz's file in ``dpcourse/quizzes/``, or ``None``."""
        return f"{self.name}.toml" if self.quiz else None

    @property
    def experiments_module(self) -> str | None:
        """The module whose ``EXPERIMENTS`` the quiz runs, or ``None``."""
        return f"dpcourse.quiz.experiments.{self.marker}" if self.quiz else None

    @property
    def exercises_module(self) -> str | None:
        """The module that registers the lesson's checked exercises, or ``None``."""
        if not self.exercises:
            return None
        return "dpcourse.exercises.capstone" if self.name == "12_capstone" else f"dpcourse.exercises.{self.marker}"


LESSONS: tuple[Lesson, ...] = (
    Lesson("00_start_here", "Start here: what DataParallel does, and how this course works"),
    Lesson("01_one_device", "One device: the training step we will parallelise"),
    Lesson("02_scatter", "Scatter: splitting the batch"),
    Lesson("03_replicate", "Replicate: one copy of the model per device, every step"),
    Lesson("04_parallel_apply", "parallel_apply: running the replicas"),
    Lesson("05_gather", "Gather: one output from many replicas"),
    Lesson("06_backward", "Backward: where the gradients go"),
    Lesson("07_end_to_end", "End to end: training, checkpoints, and the errors people meet"),
    Lesson("08_myths", "Myths, run and corrected"),
    Lesson("09_performance", "Performance: where a DataParallel step spends its time"),
    Lesson("10_ddp_bridge", "From DataParallel to DistributedDataParallel"),
    Lesson("11_review", "Review: the four steps, all together"),
    Lesson("12_capstone", "Capstone: write DataParallel yourself", quiz=False),
    Lesson("13_collectives", "Collectives: broadcast, reduce, all-reduce, all-gather, reduce-scatter"),
    Lesson("14_accumulation", "Gradient accumulation and no_sync"),
    Lesson("15_memory", "Memory per device"),
    Lesson("16_mixed_precision", "Mixed precision: autocast in threads, GradScaler, compressed gradients"),
    Lesson("17_ddp_in_practice", "DDP in practice: data, checkpoints, uneven inputs, unused parameters, BatchNorm, "
                                 "and a script converted"),
    Lesson("18_zero1", "ZeRO-1: each rank keeps a shard of the optimizer state"),
    Lesson("19_zero2", "ZeRO-2: gradients reduce-scattered, each rank keeps its shard"),
    Lesson("20_zero3", "ZeRO-3: parameters sharded too, FSDP written by hand"),
    Lesson("21_fsdp2", "FSDP2 and ZeroRedundancyOptimizer in practice"),
    Lesson("22_hangs", "When a rank hangs: desyncs, timeouts and the tools that find them"),
    Lesson("23_stragglers", "Stragglers: finding the slow rank"),
    Lesson("24_resume", "A rank killed: restart, and resume exactly"),
    Lesson("25_alpha_beta", "Overlap and the α-β model: when communication stops hiding"),
    Lesson("26_hsdp", "HSDP: sharding on a 2-D mesh"),
)


def lesson(key: str) -> Lesson:
    """The lesson called ``key``: its name (``"14_accumulation"``) or its number (``"14"``)."""
    for candidate in LESSONS:
        if key in (candidate.name, candidate.number):
            return candidate
    raise KeyError(f"No lesson {key!r}. Lessons: {', '.join(candidate.name for candidate in LESSONS)}.")


class LessonRegistry(Mapping[str, T], Generic[T]):
    """Every lesson's items of one kind, by name: quiz experiments, or checked exercises.

    Each lesson's module (``module_of(lesson)``, e.g. ``dpcourse.exercises.lesson14``) ends with a tuple of them,
    ``EXERCISES = (...)`` or ``EXPERIMENTS = (...)``. The modules are imported on first use, in course order, so
    that importing ``dpcourse.quiz`` or ``dpcourse.exercises`` stays cheap; a name used twice is refused then.
    """

    def __init__(self, attribute: str, module_of: Callable[[Lesson], str | None], name_of: Callable[[T], str],
                 kind: str) -> None:
        self._attribute, self._module_of, self._name_of, self._kind = attribute, module_of, name_of, kind
        self._items: dict[str, T] | None = None
        self._lessons: dict[str, Lesson] = {}

    def _loaded(self) -> dict[str, T]:
        if self._items is None:
            items: dict[str, T] = {}
            for course_lesson in LESSONS:
                module_name = self._module_of(course_lesson)
                if module_name is None:
                    continue
                module = importlib.import_module(module_name)
                if not hasattr(module, self._attribute):
                    raise AttributeError(f"{module_name} must end with {self._attribute} = (...), the {self._kind}s "
                                         f"of lesson {course_lesson.name}.")
                for item in getattr(module, self._attribute):
                    name = self._name_of(item)
                    if name in items:
                        raise ValueError(f"Two {self._kind}s are called {name!r}: one in lesson "
                                         f"{self._lessons[name].name}, one in {course_lesson.name}. Rename one.")
                    items[name], self._lessons[name] = item, course_lesson
            self._items = items
        return self._items

    def __getitem__(self, name: str) -> T:
        items = self._loaded()
        if name not in items:
            raise KeyError(f"No {self._kind} is called {name!r}. Known: {', '.join(sorted(items))}.")
        return items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def lesson_of(self, name: str) -> Lesson:
        """The lesson whose module declares ``name``."""
        self[name]
        return self._lessons[name]

    def of(self, key: str) -> list[str]:
        """The names declared by lesson ``key`` (name or number), in their module's order."""
        wanted = lesson(key)
        return [name for name in self._loaded() if self._lessons[name] == wanted]
