"""What a learner sees on first open: ``python -m dpcourse.open`` prepares a folder and starts JupyterLab on it,
and lesson 00 of the student edition opens in Chromium, before anything is run.

* the saved widgets render as widgets (the copy is trusted), not as their plain-text stand-ins;
* no news pop-up covers the notebook (dpcourse.open disables it; these tests' usual settings would hide it);
* the tab is not marked modified once the kernel has connected (the copy holds the metadata JupyterLab writes);
* each saved quiz and explorer says that its cell must run before its buttons and sliders do anything;
* none of them shows ipywidgets' red broken-link icons (a view without a kernel), and a click on a control
  before the cell has run lights that sentence up: it is never silent.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_setup import ARTIFACTS, TIMINGS
from lab_notebook import KERNEL_METADATA_APPLIED, PANEL, in_a_new_context, stored_widget_views
from lab_server import SETTINGS, CourseLab

pytestmark = pytest.mark.browser

LESSON = "00_start_here.ipynb"
NOTIFICATION = "@jupyterlab/apputils-extension/notification"
NEWS = "official Jupyter news"
# ipywidgets draws its broken-link icon as the ::before of each view that has no kernel behind it.
BROKEN_LINK_ICONS = PANEL + """
return Array.from(panel.content.node.querySelectorAll('.jupyter-widgets-disconnected')).filter(view => {
  const icon = getComputedStyle(view, '::before');
  return icon.content !== 'none' && icon.display !== 'none' && view.getBoundingClientRect().height > 0;
}).length;
"""
BACKGROUND = "element => getComputedStyle(element).backgroundColor"


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


def test_lesson_00_opens_trusted_unmodified_and_without_news(course_lab: CourseLab, browser) -> None:
    context, lesson = in_a_new_context(browser, course_lab, LESSON)
    page = lesson.page
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
        icons = lesson.evaluate(BROKEN_LINK_ICONS)
        assert icons == 0, f"{LESSON}: {icons} red broken-link icons on the saved widgets; the sentence says it instead"
        quiz = page.locator(".jp-OutputArea-child", has=page.get_by_role("button", name="Check my answer")).first
        check = quiz.get_by_role("button", name="Check my answer")
        sentence = quiz.locator("p", has_text="Run this cell").first
        before = sentence.evaluate(BACKGROUND)
        check.click()
        assert sentence.evaluate(BACKGROUND) != before, "a click before the cell has run must light up its sentence"
    finally:
        lesson.screenshot(ARTIFACTS / "first_open.png")
        course_lab.shutdown_kernels(LESSON)
        context.close()

