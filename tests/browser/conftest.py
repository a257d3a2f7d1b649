"""Fixtures for the real-browser tests: one JupyterLab server and one Chromium for the whole session.

* ``chromium``: Debian's ``/usr/bin/chromium``. Without it every browser test FAILS (never skips) and says
  what to install: these tests run in CI, where a silent skip would pass without testing anything.
* ``lab``: JupyterLab on a temporary copy of notebooks/ (the committed notebooks are never opened, so never
  saved), with its own settings, a token and a random port; the quiz progress file is a temporary one too.
* ``browser``: Playwright driving that Chromium (Playwright's own browser download is never used).

Screenshots go to artifacts/browser/ (gitignored). The session ends with a summary of how long each notebook
took, so CI logs show where the time goes. Each pytest-xdist worker has its own session, so its own server and
Chromium (ports and folders are its own too); it sends its timings to the controller, which prints them
(tests/conftest.py).
"""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser_setup import CHROMIUM, CHROMIUM_ARGS, INSTALL_CHROMIUM, NOTEBOOKS, TIMINGS
from lab_server import LabServer

if TYPE_CHECKING:  # imported in the fixture, so that a missing Playwright fails with a message saying so
    from playwright.sync_api import Browser, BrowserContext, Page


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"{CHROMIUM} not found: {INSTALL_CHROMIUM} (Playwright's own browser download is not used)",
                    pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium: Path) -> Iterator["Browser"]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail('the browser tests need Playwright for Python: pip install -e ".[test]"', pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of notebooks/ (lessons and whatever sits beside them) for the server to serve and run."""
    root = tmp_path_factory.mktemp("lab") / "notebooks"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return root


@pytest.fixture(scope="session")
def progress_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("progress") / "progress.json"


@pytest.fixture(scope="session")
def lab(lab_root: Path, progress_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    # The lessons' environment (CPU devices, as the stored outputs) comes with os.environ: tests/conftest.py set it.
    env = {"DPCOURSE_PROGRESS": str(progress_file)}
    with LabServer(lab_root, tmp_path_factory.mktemp("lab-state"), env).running(TIMINGS) as server:
        yield server


@pytest.fixture(scope="session")
def lab_context(browser: "Browser", lab: LabServer) -> Iterator["BrowserContext"]:
    """One browser context for every JupyterLab page: its HTTP cache spares each page JupyterLab's bundles."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(lab_context: "BrowserContext") -> Iterator["Page"]:
    """A new page per test (per notebook), closed afterwards."""
    page = lab_context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        page.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # there on a pytest-xdist worker only
    if workeroutput is not None:
        workeroutput["browser_timings"] = dict(TIMINGS)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:  # one process (-n 0); with workers, the controller prints theirs
        terminalreporter.section("browser tests: seconds per step")
        for name, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{seconds:7.1f}  {name}")
