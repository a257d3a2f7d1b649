"""Test setup shared by every test: a headless matplotlib backend and the `cuda` marker's skip.

The markers themselves are registered in pyproject.toml.
"""

import runpy
from pathlib import Path

import matplotlib
import pytest

# Before any test imports pyplot, so figures render off-screen on CI. Not MPLBACKEND: nbval's kernels
# inherit the environment, and the notebooks need ipykernel's inline backend to store figure outputs.
matplotlib.use("Agg")

# The lessons' environment (CPU devices), set in one place; the quiz experiments tested here are the lessons'.
runpy.run_path(str(Path(__file__).parent.parent / "notebooks" / "conftest.py"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda_tests = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_tests:
        return
    import torch  # only here, so a run with no cuda tests does not pay for importing torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; run on a GPU machine")
    for item in cuda_tests:
        item.add_marker(skip)


@pytest.fixture
def stand_in_gpu(monkeypatch: pytest.MonkeyPatch):
    """The lessons' placement check (tests/ipython) for one test: ``devices[0]`` is checked as if it were a GPU."""
    from tests.placement import install

    mode = install(monkeypatch.setattr)
    yield
    mode.__exit__(None, None, None)
