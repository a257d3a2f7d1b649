"""The static course (docs/build_site.py) in Chromium with the network cut off: only 127.0.0.1 answers.

Every request to another host is aborted and recorded, and a test that saw one FAILS: the site must open
offline, so nothing may come from a CDN. Widgets must render from the state saved in the notebooks (there is
no kernel), and every lesson's reveal.js slides must load and move from slide to slide.

The site must also be honest about having no kernel: every widget view carries a note that it needs one, and
its controls are disabled rather than live-looking and dead. What the notebooks keep collapsed, exercise
solutions and outputs that reveal a quiz's answer, is in closed ``<details>`` on pages and slides alike.
"""

import functools
import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest
from browser_setup import ARTIFACTS, TIMINGS, lesson_notebooks
from lab_notebook import stored_widget_views
from playwright.sync_api import Page, Route, expect

from dpcourse.quiz import find_question
from tests.answer_clues import CELL_TEXTS, giveaways
from tests.site_builder import site_builder

pytestmark = pytest.mark.browser

NOTEBOOKS = lesson_notebooks()
QUESTION = re.compile(r"<b>Question ([\w.-]+)</b>")
MATHS = re.compile(r"\$[^$\s][^$]*\$")  # inline TeX, as the lessons write it: $\frac{1}{B}$
# Per cell, the widget views that rendered: `.jupyter-widgets` elements that no other view contains (and, with
# `visibleOnly`, that take up space: reveal.js hides the slides not shown).
RENDERED_VIEWS = """(visibleOnly) => Array.from(document.querySelectorAll('.jp-Cell')).map(cell =>
  Array.from(cell.querySelectorAll('.jupyter-widgets')).filter(view =>
    view.parentElement.closest('.jupyter-widgets') === null
    && (!visibleOnly || view.getBoundingClientRect().height > 0)).length)"""


# The widgets' no-kernel state on a page: the wrappers docs/build_site.py puts around each view, how many show
# their note, and any control still usable (enabled, or a slider still taking the pointer).
NO_KERNEL_STATE = """() => {
  const wrappers = Array.from(document.querySelectorAll('.dpcourse-needs-kernel'));
  const controls = Array.from(document.querySelectorAll('.jupyter-widgets :is(button, input, select, textarea)'));
  const sliders = Array.from(document.querySelectorAll('.jupyter-widgets .widget-slider'));
  const shown = (element) => element !== null && element.getBoundingClientRect().height > 0;
  return {
    wrappers: wrappers.length,
    notesShown: wrappers.filter(w => shown(w.querySelector('.dpcourse-needs-kernel-note'))).length,
    controls: controls.length,
    usable: controls.filter(c => !c.disabled || !c.closest('.dpcourse-needs-kernel'))
      .concat(sliders.filter(s => getComputedStyle(s).pointerEvents !== 'none'))
      .map(element => element.outerHTML.slice(0, 100)),
  };
}"""



@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    start = time.monotonic()
    try:
        site_builder().build(NOTEBOOKS, out)
    except SystemExit as error:  # the builder's message says what to run, e.g. `npm ci --prefix docs/site`
        pytest.fail(f"docs/build_site.py: {error}", pytrace=False)
    TIMINGS["static site build (docs/build_site.py)"] = time.monotonic() - start
    return out


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(site: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class OfflinePage:
    """A page whose requests may only go to 127.0.0.1; what else it tried, and what went wrong in it.

    Every test ends with ``assert_offline()``: nothing requested from another host (a page that works only
    because a CDN happened to be reachable is a failure), and no error in the page (a 404 for a local file, an
    exception in a script).
    """

    def __init__(self, page: Page) -> None:
        self.page = page
        self.external: list[str] = []
        self.problems: list[str] = []
        page.on("pageerror", lambda error: self.problems.append(f"uncaught exception: {error}"))
        page.on("response", lambda response: self.problems.append(f"HTTP {response.status}: {response.url}")
                if response.status >= 400 else None)
        # "Failed to load resource" repeats a failed response (listed above, with its URL) or a blocked request.
        page.on("console", lambda message: self.problems.append(f"console error: {message.text}")
                if message.type == "error" and not message.text.startswith("Failed to load resource") else None)

    def only_local(self, route: Route) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def assert_offline(self) -> None:
        assert not self.external, "the site requested other hosts (it must work offline):\n" + "\n".join(
            self.external)
        assert not self.problems, "the page logged errors:\n" + "\n".join(self.problems)


@pytest.fixture
def offline(browser) -> Iterator[OfflinePage]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    offline = OfflinePage(page)
    context.route("**/*", offline.only_local)
    try:
        yield offline
    finally:
        context.close()


def question_ids(notebook: Path) -> list[str]:
    """The quiz questions a notebook shows, read from its saved widget state (their header HTML widgets)."""
    state = nbformat.read(notebook, as_version=4).metadata.get("widgets", {})
    models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    headers = (model["state"].get("value", "") for model in models.values() if model["model_name"] == "HTMLModel")
    return [match[1] for header in headers if (match := QUESTION.fullmatch(header))]


def has_maths(notebook: Path) -> bool:
    cells = nbformat.read(notebook, as_version=4).cells
    # Code spans are left alone by MathJax: a `$HOME` there is not maths.
    return any(c.cell_type == "markdown" and MATHS.search(re.sub(r"`[^`]*`", "", c.source)) for c in cells)


def wait_for_views(page: Page, expected: dict[int, int], visible_only: bool = True) -> list[int]:
    """Per cell, the widget views rendered, once they match ``expected`` (or after 30 s, for the message)."""
    wanted = [expected.get(index, 0) for index in range(max(expected, default=-1) + 1)]
    matches = (f"(wanted) => JSON.stringify(({RENDERED_VIEWS})({str(visible_only).lower()}).slice(0, wanted.length)) "
               "=== JSON.stringify(wanted)")
    try:
        page.wait_for_function(matches, arg=wanted)
    except Exception:
        pass  # the caller's assertion shows the difference
    return page.evaluate(RENDERED_VIEWS, visible_only)


def mismatches(expected: dict[int, int], rendered: list[int]) -> list[str]:
    return [f"cell {index}: {expected.get(index, 0)} widget view(s) expected, {views} rendered"
            for index, views in enumerate(rendered) if views != expected.get(index, 0)]


def test_index_lists_every_lesson(offline: OfflinePage, site_url: str) -> None:
    page = offline.page
    page.goto(f"{site_url}/index.html")
    for notebook in NOTEBOOKS:
        lesson = page.locator(f"li[id='{notebook.stem}']")
        expect(lesson.get_by_role("link", name="page")).to_have_attribute("href", f"lessons/{notebook.stem}.html")
        expect(lesson.get_by_role("link", name="slides")).to_have_attribute(
            "href", f"lessons/{notebook.stem}.slides.html")
    page.screenshot(path=ARTIFACTS / "site" / "index.png")
    page.locator(f"li[id='{NOTEBOOKS[0].stem}']").get_by_role("link", name="page").click()
    expect(page).to_have_url(f"{site_url}/lessons/{NOTEBOOKS[0].stem}.html")
    offline.assert_offline()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_lesson_page_renders_its_saved_widgets(notebook: Path, offline: OfflinePage, site_url: str) -> None:
    page = offline.page
    page.goto(f"{site_url}/lessons/{notebook.stem}.html")
    expected = stored_widget_views(notebook)
    try:
        wrong = mismatches(expected, wait_for_views(page, expected))
        assert not wrong, f"{notebook.stem}.html: widgets did not render from the saved state:\n" + "\n".join(wrong)
        if has_maths(notebook):  # typeset by the site's own MathJax; a CDN copy would have been blocked
            expect(page.locator(".mjx-chtml").first).to_be_visible()
        for question in question_ids(notebook):
            prompt = re.sub(r"[`*]", "", find_question(question).prompt.strip()).splitlines()[0][:40]
            quiz = page.locator(".jupyter-widgets.widget-vbox", has_text=f"Question {question}").last
            expect(quiz).to_be_visible()
            expect(quiz).to_contain_text(prompt)
        offline.assert_offline()
    finally:
        page.screenshot(path=ARTIFACTS / "site" / f"{notebook.stem}.png", full_page=True)


# A page's cells, in the notebook's order (tests/answer_clues.py's CELL_TEXTS reads what each shows).
PAGE_CELLS = ("const CELLS = Array.from(document.querySelectorAll('.jp-Cell'))"
              ".filter(cell => !cell.parentElement.closest('.jp-Cell'));")


def collapsed_cells(notebook: Path) -> dict[str, int]:
    """How many code cells the notebook keeps collapsed: solutions (source) and revealing outputs."""
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    return {
        "dpcourse-solution": sum(bool(c.metadata.get("jupyter", {}).get("source_hidden")) for c in cells),
        "dpcourse-hidden-output": sum(
            bool(c.metadata.get("jupyter", {}).get("outputs_hidden") and c.outputs) for c in cells
        ),
    }


def expect_collapsed(page: Page, notebook: Path) -> None:
    """Every solution and revealing output in a closed <details>, its content not shown until a click."""
    for kind, count in collapsed_cells(notebook).items():
        expect(page.locator(f"details.{kind}")).to_have_count(count)
    expect(page.locator("details[open]")).to_have_count(0)
    expect(page.locator("details.dpcourse-solution .jp-InputArea:visible")).to_have_count(0)
    expect(page.locator("details.dpcourse-hidden-output .jp-OutputArea:visible")).to_have_count(0)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_lesson_page_is_honest_without_a_kernel(notebook: Path, offline: OfflinePage, site_url: str) -> None:
    """Widgets: a note each, every control disabled. Solutions and revealing outputs: collapsed, one click away.
    Between each quiz and the next quiz or heading, no clue of its answer can be read (``giveaways``)."""
    page = offline.page
    page.goto(f"{site_url}/lessons/{notebook.stem}.html")
    expected = stored_widget_views(notebook)
    wait_for_views(page, expected)
    state = page.evaluate(NO_KERNEL_STATE)
    views = sum(expected.values())
    assert state["wrappers"] == views, f"{notebook.stem}: {state['wrappers']} widget notes for {views} widget views"
    assert state["notesShown"] == views, f"{notebook.stem}: {views - state['notesShown']} notes are not shown"
    assert not state["usable"], f"{notebook.stem}: controls that look live without a kernel:\n" + "\n".join(
        state["usable"])
    expect_collapsed(page, notebook)
    shown = page.evaluate("() => {" + PAGE_CELLS + CELL_TEXTS + "}")
    found = giveaways(nbformat.read(notebook, as_version=4), shown)
    assert not found, f"{notebook.stem}: answers readable before the closed <details>:\n  " + "\n  ".join(found)
    summaries = page.locator("details.dpcourse-hidden-output > summary")
    if summaries.count():
        summaries.first.click()
        expect(page.locator("details.dpcourse-hidden-output").first.locator(".jp-OutputArea")).to_be_visible()
    offline.assert_offline()


def slide_titles(notebook: Path) -> list[str]:
    """The first line of every cell that starts a slide (notebooks/build.py marks # and ## headings)."""
    cells = nbformat.read(notebook, as_version=4).cells
    starts = [c for c in cells if c.get("metadata", {}).get("slideshow", {}).get("slide_type") == "slide"]
    return [c.source.splitlines()[0].lstrip("#").strip() for c in starts]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_lesson_slides_render_and_navigate(notebook: Path, offline: OfflinePage, site_url: str) -> None:
    page = offline.page
    titles = slide_titles(notebook)
    assert len(titles) >= 2, f"{notebook.name} has {len(titles)} slide(s): its # and ## headings make the slides"
    page.goto(f"{site_url}/lessons/{notebook.stem}.slides.html")
    page.wait_for_function("() => window.Reveal && window.Reveal.isReady()")
    expect(page.locator(".reveal .slides > section")).to_have_count(len(titles))
    expect(page.locator(".reveal .slides > section.present")).to_contain_text(titles[0])
    page.keyboard.press("ArrowRight")
    expect(page.locator(".reveal .slides > section.present")).to_contain_text(titles[1])
    assert page.evaluate("() => window.Reveal.getIndices().h") == 1
    expect(page).to_have_url(re.compile(r"#/1$"))
    page.wait_for_timeout(1000)  # for the picture only: let the slide transition finish
    page.screenshot(path=ARTIFACTS / "site" / f"{notebook.stem}.slides.png")
    page.keyboard.press("ArrowLeft")
    expect(page.locator(".reveal .slides > section.present")).to_contain_text(titles[0])
    expected = stored_widget_views(notebook)
    wrong = mismatches(expected, wait_for_views(page, expected, visible_only=False))
    assert not wrong, f"{notebook.stem}.slides.html: widgets did not render from the saved state:\n" + "\n".join(wrong)
    expect_collapsed(page, notebook)
    expect(page.locator(".dpcourse-needs-kernel .dpcourse-needs-kernel-note")).to_have_count(sum(expected.values()))
    assert not page.evaluate(NO_KERNEL_STATE)["usable"], f"{notebook.stem}.slides.html: controls look live"
    offline.assert_offline()
