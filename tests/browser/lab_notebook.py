"""One notebook open in JupyterLab, driven through ``window.jupyterapp`` (the server exposes it).

Commands and the kernel status come from the app itself, not from menus or status-bar text: the tooling
notes found ``[data-status='idle']`` matching before a run had even started. Nothing here saves the notebook.
Each JavaScript snippet is the body of a function of ``path``, the notebook's path under the server's root.
"""

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
from playwright.sync_api import Browser, BrowserContext, Locator, Page

if TYPE_CHECKING:  # a type only: the benchmarks import this module as tests.browser.lab_notebook
    from lab_server import LabServer

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
EXPECTED_ERROR_TAGS = ["raises-exception", "nbval-raises-exception"]  # cells meant to raise (nbclient, nbval)
MAX_SCREENSHOT_HEIGHT = 16000  # Chromium's texture limit is 16384 px
ANSI = re.compile(r"\x1b\[[0-9;]*m")

PANEL = "const panel = [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === path);"

# Outputs are cleared first, so that every widget counted afterwards was rendered by this run's kernel, not
# restored from the widget state saved in the notebook. The outcome lands in window.__dpcourseRun.
RUN_ALL = PANEL + """
window.__dpcourseRun = null;
window.jupyterapp.shell.activateById(panel.id);
const commands = window.jupyterapp.commands;
panel.sessionContext.ready
  .then(() => commands.execute('notebook:clear-all-cell-outputs'))
  .then(() => commands.execute('notebook:run-all-cells'))
  .then(ok => { window.__dpcourseRun = {ok: ok}; }, error => { window.__dpcourseRun = {error: String(error)}; });
"""

KERNEL_IDLE = PANEL + "const kernel = panel.sessionContext.session?.kernel; return kernel?.status === 'idle';"

CELLS = PANEL + f"""
const expectedErrorTags = {json.dumps(EXPECTED_ERROR_TAGS)};
return Array.from(panel.content.model.cells).map((cell, index) => {{
  const outputs = cell.type === 'code' ? cell.outputs.toJSON() : [];
  return {{
    index: index, type: cell.type, source: cell.sharedModel.getSource(),
    executionCount: cell.type === 'code' ? cell.executionCount : null,
    errors: outputs.filter(o => o.output_type === 'error').map(o => ({{
      ename: o.ename, evalue: o.evalue, traceback: (o.traceback || []).join('\\n')}})),
    errorExpected: (cell.getMetadata('tags') || []).some(tag => expectedErrorTags.includes(tag)),
  }};
}});
"""

# Per cell: the rendered widget views (visible `.jupyter-widgets` elements that no other view contains).
WIDGET_VIEWS = PANEL + """
return Array.from(panel.content.node.querySelectorAll('.jp-Cell')).map(cell => {
  const area = cell.querySelector('.jp-OutputArea');
  if (!area) return {views: 0, text: ''};
  const views = Array.from(area.querySelectorAll('.jupyter-widgets')).filter(view =>
    view.parentElement.closest('.jupyter-widgets') === null && view.getBoundingClientRect().height > 0);
  return {views: views.length, text: area.innerText.slice(0, 300)};
});
"""

# The notebook's scroll container, back at the top (Run All leaves it at the last cell); returns the bottom of
# the last cell in page pixels, i.e. the viewport height that shows the whole notebook.
TO_TOP = PANEL + """
const outer = panel.content.node.querySelector('.jp-WindowedPanel-outer') || panel.content.node;
outer.scrollTop = 0;
const cells = outer.querySelectorAll('.jp-Cell');
return cells.length ? cells[cells.length - 1].getBoundingClientRect().bottom + 40 : 0;
"""


# Resolves once the kernel's info and spec have arrived and JupyterLab has written them into the notebook; says
# whether the tab is then marked modified, and what it wrote.
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


def js(body: str) -> str:
    return f"(path) => {{ {body} }}"


def stored_widget_views(path: Path) -> dict[int, int]:
    """Cell index -> how many widget views the notebook's stored outputs hold (cells with none are left out)."""
    notebook = nbformat.read(path, as_version=4)
    counts = {}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            views = sum(WIDGET_VIEW in output.get("data", {}) for output in cell.outputs)
            if views:
                counts[index] = views
    return counts


def in_a_new_context(browser: Browser, server: "LabServer", path: str) -> tuple[BrowserContext, "LabNotebook"]:
    """A new browser context (nothing kept from earlier pages) and, in a page of it, the notebook at ``path`` of
    ``server``, not opened yet. Close the context afterwards."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    return context, LabNotebook(page, server.url, server.token, path)


def describe(cell: dict) -> str:
    lines = cell["source"].strip().splitlines()
    return f"cell {cell['index']} `{lines[0] if lines else ''}`"


class LabNotebook:
    """The notebook at ``path`` (relative to the server's root) in ``page``."""

    def __init__(self, page: Page, lab_url: str, token: str, path: str) -> None:
        self.page, self.path = page, path
        self._url = f"{lab_url}/lab/tree/{path}?token={token}&reset"

    def evaluate(self, body: str) -> object:
        return self.page.evaluate(js(body), self.path)

    def wait_for(self, body: str, timeout_s: float) -> None:
        self.page.wait_for_function(js(body), arg=self.path, timeout=timeout_s * 1000)

    def open(self, timeout_s: float = 60) -> None:
        self.page.goto(self._url)
        # The app is exposed some time after the page's load event; PANEL would throw until then.
        self.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout_s * 1000)
        self.wait_for(PANEL + "return panel !== undefined && panel.content.model !== null;", timeout_s)
        # More room for the notebook in the screenshots; the file browser is of no use to the test.
        self.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")

    def run_all(self, timeout_s: float) -> float:
        """Clear every output, run all cells, wait for the run and an idle kernel; return the seconds it took."""
        start = time.monotonic()
        self.evaluate(RUN_ALL)
        try:
            self.page.wait_for_function("() => window.__dpcourseRun !== null", timeout=timeout_s * 1000)
            self.wait_for(KERNEL_IDLE, max(timeout_s - (time.monotonic() - start), 5))
        except Exception as error:
            waiting = [describe(c) for c in self.cells() if c["type"] == "code" and c["executionCount"] is None]
            where = f"; still waiting for {waiting[0]}" if waiting else ""
            raise AssertionError(f"{self.path}: Run All did not finish within {timeout_s:.0f} s{where}") from error
        outcome = self.page.evaluate("() => window.__dpcourseRun")
        if "error" in outcome:
            raise AssertionError(f"{self.path}: notebook:run-all-cells failed: {outcome['error']}")
        return time.monotonic() - start

    def cells(self) -> list[dict]:
        return self.evaluate(CELLS)

    def problems(self) -> list[str]:
        """Unexpected error outputs, then code cells that never ran, one paragraph each."""
        errors, not_run = [], []
        for cell in self.cells():
            for error in [] if cell["errorExpected"] else cell["errors"]:
                traceback = ANSI.sub("", error["traceback"])[-1500:]
                errors.append(f"{describe(cell)} raised {error['ename']}: {error['evalue']}\n{traceback}")
            if cell["type"] == "code" and cell["source"].strip() and cell["executionCount"] is None:
                not_run.append(describe(cell))
        return errors + ([f"not executed: {', '.join(not_run)}"] if not_run else [])

    def widget_views(self) -> list[dict]:
        """Per cell, in order: the rendered widget views (``views``) and the start of the output text."""
        return self.evaluate(WIDGET_VIEWS)

    def wait_for_widget_views(self, expected: dict[int, int], timeout_s: float = 30) -> list[str]:
        """Wait until every cell shows the ``expected`` number of views; return the mismatches left at the end."""
        deadline = time.monotonic() + timeout_s
        while True:
            rendered = self.widget_views()
            mismatches = [
                f"cell {index}: {expected.get(index, 0)} widget view(s) expected, {cell['views']} rendered; "
                f"output: {cell['text']!r}"
                for index, cell in enumerate(rendered)
                if cell["views"] != expected.get(index, 0)
            ]
            if not mismatches or time.monotonic() > deadline:
                return mismatches
            time.sleep(0.25)

    def cell(self, index: int) -> Locator:
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)

    def screenshot(self, path: Path) -> None:
        """The whole notebook in one image: scrolled to the top, the viewport stretched to its last cell."""
        viewport = self.page.viewport_size
        try:
            height = self.evaluate(TO_TOP)
        except Exception:  # the notebook never opened: show what the page shows instead
            height = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        tall = int(min(max(height, viewport["height"]), MAX_SCREENSHOT_HEIGHT))
        self.page.set_viewport_size({"width": viewport["width"], "height": tall})
        try:
            if height:
                self.evaluate(TO_TOP)  # the resize may have moved the scroll position again
            self.page.wait_for_timeout(300)  # one layout pass at the new size
            self.page.screenshot(path=path)
        finally:
            self.page.set_viewport_size(viewport)
