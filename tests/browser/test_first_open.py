"""What a learner sees on first open: ``python -m dpcourse.open`` prepares a folder and starts JupyterLab on it,
and lesson 00 of the student edition opens in Chromium, before anything is run.

* the saved widgets render as widgets (the copy is trusted), not as their plain-text stand-ins;
* no news pop-up covers the notebook (dpcourse.open disables it; these tests' usual settings would hide it);
* the tab is not marked modified once the kernel has connected (the copy holds the metadata JupyterLab writes);
* each saved quiz and explorer says that its cell must run before its buttons and sliders do anything.
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_setup import ARTIFACTS, TIMINGS
from lab_notebook import PANEL, LabNotebook, stored_widget_views
from lab_server import SETTINGS, LabServer

pytestmark = pytest.mark.browser

LESSON = "00_start_here.ipynb"
NOTIFICATION = "@jupyterlab/apputils-extension/notification"
NEWS = "official Jupyter news"
# Resolves once the kernel's info and spec have arrived, and JupyterLab has written them into the notebook.
KERNEL_METADATA_APPLIED = PANEL + """
return panel.sessionContext.ready.then(async () => {
  const kernel = panel.sessionContext.session.kernel;
  await kernel.info;
  await kernel.spec;
  await new Promise(resolve => setTimeout(resolve, 1000));
  const model = panel.context.model;
  const metadata = name => model.getMetadata(name);
  return {dirty: model.dirty, kernelspec: metadata('kernelspec'), language_info: metadata('language_info')};
});
"""


class CourseLab(LabServer):
    """JupyterLab as ``python -m dpcourse.open`` starts it, plus what a test needs: a port, a token, the app."""

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "dpcourse.open", f"--folder={self.root_dir}",
            "--no-browser", f"--port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", "--LabApp.expose_app_in_browser=True",
        ]


@pytest.fixture(scope="module")
def course_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CourseLab]:
    state = tmp_path_factory.mktemp("first-open")
    # The news setting is left out: the pop-up must stay away because of dpcourse.open alone. Trust is kept in a
    # data folder of the test's own, where dpcourse.open signs the copies and the server checks them.
    settings = {plugin: values for plugin, values in SETTINGS.items() if plugin != NOTIFICATION}
    server = CourseLab(state / "my-course", state, {"JUPYTER_DATA_DIR": str(state / "data")}, settings)
    with server.running(TIMINGS, "dpcourse.open (copy, trust, start JupyterLab)"):
        yield server


def test_the_learners_folder_holds_the_lessons_only(course_lab: CourseLab) -> None:
    lessons = sorted(path.name for path in (Path(__file__).parents[2] / "notebooks" / "student").glob("*.ipynb"))
    listed = course_lab.api("GET", "/api/contents/")["content"]
    assert sorted(item["name"] for item in listed) == lessons


def _lesson_in_a_new_page(course_lab: CourseLab, browser, path: str) -> tuple:
    """A browser context, its page and the lesson at ``path`` in it (not opened yet); close the context after."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    return context, page, LabNotebook(page, course_lab.url, course_lab.token, path)


def test_lesson_00_opens_trusted_unmodified_and_without_news(course_lab: CourseLab, browser) -> None:
    context, page, lesson = _lesson_in_a_new_page(course_lab, browser, LESSON)
    try:
        lesson.open()
        state = lesson.evaluate(KERNEL_METADATA_APPLIED)
        mismatches = lesson.wait_for_widget_views(stored_widget_views(course_lab.root_dir / LESSON))
        assert not mismatches, f"{LESSON}: the saved widgets did not render on first open:\n" + "\n".join(mismatches)
        text = page.inner_text("body")
        assert "QuizWidget(children=" not in text
        assert "Run this cell to answer or explore" in text, "a saved quiz must say that it needs its cell run"
        assert not state["dirty"], f"{LESSON} opened modified; JupyterLab wrote {state}"
        assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0
        assert NEWS not in text and page.locator(".jp-Notification-Toast").count() == 0
    finally:
        lesson.screenshot(ARTIFACTS / "first_open.png")
        course_lab.shutdown_kernels(LESSON)
        context.close()

