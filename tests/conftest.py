"""Test setup shared by every test: a headless matplotlib backend, the `cuda` marker's skip, the lesson markers,
and, on pytest-xdist's controller, the browser tests' timings that its workers send (tests/browser/conftest.py).

The `cuda`, `browser` and `slow` markers are registered in pyproject.toml, the `lessonNN` ones from dpcourse.course.
"""

import runpy
from pathlib import Path

import matplotlib
import pytest

from dpcourse import course

# Before any test imports pyplot, so figures render off-screen on CI. Not MPLBACKEND: nbval's kernels
# inherit the environment, and the notebooks need ipykernel's inline backend to store figure outputs.
matplotlib.use("Agg")

# The lessons' environment (CPU devices), set in one place; the quiz experiments tested here are the lessons'.
runpy.run_path(str(Path(__file__).parent.parent / "notebooks" / "conftest.py"))


def pytest_configure(config: pytest.Config) -> None:
    for lesson in course.LESSONS:  # pytest -m lesson14: everything lesson 14 owns
        config.addinivalue_line("markers", f"{lesson.marker}: what lesson {lesson.name} owns")


def _mark_lessons(items: list[pytest.Item]) -> None:
    """A lesson owns its notebooks (both editions), the tests of files marked ``pytestmark = pytest.mark.lessonNN``,
    and every test whose id names it (``14_accumulation`` or ``lesson14``) or one of its quiz experiments."""
    from dpcourse.quiz.experiments import EXPERIMENTS

    owner_of_experiment = {name: EXPERIMENTS.lesson_of(name).marker for name in EXPERIMENTS}
    for item in items:
        parameters = item.nodeid.partition("[")[2]
        for lesson in course.LESSONS:
            named = lesson.name in item.nodeid or lesson.marker in parameters
            if named or owner_of_experiment.get(parameters.rstrip("]")) == lesson.marker:
                item.add_marker(lesson.marker)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_lessons(items)
    cuda_tests = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_tests:
        return
    import torch  # only here, so a run with no cuda tests does not pay for importing torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; run on a GPU machine")
    for item in cuda_tests:
        item.add_marker(skip)


BROWSER_TIMINGS: dict[str, float] = {}  # step -> seconds, from every worker that ran browser tests


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without the plugin, pytest never calls it
def pytest_testnodedown(node, error) -> None:
    BROWSER_TIMINGS.update(getattr(node, "workeroutput", {}).get("browser_timings", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if BROWSER_TIMINGS:
        terminalreporter.section("browser tests: seconds per step")
        for name, seconds in BROWSER_TIMINGS.items():
            terminalreporter.write_line(f"{seconds:7.1f}  {name}")


@pytest.fixture
def stand_in_gpu(monkeypatch: pytest.MonkeyPatch):
    """The lessons' placement check (notebooks/kernel/ipython) for one test: ``devices[0]`` checked as a GPU."""
    from tests.placement import install

    mode = install(monkeypatch.setattr)
    yield
    mode.__exit__(None, None, None)
