"""A learner comes back: lesson 00 run in JupyterLab as ``python -m dpcourse.open`` starts it, saved, then

1. the server stopped and ``dpcourse.open`` started again on the same folder, the lesson opened in a new page;
2. the cells run again, saved, the kernel restarted and the page reloaded.

After each, no widget says "Error displaying widget: model not found": the cells the learner ran show the
sentence that asks to run the cell (the server wrote it on save, ``dpcourse/jupyter_config/``), a quiz among them
its question still, the others their saved widgets. Also checked on the way: after a save the open tab keeps its
live widgets, a second save does not find the file "changed on disk", and the lesson reopens unmodified.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from browser_setup import ARTIFACTS, NOTEBOOKS, TIMINGS
from lab_notebook import (
    KERNEL_IDLE,
    KERNEL_METADATA_APPLIED,
    PANEL,
    WIDGET_VIEW,
    LabNotebook,
    in_a_new_context,
    stored_widget_views,
)
from lab_server import SETTINGS, CourseLab

from dpcourse.quiz import find_question
from tests.answer_clues import asked, readable

pytestmark = pytest.mark.browser

LESSON = "00_start_here.ipynb"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_NOT_FOUND = "model not found"
RUN_THIS_CELL = "Run this cell to answer or explore"
RUN_TIMEOUT_S = 120

# Run the code cells at `indexes`, one request each, so that a cell that raises does not stop the others (Run
# All would: the kernel drops what is queued after an error). ``widgetId`` names the notebook: the command would
# otherwise run in the tracker's current one, which a headless page may not have set yet. The outcome lands in
# window.__dpcourseRun.
RUN_CELLS = PANEL + """
window.__dpcourseRun = null;
window.jupyterapp.shell.activateById(panel.id);
(async () => {
  await panel.sessionContext.ready;
  for (const index of INDEXES) {
    panel.content.activeCellIndex = index;
    panel.content.deselectAll();
    await window.jupyterapp.commands.execute('notebook:run-cell', {widgetId: panel.id});
  }
})().then(() => { window.__dpcourseRun = {ok: true}; }, error => { window.__dpcourseRun = {error: String(error)}; });
"""
# Per code cell: the widget models its outputs show, in the open tab.
SHOWN_MODELS = PANEL + """
return Array.from(panel.content.model.cells).map(cell => cell.type !== 'code' ? [] : cell.outputs.toJSON()
  .filter(output => output.data && output.data[WIDGET_VIEW]).map(output => output.data[WIDGET_VIEW].model_id));
""".replace("WIDGET_VIEW", json.dumps(WIDGET_VIEW))
# The file's cells are in the notebook model only once the context is ready (before, it may hold one empty
# cell), and in the page a little later.
LOADED = PANEL + """
const inPage = panel.content.node.querySelectorAll('.jp-Cell').length;
return panel.context.isReady && inPage === panel.content.model.cells.length;
"""
SAVE = PANEL + "return panel.context.save().then(() => panel.context.model.dirty);"
RESTART_KERNEL = PANEL + "return panel.sessionContext.session.kernel.restart().then(() => true);"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("return-visit")


def course_lab(folder: Path) -> CourseLab:
    """``dpcourse.open`` on ``folder``/my-course, with trust and JupyterLab's state kept in ``folder`` between
    starts, as a learner's are."""
    return CourseLab(folder / "my-course", folder, {"JUPYTER_DATA_DIR": str(folder / "data")}, SETTINGS)


def saved_models(path: Path) -> set[str]:
    notebook = nbformat.read(path, as_version=4)
    return set(notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}))


def widget_cells() -> list[int]:
    """The code cells of the lesson whose outputs, as the course ships them, show a widget."""
    notebook = nbformat.read(NOTEBOOKS / "student" / LESSON, as_version=4)
    return [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code" and any(
        WIDGET_VIEW in output.get("data", {}) for output in cell.outputs)]


def open_lesson(lesson: LabNotebook) -> None:
    lesson.open()
    lesson.wait_for(LOADED, 60)


def run_up_to_the_last_widget(lesson: LabNotebook, path: Path) -> list[int]:
    """Run every code cell of the lesson (saved at ``path``) up to its last widget; return the widget cells that
    now show a live widget (a model the saved state does not hold: this kernel's)."""
    cells = widget_cells()
    code = [index for index, cell in enumerate(lesson.cells()) if cell["type"] == "code" and index <= max(cells)]
    lesson.evaluate(RUN_CELLS.replace("INDEXES", json.dumps(code)))
    lesson.page.wait_for_function("() => window.__dpcourseRun !== null", timeout=RUN_TIMEOUT_S * 1000)
    assert lesson.page.evaluate("() => window.__dpcourseRun") == {"ok": True}
    lesson.wait_for(KERNEL_IDLE, 30)
    saved = saved_models(path)
    shown = lesson.evaluate(SHOWN_MODELS)
    live = [index for index in cells if shown[index] and not set(shown[index]) <= saved]
    assert live, f"no widget cell of {LESSON} showed a live widget after running:\n" + "\n".join(lesson.problems())
    return live


def save(lesson: LabNotebook) -> None:
    """Save as File > Save does; fails if JupyterLab asks about a file changed on disk (the save then waits)."""
    assert lesson.evaluate(SAVE) is False, "the tab is still modified after saving"
    assert lesson.page.locator(".jp-Dialog").count() == 0, lesson.page.locator(".jp-Dialog").inner_text()


def assert_no_missing_models(lesson: LabNotebook, path: Path, ran: list[int], when: str) -> None:
    """The lesson saved at ``path`` shows its saved widgets, none says 'model not found', each cell of ``ran``
    asks to run it; and the tab is not modified once the kernel has connected."""
    mismatches = lesson.wait_for_widget_views(stored_widget_views(path))
    assert not mismatches, f"{when}: the saved widgets did not render:\n" + "\n".join(mismatches)
    text = lesson.page.inner_text("body")
    assert MODEL_NOT_FOUND not in text, f"{when}: a widget says '{MODEL_NOT_FOUND}'"
    outputs = lesson.widget_views()
    silent = [index for index in ran if RUN_THIS_CELL not in outputs[index]["text"]]
    assert not silent, f"{when}: cells {silent} show neither their widget nor '{RUN_THIS_CELL}': {outputs[silent[0]]}"
    cells = nbformat.read(path, as_version=4).cells
    for index in ran:  # an answered quiz keeps its question: the prompt, as the page shows it
        for question in asked(cells[index].source):
            prompt = readable(find_question(question).prompt)[:60]
            assert prompt in readable(lesson.cell(index).inner_text()), f"{when}: quiz {question} lost its question"
    state = lesson.evaluate(KERNEL_METADATA_APPLIED)
    assert not state["dirty"], f"{when}: {LESSON} opened modified; JupyterLab wrote {state}"


@pytest.fixture(scope="module")
def first_visit(folder: Path, browser) -> Iterator[list[int]]:
    """Lesson 00 opened, run up to its last widget and saved twice, in a server that is then stopped; yields the
    widget cells that were run (their saved outputs name models of that kernel)."""
    server = course_lab(folder)
    with server.running(TIMINGS, "dpcourse.open, first visit"):
        context, lesson = in_a_new_context(browser, server, LESSON)
        try:
            open_lesson(lesson)
            ran = run_up_to_the_last_widget(lesson, server.root_dir / LESSON)
            save(lesson)
            views = lesson.widget_views()
            for index in ran:  # the open tab keeps its live widgets: only the file holds the sentence
                assert views[index]["views"] >= 1 and RUN_THIS_CELL not in views[index]["text"], views[index]
            lesson.evaluate(RUN_CELLS.replace("INDEXES", json.dumps(ran[:1])))  # a change, then a second save
            lesson.page.wait_for_function("() => window.__dpcourseRun !== null", timeout=RUN_TIMEOUT_S * 1000)
            lesson.wait_for(KERNEL_IDLE, 30)
            save(lesson)
        finally:
            lesson.screenshot(ARTIFACTS / "return_visit_0_before_saving.png")
            context.close()
    yield ran


def test_the_saved_file_names_no_model_it_lacks(folder: Path, first_visit: list[int]) -> None:
    path = folder / "my-course" / LESSON
    notebook, saved = nbformat.read(path, as_version=4), saved_models(path)
    for index in first_visit:
        (output,) = [o for o in notebook.cells[index].outputs if o.output_type in ("display_data", "execute_result")]
        assert WIDGET_VIEW not in output.data and RUN_THIS_CELL in output.data["text/html"].replace("</b>", "")
        assert output.data["text/plain"], "the plain-text stand-in is kept"
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.get("data", {}).get(WIDGET_VIEW, {}).get("model_id", "") in saved | {""}


def test_reopened_after_dpcourse_open_again_and_after_a_kernel_restart(
    folder: Path, first_visit: list[int], browser
) -> None:
    server = course_lab(folder)
    with server.running(TIMINGS, "dpcourse.open again (return visit)"):
        context, lesson = in_a_new_context(browser, server, LESSON)
        try:
            open_lesson(lesson)
            assert_no_missing_models(lesson, server.root_dir / LESSON, first_visit, "after dpcourse.open again")
            lesson.screenshot(ARTIFACTS / "return_visit_1_reopened.png")
            ran = run_up_to_the_last_widget(lesson, server.root_dir / LESSON)
            save(lesson)
            assert lesson.evaluate(RESTART_KERNEL)
            lesson.wait_for(KERNEL_IDLE, 60)
            open_lesson(lesson)  # the page loaded again, with the restarted kernel
            assert_no_missing_models(lesson, server.root_dir / LESSON, ran, "after a kernel restart and a page reload")
        finally:
            lesson.screenshot(ARTIFACTS / "return_visit_2_restarted_and_reloaded.png")
            context.close()
