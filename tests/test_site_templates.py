"""docs/build_site.py's templates on a three-cell notebook: what needs a kernel says so, what is collapsed stays so.

The pages have no kernel. A widget view must come with the note that sends the learner to JupyterLab (its
controls are disabled in the browser, checked by tests/browser/test_static_site.py), and be the only sentence
that says so: the "Run this cell" line a saved widget shows in JupyterLab has no cell to run on a page. A
solution cell's code and an output that reveals a quiz's answer must each be inside a closed ``<details>``, on
the page and in the slides.
"""

import re
from pathlib import Path

import nbformat
import pytest

from dpcourse.ui.controls import NEEDS_KERNEL, RUN_THIS_CELL
from tests.site_builder import site_builder

REPO = Path(__file__).parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"



def small_notebook() -> nbformat.NotebookNode:
    """A revealing output, a solution and a widget, with the metadata notebooks/build.py gives them: the saved
    state of a quiz's feedback line says "Run this cell", an explorer's message line holds its own message."""
    reveals = nbformat.v4.new_code_cell("print(3)", metadata={"jupyter": {"outputs_hidden": True}, "collapsed": True})
    reveals.outputs = [nbformat.v4.new_output("stream", text="the answer is 3\n")]
    solution = nbformat.v4.new_code_cell("answer = 42", metadata={"jupyter": {"source_hidden": True}})
    widget = nbformat.v4.new_code_cell("quiz.ask('x')")
    view = {"model_id": "quiz-model", "version_major": 2, "version_minor": 0}
    widget.outputs = [nbformat.v4.new_output("execute_result", data={WIDGET_VIEW: view, "text/plain": "Quiz"})]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lesson"), reveals, solution, widget])
    model = {"model_name": "ButtonModel", "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0"}
    html = {**model, "model_name": "HTMLModel"}
    feedback = {**html, "state": {"_dom_classes": [NEEDS_KERNEL], "value": RUN_THIS_CELL}}
    message = {**html, "state": {"_dom_classes": [NEEDS_KERNEL], "value": "<p>an explorer's own message</p>"}}
    notebook.metadata["widgets"] = {WIDGET_STATE: {
        "state": {"quiz-model": {**model, "state": {}}, "feedback-model": feedback, "message-model": message},
        "version_major": 2, "version_minor": 0,
    }}
    return notebook


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    page, slides = site_builder().exporters()
    return {
        name: exporter.from_notebook_node(small_notebook(), resources={"metadata": {"name": "small"}})[0]
        for name, exporter in (("page", page), ("slides", slides))
    }


def details(body: str, kind: str) -> list[str]:
    return re.findall(rf'<details class="dpcourse-{kind}">(.*?)</details>', body, re.DOTALL)


@pytest.mark.parametrize("name", ["page", "slides"])
def test_a_revealing_output_is_in_a_closed_details(pages, name):
    (inside,) = details(pages[name], "hidden-output")
    assert "the answer is 3" in inside and "Output hidden" in inside
    assert pages[name].count("the answer is 3") == 1, "the output also appears outside its <details>"


@pytest.mark.parametrize("name", ["page", "slides"])
def test_a_solution_is_in_a_closed_details(pages, name):
    (inside,) = details(pages[name], "solution")
    assert "answer" in inside and "42" in inside and "Solution" in inside


@pytest.mark.parametrize("name", ["page", "slides"])
def test_every_widget_view_says_it_needs_a_kernel(pages, name):
    # From the wrapper to the end of its view's script: the note, then the view it is about.
    wrapped = re.findall(r'<div class="dpcourse-needs-kernel">(.*?</script>.*?</script>)', pages[name], re.DOTALL)
    assert len(wrapped) == 1 and "Needs a running kernel: open this lesson in JupyterLab" in wrapped[0]
    assert f'<script type="{WIDGET_VIEW}">' in wrapped[0], "the note is not next to the widget view it is about"
    assert "disableControls" in pages[name], "the script that disables the widgets' controls is missing"


@pytest.mark.parametrize("name", ["page", "slides"])
def test_a_widget_says_it_needs_a_kernel_in_one_sentence(pages, name):
    assert pages[name].count("Needs a running kernel") == 1
    assert "Run this cell" not in pages[name], "the JupyterLab sentence has no cell to run on a page"
    assert "an explorer&#39;s own message" in pages[name] or "an explorer's own message" in pages[name]


def test_the_exporters_leave_the_notebook_they_are_given_as_it_is():
    notebook = small_notebook()
    for exporter in site_builder().exporters():
        exporter.from_notebook_node(notebook, resources={"metadata": {"name": "small"}})
    assert notebook.metadata == small_notebook().metadata  # the "Run this cell" state included


@pytest.mark.parametrize("name", ["page", "slides"])
def test_nothing_else_is_collapsed(pages, name):
    assert "<details open" not in pages[name]
    assert len(re.findall(r"<details", pages[name])) == 2
